"""The recent runs of the whole cluster, for the console's plots, read a job at a time.

The store keeps run history per job and has no read of "every run that ended lately". But a
job's row gets a new End Time whenever one of its runs ends, and the console's shared view
reads the rows every interval anyway. So the feed reads the history of the jobs whose End Time
moved since it last looked, and only theirs: its cost follows the cluster's activity, not the
number of browsers, and at most :data:`READS_PER_TICK` history reads are made per interval
(more waiting jobs are read at the next ones). A new web process first reads the history of the
jobs that ended within the window. The runs are kept in memory for :data:`WINDOW_SEC`; a web
process that restarts starts that memory again from the store.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from ..model import Job, JobKey
from ..store.base import JobStore, RunRecord

WINDOW_SEC = 3600.0
READS_PER_TICK = 20
RUNS_PER_READ = 500
MAX_RUNS = 50_000


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
    """Runs that ended within the window, gathered from the jobs whose End Time moved."""

    def __init__(self, store: JobStore, window_sec: float = WINDOW_SEC, reads_per_tick: int = READS_PER_TICK) -> None:
        self.store = store
        self.window = timedelta(seconds=window_sec)
        self.reads_per_tick = reads_per_tick
        self._seen: dict[JobKey, datetime] = {}  # the last run end recorded per job
        self._pending: dict[JobKey, Job] = {}  # rows whose End Time is newer than that
        self._runs: deque[RunPoint] = deque(maxlen=MAX_RUNS)
        self.reads = 0  # history reads made (the benchmark and the tests count them)

    def update(self, jobs: Iterable[Job], now: datetime) -> None:
        """Note the rows whose End Time moved, then read the history of up to
        ``reads_per_tick`` of them, the most recently ended first."""
        horizon = now - self.window
        for job in jobs:
            end = job.end_time
            if end is not None and end >= horizon and end > self._seen.get(job.key, horizon):
                self._pending[job.key] = job
        for job in sorted(self._pending.values(), key=lambda j: j.end_time or now, reverse=True)[:self.reads_per_tick]:
            del self._pending[job.key]
            self._read(job, horizon)
        self._forget(horizon)

    def _read(self, job: Job, horizon: datetime) -> None:
        since = self._seen.get(job.key, horizon)
        self.reads += 1
        runs = self.store.runs(job.type, job.name, job.uid, limit=RUNS_PER_READ)
        recurring = bool(job.execution_interval)
        fresh = [r for r in runs if r.end > since and r.end >= horizon]
        self._runs.extend(point(r, recurring) for r in sorted(fresh, key=lambda r: r.end))
        latest = max((r.end for r in runs), default=job.end_time)
        self._seen[job.key] = max(latest or since, since)

    def _forget(self, horizon: datetime) -> None:
        while self._runs and self._runs[0].end < horizon:
            self._runs.popleft()
        if len(self._seen) > 2 * MAX_RUNS:
            self._seen = {k: v for k, v in self._seen.items() if v >= horizon}

    def runs(self) -> list[RunPoint]:
        """The runs kept, oldest end first (within a job; jobs read later may interleave)."""
        return list(self._runs)

    @property
    def backlog(self) -> int:
        """Jobs whose new runs are not read yet."""
        return len(self._pending)
