"""Fires the scheduler offers to its own node's claims (docs/explanation/nodes.md, "The
scheduler").

A recurring job's fire used to cost three writes: the scheduler marked the row WAITING, the
loop claimed it IN_PROCESS, the run's outcome made it SCHEDULED again. The owner need not tell
the store that a fire is ready before taking it: the scheduler offers the due row to the claims
of its own node, which take it straight from SCHEDULED to IN_PROCESS (one compare-and-set on
the same revision, owner and epoch, so fencing is unchanged). A fire the claims have not taken
by ``grace`` after its due time, or after it was offered if that was later (the pool is full),
is marked WAITING in the store as before, for any node to run. Whoever pops an offer acts on
it; the other side then leaves it alone.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Iterable

from ..model import Job, JobKey


_GONE_KEPT = 50_000  # taken or expired offers remembered (see holds), at most


class Offers:
    def __init__(self, grace: float) -> None:
        self.grace = timedelta(seconds=grace)
        self._rows: dict[JobKey, tuple[Job, datetime]] = {}  # key -> (row, when it expires)
        # offers taken or expired: key -> revision (a refresh may read the row from before)
        self._gone: dict[JobKey, int] = {}
        self._lock = threading.Lock()

    def put(self, rows: Iterable[Job], now: datetime) -> None:
        """Offer ``rows`` (due fires), until ``grace`` after their due time or after ``now``,
        whichever is later: a fire offered late (a node's start, a takeover, a retry) still
        gets its chance at the claims."""
        with self._lock:
            for row in rows:
                self._rows[row.key] = (row, max(row.next_run or now, now) + self.grace)

    def rows(self) -> list[Job]:
        """The rows on offer now (a snapshot: taking one is :meth:`take`)."""
        with self._lock:
            return [row for row, _ in self._rows.values()]

    def offering(self, row: Job) -> bool:
        """Whether the fire of ``row`` (this revision or an older one) is on offer now."""
        with self._lock:
            known = self._rows.get(row.key)
        return known is not None and known[0].revision >= row.revision

    def holds(self, row: Job) -> bool:
        """Whether the fire of ``row`` (this revision or an older one) is on offer, or was
        taken or expired: a refresh of the store that read it before its claim is not a new
        fire (added again, it would be offered again and claimed in vain)."""
        if self.offering(row):
            return True
        with self._lock:  # (an offer taken or expired meanwhile is in _gone by now)
            gone = self._gone.get(row.key)
        return gone is not None and gone >= row.revision

    def take(self, keys: Iterable[JobKey]) -> set[JobKey]:
        """Pop the offers of ``keys`` that are still there: the caller claims those, and only
        those (the others went back to the store as WAITING meanwhile)."""
        with self._lock:
            return {key for key in keys if self._pop(key) is not None}

    def expired(self, now: datetime) -> list[Job]:
        """Pop the offers whose time is up: the node could not seat them."""
        with self._lock:
            gone = [row for row, until in self._rows.values() if until <= now]
            for row in gone:
                self._pop(row.key)
            return gone

    def _pop(self, key: JobKey) -> Job | None:
        entry = self._rows.pop(key, None)
        if entry is None:
            return None
        if len(self._gone) >= _GONE_KEPT:  # the oldest half: their rows have long moved on
            for old in list(self._gone)[:_GONE_KEPT // 2]:
                del self._gone[old]
        self._gone[key] = entry[0].revision
        return entry[0]

    def next_expiry(self) -> datetime | None:
        with self._lock:
            return min((until for _, until in self._rows.values()), default=None)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._gone.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)
