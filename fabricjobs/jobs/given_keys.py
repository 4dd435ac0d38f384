"""The ARGS keys a node gives the jobs it starts itself: an ON_FAILURE or LATE_ACTION job, and
a listener's job for a file (docs/guides/writing-jobs.md). A job's function takes those it names
and the rest are let go, as for any job; but STARTJOB refuses ARGS keys that no parameter takes,
and ``export-jobs`` writes such a job back as the STARTJOB that makes it again: its ARGS,
recognised by their marker keys, must pass."""

from __future__ import annotations

from typing import Any

#: ON_FAILURE: the failed job, its run and its error (node/decisions.py).
FAILURE_KEYS = ("failed_job", "type", "name", "uid", "run", "error")
#: LATE_ACTION: the late job, the fire's due time and how late it came.
LATE_KEYS = ("late_job", "type", "name", "uid", "due", "late_seconds")
#: A listener's job for a file: the file's path and name, the listener, the file's version.
CHILD_KEYS = ("file", "name", "listener", "version")

_MARKED = ((("failed_job", "run", "error"), FAILURE_KEYS), (("late_job", "due", "late_seconds"), LATE_KEYS),
           (("file", "listener", "version"), CHILD_KEYS))


def given_by_node(args: Any) -> frozenset[str]:
    """The keys of ``args`` (a job's ARGS object) that a node gave it, or none."""
    if not isinstance(args, dict):
        return frozenset()
    for markers, keys in _MARKED:
        if all(m in args for m in markers):
            return frozenset(keys)
    return frozenset()
