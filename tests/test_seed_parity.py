"""What users of the other seed systems type (issue #22), through ``fabricjobs shell`` on two
real node processes on SQLite: RJM's idempotent set-up (STARTJOB ... IF NOT EXISTS), DolphinDB's
recent runs of the whole cluster (JOBHISTORY RECENT n), IPF's one-time schedule to the
millisecond; and the Fabric course's AFFINITY naming a node by IP address."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from harness import table_row as row, two_nodes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = two_nodes(tmp_path_factory.mktemp("parity"))
    yield c
    c.stop_all()


SETUP = ("startjob user_job name='Probe.started' uid='parent' args='{{\"log\": \"{log}\"}}' if not exists;\n"
         "startjob user_job name='Probe.noop' uid='child' depends_on='USER_JOB.Probe.started.parent' if not exists;\n")


def test_a_set_up_script_runs_again_and_returns_the_jobs_as_they_are(cluster, tmp_path):
    """RJM: setting up a job is idempotent, so a script that set up a graph can be re-run."""
    script = SETUP.format(log=tmp_path / "started.log")
    first = cluster.shell("-e", script)
    assert first.returncode == 0, first.stderr
    assert row("USER_JOB", "Probe.started", "parent", "WAITING").search(first.stdout)
    assert row("USER_JOB", "Probe.noop", "child", "WAITING", "waiting for USER_JOB.Probe.started.parent").search(first.stdout)
    parent = cluster.wait_job("USER_JOB", "Probe.started", "parent", lambda j: j.status.name == "IN_PROCESS")

    again = cluster.shell("-e", script)
    assert again.returncode == 0 and again.stderr == ""
    assert row("USER_JOB", "Probe.started", "parent", "IN_PROCESS").search(again.stdout)  # not "Job is running"
    assert row("USER_JOB", "Probe.noop", "child", "WAITING").search(again.stdout)
    now = cluster.job("USER_JOB", "Probe.started", "parent")
    assert (now.epoch, now.creation_time, now.arguments) == (parent.epoch, parent.creation_time, parent.arguments)

    plain = cluster.shell("-e", "startjob user_job name='Probe.started' uid='parent';")
    assert plain.returncode == 1 and plain.stderr.strip() == "Job is running [type: USER_JOB, name: Probe.started, uid: parent]"

    stop = cluster.shell("-e", "stopjob user_job name='Probe.started' uid='parent' wait timeout 20;")
    assert stop.returncode == 0, stop.stderr
    archived = cluster.shell("-e", "startjob user_job name='Probe.started' uid='parent' if not exists;")
    assert archived.returncode == 0 and row("USER_JOB", "Probe.started", "parent", "TERMINATED").search(archived.stdout)
    assert cluster.job("USER_JOB", "Probe.started", "parent").status.name == "TERMINATED"  # not started again


def test_if_not_exists_needs_a_uid_and_changes_nothing_without_one(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.echo' if not exists;")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("Invalid command at line 1, column 37: IF NOT EXISTS needs UID='<uid>'")
    assert "Probe.echo" not in cluster.shell("-e", "jobstatus 1 day ago;").stdout


def test_jobhistory_recent_lists_the_clusters_last_runs_newest_first(cluster):
    """DolphinDB's getRecentJobs: across jobs, with node, result and duration."""
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='r1'; waitjob user_job 'Probe.noop' with uid='r1' timeout 20;"
                            "startjob user_job name='Probe.fails_no_retry' uid='r2';"
                            "waitjob user_job 'Probe.fails_no_retry' with uid='r2' timeout 20;")
    assert r.returncode == 0, r.stderr
    r = cluster.shell("-e", "jobhistory recent 2;")
    assert r.returncode == 0, r.stderr
    header, *lines = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "Type", "Name", "UID", "Run", "Node", "Result", "Status", "Start", "End", "Duration (ms)", "Tries", "Error", "Note"]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert [c[:4] + c[5:7] for c in cells] == [["USER_JOB", "Probe.fails_no_retry", "r2", "1", "ERROR", "FAILED"],
                                               ["USER_JOB", "Probe.noop", "r1", "1", "OK", "PROCESSED"]]
    assert all(c[4].startswith("local-") and re.fullmatch(r"\d+", c[9]) for c in cells)
    assert cells[0][8] >= cells[1][8] and "(2 rows)" in r.stdout  # newest first
    one = cluster.shell("-e", "jobhistory recent 1;")
    assert "| Probe.fails_no_retry |" in one.stdout and "Probe.noop" not in one.stdout and "(1 row)" in one.stdout
    bad = cluster.shell("-e", "jobhistory recent 0;")
    assert bad.returncode == 1 and "RECENT needs at least 1 run" in bad.stderr


def test_a_one_time_schedule_to_the_millisecond(cluster):
    """IPF's singleSchedule: EXEC_INTERVAL='yyyy-MM-dd HH:mm:ss.SSS' is due at that millisecond."""
    # 4 to 5 s ahead: its owner makes it WAITING up to 1 s early (the fire lead), after which
    # JOBSTATUS shows "Ready to be executed"; two shell starts under load fit well before that.
    at = (datetime.now(timezone.utc) + timedelta(seconds=5)).replace(microsecond=437000)
    text = at.strftime("%Y-%m-%d %H:%M:%S") + ".437"
    r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='ms' exec_interval='{text}' tz='UTC';")
    assert r.returncode == 0 and row("USER_JOB", "Probe.noop", "ms", "SCHEDULED").search(r.stdout), r.stderr
    status = json.loads(cluster.shell("--format", "json", "-e", "jobstatus user_job 'Probe.noop' with uid='ms';").stdout)
    assert datetime.fromisoformat(status[0]["Next Run"]) == at
    done = cluster.shell("-e", "waitjob user_job 'Probe.noop' with uid='ms' timeout 20;")
    assert done.returncode == 0 and "PROCESSED" in done.stdout, done.stderr
    (run,) = json.loads(cluster.shell("--format", "json", "-e", "jobhistory user_job 'Probe.noop' with uid='ms';").stdout)
    assert datetime.fromisoformat(run["Due"]) == at and datetime.fromisoformat(run["Start"]) >= at
    bad = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='us' exec_interval='{text}123';")
    assert bad.returncode == 1 and "at most 3 decimals (milliseconds), got 6" in bad.stderr
    assert cluster.job("USER_JOB", "Probe.noop", "us") is None


def test_affinity_names_a_node_by_ip_address(cluster, tmp_path):
    """The course: AFFINITY is "the node or DC (IP address) where the job can run". A third
    node with [node] ADDRESSES of its own; a job naming one of them runs there, in any of the
    address's spellings; an address no node has leaves the job waiting, with no candidate."""
    config = tmp_path / "local-3.ini"
    text = cluster.config_path.read_text()
    addresses = "ADDRESSES = 10.250.0.3, fd00:250::3\n"
    config.write_text(text.replace("[node]\n", "[node]\n" + addresses, 1) if "[node]\n" in text else text + "\n[node]\n" + addresses)
    node = cluster.start_node("local-3", config=config)
    try:
        r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='ip4' affinity='10.250.0.3';"
                                "startjob user_job name='Probe.noop' uid='ip6' affinity='{\"Affinity\":[\"FD00:250:0::3\"]}';"
                                "startjob user_job name='Probe.noop' uid='nowhere' affinity='10.250.0.99';"
                                "waitjob user_job 'Probe.noop' with uid='ip4' timeout 20;"
                                "waitjob user_job 'Probe.noop' with uid='ip6' timeout 20;")
        assert r.returncode == 0, r.stderr
        for uid in ("ip4", "ip6"):
            (run,) = json.loads(cluster.shell("--format", "json", "-e", f"jobhistory user_job 'Probe.noop' with uid='{uid}';").stdout)
            assert (run["Node"], run["Result"]) == ("local-3", "OK")
        (waiting,) = json.loads(cluster.shell("--format", "json", "-e", "jobstatus user_job 'Probe.noop' with uid='nowhere';").stdout)
        assert (waiting["Status"], waiting["Ownership Candidates Num"]) == ("WAITING", 0)
        details = cluster.shell("-e", "nodes details;").stdout
        assert re.search(r"node +\| local-3\n(?:.*\n)*?addresses +\| 10\.250\.0\.3, FD00:250::3\n", details), details
        bad = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='bad' affinity='10.250.0.3/24';")
        assert bad.returncode == 1 and "bad affinity name '10.250.0.3/24'" in bad.stderr
    finally:
        cluster.shell("-e", "stopjob user_job name='Probe.noop' uid='nowhere';")
        node.end()
