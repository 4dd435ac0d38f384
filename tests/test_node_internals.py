"""The node's worker pool on real worker processes (fork server, pipes, the board)."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from fabricjobs.jobs.board import Board
from fabricjobs.node.workers import WorkerPool
from harness import wait_for


@pytest.fixture
def pool():
    board = Board.create(2)
    p = WorkerPool(board, 2, node="n1", idle_sec=60, log_level=logging.WARNING)
    p.prewarm()
    yield p
    p.shutdown(kill=True)
    board.close(unlink=True)


def test_a_worker_that_dies_holding_a_run_stays_until_the_collector_has_seen_its_death(pool):
    """Its slot must not be reused behind the executor's back: that would close the pipe the
    executor waits on, the death would go unseen and the run would stay IN_PROCESS forever."""
    holder = pool.acquire()
    holder.task = 4242  # as WorkerPool.start() records a dispatched run
    os.kill(holder.pid, signal.SIGKILL)
    wait_for(lambda: not holder.process.is_alive(), 10, "the worker to die")

    other = pool.acquire()  # the next dispatch, before the collector ran
    assert other is not holder and other.slot != holder.slot
    assert pool.connections()[holder.conn] is holder and not holder.conn.closed
    with pytest.raises(EOFError):
        holder.conn.recv()  # what the collector sees: the death

    pool.forget(holder)  # the collector's answer to it; now the slot is free again
    other.task = 1
    fresh = pool.acquire()
    assert fresh.slot == holder.slot and fresh.process.is_alive()


def test_a_lease_that_runs_out_during_a_slow_heartbeat_write_counts_as_a_lapse(store):
    """The node's runs saw the lease end while the write hung; the renewal must raise the
    generation (so runs claimed before end) and say so, even though the write succeeded."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.node.heartbeat import Heartbeat

    clock, board, lapses = ManualClock(), Board.create(1), []
    beat = Heartbeat(store, board, clock, name="n1", dc="dc1", interval=0.2, miss=5, info=dict, tasks=list,
                     running=lambda: 0, on_fenced=lambda: None, on_recovered=lambda: None,
                     on_lapse=lapses.append, on_displaced=lambda row: None)
    try:
        assert beat.beat_once() and board.generation() == 0 and lapses == []
        write = store.write_node
        store.write_node = lambda row: (clock.advance(beat.lease + 0.1), write(row))
        assert beat.beat_once()  # the write succeeded, but only after the lease ran out
        assert board.generation() == 1 and lapses == [1]
    finally:
        board.close(unlink=True)
