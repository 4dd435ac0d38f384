"""Cassandra's time as a process measures it (fabricjobs/store/cassandra/clock.py), with the
process's clocks in the test's hands. The same with real processes under libfaketime on Apache
Cassandra: tests/test_clock_skew.py."""

from __future__ import annotations

import pytest

from fabricjobs.store.cassandra.clock import MAX_ERROR_SEC, ClockSkewError, ClusterClock, Sample


class Clocks:
    """A host whose wall clock is ``skew`` s off Cassandra's, and whose monotonic clock runs."""

    def __init__(self, skew: float) -> None:
        self.mono, self.cassandra, self.skew = 100.0, 1_800_000_000.0, skew

    def wall(self) -> float:
        return self.cassandra + self.skew

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.cassandra += seconds

    def ask(self, round_trip: float, host_offset: float = 0.0):
        """A host that answers its clock after half ``round_trip``, and is ``host_offset`` off."""
        def ask(_host) -> float:
            self.advance(round_trip / 2)
            answer = self.cassandra + host_offset
            self.advance(round_trip / 2)
            return answer
        return ask


def test_cassandras_time_is_kept_on_the_monotonic_clock_whatever_the_wall_clock_says():
    c = Clocks(skew=-30.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    assert clock.take(clock.measure(c.ask(0.002), ["h1"]))
    assert abs(clock.now() - c.cassandra) < 0.002
    assert abs(clock.skew + 30.0) < 0.002 and clock.sure
    c.skew = +3600.0  # the wall clock steps an hour (NTP, an operator): Cassandra's time does not
    c.advance(5.0)
    assert abs(clock.now() - c.cassandra) < 0.002
    first = clock.timestamp()
    assert clock.timestamp() > first and abs(first / 1e6 - c.cassandra) < 0.002


def test_the_hosts_median_is_taken_and_each_hosts_quickest_round_trip():
    c = Clocks(skew=0.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    samples = clock.measure(c.ask(0.4), ["slow"]) + clock.measure(c.ask(0.002, +0.010), ["h1"]) \
        + clock.measure(c.ask(0.002, -0.010), ["h2"]) + clock.measure(c.ask(0.002, +0.001), ["h3"])
    assert clock.take(samples)
    assert abs(clock.now() - (c.cassandra + 0.001)) < 0.003  # h3, the median of the sure ones


def test_beyond_the_bound_every_write_is_refused_with_how_far_off_the_host_is():
    c = Clocks(skew=+75.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    clock.take(clock.measure(c.ask(0.002), ["h1"]))
    assert clock.refuses
    with pytest.raises(ClockSkewError, match=r"75\.0 s ahead of Cassandra's, beyond \[cassandra\] MAX_CLOCK_SKEW_SEC = 60"):
        clock.check_write()
    c.skew = -1.0  # set right: the next measurement lets it write again
    clock.take(clock.measure(c.ask(0.002), ["h1"]))
    clock.check_write()


def test_an_unsure_first_measurement_stamps_writes_late_and_forbids_sweeps_until_a_sure_one():
    c = Clocks(skew=0.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    assert clock.take(clock.measure(c.ask(1.2), ["h1"]))  # a loaded machine: still a clock
    assert not clock.sure and clock.error > MAX_ERROR_SEC
    assert clock.timestamp() / 1e6 >= c.cassandra + 0.5  # late, so no other's sweep covers it
    assert not clock.take([Sample("h1", c.cassandra, c.mono, c.mono + 2.0, c.wall())]) or not clock.sure
    assert clock.take(clock.measure(c.ask(0.002), ["h1"])) and clock.sure
    late = clock.timestamp()
    c.advance(1.0)  # stamps never go back: they follow Cassandra's time again once it passed the late ones
    assert late < clock.timestamp() and abs(clock.timestamp() / 1e6 - c.cassandra) < 0.01


def test_stamps_taken_before_the_first_measurement_do_not_hold_later_ones_at_the_hosts_time():
    """The driver stamps every request, the measurement's own too, before the clock is known:
    on a host 30 s ahead those stamps must not keep later writes 30 s in the future."""
    c = Clocks(skew=+30.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    assert clock.timestamp() / 1e6 > c.cassandra + 29  # the host's clock: nothing measured yet
    clock.take(clock.measure(c.ask(0.002), ["h1"]))
    assert abs(clock.timestamp() / 1e6 - c.cassandra) < 0.01


def test_a_measurement_grows_less_sure_while_it_is_not_taken_again():
    """The clocks may drift apart between measurements: a process whose round trips all stay
    slow for ten minutes stops sweeping and stamps later, until a measurement is taken again
    (a slow one once the anchor held has drifted further than it is off)."""
    from fabricjobs.store.cassandra.clock import DRIFT_PER_SEC

    c = Clocks(skew=0.0)
    clock = ClusterClock(max_skew=60, monotonic=c.monotonic, wall=c.wall)
    assert clock.take(clock.measure(c.ask(0.004), ["h1"])) and clock.sure
    c.advance(60.0)  # two resyncs missed: still sure
    assert clock.sure and clock.error < 0.004 + 61 * DRIFT_PER_SEC
    assert not clock.take(clock.measure(c.ask(0.8), ["h1"]))  # slow, and worse than the anchor held
    c.advance(600.0)
    assert not clock.sure and clock.error > MAX_ERROR_SEC
    assert clock.timestamp() / 1e6 - c.cassandra >= MAX_ERROR_SEC  # stamped that much later
    c.advance(600.0)
    assert clock.take(clock.measure(c.ask(0.8), ["h1"]))  # slow, but better than the anchor drifted since
    assert clock.error < 0.45
    assert clock.take(clock.measure(c.ask(0.004), ["h1"])) and clock.sure
