"""Everything a run starts belongs to the run (SPEC 7.10): what a job leaves running when its
run ends, is stopped, killed or loses its lease is ended with it, so a retry never runs beside
a leftover of the previous attempt.

A PROCESS job has its own process group (runner.py ends the group when the job's process
exits). A USER_JOB's children are children of its worker, which lives on for more runs: they
are found through /proc (each task's ``children`` list, else every process's parent pid) and
killed. A process that left on purpose (a double fork, ``setsid``) is out of reach: the README
states that limit.
"""

from __future__ import annotations

import os
import signal


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before children (Linux; [] elsewhere)."""
    out: list[int] = []
    todo = [pid]
    parents: dict[int, list[int]] | None = None
    while todo:
        current = todo.pop()
        kids = _children(current)
        if kids is None:  # no per-task children lists here: one scan of every parent pid
            if parents is None:
                parents = _parent_map()
            kids = parents.get(current, [])
        for kid in kids:
            if kid not in out and kid != pid:
                out.append(kid)
                todo.append(kid)
    return out


def kill_descendants(pid: int) -> int:
    """SIGKILL every process below ``pid``; returns how many were signalled. Each is stopped
    first, so none can start another between the listing and the kill."""
    found = descendants(pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for kid in found:
            try:
                os.kill(kid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    return len(found)


def _children(pid: int) -> list[int] | None:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return [] if os.path.isdir("/proc") else None
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            continue
    return kids


def _parent_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out.setdefault(ppid, []).append(int(entry))
    return out
