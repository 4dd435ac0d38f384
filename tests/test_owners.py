"""Who a job is for (docs/explanation/design-choices.md): its owner (DolphinDB's userID: the OS user of a shell, script or
program, an HTTP API token's name), the priority ceiling of that user (DolphinDB's
setMaxJobPriority, refused instead of capped) and its requestor (IPF's jobRequestor); JOBSTATUS
... BY and REQUESTOR. The service on every store backend, then ``fabricjobs shell`` against two
real node processes on each node backend."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from backends import SEED_BACKENDS, add_sections
from fabricjobs.client import Client
from fabricjobs.clock import ManualClock
from fabricjobs.config import load_config
from fabricjobs.errors import PriorityAboveCeiling
from fabricjobs.model import JobKey
from fabricjobs.service.session import local_user
from fabricjobs.store import open_store
from harness import TESTS, table_row as row

ME = local_user()
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
LATER = "2099-01-01 00:00:00"  # a one-time schedule that keeps a job live (SCHEDULED) for the test
CEILINGS = {"MAX_JOB_PRIORITY": 3, "MAX_JOB_PRIORITY_BY_USER": f"{ME}=7, ci-bot=2"}


@pytest.fixture(params=SEED_BACKENDS)
def node_backend(request):
    """The end-to-end test's nodes: SQLite and the CQL test server (tests/backends.py says why)."""
    return request.param


@pytest.fixture
def client(store_config):
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": TESTS / "jobs", **CEILINGS}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, ManualClock(T0), owns_store=True)
    yield c
    c.close()


def _job(client, uid):
    return client.store.get(JobKey("USER_JOB", "Probe.noop", uid))


def test_a_job_records_its_owner_and_requestor(client):
    client.fetch(f"startjob user_job name='Probe.noop' uid='a' requestor='payments' exec_interval='{LATER}';")
    job = _job(client, "a")
    assert (job.owner, job.requestor) == (ME, "payments")
    (shown,) = client.fetch("jobstatus user_job 'Probe.noop' with uid='a' details;").as_dicts()
    assert (shown["Owner"], shown["Requestor"]) == (ME, "payments")
    client.fetch("updatejob user_job name='Probe.noop' uid='a' requestor='billing';")
    assert (_job(client, "a").owner, _job(client, "a").requestor) == (ME, "billing")  # the owner stays


def test_jobstatus_by_owner_and_requestor(client):
    client.fetch(f"startjob user_job name='Probe.noop' uid='mine' requestor='payments' exec_interval='{LATER}';")
    client.session.owner = "ci-bot"  # as the HTTP API's token of that name
    client.fetch(f"startjob user_job name='Probe.noop' uid='bots' requestor='payments' exec_interval='{LATER}';")
    client.fetch(f"startjob user_job name='Probe.noop' uid='none' exec_interval='{LATER}';")

    def uids(text):
        return sorted(r["UID"] for r in client.fetch(text).as_dicts())

    assert uids(f"jobstatus by '{ME}';") == ["mine"]
    assert uids("jobstatus user_job by 'ci-bot';") == ["bots", "none"]
    assert uids("jobstatus requestor 'payments';") == ["bots", "mine"]
    assert uids("jobstatus user_job 'Probe.noop' requestor 'payments' by 'ci-bot' details;") == ["bots"]
    assert uids("jobstatus requestor '';") == ["none"]
    assert uids("jobstatus 1 day ago by 'nobody';") == []


def test_a_priority_above_the_users_ceiling_is_refused_and_nothing_is_written(client):
    with pytest.raises(PriorityAboveCeiling, match=f"PRIORITY 8 refused: '{ME}' may give at most 7"):
        client.fetch("startjob user_job name='Probe.noop' uid='high' priority=8;")
    assert _job(client, "high") is None
    client.fetch(f"startjob user_job name='Probe.noop' uid='ok' priority=7 exec_interval='{LATER}';")
    with pytest.raises(PriorityAboveCeiling):
        client.fetch("updatejob user_job name='Probe.noop' uid='ok' priority=9 requestor='x';")
    assert (_job(client, "ok").priority, _job(client, "ok").requestor) == (7, "")  # nothing of it applied
    client.session.owner = "ci-bot"  # ceiling 2 (MAX_JOB_PRIORITY_BY_USER)
    with pytest.raises(PriorityAboveCeiling, match="'ci-bot' may give at most 2"):
        client.fetch("updatejob user_job name='Probe.noop' uid='ok' priority=3;")
    client.fetch(f"startjob user_job name='Probe.noop' uid='bot' exec_interval='{LATER}';")
    assert _job(client, "bot").priority == 2  # none given: min(4, ceiling), as DolphinDB's interactive jobs
    client.session.owner = "someone"  # not listed: MAX_JOB_PRIORITY (3)
    client.fetch(f"startjob user_job name='Probe.noop' uid='other' priority=3 exec_interval='{LATER}';")
    with pytest.raises(PriorityAboveCeiling, match="'someone' may give at most 3"):
        client.fetch("startjob user_job name='Probe.noop' uid='other2' priority=4;")


# -- through the shell, on real nodes ---------------------------------------------------------

@pytest.mark.parametrize("cluster", [{"jobs": {"MAX_JOB_PRIORITY": 5, "MAX_JOB_PRIORITY_BY_USER": f"{ME}=8"}}],
                         indirect=True)
def test_owner_requestor_and_ceiling_through_the_shell_on_real_nodes(cluster):
    for name in ("local-1", "local-2"):
        cluster.start_node(name, wait=False)
    for node in cluster.nodes.values():
        cluster.wait_started(node)
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='pay' requestor='payments' priority=8;"
                            "startjob user_job name='Probe.noop' uid='bill' requestor='billing';"
                            "waitjob user_job 'Probe.noop' with uid='pay' timeout 20;"
                            "waitjob user_job 'Probe.noop' with uid='bill' timeout 20;")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.noop", "pay", "PROCESSED").search(r.stdout), r.stdout

    shown = cluster.shell("-e", "jobstatus 1 day ago requestor 'payments' details;", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    (pay,) = json.loads(shown.stdout)
    assert (pay["UID"], pay["Owner"], pay["Requestor"], pay["Priority"], pay["Status"]) == ("pay", ME, "payments", 8, "PROCESSED")
    mine = cluster.shell("-e", f"jobstatus user_job 'Probe.noop' 1 day ago by '{ME}';", "--format", "json")
    assert sorted(j["UID"] for j in json.loads(mine.stdout)) == ["bill", "pay"]
    theirs = cluster.shell("-e", "jobstatus user_job 1 day ago by 'someone-else';")
    assert theirs.returncode == 0 and "(0 rows)" in theirs.stdout, theirs.stdout

    refused = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='high' priority=9;")
    assert refused.returncode == 1 and f"PRIORITY 9 refused: '{ME}' may give at most 8" in refused.stderr
    assert "Traceback" not in refused.stderr and cluster.job("USER_JOB", "Probe.noop", "high") is None

    r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='later' requestor='payments' exec_interval='{LATER}';"
                            "updatejob user_job name='Probe.noop' uid='later' requestor='billing' priority=6;")
    assert r.returncode == 0, r.stderr
    later = cluster.job("USER_JOB", "Probe.noop", "later")
    assert (later.owner, later.requestor, later.priority) == (ME, "billing", 6)
    live = cluster.shell("-e", "jobstatus requestor 'billing';", "--format", "json")
    assert [j["UID"] for j in json.loads(live.stdout)] == ["later"]
