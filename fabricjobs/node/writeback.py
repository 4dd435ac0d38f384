"""Outcome write-back: post-execution, the row a run leaves behind.

The node's loop writes all outcomes that are ready in one ``cas_each`` (group commit), before
the claims that refill the freed slots, in a write of its own: the store's write lock is held
while the statements run, not while outcomes are decided. Every write is fenced: it is
conditioned on the (status, epoch, worker_id, revision) this node holds, and a write that
loses is decided again from the current row. If the row is no longer ours (another node took
it over), the run's bookkeeping stops there and that is logged. Nothing is dropped: an outcome
that cannot be written now (the store is failing) goes back to the queue and is tried again
after ``retry_at``.
"""

from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

from ..clock import Clock
from ..worker.protocol import LEASE_LOST, OK, Outcome
from ..worker.runner import clean_text
from ..jobs.registry import JobCatalog, JobResolutionError
from ..logs import job_extra
from ..model import Event, Job, Status, advance
from ..store.base import CasResult, JobStore
from .decisions import after_run, failure_job, run_record
from .runs import Run, RunTable
from .stragglers import Stragglers

if TYPE_CHECKING:
    from .metrics import Metrics

log = logging.getLogger("fabricjobs.node.executor")

_REDECIDE = 20  # rounds of write, re-read and decide again for outcomes that lost their write
_RETRY_PAUSE = 0.2  # seconds: outcomes wait this long for a failing or contended store
#: Seconds without an answer after which the loop stops waiting for a group of writes
#: (outcomes, claims) and goes on without the ones that have not answered; the store settles
#: those meanwhile, and the loop acts on each when it answers (docs/explanation/nodes.md,
#: "Writes that straggle").
PATIENCE = 0.5

_Todo = list[tuple[Run, Outcome, Job | None]]  # an outcome and the row it is decided on


def start_on_failure(store: JobStore, row: Job, now: datetime, run: int | None = None) -> None:
    """ON_FAILURE: start the failure job of ``row``, which just FAILED (if it names one);
    ``run``: the run that failed, where it is not the row's epoch (failure_job)."""
    job = failure_job(row, now, run)
    if job is None:
        return
    try:
        started = store.insert(advance(None, Event.START, job)).applied
    except Exception:
        log.exception("could not start the ON_FAILURE job of '%s'", row.key)
        return
    if started:
        log.info("ON_FAILURE job '%s' started for '%s'", job.key, row.key, extra=job_extra(row.key, row.epoch))


def delete_on_success(catalog: JobCatalog, row: Job) -> None:
    """RJM's rjm_delete: after a successful run, its job's DELETE_ON_SUCCESS files go. A file
    already gone is fine (another run, or a retried clean-up, deleted it); a directory or a
    file this node may not delete is left, with a warning. Checked against this node's
    CLEANUP_ROOT as well as the one STARTJOB saw."""
    try:
        files = catalog.cleanup_files(row.delete_on_success)
    except JobResolutionError as exc:
        log.warning("'%s': DELETE_ON_SUCCESS not carried out: %s", row.key, exc, extra=job_extra(row.key, row.epoch))
        return
    deleted = 0
    for path in files:
        try:
            os.unlink(path)
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("'%s': DELETE_ON_SUCCESS could not delete %s: %s", row.key, path, exc.strerror or exc,
                        extra=job_extra(row.key, row.epoch))
    log.info("'%s' succeeded: %d of its %d DELETE_ON_SUCCESS file(s) deleted (the others were gone already or "
             "could not be)", row.key, deleted, len(files), extra=job_extra(row.key, row.epoch))


class OutcomeWriter:
    def __init__(
        self,
        store: JobStore,
        table: RunTable,
        clock: Clock,
        *,
        max_tries: int,
        retry_delay: float,
        zone,
        on_scheduled: Callable[[Job], None],
        on_final: Callable[[Job], None],
        on_freed: Callable[[], None],
        on_tasks_changed: Callable[[], None],
        on_answered: Callable[[], None] = lambda: None,
        metrics: Metrics | None = None,
        catalog: JobCatalog | None = None,  # DELETE_ON_SUCCESS's root (None: nothing deleted)
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.table = table
        self.clock = clock
        self.max_tries = max_tries
        self.retry_delay = timedelta(seconds=retry_delay)
        self.zone = zone
        self.on_scheduled = on_scheduled
        self.on_final = on_final
        self.on_freed = on_freed
        self.on_tasks_changed = on_tasks_changed
        self.retry_at: float | None = None  # monotonic: pending outcomes wait for a failing store
        self.failing_since: float | None = None  # monotonic: writes of outcomes fail since then
        self.shutting_down = False
        self.metrics = metrics
        self.on_answered = on_answered  # a straggling write answered (wakes the node's loop)
        self._late = Stragglers(lambda: self.on_answered(), self._write_failed)  # writes still being settled
        self._answers: list[tuple[Run, Outcome, str, CasResult | None]] = []  # theirs, once answered

    def due(self) -> bool:
        """Whether outcomes may be written now (not while waiting for a failing store)."""
        if self.retry_at is not None:
            if self.clock.monotonic() < self.retry_at:
                return False
            self.retry_at = None
        return True

    def write(self, pending: list[tuple[Run, Outcome]]) -> None:
        """Write ``pending``: one cas_each for the batch, then each loser re-read and decided
        again; what cannot be written now goes back to the queue. Called by the node's loop
        only (one writer of outcomes)."""
        retry: list[tuple[Run, Outcome]] = []
        todo: _Todo = self._answered_late(retry)
        if not pending and not todo and not retry:
            return
        now = self.clock.now()
        todo += [(run, outcome, run.row) for run, outcome in self._with_lease(pending)]
        for _ in range(_REDECIDE):
            if not todo:
                break
            todo = self._write_round(todo, now, retry)
        retry.extend((run, outcome) for run, outcome, _ in todo)
        if retry:
            self.table.requeue(retry)
            self.retry_at = self.clock.monotonic() + _RETRY_PAUSE  # the store is failing or contended: pause

    def _with_lease(self, pending: list[tuple[Run, Outcome]]) -> list[tuple[Run, Outcome]]:
        """The outcomes that may be written: without a lease during shutdown nothing of ours
        may be, so the row is left as it is, and whoever takes it over re-runs it."""
        out = []
        for run, outcome in pending:
            if self.shutting_down and outcome.kind == LEASE_LOST:
                log.info("'%s' ended without a lease during shutdown; left for a re-run", run.key)
                self._done(run)
            else:
                out.append((run, outcome))
        return out

    def _write_round(self, todo: _Todo, now: datetime, retry: list[tuple[Run, Outcome]]) -> _Todo:
        """Decide and write each of ``todo`` once; return those whose write lost, with the row
        read again (adds to ``retry`` what cannot be decided, written or read now)."""
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
        # Whole rows: a run's row as its claim returned it, or read again below.
        results: list = self.store.cas_each_within(pairs, records, self._write_failed, whole=True, patience=PATIENCE)
        if self.failing_since is not None and any(res is not None and not isinstance(res, Future) for res in results):
            log.warning("the store takes outcomes again after %.1f s of failed writes",
                        self.clock.monotonic() - self.failing_since)
            self.failing_since = None
        again: _Todo = []
        for (run, outcome), record, res in zip(order, records, results):
            if isinstance(res, Future):  # not answered yet: the run keeps its slot until it has
                self._late.leave(run.row, res, functools.partial(self._answered, run, outcome, record.result))
            else:
                self._answer(run, outcome, record.result, res, retry, again)
        return again

    def _answer(self, run: Run, outcome: Outcome, result: str, res, retry: list[tuple[Run, Outcome]],
                again: _Todo) -> None:
        """Act on the answer ``res`` to the write of ``run``'s outcome (None: not written)."""
        if res is None:
            retry.append((run, outcome))
        elif res.applied:  # committed: the store answers once its writes have
            self._applied(run, outcome, res.row, result)
        else:
            try:
                again.append((run, outcome, self.store.get(run.key)))
            except Exception:
                log.exception("cannot re-read '%s'; trying again", run.key)
                retry.append((run, outcome))

    def _answered_late(self, retry: list[tuple[Run, Outcome]]) -> _Todo:
        """Act on the straggling writes that have answered since; return the outcomes whose
        write lost, with their rows read again, to be decided again."""
        self._late.act()  # (each answer comes to _answered)
        answers, self._answers = self._answers, []
        again: _Todo = []
        for run, outcome, result, res in answers:
            self._answer(run, outcome, result, res, retry, again)
        return again

    def _answered(self, run: Run, outcome: Outcome, result: str, res: CasResult | None) -> None:
        self._answers.append((run, outcome, result, res))

    def straggling(self) -> bool:
        """Whether outcome writes are still being settled by the store."""
        return bool(self._late)

    def _write_failed(self, expected: Job) -> None:
        """A failing store (a full disk) fails every retry, every 0.2 s: the first failure of an
        outage is logged with its traceback, the others at DEBUG, and the outage's end once."""
        if self.failing_since is None:
            self.failing_since = self.clock.monotonic()
            log.exception("post-execution write of '%s' failed; the outcomes are kept and written again "
                          "every %.1f s until the store takes them", expected.key, _RETRY_PAUSE,
                          extra=job_extra(expected.key, expected.epoch))
        else:
            log.debug("post-execution write of '%s' failed again", expected.key, exc_info=True)

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

    # -- the run is done ---------------------------------------------------------------------------

    def _applied(self, run: Run, outcome: Outcome, row: Job, result: str) -> None:
        if outcome.kind != OK and row.status in (Status.WAITING, Status.FAILED):
            log.info("job %s failed (%s): %s", run.key, outcome.kind, outcome.error)
        if log.isEnabledFor(logging.INFO):  # the hot path: no log record built at WARNING
            log.info("job %s status was updated to %s.", run.key, row.status.value, extra=job_extra(run.key, run.facts.epoch))
        self._done(run)
        if self.metrics is not None:  # only once the run left the running gauge (_done)
            self.metrics.execution(run.row.type, result)
        if outcome.kind == OK and row.delete_on_success and self.catalog is not None:
            delete_on_success(self.catalog, row)
        if row.status is Status.SCHEDULED:
            self.on_scheduled(row)
        elif row.archived:
            start_on_failure(self.store, row, self.clock.now())
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
        self.table.forget(run)
        self.on_freed()
        self.on_tasks_changed()
