"""The node's worker pool on real worker processes (fork server, pipes, the board): a worker
that dies holding a run."""

from __future__ import annotations

import logging
import os
import signal

import pytest
from harness import wait_for

from fabricjobs.worker.board import Board
from fabricjobs.worker.pool import WorkerPool


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
    holder.tasks = [4242]  # as WorkerPool.start() records a dispatched run
    os.kill(holder.pid, signal.SIGKILL)
    wait_for(lambda: not holder.process.is_alive(), 10, "the worker to die")

    other = pool.acquire()  # the next dispatch, before the collector ran
    assert other is not holder and other.slot != holder.slot
    assert pool.connections()[holder.conn] is holder and not holder.conn.closed
    with pytest.raises(EOFError):
        holder.conn.recv()  # what the collector sees: the death

    pool.forget(holder)  # the collector's answer to it; now the slot is free again
    other.tasks = [1]
    fresh = pool.acquire()
    assert fresh.slot == holder.slot and fresh.process.is_alive()
