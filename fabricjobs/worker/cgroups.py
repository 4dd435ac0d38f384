"""Run cgroups: every process a run starts is in a cgroup of its worker slot, so that the run's
end ends all of them, however they forked or whatever session they made
(docs/guides/run-isolation.md).

cgroup v2 only, found at run time: the hierarchy's mount point from /proc/self/mountinfo (a
pure v2 host mounts it at /sys/fs/cgroup, a hybrid one at /sys/fs/cgroup/unified) and this
process's own cgroup from /proc/self/cgroup. Under that cgroup a node makes (where it may: as
root, or in a subtree systemd delegated to it with ``Delegate=yes``)::

    fabricjobs-<pid>-<n>/          one per node of process <pid>: no process of its own
    fabricjobs-<pid>-<n>/slot-<k>  worker slot k: its worker and whatever its runs start
    fabricjobs-<pid>-node          the node itself, moved there only when the limits need the
                                   controllers enabled in its cgroup (a process in a cgroup
                                   forbids that: a systemd unit's)

A slot runs one run at a time. When a run ends its worker kills every other process of its
slot's cgroup; the node ends a run it kills (STOP past its grace, KILL, a lost lease, its own
shutdown) and a worker that died by writing the slot's ``cgroup.kill``; the fork server kills
the node's cgroups when the node itself is gone (server_init.py). ``memory.max`` and
``pids.max`` of a slot are set where those controllers can be enabled.

Where no cgroup can be made, :meth:`RunCgroups.make` says why, and runs are ended as before
(reaper.py): a PROCESS job's process group, a worker's descendants (a worker is a subreaper,
so a double fork's orphan is still its descendant), and what a dead worker left to the fork
server.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from dataclasses import dataclass

_PREFIX = "fabricjobs-"
_HOME = re.compile(r"^fabricjobs-(\d+)-(\d+|node)$")
_KILL_ROUNDS = 50  # a process may fork while its cgroup is emptied: look again until none is left
EMPTY_WAIT = 2.0  # seconds a killed cgroup may take to empty before it is removed
_counter = [0]


@dataclass(frozen=True)
class Limits:
    """What each slot's cgroup may use (0: no limit)."""

    memory_mb: int = 0
    pids_max: int = 0

    def wanted(self) -> dict[str, tuple[str, str]]:
        """controller -> (file, value): what the limits need."""
        out = {}
        if self.memory_mb:
            out["memory"] = ("memory.max", str(self.memory_mb * 1024 * 1024))
        if self.pids_max:
            out["pids"] = ("pids.max", str(self.pids_max))
        return out


# -- finding the hierarchy ---------------------------------------------------------------------

def v2_mount(mountinfo: str) -> tuple[str, str] | None:
    """(mount point, root within the hierarchy) of the cgroup v2 mount in a mountinfo text, or
    None where there is none (a host without cgroups, or v1 only)."""
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if sep and len(fields) >= 5 and tail.split()[:1] == ["cgroup2"]:
            return _unescape(fields[4]), _unescape(fields[3])
    return None


def own_path(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of /proc/self/cgroup), or None."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def locate(mountinfo: str, proc_cgroup: str) -> str | None:
    """The directory of this process's own cgroup v2, or None where it has none."""
    mount, path = v2_mount(mountinfo), own_path(proc_cgroup)
    if mount is None or path is None:
        return None
    point, root = mount
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")):] or "/"  # a bind mount of a subtree
    path = path.removesuffix(" (deleted)")
    return os.path.normpath(point + "/" + path.lstrip("/"))


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (a space is \\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def here(proc: str = "/proc") -> str | None:
    """The directory of this process's own cgroup v2 (see :func:`locate`), or None."""
    try:
        with open(f"{proc}/self/mountinfo") as f:
            mountinfo = f.read()
        with open(f"{proc}/self/cgroup") as f:
            mine = f.read()
    except OSError:
        return None
    found = locate(mountinfo, mine)
    if found is not None and _HOME.match(os.path.basename(found)):  # a node of this process moved it there
        found = os.path.dirname(found)
    return found


# -- one cgroup's files ----------------------------------------------------------------------

def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def procs(cgroup: str) -> list[int]:
    """The processes in ``cgroup`` (not its children's); [] if it is gone."""
    try:
        return [int(p) for p in _read(os.path.join(cgroup, "cgroup.procs")).split()]
    except (OSError, ValueError):
        return []


def populated(cgroup: str) -> bool:
    """Whether any process is left in ``cgroup`` or below it."""
    try:
        return "populated 1" in _read(os.path.join(cgroup, "cgroup.events"))
    except OSError:
        return False


def join(cgroup: str) -> bool:
    """Move this process into ``cgroup``; False if it could not be."""
    try:
        _write(os.path.join(cgroup, "cgroup.procs"), "0")
        return True
    except OSError:
        return False


def kill(cgroup: str) -> None:
    """SIGKILL every process in ``cgroup`` and below it, including those forking meanwhile
    (``cgroup.kill``; before Linux 5.14, frozen first and killed one by one). A SIGKILL is
    delivered at once, but a process ends only once it is next scheduled (on a loaded host, a
    while later): :func:`wait_empty` waits for them to be gone."""
    try:
        _write(os.path.join(cgroup, "cgroup.kill"), "1")
        return
    except FileNotFoundError:
        if not os.path.isdir(cgroup):
            return
    except OSError:
        return
    try:
        _write(os.path.join(cgroup, "cgroup.freeze"), "1")
    except OSError:
        pass
    for _ in range(_KILL_ROUNDS):
        found = [p for root, _dirs, _files in os.walk(cgroup) for p in procs(root)]
        if not found:
            break
        _signal_all(found, signal.SIGKILL)
    try:
        _write(os.path.join(cgroup, "cgroup.freeze"), "0")
    except OSError:
        pass


def kill_others(cgroup: str, spare: tuple[int, ...] = ()) -> int:
    """SIGKILL every process in ``cgroup`` but this one and ``spare`` (a worker's, at its run's
    end; a PROCESS job's guard, at a lapse, spares its worker), each stopped first so that none
    starts another meanwhile; returns how many were found."""
    keep = {os.getpid(), *spare}
    seen: set[int] = set()
    for _ in range(_KILL_ROUNDS):
        others = [p for p in procs(cgroup) if p not in keep]
        if not others:
            break
        seen.update(others)
        _signal_all(others, signal.SIGSTOP)
        _signal_all(others, signal.SIGKILL)
    return len(seen)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def remove(cgroup: str, wait: float = EMPTY_WAIT) -> None:
    """Kill what is left in ``cgroup`` and remove it with the cgroups below it."""
    kill(cgroup)
    wait_empty([cgroup], wait)
    for root, dirs, _files in os.walk(cgroup, topdown=False):
        for d in dirs:
            _rmdir(os.path.join(root, d))
    _rmdir(cgroup)


def wait_empty(cgroups: list[str], wait: float) -> None:
    """Wait up to ``wait`` s for every process of ``cgroups`` (killed) to be gone."""
    deadline = time.monotonic() + wait
    while any(populated(c) for c in cgroups) and time.monotonic() < deadline:
        time.sleep(0.01)


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def slot_of(proc: str = "/proc") -> str | None:
    """This process's cgroup if it is a run slot of a node (``fabricjobs-<pid>-<n>/slot-<m>``),
    else None: nothing outside a node's own cgroups is ever killed."""
    path = here(proc)
    if path is None:
        return None
    home, slot = os.path.split(path)
    return path if slot.startswith("slot-") and _HOME.match(os.path.basename(home)) else None


def is_home_of(path: str, pid: int, proc: str = "/proc") -> bool:
    """Whether ``path`` is a node's run cgroup home (``fabricjobs-<pid>-<n>``) of process ``pid``
    in this host's cgroup v2 hierarchy, named as it is (no link, no '..'): nothing else is ever
    killed on another node's word (a row in the store)."""
    m = _HOME.match(os.path.basename(path))
    if m is None or int(m.group(1)) != pid or m.group(2) == "node" or os.path.realpath(path) != path:
        return False
    try:
        with open(f"{proc}/self/mountinfo") as f:
            mount = v2_mount(f.read())
    except OSError:
        return False
    return (mount is not None and path.startswith(mount[0].rstrip("/") + "/")
            and os.path.isfile(os.path.join(path, "cgroup.procs")))


def end_node(root: str, pid: int) -> int:
    """Kill and remove the run cgroups of every node of process ``pid`` under ``root`` (the
    fork server's last act once that process is gone); returns how many there were."""
    homes = _homes(root, lambda found, kind: found == pid and kind != "node")
    for home in homes:
        kill(home)
    for home in homes:
        remove(home)
    return len(homes)


def _homes(root: str, pick) -> list[str]:
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        m = _HOME.match(name)
        if m and pick(int(m.group(1)), m.group(2)):
            out.append(os.path.join(root, name))
    return out


def remove_stale(root: str) -> None:
    """The cgroups of nodes whose process is gone (killed, with their fork server, before
    either could remove them): a node's start clears them, and so does the end of a test run."""
    from .reaper import pid_alive

    for home in _homes(root, lambda pid, kind: not pid_alive(pid)):
        remove(home, wait=0.5)


# -- a node's cgroups --------------------------------------------------------------------------

class RunCgroups:
    """One node's run cgroups: a slot's is made with its limits when its first worker starts."""

    def __init__(self, home: str, limits: dict[str, str], notes: tuple[str, ...]) -> None:
        self.home = home
        self.limits = limits  # file -> value, for each slot
        self.notes = notes  # limits asked for that could not be applied, and why

    @classmethod
    def make(cls, limits: Limits, proc: str = "/proc") -> "RunCgroups | str":
        """This node's cgroups, or why there are none (the node then ends runs without)."""
        root = here(proc)
        if root is None:
            return "no cgroup v2 hierarchy is mounted"
        remove_stale(root)
        _counter[0] += 1
        home = os.path.join(root, f"{_PREFIX}{os.getpid()}-{_counter[0]}")
        try:
            os.mkdir(home, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            return (f"cannot create a cgroup under {root} ({exc.strerror}): run the node as root or in a "
                    "systemd unit with Delegate=yes")
        applied, notes = _enable(root, home, limits.wanted())
        return cls(home, applied, notes)

    def slot(self, n: int) -> str | None:
        """Slot ``n``'s cgroup, made (with its limits) if it is not there; None if it cannot be."""
        path = os.path.join(self.home, f"slot-{n}")
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            return path
        except OSError:
            return None
        for file, value in self.limits.items():
            try:
                _write(os.path.join(path, file), value)
            except OSError:
                pass
        return path

    def kill(self, n: int) -> None:
        """Kill every process of slot ``n`` (its worker and what its run started)."""
        kill(os.path.join(self.home, f"slot-{n}"))

    def close(self) -> None:
        """The node stops: nothing of its runs may be left."""
        remove(self.home)

    def describe(self) -> str:
        limits = ", ".join(f"{f} {v}" for f, v in self.limits.items()) or "no limits"
        return f"cgroup v2 at {self.home} ({limits}" + "".join(f"; {n}" for n in self.notes) + ")"


def _enable(root: str, home: str, wanted: dict[str, tuple[str, str]]) -> tuple[dict[str, str], tuple[str, ...]]:
    """Enable the controllers the limits need in ``root`` and ``home``: the limits that can be
    applied (file -> value), and a note for each that cannot."""
    if not wanted:
        return {}, ()
    try:
        available = set(_read(os.path.join(root, "cgroup.controllers")).split())
    except OSError:
        available = set()
    notes = [f"{c}: controller not available here" for c in wanted if c not in available]
    usable = [c for c in wanted if c in available]
    if usable and not _subtree(root, usable):
        if not (_move_node_out(root) and _subtree(root, usable)):
            notes += [f"{c}: cannot enable it in {root} (processes of others live there)" for c in usable]
            usable = []
    if usable and not _subtree(home, usable):
        notes += [f"{c}: cannot enable it in {home}" for c in usable]
        usable = []
    applied = dict(wanted[c] for c in usable)
    return applied, tuple(notes)


def _subtree(cgroup: str, controllers: list[str]) -> bool:
    """Enable ``controllers`` for the children of ``cgroup``; False if it cannot be done."""
    try:
        enabled = set(_read(os.path.join(cgroup, "cgroup.subtree_control")).split())
        missing = [c for c in controllers if c not in enabled]
        if missing:
            _write(os.path.join(cgroup, "cgroup.subtree_control"), " ".join("+" + c for c in missing))
        return True
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.EACCES, errno.EPERM, errno.ENOENT, errno.EINVAL, errno.EOPNOTSUPP):
            raise
        return False


def _move_node_out(root: str) -> bool:
    """Move this process and its descendants out of ``root`` into a leaf of their own, so
    that controllers may be enabled in ``root`` (a cgroup with processes of its own may not
    have any enabled for its children: a systemd unit's cgroup holds the node)."""
    from .reaper import descendants

    mine = {os.getpid(), *descendants(os.getpid())}
    leaf = os.path.join(root, f"{_PREFIX}{os.getpid()}-node")
    try:
        os.makedirs(leaf, 0o755, exist_ok=True)
    except OSError:
        return False
    moved = False
    for pid in procs(root):
        if pid in mine:
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
                moved = True
            except OSError:
                pass
    return moved


def for_node(enabled: bool, limits: Limits) -> tuple[RunCgroups | None, str]:
    """A node's run cgroups (None where off or impossible) and how its runs are isolated, in
    words for its start-up log and NODES."""
    if not enabled:
        return None, "process groups ([jobs] RUN_CGROUPS = OFF)"
    made = RunCgroups.make(limits)
    if isinstance(made, str):
        return None, f"process groups ({made})"
    return made, made.describe()
