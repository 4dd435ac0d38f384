"""Ending runs before they end by themselves: STOPJOB, RESTARTJOB, give-up and shutdown ask a
run to end and kill it after a grace period; KILL, an expired grace and a lost lease kill it
at once. What is recorded on the run goes through the run table (runs.py); what reaches the
worker goes through the pool (its abort flag on the board, or SIGKILL)."""

from __future__ import annotations

import logging

from ..clock import Clock
from ..worker.pool import WorkerPool
from .runs import EndReason, Run, RunTable

log = logging.getLogger("fabricjobs.node.executor")

_SKIP_GRACE = 0.2  # seconds: a run skipped on its train that began meanwhile is killed after this


class Endings:
    def __init__(self, table: RunTable, pool: WorkerPool, clock: Clock) -> None:
        self.table = table
        self.pool = pool
        self.clock = clock

    def abort(self, run: Run, reason: EndReason, grace: float, note: str = "") -> None:
        """Ask a run to end (STOPJOB, RESTARTJOB, give-up, shutdown); kill it after ``grace``."""
        worker = self.table.ask_end(run, reason, note, self.clock.monotonic() + grace)
        if worker is not None:
            self.pool.abort(worker, run.task)

    def kill(self, run: Run, reason: EndReason, note: str) -> None:
        """End a run at once (KILL, an expired grace period, a lost lease). A run still queued
        on a train is skipped rather than its worker killed (that would end the run ahead of
        it); if it began meanwhile, it is killed when a short grace runs out."""
        on = self.table.mark_kill(run, reason, note, self.clock.monotonic() + _SKIP_GRACE)
        if on is None:
            return  # not on a worker (yet, or any more): nothing to kill
        worker, queued = on
        if queued:
            self.pool.abort(worker, run.task)
        else:
            worker.killed_for = run.task
            self.pool.kill(worker)

    def end_generation(self, generation: int) -> None:
        """The lease lapsed and was renewed: end every run claimed under an older generation."""
        for run in self.table.all():
            if run.generation < generation and run.outcome is None:
                log.warning("'%s' was claimed before this node's lease lapsed: ending it", run.key)
                self.kill(run, EndReason.LEASE, "run ended: this node's lease lapsed while it ran")

    def enforce_deadlines(self) -> float | None:
        """Kill runs whose stop grace ran out; return the next deadline (monotonic) if any."""
        now = self.clock.monotonic()
        nxt = None
        for run in self.table.all():
            if run.stop_deadline is None or run.outcome is not None:
                continue
            if now >= run.stop_deadline:
                log.warning("'%s' did not end within its grace period; killing it", run.key)
                self.table.clear_deadline(run)
                self.kill(run, run.end_reason or EndReason.STOP, "killed after the stop grace period")
            elif nxt is None or run.stop_deadline < nxt:
                nxt = run.stop_deadline
        return nxt
