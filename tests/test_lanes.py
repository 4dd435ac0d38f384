"""Claim lanes (fabricjobs/node/lanes.py): which claimable rows a node tries, and when. Pure
logic on a clock value the test sets; tests/test_cluster.py shows the effect on real nodes."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from fabricjobs.model import Job, JobKey, Status
from fabricjobs.node.lanes import MAX_WAIT, OVERDUE, ROUNDS, Lanes

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
ALIVE = ["a", "b"]


def row(uid: str, priority: int = 4, owner: str | None = None) -> Job:
    return Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, T, priority=priority, worker_id=owner)


def rows_in(lane: int, count: int, prefix: str = "r", lanes: int = 2) -> list[Job]:
    out, i = [], 0
    while len(out) < count:
        r = row(f"{prefix}{i}")
        if r.key.lane(lanes) == lane:
            out.append(r)
        i += 1
    return out


def test_every_row_falls_in_exactly_one_live_nodes_lane_the_same_on_every_node():
    a, b = Lanes("a", 0.2), Lanes("b", 0.2)
    rows = [row(f"u{i}") for i in range(200)]
    own_a = {r.key for r in rows if a.is_own(r, ALIVE)}
    own_b = {r.key for r in rows if b.is_own(r, ALIVE)}
    assert own_a.isdisjoint(own_b) and len(own_a | own_b) == 200
    assert 60 <= len(own_a) <= 140  # a hash, not a split by position
    assert Lanes("a", 0.2).is_own(rows[0], ALIVE) == a.is_own(rows[0], ALIVE)  # stable


def test_owned_rows_are_left_to_owner_precedence_not_held_back_by_lanes():
    a = Lanes("a", 0.2)
    theirs = rows_in(1, 2)
    owned = [r.replace(worker_id="b") for r in theirs]
    order, preferred = a.claimable(owned, 10, ALIVE, now=0.0)
    assert order == owned and a.next_wake is None  # past owner precedence: claimable at once


def test_a_rows_live_owner_decides_its_lane_whatever_its_hash():
    a = Lanes("a", 0.2)
    theirs = rows_in(1, 1)[0].replace(worker_id="a")
    assert a.is_own(theirs, ALIVE)
    assert not a.is_own(rows_in(0, 1)[0].replace(worker_id="b"), ALIVE)
    dead_owner = rows_in(0, 1)[0].replace(worker_id="gone")  # not live: back to the hash
    assert a.is_own(dead_owner, ALIVE)


def test_own_rows_at_once_other_lanes_rows_after_the_wait_with_a_wake_up_for_it():
    a = Lanes("a", 0.2)
    mine, theirs = rows_in(0, 3), rows_in(1, 3)
    order, preferred = a.claimable(mine + theirs, 10, ALIVE, now=100.0)
    assert order == mine and preferred == {r.key for r in mine}
    assert a.next_wake == 100.2
    order, _ = a.claimable(mine + theirs, 10, ALIVE, now=100.1)
    assert order == mine and a.next_wake == 100.2  # counted from the first sighting
    order, preferred = a.claimable(mine + theirs, 10, ALIVE, now=100.2)
    assert order[:3] == mine and set(order[3:]) == set(theirs)
    assert preferred == {r.key for r in mine}  # passengers: own lane only
    assert a.next_wake is None


def test_stolen_rows_are_taken_youngest_first_beyond_the_ones_their_node_takes_next():
    a = Lanes("a", 0.2, rng=random.Random(1))
    theirs = rows_in(1, 6)
    a.claimable(theirs, 2, ALIVE, now=0.0)
    order, _ = a.claimable(theirs, 2, ALIVE, now=0.3)
    assert order[:4] == theirs[2:][::-1]  # the far end first
    assert set(order[4:]) == set(theirs[:2])  # their node's next two: last, at random


def test_rows_left_for_overdue_times_the_wait_are_taken_in_order_like_own_ones():
    a = Lanes("a", 0.2)
    theirs = rows_in(1, 4)
    a.claimable(theirs, 1, ALIVE, now=0.0)
    order, preferred = a.claimable(theirs, 1, ALIVE, now=OVERDUE * 0.2)
    assert order == theirs and preferred == {r.key for r in theirs}


def test_priority_levels_keep_their_order_across_lanes():
    a = Lanes("a", 0.2)
    high_theirs = [r.replace(priority=9) for r in rows_in(1, 2, "h")]
    low_mine = rows_in(0, 2, "l")
    a.claimable(high_theirs + low_mine, 4, ALIVE, now=0.0)
    order, _ = a.claimable(high_theirs + low_mine, 4, ALIVE, now=0.5)
    assert set(order[:2]) == set(high_theirs) and order[2:] == low_mine


def test_a_row_gone_from_the_window_is_forgotten_and_waits_afresh():
    a = Lanes("a", 0.2)
    mine, theirs = rows_in(0, 1), rows_in(1, 1)
    a.claimable(mine + theirs, 1, ALIVE, now=0.0)
    a.claimable(mine, 1, ALIVE, now=0.1)
    order, _ = a.claimable(mine + theirs, 1, ALIVE, now=0.25)
    assert order == mine and a.next_wake == 0.45


def test_a_node_with_nothing_of_its_own_steals_after_a_few_claim_rounds_not_the_whole_patience():
    """At the end of a queue drained by several nodes, the one that ran out of work first took
    its peers' rows only after the patience (0.2 s): idle while they still worked. With nothing
    of its own to claim it waits ROUNDS claim rounds (a quarter of the patience at least), and
    still takes the far ends of their lanes first; rows are overdue after the usual time."""
    a = Lanes("a", 0.2, rng=random.Random(1))
    theirs = rows_in(1, 6)
    assert a.idle_wait == 0.05  # no claim round measured yet: a quarter of the patience
    order, _ = a.claimable(theirs, 2, ALIVE, now=0.0)
    assert order == [] and a.next_wake == 0.05
    order, _ = a.claimable(theirs, 2, ALIVE, now=0.05)
    assert order[:4] == theirs[2:][::-1] and set(order[4:]) == set(theirs[:2])
    a.claimed(0.04)  # slow rounds: their node may need as long to claim its own
    assert a.idle_wait == ROUNDS * 0.04
    b = Lanes("b", 0.2)
    mine_too = rows_in(1, 1, "m")  # b's own row among a's: not idle, the whole patience
    b.claimable(rows_in(0, 2) + mine_too, 2, ALIVE, now=0.0)
    assert b.next_wake == 0.2


def test_the_wait_grows_with_slow_claim_rounds_and_shrinks_back_slowly():
    a = Lanes("a", 0.2)
    a.claimed(0.3)
    assert a.wait == ROUNDS * 0.3
    a.claimed(5.0)  # a store fault: rounds of seconds must not hold other lanes' rows that long
    assert a.wait == MAX_WAIT
    a = Lanes("a", 0.2)
    a.claimed(0.3)
    a.claimed(0.01)
    assert 0.2 < a.wait < ROUNDS * 0.3  # down slowly
    for _ in range(100):
        a.claimed(0.01)
    assert a.wait == 0.2


def test_alone_or_with_lanes_off_every_claimable_row_is_taken_in_order():
    rows = [row(f"u{i}") for i in range(10)]
    assert Lanes("a", 0.2).claimable(rows, 5, ["a"], now=0.0)[0] == rows
    off = Lanes("a", 0.0)
    assert off.claimable(rows, 5, ALIVE, now=0.0)[0] == rows
    assert all(off.is_own(r, ALIVE) for r in rows)


def test_a_dead_nodes_runs_are_taken_over_in_lanes_the_others_after_the_wait():
    """Survivors judge a crash at about the same moment: each takes its own lane's runs of the
    dead node at once, another survivor's lane's only once that one has had the wait to take
    them (it is slow or gone too), with a wake-up for then."""
    a = Lanes("a", 0.2)
    mine, theirs = rows_in(0, 3), rows_in(1, 3)
    dead = [r.replace(status=Status.IN_PROCESS, worker_id="gone") for r in mine + theirs]
    assert a.takeover(dead, ALIVE, now=50.0) == dead[:3]
    assert a.takeover_wake == 50.2
    assert a.takeover(dead[3:], ALIVE, now=50.1) == [] and a.takeover_wake == 50.2  # first seen at 50.0
    assert a.takeover(dead[3:], ALIVE, now=50.2) == dead[3:] and a.takeover_wake is None
    b = Lanes("b", 0.2)
    assert b.takeover(dead, ALIVE, now=50.0) == dead[3:]  # the other survivor: the other half
    assert Lanes("a", 0.2).takeover(dead, ["a"], now=50.0) == dead  # the only survivor: all
    assert Lanes("a", 0).takeover(dead, ALIVE, now=50.0) == dead  # lanes off: all
