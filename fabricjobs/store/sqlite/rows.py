"""A Job or a run as the values of its SQLite row, and back: the column lists every statement
uses, and times as seconds since the epoch (REAL columns, which SQLite compares and indexes).
"""

from __future__ import annotations

import dataclasses
import operator
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from ...model import Job, JobKey, Status, job_from_values
from ..base import RunRecord

UTC = timezone.utc

_JOB_COLUMNS = (
    "type", "name", "uid", "status", "archived", "affinity", "arguments", "execution_interval",
    "creation_time", "start_time", "end_time", "next_run", "hold_until", "error_msg", "output",
    "tries", "worker_id", "epoch", "revision", "priority",
    "runs", "successes", "failures", "retries_error", "retries_lost", "kills",
    "depends_on", "blocked", "time_zone", "late_threshold", "overlap", "finishing", "resume_at", "late_action", "on_failure",
    "owner", "requestor", "calendar", "delete_on_success", "parallelism", "task_of",
    "failed_after_retry", "failed_without_retry", "canceled",
)
_RUN_COLUMNS = (
    "type", "name", "uid", "epoch", "node", "due", "start", "end", "result", "status", "tries",
    "error", "output", "exit_code", "log", "note",
)
_COLS = ", ".join(_JOB_COLUMNS)

# The store's clock, evaluated by SQLite itself (this host's real clock, whatever a node's
# time source says).
_STORE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


_fromts = datetime.fromtimestamp


def _when(value: float) -> datetime:
    """A NOT NULL time column."""
    return datetime.fromtimestamp(value, UTC)


def _dt(value: float | None) -> datetime | None:
    return None if value is None else _when(value)


_TIME_COLUMNS = frozenset({"creation_time", "start_time", "end_time", "next_run", "hold_until", "resume_at"})
_FLAG_COLUMNS = frozenset({"archived", "blocked", "finishing"})


def column_value(column: str) -> Callable[[Any], Any] | None:
    """How a Job field becomes its column's value, as _job_params converts it (None: as it is);
    for code that converts one column at a time (a CAS writes only the changed ones).
    tests/store/test_sqlite.py checks that the two agree on every column."""
    if column in _TIME_COLUMNS:
        return _ts
    if column in _FLAG_COLUMNS:
        return int
    if column == "status":
        return operator.attrgetter("value")
    return None


def _job_params(job: Job) -> tuple:
    return (
        job.key.type, job.key.name, job.key.uid, job.status.value, int(job.archived), job.affinity,
        job.arguments, job.execution_interval, _ts(job.creation_time), _ts(job.start_time),
        _ts(job.end_time), _ts(job.next_run), _ts(job.hold_until), job.error_msg, job.output,
        job.tries, job.worker_id, job.epoch, job.revision, job.priority,
        job.runs, job.successes, job.failures, job.retries_error, job.retries_lost, job.kills,
        job.depends_on, int(job.blocked), job.time_zone, job.late_threshold, job.overlap, int(job.finishing), _ts(job.resume_at), job.late_action, job.on_failure,
        job.owner, job.requestor, job.calendar, job.delete_on_success, job.parallelism, job.task_of,
        job.failed_after_retry, job.failed_without_retry, job.canceled,
    )


_STATUS = {s.value: s for s in Status}


# _row_to_job builds a Job from positions (a third cheaper than by keyword; it runs a few times
# per run on the node's loop): the Job fields must stay in the order of the columns.
assert [f.name for f in dataclasses.fields(Job)] == [
    "key", "status", "creation_time", "archived", "affinity", "arguments", "execution_interval",
    *_JOB_COLUMNS[9:13], *_JOB_COLUMNS[13:27], "blocked", *_JOB_COLUMNS[28:31], "finishing", "resume_at", "late_action", "on_failure", "owner", "requestor", "calendar", "delete_on_success", "parallelism", "task_of",
    "failed_after_retry", "failed_without_retry", "canceled",
], "Job fields and k2_jobs columns are out of step"


def _row_to_job(r: Sequence) -> Job:
    return job_from_values((
        JobKey(r[0], r[1], r[2]), _STATUS[r[3]], _fromts(r[8], UTC), bool(r[4]), r[5], r[6], r[7],
        None if r[9] is None else _fromts(r[9], UTC), None if r[10] is None else _fromts(r[10], UTC),
        None if r[11] is None else _fromts(r[11], UTC), None if r[12] is None else _fromts(r[12], UTC),
        *r[13:27], bool(r[27]), *r[28:31], bool(r[31]), None if r[32] is None else _fromts(r[32], UTC), r[33], r[34], r[35], r[36], r[37], r[38], r[39], r[40], r[41], r[42], r[43],
    ))


def _run_params(r: RunRecord) -> tuple:
    return (r.key.type, r.key.name, r.key.uid, r.epoch, r.node, _ts(r.due), _ts(r.start), _ts(r.end), r.result,
            r.status, r.tries, r.error, r.output, r.exit_code, r.log, r.note)


def _row_to_run(r: Sequence) -> RunRecord:
    return RunRecord(JobKey(r[0], r[1], r[2]), r[3], r[4], _dt(r[5]), _dt(r[6]), _when(r[7]), r[8], r[9], r[10],
                     r[11], r[12], r[13], r[14], r[15])


_RUN_COLS = ", ".join(f'"{c}"' for c in _RUN_COLUMNS)
