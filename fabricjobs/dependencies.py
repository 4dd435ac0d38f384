"""Job dependencies (DEPENDS_ON, as RJM's job graphs): a job runs only after every parent
reached PROCESSED.

A child whose parents are not all PROCESSED is *blocked*: it keeps its status (WAITING or
SCHEDULED), is left out of every claim query, and its Notes say what it waits for. A parent
that ends FAILED or TERMINATED keeps its children blocked, with a note saying so; once the
parent is resumed and succeeds, they run.

A parent whose row is gone (archived, then deleted after the retention period) keeps a blocked
child blocked, with a note saying so: its outcome is no longer known, and a missing FAILED
parent that counted as done let its child run (Cassandra's TTL cannot keep the row). Nothing
sound is lost: a child is freed as soon as its parents are PROCESSED (the node that wrote the
outcome checks at once), long before the retention, and STARTJOB refuses unknown parents too.

Unblocking is event-driven: a node that writes a final outcome checks the blocked jobs, and
every node also checks them at a slow pace as a backstop. Neither reads anything but the
blocked rows and their parents.
"""

from __future__ import annotations

from typing import Iterable

from .errors import ValidationError
from .model import Job, JobKey, Status
from .store.base import JobStore

_MAX_DEPTH = 10_000


def parse_key(text: str) -> JobKey:
    """TYPE.NAME.UID; NAME may contain dots, TYPE and UID may not."""
    bits = text.strip().split(".")
    if len(bits) < 3:
        raise ValidationError(f"bad job key {text!r}: expected TYPE.NAME.UID")
    return JobKey(bits[0].upper(), ".".join(bits[1:-1]), bits[-1])


def parent_keys(parents: Iterable[JobKey | str]) -> list[JobKey]:
    """A command's DEPENDS_ON as keys. The parser hands over keys, read once; a command built
    in code may still name its parents as TYPE.NAME.UID text. A parent named twice is one."""
    return list(dict.fromkeys(p if isinstance(p, JobKey) else parse_key(p) for p in parents))


def parents_of(job: Job) -> list[JobKey]:
    return [parse_key(k) for k in job.depends_on.split(",") if k.strip()]


def check_new(store: JobStore, key: JobKey, parents: Iterable[JobKey]) -> None:
    """Refuse unknown parents and cycles (the new job reachable from its own parents)."""
    parents = list(parents)
    for p in parents:
        if p == key:
            raise ValidationError(f"DEPENDS_ON: {key} cannot depend on itself")
        if store.get(p) is None:
            raise ValidationError(f"DEPENDS_ON: no job {p}")
    seen: set[JobKey] = set()
    stack = [(p, [key, p]) for p in parents]
    while stack:
        current, path = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if len(seen) > _MAX_DEPTH:
            raise ValidationError("DEPENDS_ON: the dependency graph is too large to check")
        row = store.get(current)
        if row is None:
            continue
        for grand in parents_of(row):
            if grand == key:
                cycle = " -> ".join(str(k) for k in [*path, grand])
                raise ValidationError(f"DEPENDS_ON would make a cycle: {cycle}")
            stack.append((grand, [*path, grand]))


def blocking(store: JobStore, parents: Iterable[JobKey], cache: dict | None = None) -> list[tuple[JobKey, Status | None]]:
    """The parents that are not PROCESSED, with their status (None: the row is gone)."""
    out = []
    for p in parents:
        if cache is not None and p in cache:
            row = cache[p]
        else:
            row = store.get(p)
            if cache is not None:
                cache[p] = row
        if row is None or row.status is not Status.PROCESSED:
            out.append((p, None if row is None else row.status))
    return out


def note(blockers: list[tuple[JobKey, Status | None]]) -> str:
    """The Notes of a blocked job."""
    ended = (Status.FAILED, Status.TERMINATED)
    failed = [f"{k} is {s.value}" for k, s in blockers if s in ended]
    waiting = [f"{k} ({s.value})" for k, s in blockers if s is not None and s not in ended]
    gone = [str(k) for k, s in blockers if s is None]
    parts = []
    if waiting:
        parts.append("waiting for " + ", ".join(waiting))
    if failed:
        parts.append("blocked: parent " + ", ".join(failed) + "; it runs once the parent is resumed and succeeds")
    if gone:
        parts.append("blocked: parent " + ", ".join(gone) + " is gone (its archived row outlived the retention), so "
                     "how it ended is unknown; STOPJOB this job and start it again without that parent to run it")
    return "; ".join(parts)
