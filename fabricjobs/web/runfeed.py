"""The recent runs of the whole cluster, for the console's plots.

Each interval the console's shared view asks the store for the runs that ended since it last
looked (the cluster's recent runs, a bounded read by end time: JOBHISTORY RECENT's), at most
:data:`RUNS_PER_TICK` of them, and keeps those of the last :data:`WINDOW_SEC` in memory. Its
cost follows the cluster's activity, not the number of jobs or browsers. A cluster that ends
more runs than that in one interval has the oldest of them left out of the plots (``missed``
counts them as "at least"). Whether a run's job is recurring (its fire lag is drawn) is read
from its row, once per job. A web process that restarts reads the window again from the store.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..model import JobKey
from ..store.base import JobStore, RunRecord

WINDOW_SEC = 3600.0
RUNS_PER_TICK = 1000
MAX_RUNS = 50_000
_OVERLAP = timedelta(seconds=5)  # runs are asked for again this far back (a line recorded just after its row)
_KNOWN_JOBS = 100_000  # jobs whose recurrence is remembered, at most


@dataclass(frozen=True)
class RunPoint:
    """One ended run, as the plots need it."""

    key: JobKey
    run: int
    result: str
    end: datetime
    duration_ms: int | None
    lag_ms: int | None  # start minus due time (a fire's lateness); None without both
    recurring: bool


def point(r: RunRecord, recurring: bool) -> RunPoint:
    took = int((r.end - r.start).total_seconds() * 1000) if r.start and r.end else None
    lag = int((r.start - r.due).total_seconds() * 1000) if r.start and r.due else None
    return RunPoint(r.key, r.epoch, r.result, r.end, took, lag, recurring)


class RunFeed:
    """Runs that ended within the window, gathered from the cluster's recent runs."""

    def __init__(self, store: JobStore, window_sec: float = WINDOW_SEC, per_tick: int = RUNS_PER_TICK) -> None:
        self.store = store
        self.window = timedelta(seconds=window_sec)
        self.per_tick = per_tick
        self._mark: datetime | None = None  # the newest end read so far
        self._seen: set[tuple[JobKey, int, datetime]] = set()  # the runs of the overlap, read already
        self._recurring: dict[JobKey, bool] = {}
        self._runs: deque[RunPoint] = deque(maxlen=MAX_RUNS)
        self.reads = 0  # reads of recent runs made (the tests count them)
        self.missed = False  # more runs ended in one interval than were read: the plots show at least

    def update(self, now: datetime) -> None:
        """Read the runs that ended since the last read (the whole window the first time)."""
        horizon = now - self.window
        since = horizon if self._mark is None else max(horizon, self._mark - _OVERLAP)
        self.reads += 1
        runs = self.store.recent_runs(self.per_tick, since=since)
        self.missed = self.missed or len(runs) >= self.per_tick
        fresh = sorted((r for r in runs if (r.key, r.epoch, r.end) not in self._seen), key=lambda r: r.end)
        recurring = self._recurrence({r.key for r in fresh})
        self._runs.extend(point(r, recurring.get(r.key, False)) for r in fresh)
        if runs:
            self._mark = max(self._mark or runs[0].end, runs[0].end)
        self._seen = {(r.key, r.epoch, r.end) for r in runs if self._mark and r.end >= self._mark - _OVERLAP}
        while self._runs and self._runs[0].end < horizon:
            self._runs.popleft()

    def _recurrence(self, keys: set[JobKey]) -> dict[JobKey, bool]:
        """Whether each job is recurring (has an EXEC_INTERVAL), its row read once."""
        new = [k for k in keys if k not in self._recurring]
        if new:
            if len(self._recurring) > _KNOWN_JOBS:
                self._recurring.clear()
            for key, row in zip(new, self.store.get_many(new)):
                self._recurring[key] = bool(row is not None and row.execution_interval)
        return {k: self._recurring.get(k, False) for k in keys}

    def runs(self) -> list[RunPoint]:
        """The runs kept, oldest end first."""
        return list(self._runs)
