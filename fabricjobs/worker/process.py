"""A worker process: runs one job at a time for its node, and ends it when the node cannot.

Jobs run here rather than in the node's threads so that STOPJOB (after a grace period) and
KILL can really end them: the node kills the worker (and a PROCESS job's process group),
whatever the job is blocked in.

This is also the other half of guarantee 1 of docs/explanation/guarantees.md: a run lives on its node's lease
(:mod:`.board`) and ends itself when the lease runs out or changes generation, well before
any other node may declare its node dead. Two mechanisms, so that neither a paused node nor a
job that holds the GIL can defeat it:

* a watchdog thread sees the lease run out, makes ``is_aborted()`` true, gives the job a
  moment to end on its own, then ends it (killing a PROCESS job's process group and every
  process the run started, so that none runs on beside a takeover);
* a kernel timer (``ITIMER_REAL``, with SIGALRM left at its default action: terminate) is
  kept armed to the lease's end plus *twice* that moment, so that it fires only after the
  watchdog has had its chance to kill a PROCESS job's process group (which lives in its own
  session and would outlive its worker). The watchdog pushes it forward while the lease is
  renewed; if the watchdog cannot run (a C call holding the GIL) or the whole node was
  paused past the lease, the kernel ends the process (and the node ends what its run started:
  reaper.py). (A job must therefore not hold the GIL for longer than the lease: 50 s with the
  default heartbeat.) The lease's margin before anyone may declare the node dead is at least
  0.35 s (heartbeat.py), more than the 0.2 s this takes.

The timer is relative, so it is armed from a fresh clock reading and re-armed if a pause got
between the reading and the system call; a run is checked against its lease *after* the
timer is armed, so a pause anywhere before the job starts is caught by one or the other.

The same check runs before a result is reported, so a run resumed after a pause never reports
success from a lease it lost.

What goes over the pipe to the node is listed in :mod:`.protocol`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import signal
import sys
import threading
import time

from ..logs import setup_logging  # at the top: the fork server imports it once for all forks
from ..model import JobType
from .board import Board
from .spool import spool_path
from . import cgroups
from .node_link import NodeLink
from .leftovers import Leftovers
from .output import StdCapture
from .reaper import become_subreaper, kill_descendants, reap_children
from .protocol import ANSWER, BOUNCED, DONE, INTERRUPTED, LEASE_LOST, NOT_BEGUN, SPAWNED, Outcome, RunSpec, encode
from .runner import FOREIGN_LINES, run_job

_WATCH_PERIOD = 0.02
_WATCH_PERIOD_MAX = 0.1
_WATCH_IDLE = 1.0  # the watchdog stops polling (and is woken by each run) after this idle
_TRAIN_PATIENCE = 0.2  # a train's run taking longer than this sends the rest of it back
_COOPERATIVE_END = 0.1  # seconds a run gets to notice is_aborted() once the lease is gone
_DEAD_MAN = 2 * _COOPERATIVE_END  # the kernel timer fires this long after the lease's end
_ARM_SLACK = 0.01  # a timer armed later than this after its clock reading is armed again
_LOST = "run ended: its node stopped renewing the lease"


class _Current:
    """What the worker is running now, shared by its main thread and its lease watchdog."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.task: int | None = None
        self.generation = 0
        self.child: int | None = None
        self.watchdog_idle = True  # the watchdog waits to be woken by the next run start
        self.started = 0.0  # monotonic: when the current run began
        self.waiting = False  # the current run waits for its due time (a fire prepared ahead)
        self.queue: collections.deque[RunSpec] = collections.deque()  # the rest of a train


_SPAWN_MIN = 0.0002  # seconds: no run this short started a process (see _execute)


def worker_main(conn, board_path: str, slots: int, slot: int, idle_sec: float, log_level: int, node: str,
                log_format: str = "text", cgroup: str | None = None) -> None:
    """The worker process's entry point (worker/pool.py starts it from the fork server).
    ``cgroup``: its slot's run cgroup (cgroups.py), None where the node has none."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C at the node's terminal is the node's business
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # and so is its hangup (it stops cleanly)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the dead-man timer: terminate, no Python involved
    # A double fork's orphan becomes this process's child, not init's: still found (and
    # ended) among its descendants when the run ends, cgroup or not.
    become_subreaper()
    if cgroup is not None and not cgroups.join(cgroup):
        cgroup = None
    threading.current_thread().name = f"worker-{slot}@{node}"
    std = StdCapture()  # what a USER_JOB prints is its run's output, not the node's log
    setup_logging(log_level, log_format, node, thread_name=f"worker-{slot}@{node}", stream=std.log_stream)
    for handler in logging.getLogger().handlers:  # (one: the node's log)
        handler.addFilter(FOREIGN_LINES)
    worker = WorkerProcess(conn, board_path, slots, logging.getLogger("fabricjobs.job"), cgroup, std)
    threading.Thread(target=LeaseWatchdog(worker).run, name="lease-watchdog", daemon=True).start()
    worker.serve(idle_sec)
    _leave()


def _leave() -> None:
    """End the worker now, its output flushed and multiprocessing's finalizers run (a job's
    Manager cleans up after itself): not as an interpreter exits, which waits for every thread
    that is not a daemon, such as one a job left going for ever (the node would take the worker
    for idle and send it runs that no one reads)."""
    try:
        from multiprocessing import util

        util._run_finalizers()  # type: ignore[attr-defined]  # (private: multiprocessing's own exit calls it)
    except Exception:  # noqa: BLE001 - a job's finalizer may fail: the worker ends anyway
        pass
    for handler in logging.getLogger().handlers:
        lock = handler.lock
        if lock is None or lock.acquire(timeout=0.5):  # (a job's thread may be halfway through a line)
            try:
                handler.flush()
            except (OSError, ValueError):
                pass
            finally:
                if lock is not None:
                    lock.release()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _arm(until: float) -> None:
    """Set the dead-man timer to fire _DEAD_MAN after the lease end ``until`` (monotonic)."""
    while True:
        read = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, max(until + _DEAD_MAN - read, 0.001))
        if time.monotonic() - read <= _ARM_SLACK:
            return  # no pause between the reading and the call worth speaking of


class WorkerProcess:
    """The worker's main thread: takes runs (one, or a train) from the node's pipe, runs each
    in turn and reports it."""

    def __init__(self, conn, board_path: str, slots: int, log: logging.Logger, cgroup: str | None = None,
                 std: StdCapture | None = None) -> None:
        self.conn = conn
        self.cgroup = cgroup
        self.std = std
        self.board_path = board_path
        self.slots = slots
        self.board = Board(board_path, slots)
        self.log = log
        self.current = _Current()
        self.parent = os.getppid()  # the fork server; it exits when the node dies
        self.lost = threading.Event()  # the watchdog saw the lease go: the run must end
        self.busy = threading.Event()  # a run began: wake the watchdog
        self._send_lock = threading.Lock()
        self.leftovers = Leftovers()
        self.retiring: str | None = None  # why: a run left something later runs would inherit

    def send(self, msg) -> None:
        data = encode(msg)
        with self._send_lock:
            self.conn.send_bytes(data)

    def report(self, task: int, outcome: Outcome) -> bool:
        """Tell the node how run ``task`` ended (and, if so, that this worker retires with it:
        the node sends it nothing more); False if the node can no longer be told."""
        try:
            self.send((DONE, task, outcome) if self.retiring is None else (DONE, task, outcome, self.retiring))
            return True
        except (OSError, ValueError):
            return False

    def serve(self, idle_sec: float) -> None:
        """Run what the node sends until it says to exit, goes away, or sends nothing for
        ``idle_sec`` (the node starts a new worker when it needs one)."""
        while True:
            try:
                if not self.conn.poll(idle_sec if idle_sec > 0 else None):
                    return  # idle too long
                msg: RunSpec | list[RunSpec] | None = self.conn.recv()
            except (EOFError, OSError):
                return  # the node is gone
            if isinstance(msg, tuple) and msg[:1] == (ANSWER,):
                continue  # a listener's store request answered after its run gave up on it
            if msg is None or not self._run_train(msg if isinstance(msg, list) else [msg]) or self.retiring:
                return

    def _look_for_leftovers(self) -> None:
        """Retire after this run if it left what a later run would inherit (leftovers.py);
        the rest of its train, not begun, goes back to the node."""
        why = self.leftovers.of_run()
        if why is None:
            return
        self.retiring = why
        with self.current.lock:
            bounced = [s.task for s in self.current.queue]
            self.current.queue.clear()
        if bounced:
            try:
                self.send((BOUNCED, bounced, None))
            except (OSError, ValueError):
                pass

    def _run_train(self, specs: list[RunSpec]) -> bool:
        """A train (or one run) in order, each run reported as it ends, so that the node knows
        exactly which of them ran if this process is killed halfway. The watchdog may send the
        rest back meanwhile (a run that took long), so they are taken from the queue."""
        with self.current.lock:
            self.current.queue.extend(specs[1:])
        if not self._run_one(specs[0], queued=False):
            return False
        while True:
            with self.current.lock:
                if not self.current.queue:
                    return True
                spec = self.current.queue.popleft()
            if not self._run_one(spec, queued=True):
                return False

    def _run_one(self, spec: RunSpec, queued: bool) -> bool:
        """Run one spec and report it; False if the node can no longer be told."""
        board = self.board
        if queued and board.aborted(spec.slot, spec.task):  # a train's run, stopped before it began
            return self.report(spec.task, Outcome(INTERRUPTED, error=NOT_BEGUN))
        # (The node clears this slot's abort flag before sending; clearing it here would lose
        # a STOPJOB that arrived before the run began.)
        if not self._begin(spec):
            signal.setitimer(signal.ITIMER_REAL, 0)
            return self.report(spec.task, Outcome(LEASE_LOST, error=_LOST))
        if spec.key.type == JobType.PROCESS:
            spec = dataclasses.replace(spec, board=(self.board_path, self.slots))  # for its guard
        outcome, elapsed = self._execute(spec)
        self._look_for_leftovers()
        with self.current.lock:
            if (self.lost.is_set() or not board.lease_valid(None, spec.generation)) and outcome.kind != LEASE_LOST:
                outcome = Outcome(LEASE_LOST, error=_LOST)
            self.current.task, self.current.child, self.current.waiting = None, None, False
        signal.setitimer(signal.ITIMER_REAL, 0)  # idle: nothing to end
        return self.report(spec.task, dataclasses.replace(outcome, elapsed=elapsed))

    def _begin(self, spec: RunSpec) -> bool:
        """Check the run's lease, arm the dead-man timer and make it the current run; False
        if the lease is gone."""
        board, current = self.board, self.current
        ok = board.lease_valid(time.monotonic(), spec.generation)
        if ok:  # (a lease long gone would make the timer race the reply)
            _arm(board.lease_until())
            ok = board.lease_valid(time.monotonic(), spec.generation)  # after arming: a pause between is caught
        if not ok:
            return False
        self.lost.clear()
        with current.lock:
            current.task, current.generation, current.child = spec.task, spec.generation, None
            current.started = time.monotonic()
            wake = current.watchdog_idle
        if wake or board.lease_until() - current.started < 2 * _WATCH_PERIOD_MAX:
            self.busy.set()  # idle, or the lease ends soon: the watchdog must look now, not in 50 ms
        return True

    def _execute(self, spec: RunSpec) -> tuple[Outcome, float]:
        """Wait for the run's due time, run it, and end what it left running: its outcome and
        the seconds it ran."""
        def aborted() -> bool:
            return self.lost.is_set() or self.board.aborted(spec.slot, spec.task) \
                or not self.board.lease_valid(None, spec.generation)

        if spec.not_before is not None:
            with self.current.lock:  # waiting for its due time is not running long (its train-mates stay)
                self.current.waiting = True
            if not wait_until(spec.not_before, aborted):
                return Outcome(INTERRUPTED, error=NOT_BEGUN), 0.0
        began = time.monotonic()
        with self.current.lock:  # a run is slow (its train-mates sent back) from when it began, not its wait
            self.current.started, self.current.waiting = began, False
        link = NodeLink(spec.task, self.send, self.conn) if spec.key.type == JobType.INTERFACE_LISTENER else None
        def progress(done: float, total: float) -> None:
            self.board.set_progress(spec.slot, spec.task, done, total)

        outcome = run_job(spec, aborted, self._on_spawn, self.log, link, progress, spool_path(self.board_path, spec.task),
                          std=self.std, end_leftovers=self.end_leftovers)
        elapsed = time.monotonic() - began
        # What the run started ends with it (docs/guides/writing-jobs.md). Starting a process takes longer than
        # _SPAWN_MIN (a fork alone ~0.5 ms here), and the /proc scan ~0.1 ms: a run that short
        # started none, and the hot path of short jobs skips the scan.
        if elapsed >= _SPAWN_MIN:
            left = self.end_leftovers()
            if left:
                self.log.info("run of %s left %d process(es) running; killed", spec.key, left)
        return outcome, elapsed

    def end_leftovers(self, reap: bool = True) -> int:
        """Kill whatever the run left running: everything in this worker's cgroup but itself,
        and every descendant (all there is without a cgroup); returns how many were found.
        ``reap``: collect them (not while the run's own thread may still wait for its child)."""
        in_cgroup = cgroups.kill_others(self.cgroup) if self.cgroup is not None else 0
        below = kill_descendants(os.getpid())
        if reap:
            reap_children()
        return max(in_cgroup, below)

    def _on_spawn(self, pid: int) -> None:
        with self.current.lock:
            self.current.child = pid
        self.send((SPAWNED, self.current.task, pid))


class LeaseWatchdog:
    """The worker's second thread: keeps the dead-man timer ahead of a valid lease, sends back
    the rest of a train whose run takes long, and ends the run when the lease is gone."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.board = worker.board
        self.current = worker.current

    def run(self) -> None:
        while True:
            with self.current.lock:
                task, generation = self.current.task, self.current.generation
                if task is None and time.monotonic() - self.current.started > _WATCH_IDLE:
                    self.current.watchdog_idle = True  # no run began for a while: from now on a run start wakes it
            if task is None:
                self._wait_for_a_run()
                continue
            now = time.monotonic()
            if self.board.lease_valid(now, generation) and os.getppid() == self.worker.parent:
                self._keep_going(task, now)
                continue
            # The node stopped renewing its lease, renewed it after it had lapsed, or is gone:
            # end the run now, well before anyone may take the job over.
            self._end_run(task)

    def _wait_for_a_run(self) -> None:
        busy = self.worker.busy
        if self.current.watchdog_idle:
            busy.wait(1.0)  # idle: nothing to watch until a run begins
            busy.clear()
            with self.current.lock:
                self.current.watchdog_idle = False
        else:  # runs come and go: look again soon rather than be woken for each one
            busy.wait(_WATCH_PERIOD_MAX / 2)
            busy.clear()

    def _keep_going(self, task: int, now: float) -> None:
        """The lease is valid: push the dead-man timer forward, send back the rest of a train
        whose run takes long, and sleep until the lease could lapse."""
        until = self.board.lease_until()
        _arm(until)
        with self.current.lock:  # a short job that ran long: its train-mates go elsewhere
            current = self.current
            slow = current.task == task and not current.waiting and now - current.started > _TRAIN_PATIENCE
            bounced = [s.task for s in current.queue] if slow else []
            if bounced:
                current.queue.clear()
        if bounced:
            try:
                self.worker.send((BOUNCED, bounced, task))
            except (OSError, ValueError):
                pass
        # The lease cannot lapse before `until`: sleep till then (a renewal moves it on), but
        # look at least every _WATCH_PERIOD_MAX for a node that died.
        time.sleep(min(max(until - now, _WATCH_PERIOD), _WATCH_PERIOD_MAX))

    def _end_run(self, task: int) -> None:
        """The lease is gone: is_aborted() turns true at once; a run that does not end within
        a moment is killed, with the worker (which does not return from here then)."""
        self.worker.lost.set()
        deadline = time.monotonic() + _COOPERATIVE_END
        while time.monotonic() < deadline:
            with self.current.lock:
                if self.current.task != task:
                    return  # it ended by itself
            time.sleep(0.005)
        with self.current.lock:
            child = self.current.child
        if child is not None:
            try:
                os.killpg(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.worker.end_leftovers(reap=False)  # what the run started: else it outlives the run it belongs to
        self.worker.log.warning("run %s ended: its node stopped renewing the lease", task)
        with self.current.lock:
            queued = [s.task for s in self.current.queue]
        try:
            for t in [task] + queued:  # the rest of its train never began
                self.worker.send((DONE, t, Outcome(LEASE_LOST, error=_LOST)))
        except (OSError, ValueError):
            pass
        os._exit(3)


def wait_until(wall: float, aborted) -> bool:
    """Wait for a fire's due time; False if the run was aborted. The job must see a wall clock
    at or past ``wall``, so that clock is what is compared (a monotonic deadline computed from
    it would come early by any pause between the two readings); the wait is at most 1 s."""
    cap = time.monotonic() + 1.0
    while True:
        if aborted():
            return False
        left = wall - time.time()
        if left <= 0 or time.monotonic() >= cap:
            return True
        time.sleep(min(left, 0.005))
