"""A peer on this node's own host: whether its row still names a live process, and what a
node does when such a peer is dead and its runs are taken over here (docs/guides/run-isolation.md).

A run's processes end with its lease, by the worker and a PROCESS job's guard. When the whole
of a node is stopped (a SIGSTOP of its process group, Ctrl-Z at its terminal), its workers are
stopped too, and what a job started into a session of its own runs on beside the run that takes
over. A node that takes over a dead peer of its own host therefore kills the peer's run cgroups
first (the one the peer's row names, wherever it is): a peer judged dead has lost its lease, so
nothing in them may run on.
"""

from __future__ import annotations

import json
import os

from ..store.base import NodeRow
from ..worker import cgroups
from ..worker.reaper import pid_alive, stat_field


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux; None elsewhere)."""
    return stat_field(pid, 19)


def same_process(pid: int, info: str | None) -> bool:
    """Whether the live process ``pid`` is the node that wrote ``info``: the same start time,
    when the row recorded one. A pid reused by another process (after a reboot, or a long
    time) then no longer looks like the node, which could never restart under its name."""
    try:
        recorded = json.loads(info or "{}").get("pid_start")
    except (ValueError, AttributeError):
        recorded = None
    if recorded is None:
        return True  # a row from before pid_start was recorded: the pid is all there is
    return process_start(pid) == recorded


def end_dead_peer_runs(peer: NodeRow, host: str) -> str | None:
    """Kill what is left in the run cgroups of ``peer``, judged dead, if it ran on this host
    (``host``): the cgroup its row names (each node of a process has its own), and only while
    the row's pid and start time still name that node's process or no process at all. The
    cgroup it killed (signalled: cgroups.wait_empty waits for them to be gone), or None; a row
    that cannot say for sure is left alone."""
    if peer.host != host or peer.pid == os.getpid():
        return None
    try:
        info = json.loads(peer.info or "{}")
    except ValueError:
        return None
    home, started = (info.get("run_cgroups"), info.get("pid_start")) if isinstance(info, dict) else (None, None)
    if not isinstance(home, str) or started is None or not cgroups.is_home_of(home, peer.pid):
        return None
    if pid_alive(peer.pid) and process_start(peer.pid) != started:
        return None  # the pid names another process now: its cgroups are not the dead node's
    cgroups.kill(home)  # (its slots; the home stays for that node, or the next node's start, to remove)
    return home
