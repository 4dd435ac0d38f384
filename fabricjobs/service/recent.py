"""JOBHISTORY RECENT n: DolphinDB's getRecentJobs for the whole cluster.

getRecentJobs lists a node's jobs that are pending (received, no start time), running (no end
time) and done, each with its user, priority, parallelism and received time. Here: the runs
going on (newest start first), then the jobs waiting for a node (next to run first, blocked
ones among them), then the runs that ended (newest end first), n rows in all
(docs/explanation/design-choices.md). Each part is a bounded read (the live indexes, the
recent-runs read), and only as much of it as the n rows still need; a run's user, priority
and parallelism are its job row's.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..model import RUNNING_STATUSES, Job, Status
from ..store.base import JobStore, RunRecord

RECENT_COLUMNS = ("Type", "Name", "UID", "Run", "Node", "Result", "Status", "User", "Priority", "Parallelism",
                  "Received", "Start", "End", "Duration (ms)", "Tries", "Error", "Note")
RUNNING, PENDING = "RUNNING", "PENDING"  # the Result of a run going on, of a job waiting for a node
_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def recent_rows(store: JobStore, n: int) -> tuple[tuple, ...]:
    rows: list[tuple] = []
    running = _full(store, store.by_status(RUNNING_STATUSES, limit=n))
    for job in sorted(running, key=lambda j: (j.start_time or _NEVER, j.key), reverse=True):
        rows.append(_live_row(job, RUNNING, job.epoch, job.worker_id or ""))
    if len(rows) < n:
        want = n - len(rows)
        waiting = store.waiting(want) + [j for j in store.blocked_jobs(want) if j.status is Status.WAITING]
        waiting = sorted(waiting, key=lambda j: (j.next_run or j.creation_time, j.key))[:want]
        rows += [_live_row(job, PENDING, None, "") for job in _full(store, waiting)]
    if len(rows) < n:
        runs = store.recent_runs(n - len(rows))
        jobs = dict(zip(keys := list(dict.fromkeys(r.key for r in runs)), store.get_many(keys)))
        rows += [_ended_row(r, jobs.get(r.key)) for r in runs]
    return tuple(rows[:n])


def _full(store: JobStore, candidates: list[Job]) -> list[Job]:
    """The rows of index candidates as they stand (a candidate lacks times and owner), still
    in the status they were read in."""
    rows = store.get_many([j.key for j in candidates])
    return [row for cand, row in zip(candidates, rows) if row is not None and row.status is cand.status]


def _who(job: Job | None) -> tuple:
    if job is None:  # a run whose job row is gone (deleted after its retention)
        return "", None, None
    return job.owner, job.priority, job.parallelism or 1


def _live_row(job: Job, result: str, run: int | None, node: str) -> tuple:
    return (job.type, job.name, job.uid, run, node, result, job.status.value, *_who(job),
            job.next_run or job.creation_time, job.start_time if result == RUNNING else None, None, None, job.tries,
            "", job.error_msg)


def _ended_row(r: RunRecord, job: Job | None) -> tuple:
    took = int((r.end - r.start).total_seconds() * 1000) if r.start and r.end else None
    return (r.key.type, r.key.name, r.key.uid, r.epoch, r.node, r.result, r.status, *_who(job), r.due, r.start, r.end,
            took, r.tries, r.error, r.note)
