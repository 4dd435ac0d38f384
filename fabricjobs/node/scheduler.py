"""The scheduler thread (SPEC 7.2, the seed's JobScheduler).

A time-ordered heap of the SCHEDULED jobs this node owns that come due within a horizon; at
the due time it moves them to WAITING by CAS ("marked as ready") and wakes the reconcile loop,
which claims them first (owner precedence). Jobs due later than the horizon stay in the store
and are loaded when their time approaches, so a node owning 100,000 far-future jobs holds
none of them in memory.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from datetime import timedelta
from typing import Callable

from ..clock import Clock
from ..model import Job, JobKey, Status, advance
from ..store.base import JobStore
from .decisions import fire

log = logging.getLogger("fabricjobs.node.scheduler")


class Scheduler:
    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        me: str,
        *,
        on_ready: Callable[[], None],
        horizon: float = 60.0,
        batch: int = 5000,
    ) -> None:
        self.store = store
        self.clock = clock
        self.me = me
        self.on_ready = on_ready
        self.horizon = timedelta(seconds=horizon)
        self.batch = batch
        self._heap: list[tuple[float, int, JobKey]] = []
        self._rows: dict[JobKey, Job] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._refresh_due = 0.0  # monotonic time of the next store refresh
        self._thread: threading.Thread | None = None
        self.paused = False  # while fenced: fire nothing

    # -- feeding ---------------------------------------------------------------------------------

    def add(self, row: Job) -> None:
        """A SCHEDULED row this node now owns (taken over, or back from a recurring run)."""
        if row.status is not Status.SCHEDULED or row.worker_id != self.me or row.next_run is None:
            return
        if row.next_run > self.clock.now() + self.horizon:
            return  # loaded by a refresh when it gets close
        with self._cond:
            known = self._rows.get(row.key)
            if known is not None and known.revision >= row.revision:
                return
            self._rows[row.key] = row
            heapq.heappush(self._heap, (row.next_run.timestamp(), next(self._seq), row.key))
            self._cond.notify()

    def refresh(self) -> None:
        """Load owned SCHEDULED rows due within the horizon from the store."""
        rows = self.store.due_scheduled(self.me, self.clock.now() + self.horizon, self.batch)
        for row in rows:
            self.add(row)
        with self._cond:
            # A full batch means more may be due soon: look again sooner.
            period = self.horizon.total_seconds() / (10 if len(rows) >= self.batch else 3)
            self._refresh_due = self.clock.monotonic() + period

    def size(self) -> int:
        with self._cond:
            return len(self._rows)

    # -- the thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="JobsScheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                due: list[Job] = []
                now_ts = self.clock.now().timestamp()
                while self._heap and self._heap[0][0] <= now_ts and not self.paused:
                    _, _, key = heapq.heappop(self._heap)
                    row = self._rows.pop(key, None)
                    if row is not None and row.next_run.timestamp() <= now_ts:
                        due.append(row)
                    elif row is not None:  # rescheduled to a later time meanwhile: keep it
                        self._rows[key] = row
                if not due:
                    wait = self._refresh_due - self.clock.monotonic()
                    if self._heap and not self.paused:
                        wait = min(wait, self._heap[0][0] - now_ts)
                    if wait > 0:
                        self._cond.wait(min(wait, 1.0))
                    refresh = self.clock.monotonic() >= self._refresh_due
                else:
                    refresh = False
            if due:
                self._fire(due)
            elif refresh and not self.paused:
                try:
                    self.refresh()
                except Exception:
                    log.exception("scheduler refresh failed; retrying")
                    with self._cond:
                        self._refresh_due = self.clock.monotonic() + 1.0

    def _fire(self, rows: list[Job]) -> None:
        pairs = []
        for row in rows:
            event, new = fire(row)
            pairs.append((row, advance(row, event, new)))
        try:
            results = self.store.cas_many(pairs)
        except Exception:
            log.exception("could not mark %d due jobs ready; retrying", len(rows))
            for row in rows:
                self.add(row)
            return
        ready = 0
        for row, res in zip(rows, results):
            if res.applied:
                ready += 1
                log.info("cron job '%s' marked as ready", row.key)
                continue
            # Changed meanwhile (UPDATEJOB, STOPJOB, a takeover): re-read and decide again.
            current = self.store.get(row.key)
            if current is not None:
                self.add(current)
        if ready:
            self.on_ready()
