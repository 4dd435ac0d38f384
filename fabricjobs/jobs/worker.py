"""A worker process: runs one job at a time for its node, and ends it when the node cannot.

Jobs run here rather than in the node's threads so that STOPJOB (after a grace period) and
KILL can really end them: the node kills the worker (and a PROCESS job's process group),
whatever the job is blocked in.

The watchdog thread is the other half of SPEC 5's guarantee 1. It watches the node's lease
on the shared board (:mod:`.board`); once the lease runs out (the node is paused, hung or
dead and no longer renews it) it ends the run at once, well before any other node may
declare this node dead and take the job over. The same check runs before a result is
reported, so a run resumed after a pause never reports success from a lease it lost.

Protocol on the pipe (picklable tuples):
    node -> worker   RunSpec | None (exit)
    worker -> node   ("spawned", task, pid)     a PROCESS job's process group leader
                     ("done", task, Outcome)
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from .board import Board
from .runner import INTERRUPTED, LEASE_LOST, Outcome, RunSpec, run_job

_WATCH_PERIOD = 0.02
_COOPERATIVE_END = 0.1  # seconds a run gets to notice is_aborted() once the lease is gone


class _Current:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.task: int | None = None
        self.child: int | None = None


def worker_main(conn, board_path: str, slots: int, slot: int, idle_sec: float, log_level: int, node: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C at the node's terminal is the node's business
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logging.basicConfig(
        level=log_level, stream=sys.stderr,
        format=f"%(levelname)s %(asctime)s [worker-{slot}@{node}] %(name)s - %(message)s",
    )
    log = logging.getLogger("fabricjobs.job")
    board = Board(board_path, slots)
    current = _Current()

    parent = os.getppid()  # the fork server; it exits when the node dies
    lost = threading.Event()

    def lease_watchdog() -> None:
        while True:
            time.sleep(_WATCH_PERIOD)
            with current.lock:
                task = current.task
            if task is None:
                lost.clear()
                continue
            if board.lease_valid() and os.getppid() == parent:
                continue
            # The node stopped renewing its lease, or is gone: end the run now, well before
            # anyone may take the job over. is_aborted() turns true at once; a job that does not
            # end within a moment is killed.
            lost.set()
            deadline = time.monotonic() + _COOPERATIVE_END
            while time.monotonic() < deadline:
                with current.lock:
                    if current.task != task:
                        break
                time.sleep(0.005)
            else:
                with current.lock:
                    child = current.child
                if child is not None:
                    try:
                        os.killpg(child, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                log.warning("run %s ended: its node stopped renewing the lease", task)
                try:
                    conn.send(("done", task, Outcome(LEASE_LOST, error="run ended: its node stopped renewing the lease")))
                except (OSError, ValueError):
                    pass
                os._exit(3)

    threading.Thread(target=lease_watchdog, name="lease-watchdog", daemon=True).start()

    def on_spawn(pid: int) -> None:
        with current.lock:
            current.child = pid
        conn.send(("spawned", current.task, pid))

    while True:
        try:
            if not conn.poll(idle_sec if idle_sec > 0 else None):
                return  # idle too long: the node starts a new worker when it needs one
            spec: RunSpec | None = conn.recv()
        except (EOFError, OSError):
            return  # the node is gone
        if spec is None:
            return
        with current.lock:
            current.task, current.child = spec.task, None
        # (The node clears this slot's abort flag before sending the spec; clearing it here
        # would lose a STOPJOB that arrived before the run began.)
        outcome = run_job(spec, lambda: lost.is_set() or board.aborted(spec.slot) or not board.lease_valid(), on_spawn, log)
        with current.lock:
            if (lost.is_set() or not board.lease_valid()) and outcome.kind != LEASE_LOST:
                outcome = Outcome(LEASE_LOST, error="run ended: its node stopped renewing the lease")
            current.task, current.child = None, None
        try:
            conn.send(("done", spec.task, outcome))
        except (OSError, ValueError):
            return
