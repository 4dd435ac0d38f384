"""What happened to a job, where and why (docs/guides/watching-jobs.md): run history, job logs, WAITJOB,
STOPJOB WAIT, NODES DETAILS, metrics, JSON logs. Real node processes on both backends."""

from __future__ import annotations

import json
import signal
import time

import pytest

from fabricjobs.errors import WaitTimeout
from fabricjobs.model import Status
from harness import ROOT, free_port, scrape_metrics, wait_for

pytestmark = pytest.mark.slow


def test_a_job_that_fails_twice_then_succeeds_shows_three_runs_with_errors_and_nodes(cluster, tmp_path):
    counter = tmp_path / "n"
    cluster.start_node("a")
    cluster.start_node("b")
    cluster.fetch(f"startjob user_job name='Probe.fail_times' uid='f' args='{json.dumps({'counter': str(counter), 'failures': 2})}';")
    cluster.wait_job("USER_JOB", "Probe.fail_times", "f", lambda j: j.status is Status.PROCESSED, 20)
    hist = cluster.fetch("jobhistory user_job 'Probe.fail_times' with uid='f';")
    assert hist.columns[:5] == ("Run", "UID", "Node", "Result", "Status")
    rows = list(hist)
    assert [r["Result"] for r in rows] == ["OK", "ERROR", "ERROR"]  # newest first
    assert [r["Run"] for r in rows] == [3, 2, 1]
    assert [r["Status"] for r in rows] == ["PROCESSED", "WAITING", "WAITING"]
    assert rows[1]["Error"] == "RuntimeError: planned failure 2 of 2" and rows[2]["Error"] == "RuntimeError: planned failure 1 of 2"
    assert all(r["Node"] in ("a", "b") for r in rows) and rows[0]["Output"] == '{"succeeded_after": 2}'
    assert all(r["Duration (ms)"] >= 0 for r in rows)
    details = cluster.fetch("jobstatus user_job 'Probe.fail_times' with uid='f' details;")
    assert details.vertical
    d = details.first_row()
    assert (d["Runs"], d["Successes"], d["Failures"], d["Retries After Error"], d["Retries After Node Loss"], d["Kills"]) == (3, 1, 2, 2, 0, 0)
    out = cluster.shell("-e", "jobhistory user_job 'Probe.fail_times' limit 2;")
    assert out.returncode == 0 and out.stdout.rstrip().endswith("(2 rows)")


# A failed run is not re-claimed by its own node for the retry delay (long here), while the
# other node may take it at once: the three runs alternate between a and b.
@pytest.mark.parametrize("cluster", [{"jobs": {"RETRY_DELAY_SEC": 10}}], indirect=True)
def test_joblog_returns_the_right_runs_lines_from_any_shell(cluster, tmp_path):
    counter = tmp_path / "n"
    cluster.start_node("a")
    cluster.start_node("b")
    cluster.fetch(f"startjob user_job name='Probe.chatty' uid='c' args='{json.dumps({'counter': str(counter)})}';")
    cluster.wait_job("USER_JOB", "Probe.chatty", "c", lambda j: j.archived, 20)
    ran_on = {r["Run"]: r["Node"] for r in cluster.fetch("jobhistory user_job 'Probe.chatty' with uid='c';")}
    assert sorted(ran_on) == [1, 2, 3] and ran_on[1] != ran_on[2] != ran_on[3]
    # a shell in another process (as on another host) reads any run's lines
    second = cluster.shell("-e", "joblog user_job 'Probe.chatty' with uid='c' run 2;")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0].startswith(f"run 2 of USER_JOB.Probe.chatty.c on {ran_on[2]}: ERROR -> WAITING")
    assert "attempt 2 begins" in second.stdout and "attempt 2 fails" in second.stdout
    assert "attempt 1" not in second.stdout and "attempt 3" not in second.stdout
    last = cluster.shell("-e", "joblog user_job 'Probe.chatty';").stdout
    assert last.startswith(f"run 3 of USER_JOB.Probe.chatty.c on {ran_on[3]}: OK -> PROCESSED") and "attempt 3 succeeds" in last
    missing = cluster.shell("-e", "joblog user_job 'Probe.chatty' run 9;")
    assert missing.returncode == 1 and "No recorded run 9" in missing.stderr


@pytest.mark.parametrize("cluster", [{"jobs": {"PROCESS_JOBS_DIR": str(ROOT / "examples" / "process_jobs")}}], indirect=True)
def test_a_process_jobs_stdout_is_its_log(cluster):
    cluster.start_node("a")
    cluster.fetch("startjob process name='echoArg.sh' uid='e' args='{\"0\":\"x\",\"1\":\"y\"}';")
    cluster.wait_job("PROCESS", "echoArg.sh", "e", lambda j: j.archived)
    text = cluster.fetch("joblog process 'echoArg.sh' with uid='e';").status
    assert "stdout: Total Arguments : 2" in text and "stdout: 2nd Argument = y" in text


@pytest.mark.parametrize("cluster", [{"jobs": {"RUN_LOG_MAX_BYTES": 2048}}], indirect=True)
def test_joblog_keeps_the_head_and_the_tail_of_a_long_run_within_its_bound(cluster):
    cluster.start_node("a")
    cluster.fetch("startjob user_job name='Probe.many_lines' uid='u' args='{\"count\": 2000}';"
                  "startjob process name='many_lines.sh' uid='p' args='{\"0\": \"2000\"}';")
    cluster.wait_job("USER_JOB", "Probe.many_lines", "u", lambda j: j.archived)
    cluster.wait_job("PROCESS", "many_lines.sh", "p", lambda j: j.archived)
    for statement, first, last in (("joblog user_job 'Probe.many_lines' with uid='u';", "line 0000 of 2000", "line 1999 of 2000"),
                                   ("joblog process 'many_lines.sh' with uid='p';", "stdout: out 0000", "stdout: out 1999")):
        text = cluster.fetch(statement).status
        body = text.split("\n", 1)[1]  # after the run's header line
        dropped = "lines dropped] ..."
        assert first in body and last in body and dropped in body, text[:300]
        assert body.index(first) < body.index(dropped) < body.index(last)
        assert 1000 < len(body.encode()) < 2048 + 300  # the bound, with the header and the marker


def test_waitjob_returns_on_processed_and_times_out_cleanly(cluster, tmp_path):
    cluster.start_node("a")
    log = tmp_path / "r.jsonl"
    cluster.fetch(f"startjob user_job name='Probe.record' uid='w' args='{json.dumps({'log': str(log), 'seconds': 1.0})}';")
    t0 = time.monotonic()
    res = cluster.fetch("waitjob user_job 'Probe.record' with uid='w';")
    assert res.first_row()["Status"] == "PROCESSED" and 0.8 < time.monotonic() - t0 < 10
    cluster.fetch(f"startjob user_job name='Probe.started' uid='stuck' args='{json.dumps({'log': str(tmp_path / 's')})}';")
    with pytest.raises(WaitTimeout, match="WAITJOB timed out: USER_JOB.Probe.started.stuck is (WAITING|IN_PROCESS)"):
        cluster.fetch("waitjob user_job 'Probe.started' with uid='stuck' timeout 1;")
    shell = cluster.shell("-e", "waitjob user_job 'Probe.started' with uid='stuck' timeout 1;")
    assert shell.returncode == 1 and shell.stderr.startswith("WAITJOB timed out") and "Traceback" not in shell.stderr
    # STOPJOB ... WAIT returns once the stuck job is final (after the 1.5 s stop grace)
    stopped = cluster.fetch("stopjob user_job name='Probe.started' uid='stuck' wait timeout 20;")
    assert stopped.first_row()["Status"] == "TERMINATED"
    client = cluster.client()
    client.fetch(f"startjob user_job name='Probe.record' uid='w2' args='{json.dumps({'log': str(log), 'seconds': 0.2})}';")
    assert client.wait("user_job", "Probe.record", "w2", timeout=20)["Status"] == "PROCESSED"
    # client.stop(..., wait=True): STOPJOB ... WAIT from application code
    client.fetch(f"startjob user_job name='Probe.record' uid='w3' args='{json.dumps({'log': str(log), 'seconds': 3600})}';")
    cluster.wait_job("USER_JOB", "Probe.record", "w3", lambda j: j.status is Status.IN_PROCESS)
    assert client.stop("user_job", "Probe.record", "w3", wait=True, timeout=20).first_row()["Status"] == "TERMINATED"
    assert cluster.job("USER_JOB", "Probe.record", "w3").status is Status.TERMINATED


# DELETEHISTORY (SMILA's "delete job run data"): a job's runs and their logs go, the
# job's row stays, and nothing is deleted while a run of it is going.

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


def test_waitjob_on_a_recurring_job_returns_when_its_next_run_ends(cluster, tmp_path):
    cluster.start_node("a")
    cluster.fetch(f"startjob user_job name='Probe.stamp' uid='r' exec_interval='00:00:02' args='{json.dumps({'log': str(tmp_path / 'l')})}';")
    first = cluster.wait_job("USER_JOB", "Probe.stamp", "r", lambda j: j.status is Status.SCHEDULED)
    row = cluster.client().wait("user_job", "Probe.stamp", "r", timeout=10)
    assert row["Status"] == "SCHEDULED" and row["End Time"] > first.end_time


METRICS_PORT = free_port()
_scrape = scrape_metrics


# Claim lanes off (LANE_PATIENCE_MS = 0): the nodes race for the same rows, as the conflict
# counter at the end of this test needs.
@pytest.mark.parametrize("cluster", [{"metrics": {"PORT": METRICS_PORT}, "jobs": {"LANE_PATIENCE_MS": 0}}], indirect=True)
def test_metrics_are_served_and_change_as_jobs_run(cluster, tmp_path):
    cluster.start_node("a")
    before = _scrape(METRICS_PORT)
    assert before.get('fabricjobs_claim_attempts_total', 0) == 0
    log = tmp_path / "r.jsonl"
    cluster.fetch("".join(f"startjob user_job name='Probe.record' uid='m{i}' args='{json.dumps({'log': str(log), 'seconds': 1.0})}';" for i in range(3)))
    running = wait_for(lambda: _scrape(METRICS_PORT).get('fabricjobs_running_jobs{affinity="ANY",type="USER_JOB"}', 0) == 3, 10,
                       "the running gauge to show 3")
    assert running
    for i in range(3):
        cluster.wait_job("USER_JOB", "Probe.record", f"m{i}", lambda j: j.archived)
    after = wait_for(lambda: (lambda m: m.get('fabricjobs_executions_total{result="OK",type="USER_JOB"}', 0) == 3 and m)(
        _scrape(METRICS_PORT)), 10, "3 executions counted")
    assert after.get('fabricjobs_running_jobs{affinity="ANY",type="USER_JOB"}', 0) == 0
    assert after["fabricjobs_claim_attempts_total"] >= 3
    assert after["fabricjobs_reconcile_pass_seconds_count"] > before.get("fabricjobs_reconcile_pass_seconds_count", 0)
    assert after["fabricjobs_fire_lag_seconds_count"] >= 3
    assert after["fabricjobs_lease_remaining_seconds"] > 0
    # The store's own work: each claim and each outcome is an LWT on Cassandra, none on SQLite.
    lwts = after["fabricjobs_store_lwt_attempts_total"]
    assert lwts == 0 if cluster.backend == "sqlite" else lwts >= 6
    if cluster.backend != "cassandra-real":  # (a real JVM may stall past an LWT's timeout under load)
        assert after["fabricjobs_store_lwt_unknown_outcomes_total"] == 0  # nothing timed out here
    # A peer, on this node's own clock: its beat's age grows while it stands still.
    quiet = cluster.tmp / "quiet.ini"
    quiet.write_text(cluster.config_path.read_text().replace(f"PORT = {METRICS_PORT}", "PORT = 0"))
    peer = cluster.start_node("b", config=quiet)
    age = lambda: _scrape(METRICS_PORT).get('fabricjobs_peer_heartbeat_age_seconds{node="b"}')  # noqa: E731
    wait_for(lambda: age() is not None, 10, "b's heartbeat age in a's metrics")
    peer.signal_group(signal.SIGKILL)
    first = wait_for(lambda: (lambda a: a is not None and a > 1.0 and a)(age()), 10, "b's beat to stand still for a second")
    wait_for(lambda: age() > first + 0.5, 10, "b's heartbeat age to keep growing")
    # Claims another node won are counted: both nodes race for the same rows, batch after batch.
    cluster.start_node("b", config=quiet)
    batch = iter(range(100))

    def conflicts():
        i = next(batch)
        cluster.fetch("".join(f"startjob user_job name='Probe.noop' uid='c{i}-{j}';" for j in range(100)))
        return _scrape(METRICS_PORT).get("fabricjobs_claim_conflicts_total", 0) > 0

    wait_for(conflicts, 30, "a claim conflict to be counted", interval=0.2)


def test_nodes_details_and_json_logs(cluster, tmp_path):
    node = cluster.start_node("a", extra_args=["--log-format", "json"])
    cluster.fetch("startjob user_job name='Probe.noop' uid='j';")
    cluster.wait_job("USER_JOB", "Probe.noop", "j", lambda j: j.archived)
    details = cluster.fetch("nodes details;")
    assert details.vertical and details.first_row()["heartbeat"] == "500 ms x 8"
    wait_for(lambda: "status was updated to PROCESSED" in node.log(), 15, "the outcome line")
    lines = [json.loads(line) for line in node.log().splitlines() if line.startswith("{")]
    done = [l for l in lines if "status was updated to PROCESSED" in l["message"]]
    assert done and done[0]["node"] == "a" and done[0]["job"] == "USER_JOB.Probe.noop.j" and done[0]["epoch"] == 1
    assert all({"time", "level", "logger", "message", "node"} <= set(l) for l in lines)
