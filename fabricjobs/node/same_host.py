"""A peer on this node's own host: whether its row still names a live process, and what a
node does when such a peer is dead and its runs are taken over here (docs/guides/run-isolation.md).

A run's processes end with its lease, by the worker and a PROCESS job's guard. When the whole
of a node is stopped (a SIGSTOP of its process group, Ctrl-Z at its terminal), its workers are
stopped too, and what a job started into a session of its own runs on beside the run that takes
over. A node that takes over a dead peer of its own host therefore kills the peer's run cgroups
first: a peer judged dead has lost its lease, so nothing in them may run on.
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


def end_dead_peer_runs(peer: NodeRow, host: str, cgroups_home: str | None) -> int:
    """Kill what is left in the run cgroups of ``peer``, judged dead, if it ran on this host
    (``host``) and this node has run cgroups beside them (``cgroups_home``, this node's own);
    returns how many cgroups were killed. A pid that now names another process is left alone."""
    if cgroups_home is None or peer.host != host or peer.pid == os.getpid():
        return 0
    if pid_alive(peer.pid) and not same_process(peer.pid, peer.info):
        return 0
    return cgroups.kill_node(os.path.dirname(cgroups_home), peer.pid)
