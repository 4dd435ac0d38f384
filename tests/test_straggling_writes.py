"""One write that straggles holds up no other job (docs/explanation/nodes.md, "Writes that
straggle"). On Cassandra an LWT sent to a coordinator that froze (a long GC pause, SIGSTOP, a
cut cable) is not answered until its timeout, and the node's loop used to wait for the slowest
write of each group: one claim or outcome stuck there made every fire of the node late with it
(chaos runs saw 50 fires 5.5 s late). Here a node whose every LWT for one job answers 3 s late
(tests/helpers/straggling_lwt_node.py) runs that job and another, each every second: the other
starts each fire on time, and the slow one's claims and outcomes still land, late, each once."""

from __future__ import annotations

import json

import pytest

from backends import BACKENDS
from harness import read_records, wait_records

pytestmark = [pytest.mark.real_cassandra, pytest.mark.timing,
              pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="the LWTs are Apache Cassandra's (real tier)")]


@pytest.fixture
def node_backend():
    return "cassandra-real"


def test_a_straggling_lwt_delays_only_its_own_job(cluster, tmp_path):
    cluster.start_helper_node("a", "straggling_lwt_node.py")
    ticks, slow = tmp_path / "ticks.jsonl", tmp_path / "slow.jsonl"
    cluster.shell_ok(
        f"startjob user_job name='Probe.stamp' uid='slow' exec_interval='00:00:01' args='{json.dumps({'log': str(slow)})}';"
        f"startjob user_job name='Probe.stamp' uid='tick' exec_interval='00:00:01' args='{json.dumps({'log': str(ticks)})}';")
    records = wait_records(ticks, 12, timeout=60)
    lags = [round(r["start"] - r["due"], 3) for r in records[2:12]]  # after the node's first passes
    # Before, each fire of 'tick' whose claim or outcome went with one of 'slow' waited for it: 3 s.
    assert max(lags) < 1.0, lags
    runs = read_records(slow)
    assert len(runs) >= 2, runs  # claimed late, run, its outcome written late, claimed again
    assert len({r["due"] for r in runs}) == len(runs), runs  # each fire once
    assert [r["epoch"] for r in runs] == sorted({r["epoch"] for r in runs}), runs
