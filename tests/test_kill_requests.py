"""KILL requests through the store (PS and KILL from any shell): a request older than the node
that reads it is for an earlier life of its name, whose task numbers the node may have reused:
it is dropped, never carried out (on Cassandra a lagging replica can bring a deleted request
back after the table's short gc_grace; docs/explanation/cassandra-queue.md)."""

from __future__ import annotations

import json
from datetime import timedelta

from fabricjobs.model import Status
from fabricjobs.store.base import KillRequest
from harness import wait_for


def test_a_kill_request_from_before_the_node_started_is_dropped_and_a_new_one_is_carried_out(cluster, tmp_path):
    cluster.start_node("k1")
    args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 60})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='long' args='{args}';")
    cluster.wait_job("USER_JOB", "Probe.record", "long", lambda j: j.status is Status.IN_PROCESS)
    task = wait_for(lambda: cluster.fetch("ps;").first_row(), 10, "the run in PS")["task"]
    store = cluster.client().store
    old = store.store_time() - timedelta(hours=1)
    store.add_kill_request(KillRequest("k1", task, old, "a shell of long ago"))
    wait_for(lambda: store.kill_requests("k1") == [], 10, "the old request to be dropped")
    # A pass later (a request for no task, consumed in turn), the run still goes, never killed.
    store.add_kill_request(KillRequest("k1", 1, store.store_time(), "a marker"))
    wait_for(lambda: store.kill_requests("k1") == [], 10, "the marker request to be consumed")
    assert "requested by a shell of long ago" not in cluster.nodes["k1"].log()
    job = cluster.job("USER_JOB", "Probe.record", "long")
    assert job.status is Status.IN_PROCESS and job.tries == 0, job  # its first run, still going
    cluster.fetch(f"kill 'k1' {task};")
    killed = cluster.wait_job("USER_JOB", "Probe.record", "long", lambda j: j.tries == 1, 10)
    assert "killed by KILL" in killed.error_msg
