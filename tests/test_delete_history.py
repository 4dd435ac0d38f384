"""DELETEHISTORY through the shell on real node processes: a job's runs and their logs go,
the job's row stays, and nothing is deleted while a run of it is going (issue #22, SMILA's
"delete job run data")."""

from __future__ import annotations

import json

import pytest

from fabricjobs.model import Status
from harness import Cluster, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path, request, node_backend):
    c = Cluster(tmp_path, backend=node_backend, settings=getattr(request, "param", None), request=request)
    yield c
    c.stop_all()


def test_deletehistory_removes_a_jobs_three_runs_and_their_logs_and_leaves_the_job(cluster, tmp_path):
    cluster.start_node("a")
    cluster.start_node("b")
    args = json.dumps({"counter": str(tmp_path / "n")})
    cluster.fetch(f"startjob user_job name='Probe.chatty' uid='c' args='{args}';")
    cluster.wait_job("USER_JOB", "Probe.chatty", "c", lambda j: j.archived, 30)
    # another uid of the same name keeps its history
    cluster.fetch(f"startjob user_job name='Probe.chatty' uid='other' args='{json.dumps({'counter': str(tmp_path / 'm')})}';")
    cluster.wait_job("USER_JOB", "Probe.chatty", "other", lambda j: j.archived, 30)
    before = cluster.shell("-e", "jobhistory user_job 'Probe.chatty' with uid='c';")
    assert before.returncode == 0 and before.stdout.rstrip().endswith("(3 rows)"), before.stdout
    assert "attempt 3 succeeds" in cluster.shell("-e", "joblog user_job 'Probe.chatty' with uid='c';").stdout

    out = cluster.shell("-e", "deletehistory user_job 'Probe.chatty' with uid='c';")
    assert out.returncode == 0, out.stderr
    assert "Deleted Runs" in out.stdout and "(1 row)" in out.stdout
    assert cluster.fetch("deletehistory user_job 'Probe.chatty' with uid='c';").first_row()["Deleted Runs"] == 0

    empty = cluster.shell("-e", "jobhistory user_job 'Probe.chatty' with uid='c';")
    assert empty.returncode == 0 and empty.stdout.rstrip().endswith("(0 rows)"), empty.stdout
    log = cluster.shell("-e", "joblog user_job 'Probe.chatty' with uid='c';")
    assert log.returncode == 1 and "No recorded run of [type: USER_JOB, name: Probe.chatty, uid: c]" in log.stderr
    assert len(cluster.fetch("jobhistory user_job 'Probe.chatty' with uid='other';").rows) == 3
    # the job itself: its row, status, output and counters as they were
    d = cluster.fetch("jobstatus user_job 'Probe.chatty' with uid='c' details;").first_row()
    assert (d["Status"], d["Is Archived"], d["Output"]) == ("PROCESSED", True, "3")
    assert (d["Runs"], d["Successes"], d["Failures"]) == (3, 1, 2)

    unknown = cluster.shell("-e", "deletehistory user_job 'Probe.chatty' with uid='nope';")
    assert unknown.returncode == 1 and "No such job [type: USER_JOB, name: Probe.chatty, uid: nope]" in unknown.stderr


def test_deletehistory_is_refused_while_a_run_is_going_and_deletes_nothing(cluster, tmp_path):
    cluster.start_node("a")
    args = json.dumps({"log": str(tmp_path / "l"), "seconds": 60})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='busy' args='{args}';")
    cluster.wait_job("USER_JOB", "Probe.record", "busy", lambda j: j.status is Status.IN_PROCESS)
    cluster.fetch("restartjob user_job name='Probe.record' uid='busy';")  # run 1 ends RESTARTED, run 2 starts
    wait_for(lambda: cluster.fetch("jobhistory user_job 'Probe.record' with uid='busy';").rows, 15, "run 1's line")
    cluster.wait_job("USER_JOB", "Probe.record", "busy", lambda j: j.status is Status.IN_PROCESS)

    refused = cluster.shell("-e", "deletehistory user_job 'Probe.record' with uid='busy';")
    assert refused.returncode == 1
    assert "Job is running [type: USER_JOB, name: Probe.record, uid: busy] (IN_PROCESS)" in refused.stderr
    assert [r["Result"] for r in cluster.fetch("jobhistory user_job 'Probe.record' with uid='busy';")] == ["RESTARTED"]

    cluster.fetch("stopjob user_job name='Probe.record' uid='busy' wait timeout 30;")
    assert len(cluster.fetch("jobhistory user_job 'Probe.record' with uid='busy';").rows) == 2
    assert cluster.fetch("deletehistory user_job 'Probe.record' with uid='busy';").first_row()["Deleted Runs"] == 2
    assert cluster.fetch("jobhistory user_job 'Probe.record' with uid='busy';").rows == ()
    assert cluster.job("USER_JOB", "Probe.record", "busy").status is Status.TERMINATED
