"""The fork server outlives no node: when the node that started it is gone (SIGKILLed, say),
it ends everything the node's runs started, then itself (docs/guides/run-isolation.md).

The fork server would otherwise live on: it exits when its "alive" pipe closes, and every
worker, and whatever a job forked without closing descriptors, holds that pipe open. A worker
notices its node's death by itself (its lease runs out, its parent changes) unless it is
stuck, and a process a run started into a session of its own notices nothing. So a thread of
the fork server waits for the node's exit (a pidfd; where there is none, its parent pid is
polled) and then kills the node's run cgroups (cgroups.py) and every process below the fork
server: its workers, and the orphans of dead workers it adopted as their subreaper.
"""

from __future__ import annotations

import os
import select
import threading

from . import cgroups
from .reaper import kill_descendants

_POLL_SEC = 0.1  # where there is no pidfd: how often the parent pid is looked at

#: The node's pid, set by the node before it forks its fork server (pool.start_fork_server).
#: Not the fork server's parent pid read when the watch starts: a node that exits at once (a
#: refused config) is gone by then, the parent is init, and the watch waited on init for ever,
#: the fork server with it.
NODE: int | None = None


def start() -> None:
    """Watch the node (this process's parent) from a thread of its own."""
    node = NODE if NODE is not None else os.getppid()
    root = cgroups.here()  # before anything moves this process: the node's cgroups are below it
    # Not a daemon thread: the fork server's own loop exits once the last holder of its
    # "alive" pipe is killed, which is halfway through the watch's work; the interpreter then
    # waits for this thread, which ends the process when it is done.
    threading.Thread(target=_watch, args=(node, root), name="node-watch", daemon=False).start()


def _watch(node: int, root: str | None) -> None:
    _wait_for_exit(node)
    if root is not None:
        cgroups.end_node(root, node)
    kill_descendants(os.getpid())
    os._exit(0)


def _wait_for_exit(node: int) -> None:
    try:
        fd = os.pidfd_open(node)
    except (AttributeError, OSError):
        fd = None
    if fd is not None and os.getppid() == node:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
        return
    stop = threading.Event()
    while os.getppid() == node:
        stop.wait(_POLL_SEC)
