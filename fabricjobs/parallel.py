"""DolphinDB's tasks of a job (STARTJOB USER_JOB ... PARALLELISM=n).

The job the user names (the *parent*, parallelism n, task_of '') never runs user code. Its n
tasks are ordinary rows, written with it in one store transaction: UID '<uid>/<i>' for i in
0..n-1, parallelism n, task_of the parent's key, the parent's ARGS, AFFINITY, PRIORITY and
owner. Any node may claim any task; the task's function learns its index from
``current_job().task_index`` (and ``task_count``), or as parameters so named.

The parent DEPENDS_ON its tasks, so it is blocked until all are PROCESSED (the node that wrote
the last outcome frees it, and every node's dependency check does so too: a node dying between
the two writes leaves nothing stuck). Freed, it is claimed like any job, and the claiming node
ends its run at once, without a worker, with the tasks' outputs in index order as its output.
A task FAILED for good fails the parent (the same dependency check: "task i failed: <error>");
the other tasks go on. STOPJOB of the parent stops its tasks.
"""

from __future__ import annotations

import json
from collections import Counter

from datetime import datetime

from .model import Event, Job, JobKey, Status
from .names import derived_uid
from .store.base import JobStore


def task_keys(key: JobKey, n: int) -> list[JobKey]:
    return [JobKey(key.type, key.name, derived_uid(key.uid, f"/{i}")) for i in range(n)]


def is_parent(job: Job) -> bool:
    """The job the user named: its run only collects its tasks' outputs."""
    return job.parallelism > 0 and not job.task_of


def task_index(job: Job) -> int | None:
    """A task's index (None: not a task)."""
    if not job.task_of:
        return None
    return int(job.key.uid.rpartition("/")[2])


def tasks(store: JobStore, parent: Job) -> list[Job | None]:
    return [store.get(k) for k in task_keys(parent.key, parent.parallelism)]


def summary(store: JobStore, parent: Job, output_max: int) -> str:
    """The parent's output: its tasks' outputs (JSON values) in index order."""
    outputs = []
    for row in tasks(store, parent):
        try:
            outputs.append(json.loads(row.output) if row is not None and row.output else None)
        except ValueError:
            outputs.append(row.output if row is not None else None)
    text = json.dumps({"tasks": parent.parallelism, "outputs": outputs}, ensure_ascii=False)
    if len(text.encode("utf-8")) > output_max:
        text = json.dumps({"tasks": parent.parallelism, "outputs": "too long: see each task's output"})
    return text


def progress(rows: list[Job | None]) -> str:
    """JOBSTATUS's Notes of a parent: 'tasks: 3 of 4 PROCESSED, 1 IN_PROCESS'."""
    counts = Counter("gone" if r is None else r.status.value for r in rows)
    done = counts.pop(Status.PROCESSED.value, 0)
    rest = "".join(f", {c} {s}" for s, c in sorted(counts.items()))
    return f"tasks: {done} of {len(rows)} PROCESSED{rest}"


def failed_task(parent: Job, parents: dict) -> str | None:
    """The parent's error if one of its tasks (read into ``parents`` by the dependency check)
    is FAILED: 'task i failed: <error>'; else None."""
    found = _first_failed(parent, parents)
    if found is None:
        return None
    i, row = found
    return f"task {i} failed: {row.error_msg or 'no error given'}"


def failed_task_run(parent: Job, parents: dict, store: JobStore) -> int | None:
    """The run of the task whose failure failed the parent: the run ON_FAILURE names (the
    parent has no run of its own), as the task's JOBHISTORY numbers it: its last recorded run
    (a task failed by a takeover has an epoch one past its lost run), else its epoch."""
    found = _first_failed(parent, parents)
    if found is None:
        return None
    task = found[1]
    last = store.runs(task.key.type, task.key.name, task.key.uid, limit=1)
    return last[0].epoch if last else task.epoch


def _first_failed(parent: Job, parents: dict) -> tuple[int, Job] | None:
    for i, key in enumerate(task_keys(parent.key, parent.parallelism)):
        row = parents.get(key)
        if row is not None and row.status is Status.FAILED:
            return i, row
    return None


def checked(parent: Job, blockers: list, parents: dict, now: datetime) -> tuple[Event, Job] | None:
    """The dependency check's decision on a blocked parent (``parents``: its tasks as just
    read): FAILED if a task is; freed once all are PROCESSED; else its Notes kept true."""
    failed = failed_task(parent, parents)
    if failed is not None:
        return Event.TASK_FAILED, parent.replace(status=Status.FAILED, blocked=False, error_msg=failed, end_time=now)
    note = progress([parents.get(k) for k in task_keys(parent.key, parent.parallelism)]) if blockers else ""
    if blockers and note == parent.error_msg:
        return None
    return Event.UPDATE, parent.replace(blocked=bool(blockers), error_msg=note)
