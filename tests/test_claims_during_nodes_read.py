"""A full reconcile pass reads the nodes table, and on Cassandra that read can wait about 2 s
for a replica that is down but not yet known to be. The claims asked for meanwhile are served
while it is under way (docs/explanation/nodes.md, "The reconcile loop"): here a node whose every
such read takes 2 s (tests/helpers/slow_nodes_read_node.py) runs a job due every second, and
each fire starts well within a second of its due time, not when the read is over."""

from __future__ import annotations

import json

import pytest

from harness import Cluster, wait_records

pytestmark = pytest.mark.timing


def test_a_due_fire_does_not_wait_behind_a_slow_read_of_the_nodes(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start_helper_node("a", "slow_nodes_read_node.py")
        log = tmp_path / "stamps.log"
        args = json.dumps({"log": str(log)})
        cluster.shell_ok(f"startjob user_job name='Probe.stamp' uid='tick' exec_interval='00:00:01' args='{args}';")
        records = wait_records(log, 10, timeout=40)
        lags = [round(r["start"] - r["due"], 3) for r in records[2:10]]  # after the node's first passes
        # Before, a fire came due during the 2 s read and waited for its end: lags spread over 0-2 s.
        assert max(lags) < 1.0, lags
    finally:
        cluster.stop_all()
