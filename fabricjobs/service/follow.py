"""JOBLOG ... FOLLOW: a run's log lines as they come (docs/explanation/design-choices.md).

The lines are those the run's node passes to the store while the run goes on
(node/livelog.py, about once a second). Following is a generator, read by whoever prints the
result (the shell prints each line as it comes; ``Client.fetch(...).lines`` may be iterated
by a program): it waits for the run to start if none is going, yields its lines, then, once
the run has ended, the lines of its record not yet shown (those logged after the node's last
pass, and a PROCESS job's output in the record's order) and JOBLOG's first line, saying how
it ended. TIMEOUT bounds the whole follow (real time, like WAITJOB).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterator

from ..errors import JobNotFound, WaitTimeout
from ..model import RUNNING_STATUSES, Job, JobKey
from ..store.base import JobStore, RunRecord

_BATCH = 1000  # lines read at a time
_PAUSE, _MAX_PAUSE = 0.1, 0.5  # seconds between reads while nothing comes
_NO_RECORD_GRACE = 10.0  # seconds a run's record may lag behind its row (then the follow ends)


def follow_lines(store: JobStore, row: Job, deadline: float | None,
                 summary: Callable[[RunRecord], str]) -> Iterator[str]:
    """The lines of the run of ``row`` going on, or (none going) of its next one."""
    key = row.key
    target = row.epoch if row.status in RUNNING_STATUSES else row.epoch + 1
    row = _wait_for_run(store, key, target, deadline)
    if row.epoch < target:  # final without another run
        yield f"{key} is {row.status.value}: no run to follow"
        return
    yield f"run {row.epoch} of {key} on {row.worker_id or '?'}: following (ends with the run)"
    yield from _run_lines(store, key, row.epoch, deadline, summary)


def _wait_for_run(store: JobStore, key: JobKey, target: int, deadline: float | None) -> Job:
    """The row once run ``target`` (or a later one) has begun, or once it is archived. A new
    epoch is a run only if it is going on or has its record (it may have ended between two
    reads): a node that adopts a scheduled job, or takes one over from a dead node while it
    waits, changes the owner and the epoch without running it, and the run is the next one."""
    pause = _PAUSE
    while True:
        row = _row(store, key)
        if row.archived:
            return row
        if row.epoch >= target:
            if row.status in RUNNING_STATUSES or store.run(key, row.epoch) is not None:
                return row
            target = row.epoch + 1
        _check(deadline, f"JOBLOG FOLLOW timed out: {key} is {row.status.value}, no run started")
        _sleep(pause, deadline)
        pause = min(pause * 1.5, _MAX_PAUSE)


class _Shown:
    """The live lines of one run shown so far: the last number, and each line's count."""

    def __init__(self, store: JobStore, key: JobKey, epoch: int) -> None:
        self.store, self.key, self.epoch = store, key, epoch
        self.seq = -1
        self.lines: Counter[str] = Counter()

    def more(self, limit: int) -> list[str]:
        batch = self.store.live_log(self.key, self.epoch, self.seq, limit)
        if batch:
            self.seq = batch[-1][0]
        self.lines.update(line for _, line in batch)
        return [line for _, line in batch]


def _run_lines(store: JobStore, key: JobKey, epoch: int, deadline: float | None,
               summary: Callable[[RunRecord], str]) -> Iterator[str]:
    shown = _Shown(store, key, epoch)
    pause, gone_at = _PAUSE, None
    while True:
        batch = shown.more(_BATCH)
        yield from batch
        if len(batch) == _BATCH:
            continue
        row = _row(store, key)
        if row.epoch == epoch and row.status in RUNNING_STATUSES:
            gone_at = None
        else:
            record = store.run(key, epoch)
            if record is not None:
                yield from shown.more(1_000_000)  # passed on after the last read
                yield from _not_shown(record.log, shown.lines)
                yield summary(record)
                return
            gone_at = gone_at if gone_at is not None else time.monotonic()
            if time.monotonic() - gone_at > _NO_RECORD_GRACE:
                yield f"run {epoch} of {key} ended; no record of it (the job is {row.status.value})"
                return
        _check(deadline, f"JOBLOG FOLLOW timed out: run {epoch} of {key} is still going")
        pause = _PAUSE if batch else min(pause * 1.5, _MAX_PAUSE)
        _sleep(pause, deadline)


def _not_shown(log: str, shown: Counter[str]) -> Iterator[str]:
    """The record's lines that were not shown live (each shown line stands for one of them)."""
    for line in log.split("\n") if log else ():
        if shown[line] > 0:
            shown[line] -= 1
        else:
            yield line


def _row(store: JobStore, key: JobKey) -> Job:
    row = store.get(key)
    if row is None:
        raise JobNotFound(f"No such job {key.describe()}")
    return row


def _check(deadline: float | None, message: str) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise WaitTimeout(message)


def _sleep(pause: float, deadline: float | None) -> None:
    time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
