"""The node's worker processes: started on demand, reused while warm, killed when needed.

Workers are forked from a fork server that imported fabricjobs once, so starting one costs
a fork, not an interpreter start; and they are reused across runs, so most runs cost two
pipe messages. Each worker owns a fixed slot on the board (its abort flag). A worker may be
given a *train* of short runs in one message (see trains.py); it runs them in order.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from .reaper import kill_orphans, kill_tree, parent_of
from .board import Board
from .cgroups import RunCgroups
from .protocol import MessageReader, RunSpec, encode
from .zygote import run_forking

log = logging.getLogger("fabricjobs.node.workers")

# The workers this process forked and has not forgotten, over all its pools (tests run several
# nodes in one process, on its one fork server): any other child of the fork server is an
# orphan. _FORKS is held while a worker is started, so none is missing from the set.
_FORKS = threading.Lock()
_FORKED: set[int] = set()
# What the fork server imports once for every fork. server_init: the fork server becomes the
# reaper of what a dead worker leaves. fabricjobs.cli: where the fork server is started the
# usual way (start_fork_server could not fork it), a node started by the console script (a
# path, not ``-m``) has each worker run that script again as __mp_main__, which imports the CLI.
_PRELOAD = ["fabricjobs.worker.server_init", "fabricjobs.worker.process", "fabricjobs.cli"]


def start_fork_server() -> bool:
    """Start the fork server now, as a fork of this process (zygote.py): for a node process,
    early, while it has one thread. False where it could not (other threads already run): the
    first worker then starts it the usual way."""
    from multiprocessing import forkserver

    from . import node_watch

    node_watch.NODE = os.getpid()  # the fork, a copy of this process, knows whom to watch
    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    if run_forking(forkserver.ensure_running):
        return True
    log.debug("fork server not forked (threads already run): the first worker starts it afresh")
    return False


@dataclass(eq=False)
class Worker:
    slot: int
    process: multiprocessing.process.BaseProcess
    conn: Connection
    tasks: list[int] = field(default_factory=list)  # its runs not yet reported, in order: [0] runs
    train: list[int] = field(default_factory=list)  # the runs of its last message, in order
    child_pid: int | None = None  # process group of a running PROCESS job
    server: int | None = None  # the fork server that forked it (the reaper of what it leaves)
    killed_for: int | None = None  # the run the node killed this worker to end
    idle_since: float = field(default_factory=time.monotonic)
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    reader: MessageReader = field(init=False)  # what it says, read by the collector thread only
    watched: bool = False  # the collector waits on its pipe and its exit (set by the collector, once)
    gone: bool = False  # the collector has seen it die (its pipe is no longer read)

    def __post_init__(self) -> None:
        self.reader = MessageReader(self.conn.fileno())

    @property
    def pid(self) -> int | None:
        return self.process.pid


class WorkerPool:
    def __init__(self, board: Board, size: int, *, node: str, idle_sec: float, log_level: int, log_format: str = "text",
                 cgroups: RunCgroups | None = None) -> None:
        self.board = board
        self.cgroups = cgroups  # None: runs are ended by process group and descendants (reaper.py)
        self.size = size
        self.node = node
        self.idle_sec = idle_sec
        self.log_level = log_level
        self.log_format = log_format
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._lock = threading.Lock()
        self._workers: dict[int, Worker] = {}  # slot -> worker

    def prewarm(self) -> None:
        """Start the fork server and one worker now, so the first run (or a takeover) waits
        for neither. (Like any worker, it exits after WORKER_IDLE_SEC without a run.)"""
        from multiprocessing import forkserver

        forkserver.ensure_running()
        if self.size:
            with self._lock:
                if 0 not in self._workers:
                    self._workers[0] = self._spawn(0)

    def _spawn(self, slot: int) -> Worker:
        from .process import worker_main

        parent, child = self._ctx.Pipe(duplex=True)
        cgroup = self.cgroups.slot(slot) if self.cgroups is not None else None
        proc = self._ctx.Process(
            target=worker_main,
            args=(child, self.board.path, self.board.slots, slot, self.idle_sec, self.log_level, self.node,
                  self.log_format, cgroup),
            name=f"fabricjobs-worker-{slot}",
            daemon=False,
        )
        with _FORKS:
            proc.start()
            if proc.pid:
                _FORKED.add(proc.pid)
        child.close()
        return Worker(slot, proc, parent, server=parent_of(proc.pid) if proc.pid else None)

    def acquire(self) -> Worker:
        """An idle worker (warm if possible); the caller must have a free slot. (Only the
        node's loop starts runs, so nothing takes it between here and :meth:`start`.)"""
        with self._lock:
            for w in self._workers.values():
                if not w.tasks and w.process.is_alive():
                    return w
            for slot in range(self.size):
                found = self._workers.get(slot)
                if found is not None and found.tasks:
                    continue  # busy, or died holding a run: the collector must see that death first
                if found is None or not found.process.is_alive():
                    if found is not None:
                        self._discard(found)
                        self._end_slot(slot)  # (idle when it died: nothing should be left, but be sure)
                    fresh = self._spawn(slot)
                    self._workers[slot] = fresh
                    return fresh
        raise RuntimeError("no free worker slot")

    def start(self, worker: Worker, specs: list[RunSpec]) -> None:
        worker.tasks = [s.task for s in specs]
        worker.train = list(worker.tasks)
        worker.child_pid = None
        self.board.clear_abort(worker.slot)
        data = encode(specs[0] if len(specs) == 1 else specs)
        with worker.send_lock:
            worker.conn.send_bytes(data)

    def release(self, worker: Worker, task: int) -> None:
        """Run ``task`` of this worker was reported; the worker is idle once all of its are."""
        if task in worker.tasks:
            worker.tasks.remove(task)
        worker.child_pid = None
        if not worker.tasks:
            worker.idle_since = time.monotonic()

    def abort(self, worker: Worker, task: int) -> None:
        """Ask run ``task`` to end (is_aborted() turns true; a PROCESS job gets SIGTERM; a
        queued run of a train is skipped)."""
        place = worker.train.index(task) if task in worker.train else 0
        self.board.set_abort(worker.slot, place, task)

    def kill_children(self, worker: Worker) -> None:
        """SIGKILL a PROCESS job's process group (its own session: all it started)."""
        if worker.child_pid:
            try:
                os.killpg(worker.child_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, worker: Worker) -> None:
        """End the run now: SIGKILL the worker, a PROCESS job's whole process group, and any
        process the run started (stopped first, so it cannot outlive the worker as an orphan
        that a retry would run beside): with run cgroups, everything in its slot's."""
        self.kill_children(worker)
        with self._lock:
            if self._workers.get(worker.slot) in (worker, None):
                self._end_slot(worker.slot)
        if worker.process.pid and worker.process.exitcode is None:
            kill_tree(worker.process.pid)

    def _end_slot(self, slot: int) -> None:
        """Kill everything in slot ``slot``'s cgroup. Only while the slot is the dead or
        doomed worker's: a fresh worker of the slot would go with it."""
        if self.cgroups is not None:
            self.cgroups.kill(slot)

    def kill_orphans(self, dead: Worker) -> int:
        """End what a dead worker left running (its run's children, now the fork server's):
        a worker the kernel ended could not. Returns how many were found."""
        if dead.server is None:
            return 0
        with _FORKS:
            return kill_orphans(dead.server, set(_FORKED))

    def connections(self) -> dict[Connection, Worker]:
        with self._lock:
            return {w.conn: w for w in self._workers.values()}

    def workers(self) -> list[Worker]:
        with self._lock:
            return list(self._workers.values())

    def forget(self, worker: Worker) -> None:
        """A worker died or was killed: drop it, and whatever is left in its slot's cgroup
        (the slot gets a fresh worker on demand)."""
        worker.gone = True  # the collector no longer reads its pipe, which is closed below
        with self._lock:
            if self._workers.get(worker.slot) is worker:
                self._end_slot(worker.slot)
                del self._workers[worker.slot]
        self._discard(worker)

    def _discard(self, worker: Worker) -> None:
        _FORKED.discard(worker.pid or 0)
        try:
            worker.conn.close()
        except OSError:
            pass
        worker.process.join(timeout=0.5)

    def reap_idle(self) -> None:
        """Forget workers that exited on their own after their idle timeout."""
        with self._lock:
            gone = [w for w in self._workers.values() if not w.tasks and not w.process.is_alive()]
            for w in gone:
                self._end_slot(w.slot)
                del self._workers[w.slot]
        for w in gone:
            self._discard(w)

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers.values() if w.pid]

    def shutdown(self, kill: bool = False) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for w in workers:
            if kill:
                self.kill(w)
            else:
                try:
                    with w.send_lock:
                        w.conn.send(None)
                except OSError:
                    pass
        for w in workers:
            w.process.join(timeout=2)
            if w.process.is_alive():
                self.kill(w)
                w.process.join(timeout=1)
            _FORKED.discard(w.pid or 0)
            try:
                w.conn.close()
            except OSError:
                pass
        if self.cgroups is not None:
            self.cgroups.close()  # nothing of its runs may be left
