"""Cassandra's time, as this process measures it: the one clock every write timestamp, every
sweep of the index and every decision of a node on Cassandra is read from, whatever the host's
own clock says (docs/explanation/cassandra-queue.md, "Whose clock").

Cassandra orders the writes to a cell, and a delete against the writes it covers, by their
timestamps alone. Those are client timestamps: with each host stamping by its own clock, a
range delete of the index dated by a host whose clock is ahead covered entries that other
hosts wrote after it, and an entry from a host whose clock was behind fell under deletes
decided before it was written: jobs were left without an index entry, never claimed.

So the hosts do not stamp by their own clocks. A process measures the offset between its
monotonic clock and the coordinators' clocks (``toTimestamp(now())`` of ``system.local``, on
each host of its DC, the quickest of a few round trips: its error is half that round trip),
and from then on Cassandra's time is that anchor plus the monotonic time since: a step of the
host's wall clock (NTP, an operator) changes nothing. It measures again every ``RESYNC_SEC``.
Every process then stamps by the same clock, within the measurement's error, which the index's
sweeps allow for (sweep.py).

The host's own wall clock is still compared with Cassandra's: beyond ``max_skew`` (config
``[cassandra] MAX_CLOCK_SKEW_SEC``) the store refuses to write, with a message that says by how
much the host is off. Within it, nothing the product decides depends on the host's clock.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ...errors import StoreError

log = logging.getLogger("fabricjobs.store.cassandra")

RESYNC_SEC = 30.0  # how often the offset is measured again
SAMPLES = 3  # round trips per host per measurement; the quickest counts
MAX_ERROR_SEC = 0.25  # a measurement less sure than this (half its round trip) is not taken...
SPREAD_WARN_SEC = 0.25  # ...and Cassandra hosts disagreeing by more than this is warned of
#: How fast this process's clock may drift from Cassandra's between measurements (the most the
#: kernel slews a clock for NTP is 500 ppm): a measurement's error grows by this much a second
#: after it is taken, so a process whose measurements keep failing becomes unsure in time
#: (no sweeps, later stamps) instead of trusting an anchor that has drifted.
DRIFT_PER_SEC = 500e-6


def _since_boot() -> float:
    """A clock that keeps counting while the host is suspended (CLOCK_BOOTTIME where there is
    one; the monotonic clock stops, and Cassandra's time read from it would lag by the sleep)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


_STEADY: Callable[[], float] = _since_boot if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic


class ClockSkewError(StoreError):
    """This host's clock is further from Cassandra's than the bound allows: nothing is written."""


@dataclass(frozen=True)
class Sample:
    """One round trip to a host: Cassandra's time it answered, and this process's monotonic
    time before and after. Its error is half the round trip (plus the answer's millisecond)."""

    host: str
    cassandra: float  # seconds since the epoch, as the coordinator read its clock
    sent: float  # monotonic
    received: float  # monotonic
    wall: float  # this host's wall clock at the midpoint

    @property
    def error(self) -> float:
        return (self.received - self.sent) / 2 + 0.001

    @property
    def anchor(self) -> float:
        """Cassandra's time minus this process's monotonic time."""
        return self.cassandra + 0.0005 - (self.sent + self.received) / 2

    @property
    def skew(self) -> float:
        """This host's wall clock minus Cassandra's (positive: ahead)."""
        return self.wall - self.cassandra - 0.0005


class ClusterClock:
    """Cassandra's time for this process, and whether this host's clock is close enough to it
    to write. Thread-safe. Until the first measurement it reads the host's wall clock, and
    nothing may be written: a write stamped by that clock could fall under any other
    process's sweep (a host 30 s behind whose time queries all went unanswered stranded
    every job it submitted)."""

    def __init__(self, *, max_skew: float, monotonic: Callable[[], float] = _STEADY,
                 wall: Callable[[], float] = time.time) -> None:
        self.max_skew = max_skew
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._anchor: float | None = None
        self._error = float("inf")  # of the last measurement, when it was taken (see error)
        self._measured_at = 0.0  # monotonic
        self._skew = 0.0
        self._last_us = 0
        self._stop = threading.Event()

    # -- reading -------------------------------------------------------------------------------

    def now(self) -> float:
        """Cassandra's time now, in seconds since the epoch."""
        anchor = self._anchor
        return self._wall() if anchor is None else anchor + self._monotonic()

    def timestamp(self) -> int:
        """A write timestamp (microseconds), each larger than the one before: the driver's
        timestamp generator, so every plain write is stamped by Cassandra's time. While the
        measurement is less sure than MAX_ERROR_SEC (a slow round trip at start-up), stamped
        that much later: a write stamped late cannot fall under another process's sweep."""
        error = self.error
        late = error if MAX_ERROR_SEC < error < float("inf") else 0.0
        now = int((self.now() + late) * 1_000_000)
        with self._lock:
            self._last_us = now = max(now, self._last_us + 1)
        return now

    __call__ = timestamp

    @property
    def skew(self) -> float:
        """This host's wall clock minus Cassandra's, as last measured (0 before any)."""
        return self._skew

    @property
    def error(self) -> float:
        """How far :meth:`now` may be from Cassandra's own clock (inf before any measurement):
        the last measurement's error, and what the clocks may have drifted apart since."""
        return self._error + DRIFT_PER_SEC * max(0.0, self._monotonic() - self._measured_at)

    @property
    def sure(self) -> bool:
        """Whether Cassandra's time is known within MAX_ERROR_SEC: only then may this process
        sweep (sweep.py), a range delete dated by this clock."""
        return self.error <= MAX_ERROR_SEC

    @property
    def measured(self) -> bool:
        return self._anchor is not None

    @property
    def refuses(self) -> bool:
        """Whether nothing may be written: Cassandra's time not measured yet, or this host's
        clock beyond the bound."""
        return self._anchor is None or self._beyond()

    def _beyond(self) -> bool:
        return abs(self._skew) > self.max_skew

    def check_write(self) -> None:
        """ClockSkewError while this host's clock is beyond the bound."""
        if self.refuses:
            raise ClockSkewError(self.refusal())

    def refusal(self) -> str:
        if self._anchor is None:
            return ("Cassandra's time is not measured yet (no Cassandra host of this data centre answered "
                    "toTimestamp(now()) in time): nothing is written until it is, since every write is stamped by it")
        where = "ahead of" if self._skew > 0 else "behind"
        return (f"this host's clock is {abs(self._skew):.1f} s {where} Cassandra's, beyond [cassandra] "
                f"MAX_CLOCK_SKEW_SEC = {self.max_skew:g}: nothing is written until it is set right "
                f"(check its time synchronisation, e.g. chrony or systemd-timesyncd)")

    # -- measuring -----------------------------------------------------------------------------

    def take(self, samples: Sequence[Sample]) -> bool:
        """Adopt a measurement: per host its quickest sample, then the median anchor of the
        hosts. False (nothing changes) when none is sure enough, unless there is no anchor yet
        (a loaded machine still gets a clock, with a warning) or the anchor held has drifted
        to a larger error than this one's."""
        best: dict[str, Sample] = {}
        for s in samples:
            if s.host not in best or s.error < best[s.host].error:
                best[s.host] = s
        if not best:
            return False
        chosen = sorted(best.values(), key=lambda s: s.anchor)
        sure = [s for s in chosen if s.error <= MAX_ERROR_SEC]
        use = sure or chosen
        anchor = statistics.median(s.anchor for s in use)
        spread = use[-1].anchor - use[0].anchor
        # Each sample's anchor is within its own error of Cassandra's time, so the median is
        # within any sample's error plus its distance from it (the quickest sample's error
        # alone says nothing of a median taken from slower ones); half the spread stays as
        # the hosts' own disagreement.
        error = max(min(s.error for s in use) + spread / 2, min(s.error + abs(s.anchor - anchor) for s in use))
        if not sure and self._anchor is not None and error >= self.error:  # the anchor held is better
            log.warning("Cassandra's time not measured again: every round trip took over %.0f ms",
                        2000 * MAX_ERROR_SEC)
            return False
        if spread > SPREAD_WARN_SEC:
            log.warning("the Cassandra hosts' clocks disagree by %.2f s (%s): fix their time synchronisation",
                        spread, ", ".join(f"{s.host} {s.anchor - anchor:+.3f} s" for s in use))
        if not sure:
            log.warning("Cassandra's time measured with an error of up to %.0f ms (a slow round trip)",
                        1000 * error)
        skew = statistics.median(s.skew for s in use)
        first, refused_before = self._anchor is None, self._beyond()
        with self._lock:
            self._anchor, self._error, self._skew = anchor, error, skew
            self._measured_at = max(s.received for s in use)
            if first:  # the stamps of the requests before (the measurement's own) were the host's: forget them
                self._last_us = 0
        if self._beyond() and not refused_before and not first:  # (a first refusal is told by the write)
            log.error("%s", self.refusal())
        elif refused_before and not self._beyond():
            log.warning("this host's clock is within %.1f s of Cassandra's again: writing resumes", abs(skew))
        return True

    def measure(self, ask: Callable[[object], float], hosts: Sequence[object]) -> list[Sample]:
        """``SAMPLES`` round trips to each host (``ask(host)`` answers its clock, in seconds
        since the epoch); hosts that do not answer are left out."""
        out = []
        for host in hosts:
            for _ in range(SAMPLES):
                sent = self._monotonic()
                try:
                    answer = ask(host)
                except Exception as exc:  # that host is down or slow: the others decide
                    log.debug("no time from Cassandra host %s: %s", host, exc)
                    break
                received = self._monotonic()
                wall = self._wall() - (received - sent) / 2
                out.append(Sample(str(host), answer, sent, received, wall))
        return out

    def keep_in_sync(self, sync: Callable[[], None], every: float = RESYNC_SEC) -> None:
        """Call ``sync`` every ``every`` seconds on a daemon thread until :meth:`close` (every
        second while nothing is measured: writes wait for it)."""
        def loop() -> None:
            while not self._stop.wait(every if self._anchor is not None else 1.0):
                try:
                    sync()
                except Exception as exc:  # the store may be unreachable for a while: the anchor holds
                    log.debug("could not measure Cassandra's time: %s", exc)

        threading.Thread(target=loop, name="cassandra-clock", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
