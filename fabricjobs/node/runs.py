"""The run table: the runs this node has, the pool slots they hold, and the one lock.

Every change to a :class:`Run` goes through the table, under its lock: the node's loop
(starts, stops, kills, outcome write-back), the collector thread (worker messages) and the
reconciler (give-up) all change runs, so none of them sets a run's fields by itself. The
table also queues what the node's loop does next with runs: the outcomes to write and the
runs a train sent back.

A pool slot is a run going on at once. A passenger on a train (trains.py) holds none until
a train-mate that holds one is done with it (:meth:`RunTable.forget`).
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from ..jobs.context import FailMode
from ..worker.protocol import INTERRUPTED, KILLED, LEASE_LOST, OK, Outcome, OutcomeKind
from ..model import Job, JobKey, JobType
from .decisions import RELEASED, RunFacts

if TYPE_CHECKING:
    from ..worker.pool import Worker


class EndReason(StrEnum):
    """Why the node is ending a run before it ends by itself."""

    STOP = "stop"  # STOPJOB
    RESTART = "restart"  # RESTARTJOB
    KILL = "kill"  # KILL
    RELEASE = "release"  # an exceptional run handed back to a node with room
    SHUTDOWN = "shutdown"  # the node is stopping
    LEASE = "lease"  # the node's lease lapsed, or another instance took its name


@dataclass(eq=False)
class Run:
    task: int
    row: Job  # the row as this node last wrote or read it
    facts: RunFacts
    pool: str  # the affinity limit this run counts against
    exceptional: bool
    generation: int  # the lease generation it was claimed under
    started_mono: float
    holds_slot: bool = True  # False: a passenger on a train, until a train-mate hands it its slot
    prepared: bool = False  # a fire claimed ahead of its due time to ride a train of such fires (trains.py)
    worker: Worker | None = None
    end_reason: EndReason | None = None
    end_note: str = ""
    stop_deadline: float | None = None
    give_up_at: datetime | None = None  # an exceptional run this node will hand back then
    outcome: Outcome | None = None
    ended: datetime | None = None  # when the outcome reached the node (the run's end time)
    train: list["Run"] | None = None  # the runs sent to its worker with it (itself included)

    @property
    def key(self) -> JobKey:
        return self.row.key


# What reconcile.py may change on a run through RunTable.update (the rest is the executor's).
_UPDATABLE = frozenset({"give_up_at", "facts"})


class RunTable:
    def __init__(self) -> None:
        self.lock = threading.RLock()  # held by callers for a step that reads and changes runs
        self._runs: dict[int, Run] = {}
        self._slots: dict[str, int] = {}  # pool -> runs holding a slot of it
        self._reserved: dict[str, int] = {}  # pool -> slots held for claims still being written
        self._by_key: dict[JobKey, Run] = {}
        self._tasks = itertools.count(random.randrange(10_000, 60_000))
        self.pending: list[tuple[Run, Outcome]] = []  # outcomes the node's loop writes next
        self.bounced: list[Run] = []  # sent back from a train; launched again by the node's loop

    # -- queries ---------------------------------------------------------------------------------

    def next_task(self) -> int:
        return next(self._tasks)

    def get(self, task: int) -> Run | None:
        with self.lock:
            return self._runs.get(task)

    def for_key(self, key: JobKey) -> Run | None:
        with self.lock:
            return self._by_key.get(key)

    def all(self) -> list[Run]:
        with self.lock:
            return list(self._runs.values())

    def running(self, pool: str | None = None) -> int:
        """Runs this node has (passengers waiting on a train included)."""
        with self.lock:
            if pool is None:
                return len(self._runs)
            return sum(1 for r in self._runs.values() if r.pool == pool)

    def slots_used(self, pool: str | None = None) -> int:
        """Pool slots taken, by runs and by claims still being written: what claims are limited
        by (passengers hold none)."""
        with self.lock:
            if pool is None:
                return sum(self._slots.values()) + sum(self._reserved.values())
            return self._slots.get(pool, 0) + self._reserved.get(pool, 0)

    def slots_running(self, pool: str) -> int:
        """Slots of ``pool`` held by runs (not by claims still being written): what this node
        has going on, which the give-back rule compares with the recommended count."""
        with self.lock:
            return self._slots.get(pool, 0)

    def slots_ahead(self, now: datetime) -> int:
        """Slots held by fires prepared ahead of their due time that are still waiting for it."""
        with self.lock:
            return sum(1 for r in self._runs.values() if r.holds_slot and r.outcome is None and r.facts.started > now)

    def per_pool(self) -> dict[str, int]:
        """Slots held by runs per affinity pool (what peers compare with the recommended
        counts): a claim still being written may not apply, so it is not counted."""
        with self.lock:
            return {pool: n for pool, n in self._slots.items() if n}

    # -- changes -----------------------------------------------------------------------------------

    def add(self, run: Run) -> None:
        with self.lock:
            self._runs[run.task] = run
            self._by_key[run.key] = run
            if run.holds_slot:
                self._slots[run.pool] = self._slots.get(run.pool, 0) + 1

    def reserve(self, pool: str, count: int = 1) -> None:
        """Hold a slot of ``pool`` for a claim whose write has not answered yet (a negative
        ``count`` lets it go): its run, if the claim applies, must find it free."""
        with self.lock:
            self._reserved[pool] = self._reserved.get(pool, 0) + count

    def forget(self, run: Run) -> None:
        """Drop a run. Its slot goes to a train-mate still waiting without one, else back to
        the pool."""
        with self.lock:
            if self._runs.pop(run.task, None) is None:
                return
            if self._by_key.get(run.key) is run:
                del self._by_key[run.key]
            if run.holds_slot:
                heir = next((m for m in run.train or () if not m.holds_slot and m.task in self._runs), None)
                if heir is not None:
                    hand_slot(run, heir)
                else:
                    run.holds_slot = False
                    self._slots[run.pool] -= 1
            # A train's runs all hold its list, itself included: a reference cycle per train,
            # which only the cyclic GC would free (its runs, rows and outcomes with it).
            run.train = None

    def update(self, run: Run, **changes) -> None:
        """Change fields of a run from outside the executor (reconcile.py's give-up: when to
        hand it back, and the hold its row gets then)."""
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise AttributeError(f"run fields not changed from outside the executor: {sorted(unknown)}")
        with self.lock:
            for name, value in changes.items():
                setattr(run, name, value)

    def finish(self, run: Run, outcome: Outcome, ended: datetime) -> None:
        """The run ended (or will never start): queue its outcome for the node's loop."""
        with self.lock:
            run.outcome = outcome
            run.ended = ended
            self.pending.append((run, outcome))

    def requeue(self, items: list[tuple[Run, Outcome]]) -> None:
        """Outcomes that could not be written now: the node's loop tries them again."""
        with self.lock:
            self.pending.extend(items)

    def take_queued(self) -> tuple[list[tuple[Run, Outcome]], list[Run]]:
        """The outcomes to write and the runs to launch again, taken together."""
        with self.lock:
            pending, self.pending = self.pending, []
            bounced, self.bounced = self.bounced, []
        return pending, bounced

    def assign(self, train: list[Run], worker: Worker) -> None:
        """A train is about to be sent to ``worker`` (before the send: its "done" may come back
        at once)."""
        with self.lock:
            for run in train:
                run.worker = worker
                run.train = train

    def recall(self, train: list[Run], worker: Worker) -> list[Run]:
        """The send of ``train`` to ``worker`` failed: take it off the worker, and return the
        runs of it not ended meanwhile (the collector may be handling the worker's death)."""
        with self.lock:
            worker.tasks = []
            for run in train:
                if run.worker is worker:
                    run.worker = None
            return [r for r in train if r.outcome is None]

    def detach(self, run: Run, worker: Worker) -> None:
        """``worker`` reported the run: stop and KILL must never reach the worker's next job."""
        with self.lock:
            if run.worker is worker:
                run.worker = None

    def send_back(self, run: Run, worker: Worker, ahead: Run | None) -> bool | None:
        """A run of ``worker``'s train sent back unstarted, ``ahead`` taking long: None if it
        is no longer on that worker; else whether it is a passenger (no slot to run in). A run
        that holds a slot is queued to be launched again."""
        with self.lock:
            if run.outcome is not None or run.worker is not worker:
                return None
            run.worker = None
            if run.holds_slot and ahead is not None and not ahead.holds_slot and ahead.outcome is None:
                # The run going on ahead is a passenger (a train runs in due-time order): the
                # slot stays with it, and this run, sent back, is the one without a slot.
                hand_slot(run, ahead)
            passenger = not run.holds_slot
            if not passenger:
                self.bounced.append(run)
            return passenger

    def ask_end(self, run: Run, reason: EndReason, note: str, deadline: float) -> Worker | None:
        """Record that the node ends ``run`` (kill it at ``deadline`` if it has not ended);
        return its worker, if it is on one."""
        with self.lock:
            # (STOPJOB after RESTARTJOB: the run ends as stopped, and its history line says so)
            if run.end_reason in (None, EndReason.RELEASE) or (run.end_reason, reason) == (EndReason.RESTART, EndReason.STOP):
                run.end_reason = reason
                run.end_note = note
            if run.stop_deadline is None:
                run.stop_deadline = deadline
            return run.worker

    def mark_kill(self, run: Run, reason: EndReason, note: str, skip_deadline: float) -> tuple[Worker, bool] | None:
        """Record that the node kills ``run``. Returns its worker and whether the run is still
        queued there (on a train: then it is skipped, and killed at ``skip_deadline`` if it
        began meanwhile), or None if it is on no worker."""
        with self.lock:
            if run.end_reason in (None, EndReason.RELEASE, EndReason.STOP, EndReason.RESTART, EndReason.SHUTDOWN):
                if reason in (EndReason.KILL, EndReason.LEASE) or run.end_reason is None:
                    run.end_reason = reason
                    run.end_note = note
            worker = run.worker
            tasks = list(worker.tasks) if worker is not None else []
            if worker is None or run.task not in tasks:
                return None  # not on a worker (yet, or any more): nothing to kill
            queued = tasks[0] != run.task
            if queued:
                run.stop_deadline = skip_deadline
        return worker, queued

    def clear_deadline(self, run: Run) -> None:
        with self.lock:
            run.stop_deadline = None


def hand_slot(holder: Run, heir: Run) -> None:
    """``heir`` (a train-mate, same pool) takes ``holder``'s slot (caller holds the lock); a
    slot beyond the recommended count stays one (exceptional: give-up may hand it back)."""
    holder.holds_slot, heir.holds_slot = False, True
    heir.exceptional = holder.exceptional


def explain(run: Run, outcome: Outcome, me: str) -> Outcome:
    """Say why a run ended when node ``me`` ended it (the worker only sees that it died). What
    the worker did report of the run stays: its log lines, exit code and time."""
    reason = run.end_reason

    def ended(kind: OutcomeKind, error: str) -> Outcome:
        return replace(outcome, kind=kind, error=error, output=None, mode=FailMode.RETRY_UNTIL_MAX)

    if reason == EndReason.KILL and outcome.kind != OK:
        return ended(KILLED, run.end_note or "killed")
    if reason == EndReason.RELEASE and outcome.kind != OK:
        return ended(RELEASED, run.end_note)
    if reason == EndReason.SHUTDOWN and (outcome.kind != OK or run.key.type == JobType.INTERFACE_LISTENER):
        # docs/guides/cluster.md: a clean shutdown is not a failed try. The run goes back to WAITING for
        # the same due time (RELEASED: no try counted) and runs again here or elsewhere; a
        # listener, which only ends when asked to, resumes after the restart.
        return ended(RELEASED, f"node {me} shut down during the run; it runs again (no try counted)")
    if reason in (EndReason.STOP, EndReason.RESTART) and outcome.kind != OK:
        return ended(INTERRUPTED, run.end_note or f"ended by {reason}")
    if reason == EndReason.LEASE and outcome.kind != OK:
        return ended(LEASE_LOST, outcome.error or "run ended: lease lost")
    return outcome
