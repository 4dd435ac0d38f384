"""Everything a run starts belongs to the run (docs/guides/writing-jobs.md): what a job leaves running when its
run ends, is stopped, killed or loses its lease is ended with it, so a retry never runs beside
a leftover of the previous attempt.

A PROCESS job has its own process group (runner.py ends the group when the job's process
exits). A USER_JOB's children are children of its worker, which lives on for more runs: they
are found through /proc (each task's ``children`` list, else every process's parent pid) and
killed.

A worker ended by the kernel (its dead-man timer) runs no code on the way out, so what its run
started would be left to init. The fork server is therefore a child subreaper (Linux): such
orphans, and a double fork's, become its children, and the node ends every child of the fork
server that is not one of its workers when it sees a worker die (:func:`kill_orphans`).
"""

from __future__ import annotations

import ctypes
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


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and everything below it, stopped first so that nothing escapes."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        return
    kill_descendants(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_orphans(server: int, workers: set[int]) -> int:
    """End each child of the fork server ``server`` that is not one of ``workers`` (with all
    below it): what dead workers left. The caller must not be starting a worker meanwhile."""
    kids = _children(server)
    if kids is None:
        kids = _parent_map().get(server, [])
    orphans = [k for k in kids if k not in workers and not _zombie(k)]
    for pid in orphans:
        kill_tree(pid)
    return len(orphans)


def stat_field(pid: int, index: int) -> int | None:
    """Field ``index`` of /proc/PID/stat counted after the command name (0: state, 1: parent,
    19: start time in clock ticks since boot), or None if the process is gone (or this is not
    Linux). The command name may hold spaces and parentheses: split after its last ')'."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[index])
    except (OSError, IndexError, ValueError):
        return None


def parent_of(pid: int) -> int | None:
    """``pid``'s parent, or None if it is gone (or this is not Linux)."""
    return stat_field(pid, 1)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def become_subreaper() -> None:
    """Make this process inherit the orphans of its descendants (PR_SET_CHILD_SUBREAPER);
    nothing where the call does not exist."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_children() -> None:
    """Collect every child of this process that has ended (a subreaper adopts orphans, which
    no one else waits for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return True


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
        ppid = parent_of(int(entry))
        if ppid is not None:
            out.setdefault(ppid, []).append(int(entry))
    return out
