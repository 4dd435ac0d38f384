"""A worker process: runs one job at a time for its node, and ends it when the node cannot.

Jobs run here rather than in the node's threads so that STOPJOB (after a grace period) and
KILL can really end them: the node kills the worker (and a PROCESS job's process group),
whatever the job is blocked in.

This is also the other half of SPEC 5's guarantee 1: a run lives on its node's lease
(:mod:`.board`) and ends itself when the lease runs out or changes generation, well before
any other node may declare its node dead. Two mechanisms, so that neither a paused node nor a
job that holds the GIL can defeat it:

* a watchdog thread sees the lease run out, makes ``is_aborted()`` true, gives the job a
  moment to end on its own, then ends it (killing a PROCESS job's process group);
* a kernel timer (``ITIMER_REAL``, with SIGALRM left at its default action: terminate) is
  kept armed to the lease's end plus *twice* that moment, so that it fires only after the
  watchdog has had its chance to kill a PROCESS job's process group (which lives in its own
  session and would outlive its worker). The watchdog pushes it forward while the lease is
  renewed; if the watchdog cannot run (a C call holding the GIL) or the whole node was
  paused past the lease, the kernel ends the process. (A job must therefore not hold the GIL
  for longer than the lease: 50 s with the default heartbeat.) The lease's margin before
  anyone may declare the node dead is at least 0.35 s (heartbeat.py), more than the 0.2 s
  this takes.

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
import threading
import time

from ..logs import setup_logging  # here, not in worker_main: the fork server imports it once for all forks
from ..model import JobType
from .board import Board
from .node_link import NodeLink
from .reaper import kill_descendants
from .protocol import BOUNCED, DONE, INTERRUPTED, LEASE_LOST, NOT_BEGUN, SPAWNED, Outcome, RunSpec
from .runner import run_job

_WATCH_PERIOD = 0.02
_WATCH_PERIOD_MAX = 0.1
_WATCH_IDLE = 1.0  # the watchdog stops polling (and is woken by each run) after this idle
_TRAIN_PATIENCE = 0.2  # a train's run taking longer than this sends the rest of it back
_COOPERATIVE_END = 0.1  # seconds a run gets to notice is_aborted() once the lease is gone
_DEAD_MAN = 2 * _COOPERATIVE_END  # the kernel timer fires this long after the lease's end
_ARM_SLACK = 0.01  # a timer armed later than this after its clock reading is armed again
_LOST = "run ended: its node stopped renewing the lease"


class _Current:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.task: int | None = None
        self.generation = 0
        self.child: int | None = None
        self.watchdog_idle = True  # the watchdog waits to be woken by the next run start
        self.started = 0.0  # monotonic: when the current run began
        self.waiting = False  # the current run waits for its due time (a fire prepared ahead)
        self.queue: collections.deque[RunSpec] = collections.deque()  # the rest of a train


_SPAWN_MIN = 0.0002  # seconds: no run this short started a process (see run_one)

def worker_main(conn, board_path: str, slots: int, slot: int, idle_sec: float, log_level: int, node: str,
                log_format: str = "text") -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C at the node's terminal is the node's business
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the dead-man timer: terminate, no Python involved
    threading.current_thread().name = f"worker-{slot}@{node}"
    setup_logging(log_level, log_format, node, thread_name=f"worker-{slot}@{node}")
    log = logging.getLogger("fabricjobs.job")
    board = Board(board_path, slots)
    current = _Current()
    send_lock = threading.Lock()
    parent = os.getppid()  # the fork server; it exits when the node dies
    lost = threading.Event()
    busy = threading.Event()  # a run began: wake the watchdog

    def send(msg) -> None:
        with send_lock:
            conn.send(msg)

    def arm(until: float) -> None:
        """Set the dead-man timer to fire _DEAD_MAN after the lease end ``until`` (monotonic)."""
        while True:
            read = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, max(until + _DEAD_MAN - read, 0.001))
            if time.monotonic() - read <= _ARM_SLACK:
                return  # no pause between the reading and the call worth speaking of

    def lease_watchdog() -> None:
        while True:
            with current.lock:
                task, generation = current.task, current.generation
                if task is None and time.monotonic() - current.started > _WATCH_IDLE:
                    current.watchdog_idle = True  # no run began for a while: from now on a run start wakes it
            if task is None:
                if current.watchdog_idle:
                    busy.wait(1.0)  # idle: nothing to watch until a run begins
                    busy.clear()
                    with current.lock:
                        current.watchdog_idle = False
                else:  # runs come and go: look again soon rather than be woken for each one
                    busy.wait(_WATCH_PERIOD_MAX / 2)
                    busy.clear()
                continue
            now = time.monotonic()
            if board.lease_valid(now, generation) and os.getppid() == parent:
                until = board.lease_until()
                arm(until)  # push the dead-man timer forward
                with current.lock:  # a short job that ran long: its train-mates go elsewhere
                    slow = current.task == task and not current.waiting and now - current.started > _TRAIN_PATIENCE
                    bounced = [s.task for s in current.queue] if slow else []
                    if bounced:
                        current.queue.clear()
                if bounced:
                    try:
                        send((BOUNCED, bounced, task))
                    except (OSError, ValueError):
                        pass
                # The lease cannot lapse before `until`: sleep till then (a renewal moves it on),
                # but look at least every _WATCH_PERIOD_MAX for a node that died.
                time.sleep(min(max(until - now, _WATCH_PERIOD), _WATCH_PERIOD_MAX))
                continue
            # The node stopped renewing its lease, renewed it after it had lapsed, or is gone:
            # end the run now, well before anyone may take the job over. is_aborted() turns
            # true at once; a job that does not end within a moment is killed.
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
                with current.lock:
                    queued = [s.task for s in current.queue]
                try:
                    for t in [task] + queued:  # the rest of its train never began
                        send((DONE, t, Outcome(LEASE_LOST, error=_LOST)))
                except (OSError, ValueError):
                    pass
                os._exit(3)

    threading.Thread(target=lease_watchdog, name="lease-watchdog", daemon=True).start()

    def on_spawn(pid: int) -> None:
        with current.lock:
            current.child = pid
        send((SPAWNED, current.task, pid))

    def run_one(spec: RunSpec, queued: bool) -> bool:
        """Run one spec and report it; False if the node can no longer be told."""
        if queued and board.aborted(spec.slot, spec.task):  # a train's run, stopped before it began
            return report(spec.task, Outcome(INTERRUPTED, error=NOT_BEGUN))
        # (The node clears this slot's abort flag before sending; clearing it here would lose
        # a STOPJOB that arrived before the run began.)
        ok = board.lease_valid(time.monotonic(), spec.generation)
        if ok:  # (a lease long gone would make the timer race the reply below)
            arm(board.lease_until())
            ok = board.lease_valid(time.monotonic(), spec.generation)  # after arming: a pause between is caught
        if not ok:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return report(spec.task, Outcome(LEASE_LOST, error=_LOST))
        lost.clear()
        with current.lock:
            current.task, current.generation, current.child = spec.task, spec.generation, None
            current.started = time.monotonic()
            wake = current.watchdog_idle
        if wake or board.lease_until() - current.started < 2 * _WATCH_PERIOD_MAX:
            busy.set()  # idle, or the lease ends soon: the watchdog must look now, not in 50 ms

        if spec.key.type == JobType.PROCESS:
            spec = dataclasses.replace(spec, board=(board_path, slots))  # for its guard

        def aborted() -> bool:
            return lost.is_set() or board.aborted(spec.slot, spec.task) or not board.lease_valid(None, spec.generation)

        due = True
        if spec.not_before is not None:
            with current.lock:  # waiting for its due time is not running long (its train-mates stay)
                current.waiting = True
            due = wait_until(spec.not_before, aborted)
        if not due:
            outcome, elapsed = Outcome(INTERRUPTED, error=NOT_BEGUN), 0.0
        else:
            began = time.monotonic()
            with current.lock:  # a run is slow (its train-mates sent back) from when it began, not its wait
                current.started, current.waiting = began, False
            link = NodeLink(spec.task, send, conn) if spec.key.type == JobType.INTERFACE_LISTENER else None
            outcome = run_job(spec, aborted, on_spawn, log, link)
            elapsed = time.monotonic() - began
            # What the run started ends with it (SPEC 7.10). Starting a process takes longer than
            # _SPAWN_MIN (a fork alone ~0.5 ms here), and the /proc scan ~0.1 ms: a run that
            # short started none, and the hot path of short jobs skips the scan.
            if elapsed >= _SPAWN_MIN:
                left = kill_descendants(os.getpid())
                if left:
                    log.info("run of %s left %d process(es) running; killed", spec.key, left)
        with current.lock:
            if (lost.is_set() or not board.lease_valid(None, spec.generation)) and outcome.kind != LEASE_LOST:
                outcome = Outcome(LEASE_LOST, error=_LOST)
            current.task, current.child, current.waiting = None, None, False
        signal.setitimer(signal.ITIMER_REAL, 0)  # idle: nothing to end
        return report(spec.task, dataclasses.replace(outcome, elapsed=elapsed))

    def report(task: int, outcome: Outcome) -> bool:
        try:
            send((DONE, task, outcome))
            return True
        except (OSError, ValueError):
            return False

    while True:
        try:
            if not conn.poll(idle_sec if idle_sec > 0 else None):
                return  # idle too long: the node starts a new worker when it needs one
            msg: RunSpec | list[RunSpec] | None = conn.recv()
        except (EOFError, OSError):
            return  # the node is gone
        if msg is None:
            return
        # A train (a list) runs in order, each run reported as it ends, so that the node knows
        # exactly which of them ran if this process is killed halfway. The watchdog may send
        # the rest back meanwhile (a run that took long), so they are taken from the queue.
        specs = msg if isinstance(msg, list) else [msg]
        with current.lock:
            current.queue.extend(specs[1:])
        if not run_one(specs[0], queued=False):
            return
        while True:
            with current.lock:
                if not current.queue:
                    break
                spec = current.queue.popleft()
            if not run_one(spec, queued=True):
                return


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


def _inherit() -> None:
    """The fork server imports this module once; what every worker would otherwise load on
    its first run (the entry-point table) is loaded there and inherited by each fork."""
    from .registry import _entry_points

    _entry_points()


_inherit()
