"""The heartbeat: this node's row in ``nodes``, and the lease its runs live on (docs/explanation/nodes.md).

Every ``interval`` the node writes its row with a bigger beat counter. Each successful write
renews the lease on the board to ``t0 + interval x miss - margin`` (margin: two intervals, at
least 0.35 s), where ``t0`` is the monotonic time *before* the write was sent. Another node can
only declare this one dead after watching its beat stand still for ``interval x miss`` on its
own clock, and it cannot have seen this beat before ``t0``; so when the beats stop, this
node's runs (which watch the lease, see :mod:`fabricjobs.worker.process`) end themselves at least
the margin before anyone may take their jobs over. With the defaults (5 s x 12) the lease is
50 s and the margin 10 s.

While the lease is out the node is *fenced*: it claims nothing and its runs are ended. When a
write succeeds again the lease gets a new *generation*: runs started under the old one (which
another node may have taken over meanwhile) end, and the node claims again.

A node also watches its own row: if another instance wrote it since (the same name started
elsewhere), the older of the two stops.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from typing import Callable

from .. import __version__
from ..clock import Clock
from ..errors import StoreError
from ..model import NodeState
from ..worker.board import Board
from ..store.base import JobStore, NodeRow

log = logging.getLogger("fabricjobs.node.heartbeat")

_QUIET_SPACING = 0.1  # seconds from the last write to a publication of tasks after a quiet spell
_CHURN_SPACING = 1.0  # ... while the tasks keep changing
_PROMPT_AGE = 0.1  # ... but a run going this long that PS does not show yet is published
_PROMPT_SPACING = 0.2  # ... this long after the last write at most, churn or not


def lease_seconds(interval: float, miss: int) -> float:
    """How long a run outlives the last successful beat: the dead threshold less a margin of
    two intervals (at least 0.35 s: a run whose lease is gone is ended within 0.2 s, see worker/process.py)."""
    return interval * miss - max(2 * interval, 0.35)


class Heartbeat:
    def __init__(
        self,
        store: JobStore,
        board: Board,
        clock: Clock,
        *,
        name: str,
        dc: str,
        interval: float,
        miss: int,
        info: Callable[[], dict],
        tasks: Callable[[], list[dict]],
        running: Callable[[], int],
        on_fenced: Callable[[], None],
        on_recovered: Callable[[], None],
        on_lapse: Callable[[int], None],
        on_displaced: Callable[[NodeRow], None],
        poked: threading.Event | None = None,
    ) -> None:
        """``poked``: set when the running tasks changed (Signals.tasks_changed): they are
        published soon (see :meth:`_publish_at`)."""
        self.store = store
        self.board = board
        self.clock = clock
        self.name = name
        self.dc = dc
        self.interval = interval
        self.miss = miss
        self.lease = lease_seconds(interval, miss)
        # One beat's store requests give up after an interval: a request stuck on one
        # unresponsive server (a paused Cassandra coordinator) would otherwise use up the
        # whole lease, while the next beat may well reach another one.
        self._timeout = max(interval, 0.25)
        self.incarnation = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.started = clock.now()
        self.beat = 0
        self._info = info
        self._tasks = tasks
        self._running = running
        self._on_fenced = on_fenced
        self._on_recovered = on_recovered
        self._on_lapse = on_lapse
        self._on_displaced = on_displaced
        self._wake = poked or threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.fenced = False
        self._failing = False
        self._last_write = 0.0
        self._last_publish = float("-inf")  # when changed tasks were last published between beats
        self._publish: float | None = None  # when the changed tasks are to be published
        self._shown: frozenset[tuple] = frozenset()  # the (task, epoch) of the runs the last write published

    def row(self, state: NodeState = NodeState.RUNNING) -> NodeRow:
        info = dict(self._info())
        info.update({"heartbeat_ms": int(self.interval * 1000), "miss": self.miss})
        tasks = self._tasks()
        self._shown = frozenset((t.get("task"), t.get("epoch")) for t in tasks)
        return NodeRow(
            name=self.name, incarnation=self.incarnation, dc=self.dc, host=self.host, pid=os.getpid(),
            started=self.started, version=__version__, beat=self.beat, state=state,
            running=self._running(), info=json.dumps(info, separators=(",", ":")),
            tasks=json.dumps(tasks, separators=(",", ":"), ensure_ascii=False),
        )

    def beat_once(self, state: NodeState = NodeState.RUNNING, patient: bool = False) -> bool:
        """Write the row now; renew the lease if the write succeeded. ``patient``: wait the
        store's own request timeout, not one beat's, fence nothing on failure, and raise the
        store's error (the first beat at start-up, which has no lease to protect yet: a store
        slow to answer one write must not stop the node, and its caller decides whether to
        try again)."""
        with self._lock:
            self.beat += 1
            t0 = self.clock.monotonic()
            try:
                if self.beat > 1 and self._displaced():
                    return False
                self.store.write_node(self.row(state), timeout=None if patient else self._timeout)
                # Judge a lapse by the time the write came back: a lease that ran out while the
                # write was slow still ended this node's runs, so the generation must go up.
                t1 = self.clock.monotonic()
                lapsed = self.board.set_lease(t0 + self.lease, t1) if state is NodeState.RUNNING else False
            except Exception as exc:  # the store may fail in any way; the lease decides what follows
                if patient and isinstance(exc, StoreError):  # at start-up: no lease yet, no run to fence
                    raise
                if not self._failing:
                    log.warning("heartbeat of %s failed: %s", self.name, exc)
                self._failing = True
                if not patient:
                    self._check_fence()
                return False
            self._last_write = t0
            if self._failing:
                log.warning("heartbeat of %s works again", self.name)
            self._failing = False
            if lapsed:
                log.warning("%s renewed its lease after it had run out: runs started before end now", self.name)
                self._on_lapse(self.board.generation())
            if self.fenced:
                self.fenced = False
                log.warning("%s renewed its lease; claiming again", self.name)
                self._on_recovered()
            return True

    def _displaced(self) -> bool:
        """Another instance with this name wrote the row after this one started: the older
        instance stops (two nodes with one name would each think the other's jobs are theirs)."""
        row = self.store.node(self.name, timeout=self._timeout)
        if row is None or row.incarnation == self.incarnation or row.state == NodeState.STOPPED:
            return False
        if row.started > self.started or (row.started == self.started and row.incarnation > self.incarnation):
            log.error("node %s was started again elsewhere (pid %s on %s): this instance stops", self.name, row.pid, row.host)
            self._on_displaced(row)
            return True
        return False

    def lease_valid(self) -> bool:
        return self.board.lease_valid(self.clock.monotonic())

    def _check_fence(self) -> None:
        if not self.fenced and not self.lease_valid():
            self.fenced = True
            log.error("%s could not renew its lease for %.1f s: ending its runs and claiming nothing (self-fencing)",
                      self.name, self.lease)
            self._on_fenced()

    def poke(self) -> None:
        """Publish soon (tasks changed; see :meth:`_publish_at`), never blocking the caller."""
        self._wake.set()

    def _publish_at(self, now: float) -> float:
        """When to publish tasks that changed now. A change after a quiet spell goes out at
        once (at most 100 ms after the last write), so PS shows a job that just started; while
        the tasks keep changing, at most one write a second. Each write takes the store's write
        lock: on one SQLite file, four busy nodes publishing every 100 ms made 40 % of all write
        transactions, and each node's claims and outcomes queued behind its own
        (docs/benchmarks.md)."""
        churning = now - self._last_publish < _CHURN_SPACING
        return self._last_write + (_CHURN_SPACING if churning else _QUIET_SPACING)

    def _sooner(self, now: float) -> float | None:
        """A publication held back by churn, brought forward when a run PS does not show yet
        has gone on for _PROMPT_AGE: PS shows a run within about 0.3 s of its start, while the
        many short runs of a busy node (over before they would be shown) still cost one write a
        second at most."""
        if self._publish is None or self._publish <= now:
            return self._publish
        if any(t.get("elapsed_ms", 0) >= _PROMPT_AGE * 1000 and (t.get("task"), t.get("epoch")) not in self._shown
               for t in self._tasks()):
            return min(self._publish, max(now, self._last_write + _PROMPT_SPACING))
        return self._publish

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="Heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_beat = self.clock.monotonic() + self.interval
        while not self._stop.is_set():
            try:
                next_beat = self._tick(next_beat)
            except Exception:  # never let the heartbeat thread die: the lease would just run out
                log.exception("heartbeat loop error (continuing)")
                self._stop.wait(min(self.interval, 0.5))

    def _tick(self, next_beat: float) -> float:
        wake_at = next_beat if self._publish is None else min(next_beat, self._publish)
        poked = self._wake.wait(max(0.0, min(wake_at - self.clock.monotonic(), 0.05)))
        if self._stop.is_set():
            return next_beat
        self._check_fence()
        now = self.clock.monotonic()
        if poked:
            self._wake.clear()
            if self._publish is None:
                self._publish = self._publish_at(now)
        self._publish = self._sooner(now)
        if now >= next_beat:
            self._publish = None  # the beat publishes them
            self.beat_once()
            return now + self.interval
        if self._publish is not None and now >= self._publish:
            self._publish = None
            self._last_publish = now
            self.beat_once()
        return next_beat

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
