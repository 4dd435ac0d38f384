"""A store that keeps failing: one traceback per outage in the node's log, not one per retry."""

from __future__ import annotations

import functools
import logging
from datetime import timedelta


def test_a_failing_store_logs_one_traceback_per_outage_not_one_per_retry(store, caplog):
    """A full disk fails every write of the outcomes kept, retried every 0.2 s: one traceback
    (with the job's key) when the outage begins, DEBUG lines while it lasts, one line when the
    store takes outcomes again; the outcome is written then, nothing lost."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.errors import StoreError
    from fabricjobs.model import Event, Job, JobKey, Status, advance
    from fabricjobs.node.decisions import RunFacts, claim
    from fabricjobs.node.runs import Run, RunTable
    from fabricjobs.node.writeback import OutcomeWriter
    from fabricjobs.store.base import JobStore
    from fabricjobs.worker.protocol import OK, Outcome

    clock, table = ManualClock(), RunTable()
    row = store.insert(advance(None, Event.START, Job(JobKey("USER_JOB", "Probe.noop", "u1"), Status.WAITING,
                                                      clock.now(), next_run=clock.now()))).row
    row = store.cas(row, advance(row, *claim(row, "n1", clock.now()))).row
    run = Run(task=1, row=row, facts=RunFacts("n1", row.epoch, clock.now(), clock.now()), pool="ANY",
              exceptional=False, generation=1, started_mono=clock.monotonic(), holds_slot=True)
    table.add(run)
    table.finish(run, Outcome(OK, output="1"), clock.now())
    writer = OutcomeWriter(store, table, clock, max_tries=3, retry_delay=1.0, zone="UTC", on_scheduled=lambda r: None,
                           on_final=lambda r: None, on_freed=lambda: None, on_tasks_changed=lambda: None)
    cas_many = store.cas_many
    # Every write of the group through cas_many, which fails below (on Cassandra a group's LWTs
    # otherwise go out one task each: writes that straggle, docs/explanation/nodes.md).
    store.cas_each_within = functools.partial(JobStore.cas_each_within, store)

    def full_disk(*args, **kwargs):
        raise StoreError("database or disk is full")

    store.cas_many = full_disk
    caplog.set_level(logging.DEBUG, logger="fabricjobs.node.executor")
    try:
        for _ in range(5):
            clock.advance(0.25)
            assert writer.due()
            writer.write(table.take_queued()[0])
        assert store.get(row.key).status is Status.IN_PROCESS and table.pending  # kept, not written
        store.cas_many = cas_many
        clock.advance(0.25)
        assert writer.due()
        writer.write(table.take_queued()[0])
    finally:
        store.cas_many = cas_many
    assert store.get(row.key).status is Status.PROCESSED and not table.pending
    # The writer's own lines: a store's driver threads left by earlier tests in this process
    # may log (a defunct Cassandra connection) while this test runs.
    ours = [r for r in caplog.records if r.name == "fabricjobs.node.executor"]
    tracebacks = [r for r in ours if r.exc_info and r.levelno >= logging.ERROR]
    assert len(tracebacks) == 1 and "'USER_JOB.Probe.noop.u1'" in tracebacks[0].getMessage()
    assert len([r for r in ours if r.levelno == logging.DEBUG and "failed again" in r.getMessage()]) == 4
    assert [r.getMessage() for r in ours if r.levelno == logging.WARNING] == [
        "the store takes outcomes again after 1.2 s of failed writes"]  # from the first failure (1.25 s)
    assert timedelta(0) <= store.get(row.key).end_time - row.start_time
