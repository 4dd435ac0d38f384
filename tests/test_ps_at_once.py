"""PS shows a run as soon as it starts, not at the node's next heartbeat: a node publishes its
tasks when they change (within about 0.1 s after a quiet spell, at most once a second while
they keep changing), whatever its heartbeat interval. With the default heartbeat (5 s) a run
used to appear only at the next beat."""

from __future__ import annotations

import json
import time

import pytest

from harness import read_records, wait_for

SLOW_BEAT = {"heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 5000, "FABRIC_HEARTBEAT_MISS": 12}}


@pytest.mark.timing  # (a latency bound: with nothing beside it, docs/explanation/testing.md)
@pytest.mark.parametrize("cluster", [SLOW_BEAT], indirect=True)
def test_ps_shows_a_run_within_half_a_second_of_its_start(cluster, tmp_path):
    cluster.start_node("ps1")
    client = cluster.client()
    seen: dict[str, float] = {}
    for i in range(3):  # a quiet node, then runs that start while others go on (the tasks change)
        starts = tmp_path / f"starts-{i}.jsonl"
        args = json.dumps({"log": str(tmp_path / "runs.jsonl"), "seconds": 30, "starts": str(starts)})
        client.fetch(f"startjob user_job name='Probe.record' uid='ps-{i}' args='{args}';")
        wait_for(lambda: _shown(client, i + 1, f"ps-{i}", seen), 10, f"PS ALL to show ps-{i}", interval=0.01)
        # The job writes its start once its worker runs it, which can come after PS shows the
        # run (the node publishes a run it has dispatched): wait for the record, then compare.
        started = wait_for(lambda: read_records(starts), 10, f"ps-{i}'s start record")[0]["start"]
        assert seen[f"ps-{i}"] - started < 0.5, (i, seen[f"ps-{i}"] - started)
        # The store's view, not only this process's: the node's published row says so too.
        row = client.store.node("ps1")
        assert f"USER_JOB.Probe.record.ps-{i}" in row.tasks
    client.fetch("stopjob user_job name='Probe.record';")


def _shown(client, count: int, uid: str, seen: dict[str, float]) -> bool:
    """Whether PS ALL lists ``count`` runs of Probe.record (PS shows no UID: the i-th run is the
    i-th row); notes when it first did."""
    rows = client.fetch("ps all;").rows
    if sum(1 for r in rows if r[5] == "UserJob - Probe.record") >= count:
        seen.setdefault(uid, time.time())
        return True
    return False
