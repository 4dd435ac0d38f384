"""Runs on this node: start them on workers, end them when asked, and write their outcomes.

:class:`Executor` is the one object the rest of the node uses for runs; it is made of parts
with one job each:

* runs.py: the run table (runs, pool slots, the lock; every change to a run goes through it);
* trains.py: which runs share a worker (trains) and which rows ride beyond the free slots
  (passengers), planned by pure functions, and which jobs are known to be short;
* collector.py: the collector thread, which waits on every worker's pipe and turns each
  finished run into an outcome;
* endings.py: ending runs before they end by themselves (STOPJOB, KILL, grace periods, lost
  leases);
* writeback.py: the node's loop writes all outcomes that are ready in one ``cas_each``, before
  the claims that refill the freed slots.

What is left here is starting runs: held until their claim is committed, then handed to
workers, short ones in trains.

A passenger sent back by its worker (the run ahead of it is taking long) has no slot to run
in, so it is given back to the store (WAITING, no try counted); runs that hold slots are sent
to other workers at once.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Callable, Iterator

from .. import parallel
from ..clock import Clock
from ..worker.protocol import ERROR, INTERRUPTED, LEASE_LOST, NOT_BEGUN, OK, Outcome, RunSpec
from ..jobs.registry import JobCatalog
from ..model import Job, JobKey, JobType
from ..store.base import JobStore
from .collector import Collector
from .decisions import RELEASED, RunFacts
from .endings import Endings
from .runs import EndReason, Run, RunTable, explain
from .trains import ShortJobs, plan_trains
from ..worker.pool import Worker, WorkerPool
from .writeback import OutcomeWriter

if TYPE_CHECKING:
    from .metrics import Metrics

__all__ = ["EndReason", "Executor", "Run"]  # EndReason and Run: for node.py and reconcile.py

log = logging.getLogger("fabricjobs.node.executor")

_NO_ROOM = "not started: no room on a train (given back)"


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
        printed_max: int = 4 * 1024 * 1024,
        zone,
        on_scheduled: Callable[[Job], None],
        on_freed: Callable[[], None],
        on_tasks_changed: Callable[[], None],
        on_final: Callable[[Job], None] = lambda row: None,
        on_outcome: Callable[[], None] = lambda: None,
        on_dispatch: Callable[[JobKey, datetime | None], None] = lambda key, due: None,
        answer_listener: Callable[[Job, str, tuple], object] | None = None,
        table: RunTable | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.pool = pool
        self.catalog = catalog
        self.me = me
        self.output_max = output_max
        self.log_max = log_max
        self.printed_max = printed_max  # [jobs] MAX_OUTPUT_BYTES
        self.on_freed = on_freed
        self.on_tasks_changed = on_tasks_changed
        self.on_outcome = on_outcome  # an outcome is ready to be written (wakes the node loop)
        self.on_dispatch = on_dispatch  # a run reached its worker (the scheduler times its fires)
        self.table = table or RunTable()
        self.short_jobs = ShortJobs()
        self.collector = Collector(
            self.table, pool, self.short_jobs, finish=lambda run, outcome: self._finish_later(run, explain(run, outcome, me)),
            on_tasks_changed=on_tasks_changed, on_outcome=on_outcome, answer_listener=answer_listener, log_max=log_max,
        )
        self.endings = Endings(self.table, pool, clock)
        self.writer = OutcomeWriter(
            store, self.table, clock, max_tries=max_tries, retry_delay=retry_delay, zone=zone,
            on_scheduled=on_scheduled, on_final=on_final, on_freed=on_freed, on_tasks_changed=on_tasks_changed,
            on_answered=on_outcome, metrics=metrics, catalog=catalog,
        )
        self._held: list[Run] | None = None
        self._holder: int | None = None  # the thread whose starts are held
        self.metrics = metrics

    # -- what the node sets and reads ----------------------------------------------------------------

    @property
    def retry_at(self) -> float | None:
        """Monotonic: pending outcomes wait for a failing store until then."""
        return self.writer.retry_at

    @property
    def shutting_down(self) -> bool:
        return self.writer.shutting_down

    @shutting_down.setter
    def shutting_down(self, value: bool) -> None:
        self.writer.shutting_down = value

    # -- queries ---------------------------------------------------------------------------------

    def running(self, pool: str | None = None) -> int:
        """Runs this node has (passengers waiting on a train included)."""
        return self.table.running(pool)

    def slots_used(self, pool: str | None = None) -> int:
        """Pool slots taken: what claims are limited by (passengers hold none)."""
        return self.table.slots_used(pool)

    def slots_running(self, pool: str) -> int:
        """Slots of ``pool`` held by runs (claims still being written not counted)."""
        return self.table.slots_running(pool)

    def slots_ahead(self, now: datetime) -> int:
        """Slots held by prepared fires still waiting for their due time."""
        return self.table.slots_ahead(now)

    def per_pool(self) -> dict[str, int]:
        """Slots held by runs per affinity pool (what peers compare with the recommended counts)."""
        return self.table.per_pool()

    def reserve(self, pool: str, count: int = 1) -> None:
        """Hold (``count`` < 0: let go) a slot of ``pool`` for a claim still being written."""
        self.table.reserve(pool, count)

    def is_short(self, row: Job) -> bool:
        """Whether runs of ``row``'s job are known to be short (they may ride on a train)."""
        return self.short_jobs.is_short(row)

    def run_for(self, key: JobKey) -> Run | None:
        return self.table.for_key(key)

    def runs(self) -> list[Run]:
        return self.table.all()

    def update_run(self, run: Run, **changes) -> None:
        """Change a run's give-up time or facts (reconcile.py), under the run table's lock."""
        self.table.update(run, **changes)

    def tasks(self) -> list[dict]:
        """What PS shows: one entry per run, elapsed time measured here (no clock comparison)."""
        now = self.clock.monotonic()
        return [
            {
                "task": r.task,
                "thread": (r.worker.child_pid or r.worker.pid) if r.worker else None,
                "type": "JOB",
                "description": f"{_type_label(r.row.type)} - {r.row.name}",
                "key": str(r.key),
                "epoch": r.facts.epoch,
                "elapsed_ms": int((now - r.started_mono) * 1000),
                **self._progress(r),
            }
            for r in sorted(self.table.all(), key=lambda r: r.task)
        ]

    def _progress(self, run: Run) -> dict:
        """``progress``: [done, total] as the run last reported it (none reported: absent)."""
        reported = self.pool.board.progress(run.worker.slot, run.task) if run.worker else None
        return {"progress": [round(reported[0], 3), round(reported[1], 3)]} if reported else {}

    # -- starting runs -------------------------------------------------------------------------------

    def start(self, row: Job, pool: str, exceptional: bool, generation: int, passenger: bool = False,
              taken_over: bool = False, prepared: bool = False) -> Run:
        """Start a run of ``row``, which this node has just claimed (status IN_PROCESS, ours)
        under lease ``generation``. Inside :meth:`holding_starts` the run counts against its
        pool at once but reaches a worker with the rest of its batch of claims. A ``passenger``
        (a known-short run claimed beyond the free slots) must be started in the same held
        batch as slot-holding short runs of its pool: it rides on one of their trains. A run
        ``taken_over`` from a lost node is never probed (ShortJobs.lost). A ``prepared`` fire
        (claimed ahead of its due time to ride a train) rides only with such fires."""
        if taken_over:
            self.short_jobs.lost(row)
        run = Run(
            task=self.table.next_task(),
            row=row,
            facts=RunFacts(self.me, row.epoch, row.next_run or row.start_time or self.clock.now(),
                           row.start_time or self.clock.now(), schedule=(row.execution_interval, row.time_zone)),
            pool=pool,
            exceptional=exceptional,
            generation=generation,
            started_mono=self.clock.monotonic(),
            holds_slot=not passenger,
            prepared=prepared,
        )
        self.table.add(run)
        if self._held is not None and self._holder == threading.get_ident():
            self._held.append(run)
        else:
            self._launch(run)
        return run

    @contextmanager
    def holding_starts(self) -> Iterator[None]:
        """Hold the runs started in this block (a reconcile pass) until it ends or until
        :meth:`launch_held`, and hand them to workers together: passengers ride with the
        slot holders they were claimed with. Each claim has committed by itself before its run is
        started here; if the block fails, what it claimed is launched all the same."""
        self._held, self._holder = [], threading.get_ident()
        try:
            yield
        finally:
            held, self._held, self._holder = self._held or [], None, None
            self._launch(*held)

    def launch_held(self) -> None:
        """Inside ``holding_starts``, on its thread: hand the runs held so far to workers now
        (their claims are committed). A pass calls this after each batch of claims, so that a
        run claimed early in a long pass (a due fire) does not wait for the rest of the pass."""
        if self._held and self._holder == threading.get_ident():
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
                self._finish_later(run, explain(run, Outcome(INTERRUPTED, error=NOT_BEGUN), self.me))
            elif parallel.is_parent(run.row):  # its tasks are done: no user code, no worker
                self._finish_later(run, Outcome(OK, output=parallel.summary(self.store, run.row, self.output_max)))
            else:
                ready.append(run)
        trains, no_room = plan_trains(ready, self.short_jobs.is_short, self.short_jobs.is_new)
        for run in no_room:
            self._finish_later(run, Outcome(RELEASED, error=_NO_ROOM))
        for train in trains:
            try:
                self._dispatch(train)
            except Exception as exc:  # cannot start a worker: the runs fail like any other
                log.exception("could not start %s on a worker", train[0].key)
                for run in train:
                    if run.outcome is None:  # (one its worker reported before dying is done)
                        self._finish_later(run, Outcome(ERROR, error=f"could not start a worker: {exc}"))
        if runs:
            self.on_tasks_changed()

    def _dispatch(self, train: list[Run]) -> None:
        for attempt in range(3):
            worker = self.pool.acquire()
            now = self.clock.now()
            self.table.assign(train, worker)
            try:
                self.pool.start(worker, [self._spec(run, worker, now) for run in train])
            except BaseException as exc:
                train = self.table.recall(train, worker)  # the rest it already ended
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
            if not worker.watched:  # a new worker: the collector must watch its pipe from now on
                self.collector.wake()
            return

    def _spec(self, run: Run, worker: Worker, now: datetime) -> RunSpec:
        listener = run.row.type == JobType.INTERFACE_LISTENER
        ahead = run.facts.started > now  # a fire prepared before its due time
        return RunSpec(
            run.task, run.key, run.facts.epoch, self.me, run.row.arguments, worker.slot, self.output_max,
            self.catalog, run.generation, self.log_max,
            job=run.row if listener else None,
            task_index=parallel.task_index(run.row), task_count=run.row.parallelism if run.row.task_of else 0,
            not_before=run.facts.started.timestamp() if ahead else None,
            due=run.facts.due.timestamp() if run.facts.due is not None else None,
            printed_max=self.printed_max,
        )

    def _finish_later(self, run: Run, outcome: Outcome) -> None:
        self.table.finish(run, outcome, self.clock.now())
        self.on_outcome()

    # -- ending runs (endings.py) ---------------------------------------------------------------------

    def abort(self, run: Run, reason: EndReason, grace: float, note: str = "") -> None:
        """Ask a run to end (STOPJOB, RESTARTJOB, give-up, shutdown); kill it after ``grace``."""
        self.endings.abort(run, reason, grace, note)

    def kill(self, run: Run, reason: EndReason, note: str) -> None:
        """End a run at once (KILL, an expired grace period, a lost lease)."""
        self.endings.kill(run, reason, note)

    def end_generation(self, generation: int) -> None:
        """The lease lapsed and was renewed: end every run claimed under an older generation."""
        self.endings.end_generation(generation)

    def enforce_deadlines(self) -> float | None:
        """Kill runs whose stop grace ran out; return the next deadline (monotonic) if any."""
        return self.endings.enforce_deadlines()

    # -- the collector thread and write-back ---------------------------------------------------------

    def start_collector(self) -> None:
        self.collector.start()

    def stop_collector(self) -> None:
        self.collector.stop()

    def flush(self) -> None:
        """Write every pending outcome (writeback.py) and launch again the runs trains sent back.
        Called by the node's loop only (one writer of outcomes)."""
        if not self.writer.due():
            return
        pending, bounced = self.table.take_queued()
        if bounced:  # dispatching stays on this thread, where KILL and STOPJOB are decided too
            self._launch(*bounced)
        self.writer.write(pending)

    # -- the parts' internals, by their old names (tests/test_train_planning.py, test_fire_timing.py) ---

    @property
    def _durations(self):
        return self.short_jobs.durations

    @property
    def _short(self):
        return self.short_jobs.short

    @property
    def _bounced(self) -> list[Run]:
        return self.table.bounced

    def _learn(self, key: tuple[str, str], elapsed: list[float]) -> None:
        self.short_jobs.learn(key, elapsed)

    def _observe(self, run: Run, outcome: Outcome) -> None:
        self.short_jobs.observe(run.row, outcome.elapsed)

    def _forget(self, run: Run) -> None:
        self.table.forget(run)

    def _on_bounced(self, worker: Worker, tasks: list[int], slow: int | None) -> None:
        self.collector.on_bounced(worker, tasks, slow)


def _type_label(job_type: str) -> str:
    return {"USER_JOB": "UserJob", "PROCESS": "ProcessJob"}.get(job_type, job_type.title())
