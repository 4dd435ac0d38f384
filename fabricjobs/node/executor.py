"""Runs on this node: start them on workers, collect outcomes, write post-execution.

The collector thread waits on every worker's pipe and turns each finished run into an
outcome; the node's loop writes all outcomes that are ready in one ``cas_many`` (group
commit), in the same store transaction as the claims that refill the freed slots (see
:meth:`Executor.holding_starts`). Every write is fenced: it is conditioned on the (status,
epoch, worker_id, revision) this node holds, and a write that loses is decided again from
the current row. If the row is no longer ours (another node took it over), the run's
bookkeeping stops there and that is logged.

Runs of jobs known to be short (their last runs each took well under a millisecond) that are
started together go to one worker as a *train*: one message instead of one per run, and one
process woken. The worker runs them in order and reports each as it ends, so if it is killed
the node knows which ran; the ones it never reached are released (WAITING, no try counted).

A pool slot is a run going on at once (K2JOBS_POOL_SIZE of them). A train runs one run at a
time, so besides the runs that hold slots it may carry *passengers*: runs of known-short jobs
claimed beyond the free slots (up to TRAIN_RUNS - 1 per slot-holding short run of the same
claim batch), each of which takes over a slot when a train-mate that holds one is done. That
is what lets a burst of short fires larger than the pool start on time (a hundred fires of a
second on 25 slots: trains of four, not four rounds of claims), and what lets one store
transaction carry more runs. A passenger sent back by its worker (the run ahead of it is
taking long) has no slot to run in, so it is given back to the store (WAITING, no try
counted); runs that hold slots are sent to other workers at once, as before.
"""

from __future__ import annotations

import collections
import itertools
import logging
import random
import selectors
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Callable, Iterator

from ..clock import Clock
from ..errors import FabricJobsError
from ..jobs.board import TRAIN_RUNS
from ..jobs.registry import JobCatalog
from ..jobs.protocol import (ANSWER as LINK_ANSWER, BOUNCED, DONE, ERROR, INTERRUPTED, KILLED, LEASE_LOST,
                              NOT_BEGUN, OK, REQUEST as LINK_REQUEST, SPAWNED, Outcome, RunSpec)
from ..jobs.runner import clean_text
from ..model import Job, JobKey, JobType, Status, advance
from ..store.base import JobStore
from ..logs import job_extra
from .decisions import RELEASED, RunFacts, after_run, run_record
from .workers import Worker, WorkerPool

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger("fabricjobs.node.executor")

_REDECIDE = 20
SHORT_RUN = 0.001  # seconds: a job whose runs typically take less than this may ride a train
_SHORT_SEEN = 3  # ... once this many of its runs have been seen
_SHORT_WINDOW = 9  # its last runs, whose median is "typically" (one run preempted on a busy host does not count)
_NOT_STARTED = "not started: the worker of its train ended before reaching it"
_NO_ROOM = "not started: no room on a train (given back)"


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


class Executor:
    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        pool: WorkerPool,
        catalog: JobCatalog,
        *,
        me: str,
        max_tries: int,
        retry_delay: float,
        output_max: int,
        log_max: int,
        zone,
        on_scheduled: Callable[[Job], None],
        on_freed: Callable[[], None],
        on_tasks_changed: Callable[[], None],
        on_final: Callable[[Job], None] = lambda row: None,
        on_outcome: Callable[[], None] = lambda: None,
        on_dispatch: Callable[[JobKey, datetime | None], None] = lambda key, due: None,
        answer_listener: Callable[[Job, str, tuple], object] | None = None,
    ) -> None:
        self.store = store
        self.answer_listener = answer_listener  # a listener run's store requests (listener_requests.py)
        self.clock = clock
        self.pool = pool
        self.catalog = catalog
        self.me = me
        self.max_tries = max_tries
        self.retry_delay = timedelta(seconds=retry_delay)
        self.output_max = output_max
        self.log_max = log_max
        self.zone = zone
        self.on_scheduled = on_scheduled
        self.on_freed = on_freed
        self.on_tasks_changed = on_tasks_changed
        self.on_final = on_final
        self.on_outcome = on_outcome  # an outcome is ready to be written (wakes the node loop)
        self.on_dispatch = on_dispatch  # a run reached its worker (the scheduler times its fires)
        self._lock = threading.RLock()
        self._runs: dict[int, Run] = {}
        self._slots: dict[str, int] = {}  # pool -> runs holding a slot of it
        self._by_key: dict[JobKey, Run] = {}
        self._tasks = itertools.count(random.randrange(10_000, 60_000))
        self._durations: dict[tuple[str, str], collections.deque[float]] = {}  # (type, name) -> last runs' seconds
        self._short: set[tuple[str, str]] = set()  # the (type, name)s known to be short now
        self._pending: list[tuple[Run, Outcome]] = []
        self._bounced: list[Run] = []  # sent back from a train; launched again by the node's loop
        self.retry_at: float | None = None  # monotonic: pending outcomes wait for a failing store
        self._held: list[Run] | None = None
        self._holder: int | None = None  # the thread whose starts are held
        self._held_in_transaction = True  # ... until the transaction commits (else: launch_held)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector: selectors.BaseSelector | None = None  # used by the collector thread only
        self._stop = False
        self._thread: threading.Thread | None = None
        self.shutting_down = False
        self._uncommitted: list | None = None  # outcomes written in an open transaction (holding_starts)
        self.metrics: Metrics | None = None  # set by the node

    # -- queries ---------------------------------------------------------------------------------

    def running(self, pool: str | None = None) -> int:
        """Runs this node has (passengers waiting on a train included)."""
        with self._lock:
            if pool is None:
                return len(self._runs)
            return sum(1 for r in self._runs.values() if r.pool == pool)

    def slots_used(self, pool: str | None = None) -> int:
        """Pool slots taken: what claims are limited by (passengers hold none)."""
        with self._lock:
            return sum(self._slots.values()) if pool is None else self._slots.get(pool, 0)

    def per_pool(self) -> dict[str, int]:
        """Slots taken per affinity pool (what peers compare with the recommended counts)."""
        with self._lock:
            return {pool: n for pool, n in self._slots.items() if n}

    def is_short(self, row: Job) -> bool:
        """Whether runs of ``row``'s job are known to be short (they may ride on a train)."""
        return (row.key.type, row.key.name) in self._short

    def run_for(self, key: JobKey) -> Run | None:
        with self._lock:
            return self._by_key.get(key)

    def runs(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def tasks(self) -> list[dict]:
        """What PS shows: one entry per run, elapsed time measured here (no clock comparison)."""
        now = self.clock.monotonic()
        with self._lock:
            runs = list(self._runs.values())
        return [
            {
                "task": r.task,
                "thread": (r.worker.child_pid or r.worker.pid) if r.worker else None,
                "type": "JOB",
                "description": f"{_type_label(r.row.type)} - {r.row.name}",
                "key": str(r.key),
                "epoch": r.facts.epoch,
                "elapsed_ms": int((now - r.started_mono) * 1000),
            }
            for r in sorted(runs, key=lambda r: r.task)
        ]

    # -- starting and ending runs -------------------------------------------------------------------

    def start(self, row: Job, pool: str, exceptional: bool, generation: int, passenger: bool = False) -> Run:
        """Start a run of ``row``, which this node has just claimed (status IN_PROCESS, ours)
        under lease ``generation``. Inside :meth:`holding_starts` the run counts against its
        pool at once but reaches a worker only once the claim is committed. A ``passenger``
        (a known-short run claimed beyond the free slots) must be started in the same held
        batch as slot-holding short runs of its pool: it rides on one of their trains."""
        run = Run(
            task=next(self._tasks),
            row=row,
            facts=RunFacts(self.me, row.epoch, row.next_run or row.start_time or self.clock.now(),
                           row.start_time or self.clock.now()),
            pool=pool,
            exceptional=exceptional,
            generation=generation,
            started_mono=self.clock.monotonic(),
            holds_slot=not passenger,
        )
        with self._lock:
            self._runs[run.task] = run
            self._by_key[run.key] = run
            if run.holds_slot:
                self._slots[pool] = self._slots.get(pool, 0) + 1
        if self._held is not None and self._holder == threading.get_ident():
            self._held.append(run)
        else:
            self._launch(run)
        return run

    @contextmanager
    def holding_starts(self, in_transaction: bool = True) -> Iterator[None]:
        """Hold the runs started in this block until it ends: wrapped around a store
        transaction that claims rows, no run may begin before its claim is committed. If the
        block fails and the store rolled the claims back, the held runs are dropped (their rows
        are still WAITING); a store that commits each write by itself keeps them, so they run,
        as do those of a block that is not one transaction (``in_transaction=False``: a full
        pass, held so that the runs it claims leave together, short ones in trains).
        Outcomes written in such a transaction count as written only once it committed: if the
        COMMIT fails (a full disk), they go back to the queue and are written again, instead
        of their runs being forgotten with their rows still IN_PROCESS (a takeover then ran the
        job a second time)."""
        self._held, self._holder, self._held_in_transaction = [], threading.get_ident(), in_transaction
        self._uncommitted = [] if in_transaction and self.store.groups_writes else None
        try:
            yield
        except BaseException:
            held, self._held, self._holder = self._held, None, None
            uncommitted, self._uncommitted = self._uncommitted or [], None
            if uncommitted:
                log.warning("the write of %d outcome(s) was rolled back; writing them again", len(uncommitted))
                with self._lock:
                    self._pending.extend((run, outcome) for run, outcome, _row, _result in uncommitted)
                self.retry_at = self.clock.monotonic() + 0.2
            rolled_back = in_transaction and self.store.groups_writes
            if rolled_back:
                for run in held:
                    log.warning("claim of '%s' was rolled back; not started", run.key)
                    with self._lock:
                        self._forget(run)
                if held:
                    self.on_freed()
            else:
                self._launch(*held)  # together: passengers ride with their slot holders
            raise
        held, self._held, self._holder = self._held, None, None
        uncommitted, self._uncommitted = self._uncommitted or [], None
        for run, outcome, row, result in uncommitted:
            self._applied(run, outcome, row, result)
        self._launch(*held)

    def launch_held(self) -> None:
        """Inside ``holding_starts(in_transaction=False)``, on its thread: hand the runs held
        so far to workers now. Their claims are committed already (each write commits by
        itself); a full pass calls this after each batch of claims, so that a run claimed early
        in a long pass (a due fire) does not wait for the rest of the pass."""
        if self._held and self._holder == threading.get_ident() and not self._held_in_transaction:
            held, self._held = self._held, []
            self._launch(*held)

    def _launch(self, *runs: Run) -> None:
        """Hand claimed runs to workers (short ones in trains). If the lease lapsed since the
        claim, a run never starts: another node may already have the job."""
        ready = []
        for run in runs:
            if not self.pool.board.lease_valid(None, run.generation):
                self._finish_later(run, Outcome(LEASE_LOST, error="not started: this node's lease ran out since the claim"))
            elif run.end_reason is not None:  # stopped, killed or given up before it reached a worker
                self._finish_later(run, self._explain(run, Outcome(INTERRUPTED, error=NOT_BEGUN)))
            else:
                ready.append(run)
        for train in self._trains(ready):
            try:
                self._dispatch(train)
            except Exception as exc:  # cannot start a worker: the runs fail like any other
                log.exception("could not start %s on a worker", train[0].key)
                for run in train:
                    if run.outcome is None:  # (one its worker reported before dying is done)
                        self._finish_later(run, Outcome(ERROR, error=f"could not start a worker: {exc}"))
        if runs:
            self.on_tasks_changed()

    def _trains(self, runs: list[Run]) -> list[list[Run]]:
        """Each run alone, except runs of known-short jobs: those of one pool go in trains of
        up to TRAIN_RUNS, at least 2 (two workers start at once) and no more than they hold
        slots. Cut by start time (a prepared fire's is its due time), each train gets slot
        holders and passengers fill it up, and runs in start-time order. A passenger with no
        room left (not expected: claims leave it room) is given back."""
        alone: list[list[Run]] = []
        short: dict[str, list[Run]] = {}
        for r in runs:
            if not r.holds_slot or self.is_short(r.row):
                short.setdefault(r.pool, []).append(r)
            else:
                alone.append([r])
        trains = alone
        for group in short.values():
            # By start time (a prepared fire's is its due time): a train runs in order, so a
            # run must not wait behind one due later (fires of a lead of up to 1 s mix here).
            group.sort(key=lambda r: r.facts.started)
            holders = [r for r in group if r.holds_slot]
            riders = [r for r in group if not r.holds_slot]
            # One run goes alone; more: at least two trains, as few as hold TRAIN_RUNS each.
            count = len(holders) if len(group) < 2 else min(len(holders), max(2, -(-len(group) // TRAIN_RUNS)))
            cars = _chunks(holders, count)
            size = min(TRAIN_RUNS, -(-len(group) // count)) if count else 0
            at = 0
            for car in cars:  # passengers fill the cars up to an even size, in claim order
                take = max(0, size - len(car))
                car.extend(riders[at:at + take])
                at += take
            for r in riders[at:]:
                self._finish_later(r, Outcome(RELEASED, error=_NO_ROOM))
            for car in cars:
                car.sort(key=lambda r: r.facts.started)
            trains.extend(cars)
        return trains

    def _observe(self, run: Run, outcome: Outcome) -> None:
        """Remember how long this job's last runs took."""
        key = (run.row.type, run.row.name)
        if len(self._durations) > 10_000 and key not in self._durations:
            self._durations.clear()  # bounded: many one-off names
            self._short.clear()
        self._learn(key, [outcome.elapsed])

    def _learn(self, key: tuple[str, str], elapsed: list[float]) -> None:
        last = self._durations.get(key)
        if last is None:
            last = self._durations[key] = collections.deque(maxlen=_SHORT_WINDOW)
        last.extend(elapsed)
        if key[0] == JobType.USER_JOB and len(last) >= _SHORT_SEEN and sorted(last)[len(last) // 2] < SHORT_RUN:
            self._short.add(key)
        else:
            self._short.discard(key)

    def _dispatch(self, train: list[Run]) -> None:
        for attempt in range(3):
            worker = self.pool.acquire()
            now = self.clock.now()
            for run in train:  # before the send: its "done" may come back at once
                run.worker = worker
                run.train = train
            try:
                specs = [self._spec(run, worker, now) for run in train]
                self.pool.start(worker, specs)
            except BaseException as exc:
                with self._lock:  # the collector may be handling this worker's death right now
                    worker.tasks = []
                    for run in train:
                        if run.worker is worker:
                            run.worker = None
                    train = [r for r in train if r.outcome is None]  # the rest it already ended
                if not train:
                    return
                if isinstance(exc, (OSError, ValueError)):
                    self.pool.forget(worker)  # it died while idle; take another
                    if attempt < 2:
                        continue
                raise
            for run in train:
                if self.metrics is not None and run.facts.due is not None:
                    self.metrics.fire_lag(max((now - run.facts.due).total_seconds(), 0.0))
                self.on_dispatch(run.key, run.facts.due)
            self._wake_collector()
            return

    def _spec(self, run: Run, worker: Worker, now: datetime) -> RunSpec:
        listener = run.row.type == JobType.INTERFACE_LISTENER
        ahead = run.facts.started > now  # a fire prepared before its due time
        return RunSpec(
            run.task, run.key, run.facts.epoch, self.me, run.row.arguments, worker.slot, self.output_max,
            self.catalog, run.generation, self.log_max,
            job=run.row if listener else None,
            not_before=run.facts.started.timestamp() if ahead else None,
            due=run.facts.due.timestamp() if run.facts.due is not None else None,
        )

    def abort(self, run: Run, reason: EndReason, grace: float, note: str = "") -> None:
        """Ask a run to end (STOPJOB, RESTARTJOB, give-up, shutdown); kill it after ``grace``."""
        with self._lock:
            if run.end_reason is None or run.end_reason == EndReason.RELEASE:
                run.end_reason = reason
                run.end_note = note
            if run.stop_deadline is None:
                run.stop_deadline = self.clock.monotonic() + grace
            worker = run.worker
        if worker is not None:
            self.pool.abort(worker, run.task)

    def kill(self, run: Run, reason: EndReason, note: str) -> None:
        """End a run at once (KILL, an expired grace period, a lost lease). A run still queued
        on a train is skipped rather than its worker killed (that would end the run ahead of
        it); if it began meanwhile, it is killed when a short grace runs out."""
        with self._lock:
            if run.end_reason in (None, EndReason.RELEASE, EndReason.STOP, EndReason.RESTART, EndReason.SHUTDOWN):
                if reason in (EndReason.KILL, EndReason.LEASE) or run.end_reason is None:
                    run.end_reason = reason
                    run.end_note = note
            worker = run.worker
            tasks = list(worker.tasks) if worker is not None else []
            if run.task not in tasks:
                return  # not on a worker (yet, or any more): nothing to kill
            queued = tasks[0] != run.task
            if queued:
                run.stop_deadline = self.clock.monotonic() + 0.2
        assert worker is not None  # it holds the run's task
        if queued:
            self.pool.abort(worker, run.task)
        else:
            worker.killed_for = run.task
            self.pool.kill(worker)

    def end_generation(self, generation: int) -> None:
        """The lease lapsed and was renewed: end every run claimed under an older generation."""
        for run in self.runs():
            if run.generation < generation and run.outcome is None:
                log.warning("'%s' was claimed before this node's lease lapsed: ending it", run.key)
                self.kill(run, EndReason.LEASE, "run ended: this node's lease lapsed while it ran")

    def enforce_deadlines(self) -> float | None:
        """Kill runs whose stop grace ran out; return the next deadline (monotonic) if any."""
        now = self.clock.monotonic()
        nxt = None
        for run in self.runs():
            if run.stop_deadline is None or run.outcome is not None:
                continue
            if now >= run.stop_deadline:
                log.warning("'%s' did not end within its grace period; killing it", run.key)
                run.stop_deadline = None
                self.kill(run, run.end_reason or EndReason.STOP, "killed after the stop grace period")
            elif nxt is None or run.stop_deadline < nxt:
                nxt = run.stop_deadline
        return nxt

    # -- the collector thread ----------------------------------------------------------------------

    def start_collector(self) -> None:
        self._thread = threading.Thread(target=self._collect_loop, name="JobExecutor", daemon=True)
        self._thread.start()

    def stop_collector(self) -> None:
        self._stop = True
        self._wake_collector()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _wake_collector(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def _collect_loop(self) -> None:
        while not self._stop:
            try:
                self._collect_once(0.5)
            except Exception:
                log.exception("executor loop error (continuing)")
                time.sleep(0.05)

    def _watched(self) -> selectors.BaseSelector:
        """The selector over the wake-up socket and every worker's pipe, kept from one wait to
        the next (``multiprocessing.connection.wait`` builds one per call: a registration per
        worker each time a run ends)."""
        if self._selector is None:
            self._selector = selectors.DefaultSelector()
            self._selector.register(self._wake_r, selectors.EVENT_READ)
        return self._selector

    def _collect_once(self, timeout: float) -> None:
        conns = self.pool.connections()
        selector = self._watched()
        watched = set()
        for key in list(selector.get_map().values()):
            if key.fileobj is not self._wake_r and key.fileobj not in conns:
                selector.unregister(key.fd)  # a worker forgotten (its pipe is closed: by number)
            else:
                watched.add(key.fileobj)
        for conn in conns:
            if conn not in watched:
                try:
                    selector.register(conn, selectors.EVENT_READ)
                except (OSError, ValueError):  # closed meanwhile by the loop: gone from the pool next time
                    pass
        ready = [key.fileobj for key, _ in selector.select(timeout)]
        for obj in ready:
            if obj is self._wake_r:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                continue
            pipe: Connection = obj  # type: ignore[assignment]  # only the wake socket and worker pipes are registered
            worker = conns[pipe]
            try:
                while pipe.poll():
                    self._on_message(worker, pipe.recv())
            except (EOFError, OSError):
                self._on_worker_death(worker)
            except Exception:  # a garbled message from one worker: drop that worker only
                log.exception("bad message from worker %s; replacing it", worker.slot)
                self.pool.kill(worker)
                self._on_worker_death(worker)

    def _on_link_request(self, worker: Worker, run: Run | None, op: str, args: tuple) -> None:
        """Answer a listener run's store request (jobs/node_link.py); anything else is refused."""
        value: object
        if run is None or run.worker is not worker or run.key.type != JobType.INTERFACE_LISTENER \
                or self.answer_listener is None:
            ok, value = False, "store requests are answered for a listener run on this worker only"
        else:
            try:
                ok, value = True, self.answer_listener(run.row, op, args)
            except Exception as exc:  # the listener's run reports it; the node goes on
                log.warning("store request %s of listener %s failed: %s", op, run.key, exc,
                            extra=job_extra(run.key, run.facts.epoch))
                ok, value = False, str(exc) if isinstance(exc, FabricJobsError) else f"{type(exc).__name__}: {exc}"
        with worker.send_lock:
            worker.conn.send((LINK_ANSWER, ok, value))

    def _on_message(self, worker: Worker, msg) -> None:
        kind = msg[0]
        if kind == BOUNCED:
            self._on_bounced(worker, msg[1], msg[2] if len(msg) > 2 else None)
            return
        task = msg[1]
        with self._lock:
            run = self._runs.get(task)
        if kind == LINK_REQUEST:
            self._on_link_request(worker, run, msg[2], msg[3])
            return
        if kind == SPAWNED:
            worker.child_pid = msg[2]
            if run is None or run.outcome is not None or (run.end_reason is not None and run.stop_deadline is None):
                self.pool.kill(worker)  # it was already being ended: its new process group too
            self.on_tasks_changed()
        elif kind == DONE:
            if run is not None:
                with self._lock:
                    if run.worker is worker:
                        run.worker = None  # stop and KILL must never reach the worker's next job
            self.pool.release(worker, task)
            if run is not None and run.outcome is None:
                if msg[2].kind in ("ok", "error"):  # it ran its course (not cut short, not skipped)
                    self._observe(run, msg[2])
                self._finish_later(run, self._explain(run, msg[2]))

    def _on_bounced(self, worker: Worker, tasks: list[int], slow: int | None) -> None:
        """A train's runs sent back unstarted (the run ahead of them is taking long): the node's
        loop gives each that holds a slot a worker of its own, passengers go back to the store,
        and the slow job is no longer taken for a short one."""
        with self._lock:
            ahead = self._runs.get(slow) if slow is not None else None
        if ahead is not None:
            key = (ahead.row.type, ahead.row.name)
            self._learn(key, [SHORT_RUN * 10] * _SHORT_WINDOW)  # short again only after most of a window of short runs
        for task in tasks:
            self.pool.release(worker, task)
            with self._lock:
                run = self._runs.get(task)
                if run is None or run.outcome is not None or run.worker is not worker:
                    continue
                run.worker = None
                if run.holds_slot and ahead is not None and not ahead.holds_slot and ahead.outcome is None:
                    # The run going on ahead is a passenger (a train runs in due-time order): the
                    # slot stays with it, and this run, sent back, is the one without a slot.
                    _hand_slot(run, ahead)
                passenger = not run.holds_slot
                if not passenger:
                    self._bounced.append(run)
            if passenger:  # no slot to run in: back to the store for any node (no try counted)
                self._finish_later(run, self._explain(run, Outcome(RELEASED, error=_NOT_STARTED)))
        self.on_outcome()  # wake the node's loop

    def _on_worker_death(self, worker: Worker) -> None:
        tasks = list(worker.tasks)  # [0] was running; the rest of a train never began
        self.pool.kill_children(worker)  # whatever it started (a PROCESS job's group) goes with it
        self.pool.forget(worker)
        for i, task in enumerate(tasks):
            with self._lock:
                run = self._runs.get(task)
                if run is None or run.outcome is not None or run.worker is not worker:
                    continue
                if i == 0 and worker.killed_for in (None, task):
                    code = worker.process.exitcode
                    outcome = Outcome(ERROR, error=f"worker process died (exit code {code})")
                elif i == 0:  # killed to end a train-mate that had just ended: this one is innocent
                    outcome = Outcome(RELEASED, error="its worker was killed to end the run before it")
                else:
                    outcome = Outcome(RELEASED, error=_NOT_STARTED)
                self._finish_later(run, self._explain(run, outcome))

    def _explain(self, run: Run, outcome: Outcome) -> Outcome:
        """Say why a run ended when the node ended it (the worker only sees that it died)."""
        reason = run.end_reason
        if reason == EndReason.KILL and outcome.kind != OK:
            return Outcome(KILLED, error=run.end_note or "killed")
        if reason == EndReason.RELEASE and outcome.kind != OK:
            return Outcome(RELEASED, error=run.end_note)
        if reason == EndReason.SHUTDOWN and (outcome.kind != OK or run.key.type == JobType.INTERFACE_LISTENER):
            # SPEC 7.8: a clean shutdown is not a failed try. The run goes back to WAITING for
            # the same due time (RELEASED: no try counted) and runs again here or elsewhere; a
            # listener, which only ends when asked to, resumes after the restart.
            return Outcome(RELEASED, error=f"node {self.me} shut down during the run; it runs again (no try counted)")
        if reason in (EndReason.STOP, EndReason.RESTART) and outcome.kind != OK:
            return Outcome(INTERRUPTED, error=run.end_note or f"ended by {reason}")
        if reason == EndReason.LEASE and outcome.kind != OK:
            return Outcome(LEASE_LOST, error=outcome.error or "run ended: lease lost")
        return outcome

    def _finish_later(self, run: Run, outcome: Outcome) -> None:
        run.outcome = outcome
        run.ended = self.clock.now()
        with self._lock:
            self._pending.append((run, outcome))
        self.on_outcome()

    # -- post-execution ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Write every pending outcome: one cas_many for the batch, then each loser re-read and
        decided again. Nothing is dropped: an item that cannot be written now (the store is
        failing) goes back to the queue and is tried again after ``retry_at``. Called by the
        node's loop only (one writer of outcomes)."""
        if self.retry_at is not None:
            if self.clock.monotonic() < self.retry_at:
                return
            self.retry_at = None
        with self._lock:
            pending, self._pending = self._pending, []
            bounced, self._bounced = self._bounced, []
        if bounced:  # dispatching stays on this thread, where KILL and STOPJOB are decided too
            self._launch(*bounced)
        if not pending:
            return
        now = self.clock.now()
        todo: list[tuple[Run, Outcome, Job | None]] = []
        for run, outcome in pending:
            if self.shutting_down and outcome.kind == LEASE_LOST:
                # Without a lease nothing of ours may be written: the row is left as it is, and
                # whoever takes it over re-runs it.
                log.info("'%s' ended without a lease during shutdown; left for a re-run", run.key)
                self._done(run)
                continue
            todo.append((run, outcome, run.row))
        retry: list[tuple[Run, Outcome]] = []
        for _ in range(_REDECIDE):
            if not todo:
                break
            pairs, order, records = [], [], []
            for run, outcome, row in todo:
                ended = run.ended or now  # not the write time: a slow write must not skip fires
                try:
                    decision = self._decide(run, outcome, row, ended)
                except Exception:
                    log.exception("cannot decide the outcome of '%s'; trying again", run.key)
                    retry.append((run, outcome))
                    continue
                if decision is None:
                    self._lost(run, row)
                    continue
                assert row is not None  # a decision is made on a row only
                pairs.append((row, decision))
                order.append((run, outcome))
                records.append(run_record(run.facts, run.key, outcome, decision, ended, self.zone))
            results = self._write(pairs, records)
            todo = []
            for (run, outcome), _pair, record, res in zip(order, pairs, records, results):
                if res is None:
                    retry.append((run, outcome))
                elif res.applied:
                    if self._uncommitted is not None:  # in a transaction: applied once it commits
                        self._uncommitted.append((run, outcome, res.row, record.result))
                    else:
                        self._applied(run, outcome, res.row, record.result)
                else:
                    try:
                        todo.append((run, outcome, self.store.get(run.key)))
                    except Exception:
                        log.exception("cannot re-read '%s'; trying again", run.key)
                        retry.append((run, outcome))
        retry.extend((run, outcome) for run, outcome, _ in todo)
        if retry:
            with self._lock:
                self._pending.extend(retry)
            self.retry_at = self.clock.monotonic() + 0.2  # the store is failing or contended: pause

    def _write(self, pairs: list[tuple[Job, Job]], records: list) -> list:
        """cas_each: each applied outcome also recorded in the run history; None for a pair
        that could not be written at all (tried again later)."""
        return self.store.cas_each(
            pairs, records, lambda expected: log.exception("post-execution write of '%s' failed", expected.key))

    def _decide(self, run: Run, outcome: Outcome, row: Job | None, now: datetime) -> Job | None:
        decision = after_run(
            row, run.facts, outcome, now, max_tries=self.max_tries, retry_delay=self.retry_delay, zone=self.zone,
        )
        if decision is None:
            return None
        event, new = decision
        error = clean_text(new.error_msg, 4000)
        if error != new.error_msg:
            new = new.replace(error_msg=error)
        return advance(row, event, new)

    def _applied(self, run: Run, outcome: Outcome, row: Job, result: str) -> None:
        if outcome.kind != OK and row.status in (Status.WAITING, Status.FAILED):
            log.info("job %s failed (%s): %s", run.key, outcome.kind, outcome.error)
        if log.isEnabledFor(logging.INFO):  # the hot path: no log record built at WARNING
            log.info("job %s status was updated to %s.", run.key, row.status.value, extra=job_extra(run.key, run.facts.epoch))
        self._done(run)
        if self.metrics is not None:  # only once the run left the running gauge (_done)
            self.metrics.execution(run.row.type, result)
        if row.status is Status.SCHEDULED:
            self.on_scheduled(row)
        elif row.archived:
            self.on_final(row)

    def _lost(self, run: Run, row: Job | None) -> None:
        if row is None:
            log.warning("'%s' vanished while running; its outcome is dropped", run.key)
        else:
            log.warning(
                "'%s' is no longer ours (owner %s, epoch %s; ours was %s): outcome not written (fenced)",
                run.key, row.worker_id, row.epoch, run.facts.epoch, extra=job_extra(run.key, run.facts.epoch),
            )
        self._done(run)

    def _done(self, run: Run) -> None:
        with self._lock:
            self._forget(run)
        self.on_freed()
        self.on_tasks_changed()

    def _forget(self, run: Run) -> None:
        """Drop a run (caller holds the lock). Its slot goes to a train-mate still waiting
        without one, else back to the pool."""
        if self._runs.pop(run.task, None) is None:
            return
        if self._by_key.get(run.key) is run:
            del self._by_key[run.key]
        if run.holds_slot:
            heir = next((m for m in run.train or () if not m.holds_slot and m.task in self._runs), None)
            if heir is not None:
                _hand_slot(run, heir)
            else:
                run.holds_slot = False
                self._slots[run.pool] -= 1


def _hand_slot(holder: Run, heir: Run) -> None:
    """``heir`` (a train-mate, same pool) takes ``holder``'s slot (caller holds the lock); a
    slot beyond the recommended count stays one (exceptional: give-up may hand it back)."""
    holder.holds_slot, heir.holds_slot = False, True
    heir.exceptional = holder.exceptional


def _chunks(items: list, count: int) -> list[list]:
    """``items`` in ``count`` contiguous parts of sizes differing by at most one."""
    size, extra = divmod(len(items), count) if count else (0, 0)
    out, at = [], 0
    for i in range(count):
        n = size + (1 if i < extra else 0)
        out.append(items[at:at + n])
        at += n
    return out


def _type_label(job_type: str) -> str:
    return {"USER_JOB": "UserJob", "PROCESS": "ProcessJob"}.get(job_type, job_type.title())
