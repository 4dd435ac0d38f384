"""Which sweeps a read of an index partition allows (fabricjobs/store/cassandra/sweep.py), on a
clock the test moves: no Cassandra needed, the rules themselves."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fabricjobs.store.cassandra.sweep import FULL_SWEEP_EVERY, SWEEP_EVERY, SWEEP_LAG, Gap, Sweeper, gaps

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
P = ("WAITING|4", 3)


def pos(ms: int, uid: str = "u") -> tuple:
    return (T0 + timedelta(milliseconds=ms), "USER_JOB", "A.b", uid, 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_gaps_lie_strictly_between_live_entries_and_only_as_far_as_the_read_reached():
    live = [pos(5, "b"), pos(5, "a"), pos(9)]
    assert gaps(live, since=None, before=None, complete=True) == [
        Gap(None, pos(5, "a")), Gap(pos(5, "a"), pos(5, "b")), Gap(pos(5, "b"), pos(9)), Gap(pos(9), None)]
    # A read that stopped at its limit knows nothing after its last row.
    assert gaps(live, since=None, before=None, complete=False)[-1] == Gap(pos(5, "b"), pos(9))
    # Bounds of a paged read (next_run >= since) and of a due read (next_run < before).
    got = gaps([pos(9)], since=T0, before=T0 + timedelta(seconds=1), complete=True)
    assert got == [Gap((T0,), pos(9), lo_included=True), Gap(pos(9), (T0 + timedelta(seconds=1),))]
    assert pos(0) in got[0] and pos(9) not in got[0] and pos(9) not in got[1]
    assert pos(1000) not in got[1] and pos(999) in got[1]
    # Two jobs due in the same millisecond are apart: a delete between them is in a gap.
    assert pos(5, "aa") in Gap(pos(5, "a"), pos(5, "b"))


def test_a_delete_is_swept_only_once_it_is_older_than_the_lag():
    clock = Clock()
    sweeper = Sweeper(clock)
    assert sweeper.plan(P, [pos(9)], read_at=clock.now, since=None, before=None, complete=True) is not None  # first: full
    clock.now += FULL_SWEEP_EVERY / 2
    sweeper.deleted(P, pos(3))
    assert sweeper.plan(P, [pos(9)], read_at=clock.now, since=None, before=None, complete=True) is None  # too young
    clock.now += SWEEP_LAG + 0.01
    plan = sweeper.plan(P, [pos(9)], read_at=clock.now, since=None, before=None, complete=True)
    assert plan is not None and plan.gaps == (Gap(None, pos(9)),)  # only the gap that holds the delete
    assert plan.stamp_us == int((clock.now - SWEEP_LAG) * 1_000_000)  # shadows nothing written since
    clock.now += SWEEP_EVERY
    assert sweeper.plan(P, [pos(9)], read_at=clock.now, since=None, before=None, complete=True) is None  # swept


def test_a_partition_is_swept_at_most_once_per_interval_and_fully_now_and_then():
    clock = Clock()
    sweeper = Sweeper(clock)
    first = sweeper.plan(P, [pos(1), pos(2)], read_at=clock.now, since=None, before=None, complete=True)
    assert first is not None and first.gaps == (Gap(None, pos(1)), Gap(pos(2), None))  # full: the edges
    started = clock.now
    clock.now -= 2 * SWEEP_LAG  # a delete old enough to sweep ...
    sweeper.deleted(P, pos(0))
    clock.now = started + SWEEP_EVERY / 2  # ... met by a read within SWEEP_EVERY of the last sweep
    assert sweeper.plan(P, [pos(1)], read_at=clock.now, since=None, before=None, complete=True) is None
    clock.now += FULL_SWEEP_EVERY
    again = sweeper.plan(P, [pos(1), pos(2)], read_at=clock.now, since=None, before=None, complete=True)
    assert again is not None and again.gaps == (Gap(None, pos(1)), Gap(pos(2), None))


def test_a_gap_between_live_entries_is_swept_once_it_holds_two_deletes():
    """A range tombstone costs a read two markers: over one delete it would cost more than
    the row tombstone it hides."""
    clock = Clock()
    sweeper = Sweeper(clock)
    sweeper.plan(P, [pos(1)], read_at=clock.now, since=None, before=None, complete=True)  # the first, full
    sweeper.deleted(P, pos(5))
    clock.now += SWEEP_LAG + SWEEP_EVERY
    live = [pos(1), pos(9), pos(20)]
    assert sweeper.plan(P, live, read_at=clock.now, since=None, before=None, complete=True) is None
    sweeper.deleted(P, pos(7))
    clock.now += SWEEP_LAG + SWEEP_EVERY
    plan = sweeper.plan(P, live, read_at=clock.now, since=None, before=None, complete=True)
    assert plan is not None and plan.gaps == (Gap(pos(1), pos(9)),)
