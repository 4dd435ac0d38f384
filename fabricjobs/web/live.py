"""The console's shared view of the cluster: one bounded read of the store per interval, for
every browser that watches.

A thread of the web process reads the nodes, capped counts of the live jobs by status
(:meth:`~fabricjobs.store.base.JobStore.live_counts`, :data:`COUNT_CAP` each) and the runs
that ended since its last read every ``[web] CONSOLE_INTERVAL_SEC`` (slower, every
:data:`IDLE_INTERVAL_SEC`, while no browser has looked for a minute) and publishes a
:class:`Snapshot`. Browsers poll the snapshot, which costs the store nothing; ten browsers cost
what one does. None of it reads every live job: with 10,000 of them a read is what it is with
ten (docs/explanation/design-choices.md). The jobs table itself is a page read per request
(console_pages.py). The same pass samples the queue depth into a ring kept in memory
(:data:`QUEUE_SAMPLES` samples, an hour at the default interval) and feeds the plots the runs
that ended (runfeed.py). None of it outlives the process: a web process that restarts starts
the queue depth plot empty and reads the last hour's runs again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from ..cluster import NodeView, read_cluster
from ..errors import StoreError
from ..model import RUNNING_STATUSES, Status
from ..service import CommandService
from ..store.base import JobStore
from ..store.search import BLOCKED
from .runfeed import RunFeed

log = logging.getLogger("fabricjobs.web")

COUNT_CAP = 10_000  # live jobs counted per status, at most: more shows as "10,000+"
QUEUE_SAMPLES = 1800
IDLE_AFTER_SEC = 60.0
IDLE_INTERVAL_SEC = 15.0


@dataclass(frozen=True)
class Snapshot:
    """What every browser sees until the next read."""

    version: int = 0
    taken: datetime | None = None  # by the store's clock
    counts: dict[str, int] = field(default_factory=dict)  # live jobs per status, BLOCKED apart; above COUNT_CAP: more
    nodes: tuple[dict[str, Any], ...] = ()
    queue: tuple[tuple[datetime, int, int, int], ...] = ()  # (when, waiting, blocked, running)
    error: str = ""  # why the last read failed ("" when it did not)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # a running job's key -> its task


class LiveView:
    """The sampling thread and the snapshot it publishes."""

    def __init__(self, store: JobStore, service: Callable[[], CommandService], interval: float) -> None:
        self.store = store
        self.service = service
        self.interval = interval
        self.feed = RunFeed(store)
        self._snap = Snapshot()
        self._queue: deque[tuple[datetime, int, int, int]] = deque(maxlen=QUEUE_SAMPLES)
        self._changed = threading.Condition()
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._watched = 0.0
        self._published = 0.0  # monotonic time of the last snapshot
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.ticks = 0  # reads of the store made (the tests check browsers do not add any)

    # -- the thread -----------------------------------------------------------------------------

    def start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="console-view", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._poke.clear()  # a poke during this read is answered by it
            self.tick()
            idle = time.monotonic() - self._watched > IDLE_AFTER_SEC
            self._poke.wait(IDLE_INTERVAL_SEC if idle else self.interval)

    def snapshot(self) -> Snapshot:
        """The latest snapshot; after an idle spell, a fresh one (waits up to two intervals)."""
        self.start()
        self._watched = time.monotonic()
        snap = self._snap
        if snap.version == 0 or time.monotonic() - self._published > 2 * self.interval:
            if snap.version > 0:
                self._poke.set()  # idle: read now rather than at the end of the idle interval
            with self._changed:
                self._changed.wait_for(lambda: self._snap.version != snap.version, timeout=2 * self.interval + 1)
        return self._snap

    # -- one read -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Read the store once and publish what it showed; a failed read keeps the last rows
        and says why."""
        try:
            snap = self._read()
        except StoreError as exc:
            snap = _replace(self._snap, error=f"the store cannot be read: {exc}")
        except Exception as exc:  # a bug: the console says so, the log has the traceback
            log.error("the console's view of the cluster failed", exc_info=exc)
            snap = _replace(self._snap, error="reading the cluster failed; the web process's log says why")
        with self._changed:
            self._snap = _replace(snap, version=self._snap.version + 1)
            self._published = time.monotonic()
            self._changed.notify_all()

    def _read(self) -> Snapshot:
        self.ticks += 1
        now = self.store.store_time()
        nodes = read_cluster(self.store)
        counts = self.store.live_counts(COUNT_CAP)
        self.feed.update(now)
        running = sum(counts.get(s.value, 0) for s in RUNNING_STATUSES)
        self._queue.append((now, counts.get(Status.WAITING.value, 0), counts.get(BLOCKED, 0), running))
        node_rows = tuple(node_row(n) for n in nodes)
        return Snapshot(taken=now, counts=counts, nodes=node_rows, queue=tuple(self._queue), tasks=_tasks(node_rows))


def node_row(n: NodeView) -> dict[str, Any]:
    """A node as NODES shows it, with its capacity per affinity and its tasks (PS) as data."""
    running = n.running_by_affinity()
    capacity = [{"affinity": name, "running": int(running.get(name, 0)), "recommended": lim.recommended,
                 "absolute": lim.absolute} for name, lim in sorted(n.affinity.limits.items())]
    tasks = [{"task": t.get("task"), "key": t.get("key", ""), "epoch": t.get("epoch"), "job": task_job(t),
              "description": t.get("description", ""),
              "elapsed_ms": int(t.get("elapsed_ms", 0)) + int(n.age * 1000)} for t in n.tasks()]
    return {"node": n.name, "dc": n.row.dc, "host": n.row.host, "pid": n.row.pid, "state": n.state.value,
            "last_beat_s": round(n.age, 1) if n.age != float("inf") else None, "running": n.running,
            "capacity": capacity, "version": n.row.version, "started": iso(n.row.started), "tasks": tasks}


def task_job(task: dict[str, Any]) -> dict[str, str] | None:
    """The job a published task runs, in parts. Its key's text alone does not say where the
    name ends (a NAME or UID may hold '.': ``USER_JOB.v1.2.x``); the task's description does
    ("<type label> - <NAME>"). None if the two do not agree."""
    key, description = str(task.get("key") or ""), str(task.get("description") or "")
    type, _, rest = key.partition(".")
    name = description.partition(" - ")[2]
    if not type or not name or not rest.startswith(name + "."):
        return None
    return {"type": type, "name": name, "uid": rest[len(name) + 1:]}


def iso(value: Any) -> Any:
    """A time as ISO 8601 UTC with a Z (what the browser's Date reads); anything else as is."""
    if isinstance(value, datetime):
        value = value.replace(tzinfo=value.tzinfo or timezone.utc).astimezone(timezone.utc)
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return value


def _tasks(nodes: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    return {t["key"]: {"node": n["node"], "task": t["task"], "epoch": t.get("epoch"), "elapsed_ms": t["elapsed_ms"]}
            for n in nodes for t in n["tasks"] if t["key"]}


def _replace(snap: Snapshot, **changes: Any) -> Snapshot:
    import dataclasses

    return dataclasses.replace(snap, **changes)
