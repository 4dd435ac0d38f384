"""A UID started again after it ended keeps one row (the seed's reuse), and its run counters
go on counting: JOBSTATUS ... DETAILS's Runs agrees with JOBHISTORY, through ``fabricjobs
shell`` on two real nodes."""

from __future__ import annotations

import re

from harness import module_two_nodes

cluster = module_two_nodes("reuseduid")


def test_the_runs_counter_counts_every_run_of_a_reused_uid_as_jobhistory_lists_them(cluster):
    for _ in range(3):
        r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='again';"
                                "waitjob user_job 'Probe.noop' with uid='again' timeout 20;")
        assert r.returncode == 0, r.stderr
    r = cluster.shell("-e", "startjob user_job name='Probe.fails_no_retry' uid='again';"
                            "waitjob user_job 'Probe.fails_no_retry' with uid='again' timeout 20;"
                            "startjob user_job name='Probe.fails_no_retry' uid='again';"
                            "waitjob user_job 'Probe.fails_no_retry' with uid='again' timeout 20;")
    assert r.returncode == 0, r.stderr

    for name, ok, failed in (("Probe.noop", 3, 0), ("Probe.fails_no_retry", 0, 2)):
        details = cluster.shell("-e", f"jobstatus user_job '{name}' with uid='again' details;").stdout
        counters = dict(re.findall(r"^(Runs|Successes|Failures|Failed Without Retry)\s+\| (\d+)", details, re.M))
        history = cluster.shell("-e", f"jobhistory user_job '{name}' with uid='again';").stdout
        assert f"({ok + failed} rows)" in history, history
        assert counters == {"Runs": str(ok + failed), "Successes": str(ok), "Failures": str(failed),
                            "Failed Without Retry": str(failed)}, details
