"""How sure a measurement of Cassandra's time is (clock.py): a process whose round trips were
all slow stamps its writes late by the measurement's error, so that no other process's sweep
can cover them (docs/explanation/cassandra-queue.md, "Whose clock"). That only holds if the
error it states is at least the error it has."""

from __future__ import annotations

from fabricjobs.store.cassandra.clock import ClusterClock, Sample

CASSANDRA = 1_800_000_000.0  # Cassandra's time at monotonic 0


def answered(host: str, round_trip: float, after: float) -> Sample:
    """A round trip sent at monotonic 0, which the host answered ``after`` seconds into it."""
    return Sample(host, CASSANDRA + after, 0.0, round_trip, CASSANDRA + round_trip / 2)


def test_a_write_stamped_by_an_unsure_clock_is_never_stamped_before_it_was_taken():
    """Three hosts, every round trip slow (a loaded machine at start-up): the quickest (0.6 s)
    answered in its middle, the two slow ones (4 s) early. Their median is 1.8 s behind
    Cassandra's time; the error stated was the quickest sample's plus half the spread, 1.25 s,
    so writes were stamped 0.55 s before they were made, and a sweep of another process could
    cover an entry acknowledged in time."""
    mono = [4.0]
    clock = ClusterClock(max_skew=60, monotonic=lambda: mono[0], wall=lambda: CASSANDRA + mono[0])
    assert clock.take([answered("h1", 0.6, 0.3), answered("h2", 4.0, 0.1), answered("h3", 4.0, 0.2)])
    assert not clock.sure
    for mono[0] in (4.0, 5.0, 30.0):
        assert clock.timestamp() / 1e6 >= CASSANDRA + mono[0], "a stamp earlier than the time it was taken"
        assert abs(clock.now() - (CASSANDRA + mono[0])) <= clock.error
