"""A node that gives a run back (it runs beyond its recommended count while another node has
room: the seed's give-up) leaves the job to the other nodes before it may take it again,
whatever MIN/MAX_GIVE_UP_EXCEPTIONAL_MINUTES and STOP_GRACE_SEC are. With a give-up delay of
0.6-1.8 s and a run that takes the 2 s grace to stop, the node used to hand the job back
already past its hold and claim it again a few milliseconds later, every ~3 s, so that the
other node never got it (docs/explanation/nodes.md)."""

from __future__ import annotations

import pytest

from harness import read_records, wait_for

FLAPPING = {"jobs": {"CLAIM_EXCEPTIONAL_INTERVAL_SEC": 0.3, "MIN_GIVE_UP_EXCEPTIONAL_MINUTES": 0.01,
                     "MAX_GIVE_UP_EXCEPTIONAL_MINUTES": 0.03, "STOP_GRACE_SEC": 2}}


@pytest.mark.parametrize("cluster", [FLAPPING], indirect=True)
def test_a_run_given_back_goes_to_the_node_with_room_and_not_back_to_the_giver(cluster, tmp_path):
    starts = tmp_path / "starts.jsonl"
    cluster.start_node("x1", node_id="ANY:1 2\n")
    cluster.fetch("".join(f"startjob user_job name='Probe.started' uid='{u}' args='{{\"log\": \"{starts}\"}}';"
                          for u in ("g1", "g2")))  # Probe.started ignores STOPJOB: the grace runs out
    wait_for(lambda: len(read_records(starts)) == 2, 15, "x1's recommended run and its exceptional one")
    cluster.start_node("x2", node_id="ANY:1\n")  # free recommended room: x1 gives its extra run back
    taken = wait_for(lambda: [r for r in read_records(starts) if r["node"] == "x2"], 30,
                     "x2 to run the job x1 gave back")
    assert "giving 'USER_JOB.Probe.started.g" in cluster.nodes["x1"].log()
    given = taken[0]["key"]
    again = [r for r in read_records(starts) if r["key"] == given and r["node"] == "x1" and r["start"] < taken[0]["start"]]
    assert len(again) == 1, again  # x1 ran it once, gave it back, and left it to x2
    assert sorted(r.worker_id for r in (cluster.job("USER_JOB", "Probe.started", u) for u in ("g1", "g2"))) == ["x1", "x2"]
