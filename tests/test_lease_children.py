"""What a run starts ends with it (docs/guides/security.md), on the lease path: what a USER_JOB started ends with the run when its
node stops renewing the lease, before another node may take the job over (docs/guides/writing-jobs.md)."""

from __future__ import annotations

import json
import signal

import pytest

from harness import process_alive, wait_for

pytestmark = pytest.mark.slow


def _children(log) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    return [(node, int(pid)) for node, pid in (line.split() for line in log.read_text().splitlines() if line)]


@pytest.mark.liveness
def test_a_user_jobs_child_is_gone_before_another_node_takes_the_job_over(cluster, tmp_path):
    """The job waits on `sleep 45` and never looks at is_aborted(); its node is paused past the
    lease. The worker ends the run, and the child with it: else the takeover's copy ran beside it."""
    log = tmp_path / "children.txt"
    paused = cluster.start_node("paused")
    cluster.fetch(f"startjob user_job name='Hazard.shell_out' uid='s' args='{json.dumps({'log': str(log)})}';")
    first = wait_for(lambda: _children(log), 20, "the job to start its child")[0]
    assert first[0] == "paused"
    cluster.start_node("other")
    cluster.pause(paused)
    try:
        taken = wait_for(lambda: [c for c in _children(log) if c[0] == "other"], 15, "the other node to take the job over")
        assert not process_alive(first[1]), "the first run's child still ran when the other node started its own"
    finally:
        paused.signal(signal.SIGCONT)
    cluster.fetch("stopjob user_job name='Hazard.shell_out' uid='s';")
    wait_for(lambda: not process_alive(taken[0][1]), 15, "the takeover's child to end with its stopped run")


@pytest.mark.liveness
def test_a_user_jobs_child_is_gone_when_the_dead_man_timer_ends_its_worker(cluster, tmp_path):
    """The job holds the GIL past its lease, so its worker cannot act and the kernel ends it:
    what it started is left behind, and must be ended before the job's retry starts."""
    log = tmp_path / "children.txt"
    cluster.start_node("a")
    cluster.fetch(f"startjob user_job name='Hazard.shell_out_and_hog' uid='h' args='{json.dumps({'log': str(log)})}';")
    first = wait_for(lambda: _children(log), 20, "the job to start its child")[0]
    wait_for(lambda: len(_children(log)) >= 2, 20, "the retry to start its own child")
    assert not process_alive(first[1]), "the first run's child still ran when the retry started"
    cluster.fetch("stopjob user_job name='Hazard.shell_out_and_hog' uid='h';")
    cluster.wait_job("USER_JOB", "Hazard.shell_out_and_hog", "h", lambda j: j.archived, 20)
    wait_for(lambda: all(not process_alive(pid) for _, pid in _children(log)), 15, "every run's child to be ended")
