"""DolphinDB's recent runs of the whole cluster (JOBHISTORY RECENT n) through ``fabricjobs
shell`` on two real nodes."""

from __future__ import annotations

import re

from harness import module_two_nodes

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
