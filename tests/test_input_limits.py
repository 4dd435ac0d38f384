"""A job's input is bounded (docs/guides/run-isolation.md): ARGS ([jobs] MAX_ARGS_BYTES), NAME
and UID (256 and 1,024 characters) and a command text ([jobs] MAX_COMMAND_BYTES) are checked
before anything else reads them, and refused with a message that names the limit; nothing is
written, and the node beside them goes on as before."""

from __future__ import annotations

import json
import time

import pytest

from fabricjobs.commands import statements as st
from fabricjobs.errors import ValidationError
from harness import Cluster

pytestmark = pytest.mark.slow

MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    """One node on SQLite with the default limits (the checks are the command service's,
    whatever the store)."""
    c = Cluster(tmp_path_factory.mktemp("limits"), request=request)
    c.start_node("a")
    yield c
    c.stop_all()


def _no_job(cluster, name: str) -> None:
    assert not cluster.client().store.live_jobs(type="USER_JOB", name=name), "a refused STARTJOB wrote a row"


def _still_running(cluster) -> None:
    """The node took no harm: it runs a job as before."""
    uid = f"after-{time.monotonic_ns()}"
    cluster.fetch(f"startjob user_job name='Probe.noop' uid='{uid}';")
    cluster.wait_job("USER_JOB", "Probe.noop", uid, lambda j: j.archived, 20, "the node to run a job after the refusal")


def test_a_50_mb_args_is_refused_before_it_is_read(cluster):
    """Through the Python API (no command text to parse): ARGS alone, named with its limit."""
    args = json.dumps({"value": "x" * (50 * MB)})
    with pytest.raises(ValidationError) as refused:
        cluster.client().execute(st.StartJob("USER_JOB", "Probe.echo", "big", args=args))
    assert "ARGS is 52,428,813 bytes long; at most 1,048,576 are allowed ([jobs] MAX_ARGS_BYTES)" in str(refused.value)
    _no_job(cluster, "Probe.echo")
    _still_running(cluster)


def test_args_over_the_limit_in_a_shell_statement_are_refused_with_a_message(cluster):
    statement = f"startjob user_job name='Probe.echo' uid='two' args='{json.dumps({'value': 'x' * (2 * MB)})}';"
    out = cluster.shell(input=statement, timeout=60)
    assert out.returncode == 1 and "ARGS is 2,097,165 bytes long; at most 1,048,576 are allowed" in out.stderr, out.stderr
    _no_job(cluster, "Probe.echo")


def test_a_command_text_over_the_limit_is_refused_before_it_is_parsed(cluster):
    statement = f"startjob user_job name='Probe.echo' uid='huge' args='{json.dumps({'value': 'x' * (50 * MB)})}';"
    out = cluster.shell(input=statement, timeout=60)  # (it took 15 to 77 s to be accepted)
    assert out.returncode == 1 and "the command text is 52,428,8" in out.stderr and "([jobs] MAX_COMMAND_BYTES)" in out.stderr, \
        out.stderr
    _no_job(cluster, "Probe.echo")


@pytest.mark.parametrize("what", ["uid", "name"])
def test_a_uid_or_name_of_100k_characters_is_refused_with_a_message(cluster, what):
    uid, name = ("u" * 100_000, "Probe.noop") if what == "uid" else ("long-name", "Probe." + "n" * 100_000)
    out = cluster.shell("-e", f"startjob user_job name='{name}' uid='{uid}';")
    limit = "1,024" if what == "uid" else "256"
    assert out.returncode == 1 and f"{what.upper()} is 100,0" in out.stderr and f"at most {limit} are allowed" in out.stderr, \
        out.stderr
    with pytest.raises(ValidationError, match=f"{what.upper()} is 100,0"):
        cluster.client().execute(st.StartJob("USER_JOB", name, uid))
    _still_running(cluster)
