"""SMILA's job run ids and counters: WAITJOB ... RUN n waits for one run, and JOBSTATUS ...
DETAILS counts failures for good with and without retry and cancels; on two real nodes."""

from __future__ import annotations

import re
import time

from harness import module_two_nodes, read_records, start_recurring_probe, wait_for, wait_records

cluster = module_two_nodes("runnumbersan")


def test_waitjob_run_n_waits_for_that_run_and_answers_its_history_row(cluster, tmp_path):
    """SMILA's job run ids: run n (the epoch, JOBHISTORY's Run) is what WAITJOB ... RUN n waits
    for; a run that never will be is a clear error, at once for an archived job."""
    log, starts = start_recurring_probe(cluster, tmp_path, "runs", 0.5)
    began = time.monotonic()
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs' run 3 timeout 30;")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\|\s+3\s+\|\s+runs\s+\|\s+\S+\s+\|\s+OK\s+\|", r.stdout), r.stdout
    assert len(read_records(log)) >= 3  # the third run had ended when it answered
    assert time.monotonic() - began >= 1.0  # and it did wait (runs 2 and 3 fire a second apart)
    r = cluster.shell("-e", "stopjob user_job name='Probe.record' uid='runs' wait timeout 20;"
                            "waitjob user_job 'Probe.record' with uid='runs' run 1;")
    assert r.returncode == 0 and re.search(r"\|\s+1\s+\|\s+runs\s+\|", r.stdout), r.stdout + r.stderr

    once = tmp_path / "once.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='runs1' args='{{\"log\": \"{once}\"}}';"
                            "waitjob user_job 'Probe.record' with uid='runs1' run 1 timeout 20;")
    assert r.returncode == 0 and re.search(r"\|\s+1\s+\|\s+runs1\s+\|\s+\S+\s+\|\s+OK\s+\|", r.stdout), r.stdout + r.stderr
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs1' run 2 timeout 20;")
    assert r.returncode == 1 and "No recorded run 2 of" in r.stderr and "archived" in r.stderr, r.stderr
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs1' run 1 timeout x;")
    assert r.returncode == 1 and r.stdout == "", r.stdout


def test_smilas_run_counters_count_failures_for_good_with_and_without_retry_and_cancels(cluster, tmp_path):
    """SMILA's job run counters: started (Runs), successful, retried after error, retried after
    timeout (node loss), failed after retry, failed without retry, canceled; as JOBSTATUS ...
    DETAILS shows them through the shell."""
    def counters(name, uid):
        out = cluster.shell("-e", f"jobstatus user_job '{name}' with uid='{uid}' details;").stdout
        return {k: int(v) for k, v in re.findall(r"^(Runs|Successes|Failures|Retries After Error|Failed After Retry|"
                                                  r"Failed Without Retry|Canceled)\s+\| (\d+)", out, re.M)}

    r = cluster.shell("-e", "startjob user_job name='Probe.always_fails' uid='cnt';"
                            "startjob user_job name='Probe.fails_no_retry' uid='cnt';"
                            f"startjob user_job name='Probe.started' uid='cnt' args='{{\"log\": \"{tmp_path / 's.log'}\"}}';")
    assert r.returncode == 0, r.stderr
    for name in ("Probe.always_fails", "Probe.fails_no_retry"):
        wait_for(lambda: cluster.job("USER_JOB", name, "cnt").status.name == "FAILED", 30, f"{name} to fail for good")
    wait_records(tmp_path / "s.log", 1)
    r = cluster.shell("-e", "stopjob user_job name='Probe.started' uid='cnt' wait timeout 20;")
    assert r.returncode == 0, r.stderr
    retried = counters("Probe.always_fails", "cnt")
    assert retried["Failed After Retry"] == 1 and retried["Failed Without Retry"] == 0, retried
    assert retried["Runs"] == retried["Failures"] == retried["Retries After Error"] + 1, retried
    assert counters("Probe.fails_no_retry", "cnt") == {"Runs": 1, "Successes": 0, "Failures": 1, "Retries After Error": 0,
                                                       "Failed After Retry": 0, "Failed Without Retry": 1, "Canceled": 0}
    assert counters("Probe.started", "cnt") == {"Runs": 1, "Successes": 0, "Failures": 0, "Retries After Error": 0,
                                                "Failed After Retry": 0, "Failed Without Retry": 0, "Canceled": 1}
