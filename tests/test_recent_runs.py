"""DolphinDB's recent runs of the whole cluster (JOBHISTORY RECENT n) through ``fabricjobs
shell`` on two real nodes."""

from __future__ import annotations

import getpass
import json
import re

from harness import module_two_nodes, read_records, wait_for

cluster = module_two_nodes("recentruns")


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
        "Type", "Name", "UID", "Run", "Node", "Result", "Status", "User", "Priority", "Parallelism", "Received", "Start",
        "End", "Duration (ms)", "Tries", "Error", "Note"]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert [c[:4] + c[5:7] for c in cells] == [["USER_JOB", "Probe.fails_no_retry", "r2", "1", "ERROR", "FAILED"],
                                               ["USER_JOB", "Probe.noop", "r1", "1", "OK", "PROCESSED"]]
    assert all(c[4].startswith("local-") and re.fullmatch(r"\d+", c[13]) for c in cells)
    assert all(c[7] == getpass.getuser() and c[8:10] == ["4", "1"] and c[10] <= c[11] for c in cells)
    assert cells[0][12] >= cells[1][12] and "(2 rows)" in r.stdout  # newest first
    one = cluster.shell("-e", "jobhistory recent 1;")
    assert "| Probe.fails_no_retry |" in one.stdout and "Probe.noop" not in one.stdout and "(1 row)" in one.stdout
    bad = cluster.shell("-e", "jobhistory recent 0;")
    assert bad.returncode == 1 and "RECENT needs at least 1 run" in bad.stderr


def test_recent_lists_the_runs_going_on_and_the_jobs_waiting_for_a_node_first(cluster, tmp_path):
    """getRecentJobs lists pending jobs (received, not started) and running ones (started, not
    ended) too, with user, priority, parallelism and received time: RECENT's rows RUNNING
    (newest start first), then PENDING (next to run first), then the ended runs."""
    # An ended run of its own (the module's other test may run in another worker process)
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='ended';"
                            "waitjob user_job 'Probe.noop' with uid='ended' timeout 20;")
    assert r.returncode == 0, r.stderr
    starts = tmp_path / "starts.jsonl"
    args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 60, "starts": str(starts)})
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='going' priority=6 args='{args}';"
                            "startjob user_job name='Probe.noop' uid='queued-1' affinity='no-such-node';"
                            "startjob user_job name='Probe.noop' uid='queued-2' affinity='no-such-node' priority=2;"
                            "startjob user_job name='Probe.noop' uid='after' depends_on='USER_JOB.Probe.noop.queued-1';")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: read_records(starts), 20, "the running job's run to begin")
    r = cluster.shell("-e", "jobhistory recent 5;")
    assert r.returncode == 0, r.stderr
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in r.stdout.splitlines() if line.startswith("| ")][1:]
    assert [(c[2], c[5], c[6]) for c in cells[:4]] == [
        ("going", "RUNNING", "IN_PROCESS"), ("queued-1", "PENDING", "WAITING"), ("queued-2", "PENDING", "WAITING"),
        ("after", "PENDING", "WAITING")]
    going, queued = cells[0], cells[1]
    assert going[3] == "1" and going[4].startswith("local-") and going[8] == "6" and going[11] and not going[12]
    assert queued[3] == queued[4] == queued[11] == queued[12] == "" and queued[7] == getpass.getuser()
    assert queued[8:10] == ["4", "1"] and queued[10]  # received, never started
    assert cells[3][16].startswith("waiting for USER_JOB.Probe.noop.queued-1") and cells[4][5] in ("OK", "ERROR")  # then ended runs
    one = cluster.shell("-e", "jobhistory recent 1;")
    assert "| going " in one.stdout and "(1 row)" in one.stdout
    cluster.shell("-e", "stopjob user_job name='Probe.record' uid='going' wait timeout 20;"
                        "stopjob user_job name='Probe.noop';")
