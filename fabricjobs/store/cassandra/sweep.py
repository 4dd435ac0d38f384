"""Keeping the index queue free of tombstones: range deletes that sweep up what changes left.

Every change of a job moves its ``k2_jobs_index`` entry, and the old entry is deleted: a row
tombstone, left where the queue is read (a claim deletes the head of a WAITING partition).
Cassandra steps over every tombstone a read meets, counts them (``tombstone_warn_threshold``,
1,000 by default; ``tombstone_failure_threshold``, 100,000, fails the read) and purges them
only in a compaction after ``gc_grace_seconds``. A queue that deletes its head one row at a
time would warn within seconds and stop within hours.

So a read of a partition is followed, now and then, by a *sweep*: for each gap between two
consecutive live entries the read returned (and before the first and after the last, as far as
the read reached), one range delete over that gap. A range tombstone shadows every row
tombstone inside it with an older timestamp, and reads then step over its two bounds instead
of the rows; range tombstones laid over the same gap later, with newer timestamps, shadow the
older ones too. A read meets a handful of bounds plus the deletes of the last few seconds,
whatever the history of the partition.

Why a sweep never deletes a live entry: the read saw no live entry in the gap, and the range
delete is stamped ``read time - SWEEP_LAG``, so it shadows only what was written before that.
An entry written before it but not seen by the (QUORUM) read must have been acknowledged after
the read, that is more than ``SWEEP_LAG`` after its own timestamp; entry writes that take
longer than ``ENTRY_WRITE_BOUND`` are written again by their writer (with a new timestamp)
before anything relies on them (CassandraStore._index_upsert), and ``SWEEP_LAG`` is that bound
plus the clock skew allowed between hosts. Gaps are bounded by whole clustering keys
(``(next_run, type, name, uid, revision) > (...)``), strictly between two live entries, so
jobs due in the same millisecond (a bulk submission) are swept apart.

Which gaps: those holding deletes this process made (it knows where) at least ``SWEEP_LAG``
ago (see ``_worth_it``), and the partition's edges once per ``FULL_SWEEP_EVERY`` (the deletes
of processes that have gone, a shell's STOPJOB). A partition is swept at most once per
``SWEEP_EVERY`` per process; one batch per sweep (one partition, one mutation).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Sequence

#: s: an index write acknowledged later than this is written again; as long as Cassandra's own
#: write timeout. On a slow, lossy network (200 ms one way) QUORUM writes take 1-1.6 s, and with a 1 s
#: bound every entry write was sent again until it failed: nodes there claimed nothing for
#: 20 s. The price, a sweep lag 1 s longer, is in docs/explanation/cassandra-data-model.md.
ENTRY_WRITE_BOUND = 2.0
CLOCK_SKEW_BOUND = 0.5  # s: the clock difference between hosts the sweep tolerates
SWEEP_LAG = ENTRY_WRITE_BOUND + CLOCK_SKEW_BOUND
SWEEP_EVERY = 0.25  # s: per partition and process, at most
FULL_SWEEP_EVERY = 10.0  # s: every gap of a partition, deletes of others included
_PENDING_CAP = 20_000  # own deletes remembered per partition (beyond: the full sweep covers)

Partition = tuple[str, int]  # (bucket, shard)
#: Where an entry is in its partition: its clustering key (next_run in whole milliseconds,
#: type, name, uid, revision). A 1-tuple (next_run,) is a bound on due times alone.
Position = tuple


@dataclass(frozen=True)
class Gap:
    """Positions with no live entry: after ``lo`` (from it, if ``lo_included``) and before
    ``hi``; None: unbounded on that side. Python compares the tuples as Cassandra compares
    clustering prefixes."""

    lo: Position | None
    hi: Position | None
    lo_included: bool = False

    def __contains__(self, pos: Position) -> bool:
        above = self.lo is None or pos > self.lo or (self.lo_included and pos[:len(self.lo)] == self.lo)
        return above and (self.hi is None or pos[:len(self.hi)] < self.hi)


def gaps(live: Iterable[Position], *, since: datetime | None, before: datetime | None, complete: bool) -> list[Gap]:
    """The gaps a read of one partition proves empty of live entries. ``live``: the positions
    of the rows it returned; ``since``/``before``: its bounds (``next_run >= since``,
    ``next_run < before``); ``complete``: False when it stopped at its row limit, so nothing
    is known after its last row."""
    out: list[Gap] = []
    lo: Position | None = None if since is None else (since,)
    lo_included = since is not None
    for pos in sorted(set(live)):
        out.append(Gap(lo, pos, lo_included))
        lo, lo_included = pos, False
    if complete:
        out.append(Gap(lo, None if before is None else (before,), lo_included))
    return out


def _worth_it(gap: Gap, ripe: int, full: bool) -> bool:
    """Whether to lay a range tombstone over ``gap`` holding ``ripe`` of this process's own
    deletes. A range tombstone costs a read two markers, a row tombstone one: a gap between
    two live entries is swept once it holds two deletes (a later, wider one covers it). The
    edges are swept on any delete, and on a full sweep on none seen (others' deletes gather
    there): the head of the partition before its first live entry, where a queue is drained,
    and the end after its last one; each new sweep of an edge covers the last one whole, so
    a read meets two markers there whatever the history."""
    edge = gap.lo is None or gap.hi is None or len(gap.hi) == 1
    return (edge and (ripe > 0 or full)) or ripe >= 2


@dataclass(frozen=True)
class SweepPlan:
    partition: Partition
    stamp_us: int  # USING TIMESTAMP of every range delete
    gaps: tuple[Gap, ...]


class Sweeper:
    """What this process deleted where, and when each partition was last swept: decides the
    sweeps (:meth:`plan`), the store runs them. Thread-safe."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self._pending: dict[Partition, list[tuple[Position, float]]] = {}
        self._last: dict[Partition, float] = {}
        self._last_full: dict[Partition, float] = {}

    def now(self) -> float:
        return self._wall()

    def deleted(self, partition: Partition, pos: Position) -> None:
        """This process deleted the entry at ``pos`` in ``partition``."""
        with self._lock:
            pending = self._pending.setdefault(partition, [])
            if len(pending) < _PENDING_CAP:
                pending.append((pos, self._wall()))

    def plan(self, partition: Partition, live: Sequence[Position], *, read_at: float, since: datetime | None,
             before: datetime | None, complete: bool) -> SweepPlan | None:
        """The sweep that a read of ``partition`` started at ``read_at`` (wall clock, taken
        before the read was sent) allows, if one is due; None otherwise."""
        cutoff = read_at - SWEEP_LAG
        with self._lock:
            if read_at - self._last.get(partition, float("-inf")) < SWEEP_EVERY:
                return None
            full = read_at - self._last_full.get(partition, float("-inf")) >= FULL_SWEEP_EVERY
            pending = self._pending.get(partition, [])
            ripe = [pos for pos, at in pending if at <= cutoff]
            if not ripe and not full:
                return None
            chosen = [g for g in gaps(live, since=since, before=before, complete=complete)
                      if _worth_it(g, sum(1 for pos in ripe if pos in g), full)]
            if not chosen:
                return None
            # Forget the deletes the sweep covers (and, on a busy partition, ones so old that
            # their place is surely swept by now or by the next full sweep).
            stale = cutoff - FULL_SWEEP_EVERY
            self._pending[partition] = [(pos, at) for pos, at in pending
                                        if at > stale and not (at <= cutoff and any(pos in g for g in chosen))]
            self._last[partition] = read_at
            if full:
                self._last_full[partition] = read_at
        return SweepPlan(partition, int(cutoff * 1_000_000), tuple(chosen))
