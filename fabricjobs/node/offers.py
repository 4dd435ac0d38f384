"""Fires the scheduler offers to its own node's claims (docs/explanation/nodes.md, "The
scheduler").

A recurring job's fire used to cost three writes: the scheduler marked the row WAITING, the
loop claimed it IN_PROCESS, the run's outcome made it SCHEDULED again. The owner need not tell
the store that a fire is ready before taking it: the scheduler offers the due row to the claims
of its own node, which take it straight from SCHEDULED to IN_PROCESS (one compare-and-set on
the same revision, owner and epoch, so fencing is unchanged). A fire the claims have not taken
by ``grace`` after its due time (the pool is full) is marked WAITING in the store as before, for
any node to run. Whoever pops an offer acts on it; the other side then leaves it alone.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Iterable

from ..model import Job, JobKey


class Offers:
    def __init__(self, grace: float) -> None:
        self.grace = timedelta(seconds=grace)
        self._rows: dict[JobKey, Job] = {}
        self._lock = threading.Lock()

    def put(self, rows: Iterable[Job]) -> None:
        with self._lock:
            for row in rows:
                self._rows[row.key] = row

    def rows(self) -> list[Job]:
        """The rows on offer now (a snapshot: taking one is :meth:`take`)."""
        with self._lock:
            return list(self._rows.values())

    def holds(self, row: Job) -> bool:
        """Whether ``row`` (or a newer revision of it) is on offer: a refresh of the store that
        read it before its claim is not a new fire."""
        with self._lock:
            known = self._rows.get(row.key)
        return known is not None and known.revision >= row.revision

    def take(self, keys: Iterable[JobKey]) -> set[JobKey]:
        """Pop the offers of ``keys`` that are still there: the caller claims those, and only
        those (the others went back to the store as WAITING meanwhile)."""
        with self._lock:
            return {key for key in keys if self._rows.pop(key, None) is not None}

    def expired(self, now: datetime) -> list[Job]:
        """Pop the offers whose due time is ``grace`` past: the node could not seat them."""
        with self._lock:
            gone = [row for row in self._rows.values() if row.next_run is None or row.next_run + self.grace <= now]
            for row in gone:
                del self._rows[row.key]
            return gone

    def next_expiry(self) -> datetime | None:
        with self._lock:
            dues = [row.next_run for row in self._rows.values() if row.next_run is not None]
        return min(dues) + self.grace if dues else None

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)
