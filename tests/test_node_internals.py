"""The node's worker pool on real worker processes (fork server, pipes, the board)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from datetime import timedelta

import pytest

from fabricjobs.worker.board import Board
from fabricjobs.worker.pool import WorkerPool
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


def test_a_lease_that_runs_out_during_a_slow_heartbeat_write_counts_as_a_lapse(store):
    """The node's runs saw the lease end while the write hung; the renewal must raise the
    generation (so runs claimed before end) and say so, even though the write succeeded.
    The beat is 5 s (a write may take 5 s): time is the manual clock's, and on a loaded
    machine a real Cassandra LWT once took longer than the 0.25 s a 0.2 s beat allows."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.node.heartbeat import Heartbeat

    clock, board, lapses = ManualClock(), Board.create(1), []
    beat = Heartbeat(store, board, clock, name="n1", dc="dc1", interval=5.0, miss=5, info=dict, tasks=list,
                     running=lambda: 0, on_fenced=lambda: None, on_recovered=lambda: None,
                     on_lapse=lapses.append, on_displaced=lambda row: None)
    try:
        assert beat.beat_once() and board.generation() == 0 and lapses == []
        write = store.write_node
        store.write_node = lambda row, timeout=None: (clock.advance(beat.lease + 0.1), write(row))
        assert beat.beat_once()  # the write succeeded, but only after the lease ran out
        assert board.generation() == 1 and lapses == [1]
    finally:
        board.close(unlink=True)


def test_changed_tasks_go_out_at_once_after_a_quiet_spell_and_once_a_second_while_they_churn(store):
    """PS shows a job that just started on a quiet node; but a node whose tasks change all the
    time (thousands of short runs a second) must not write its row ten times a second: on one
    SQLite file those writes were 40 % of all write transactions. A due beat is never held
    back by a pending publication."""
    import threading

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.heartbeat import Heartbeat

    clock, board, poked, writes = ManualClock(), Board.create(1), threading.Event(), []
    beat = Heartbeat(store, board, clock, name="n1", dc="dc1", interval=5.0, miss=12, info=dict, tasks=list,
                     running=lambda: 0, on_fenced=lambda: None, on_recovered=lambda: None,
                     on_lapse=lambda generation: None, on_displaced=lambda row: None, poked=poked)
    write = store.write_node
    store.write_node = lambda row, timeout=None: (writes.append(round(clock.monotonic(), 2)), write(row))[1]
    try:
        start = clock.monotonic()
        assert beat.beat_once()
        next_beat = start + 5.0
        clock.advance(2.0)
        poked.set()  # a run started on a quiet node
        next_beat = beat._tick(next_beat)
        assert writes == [round(start, 2), round(start + 2.0, 2)]
        for _ in range(62):  # 3.1 s of runs starting and ending every 50 ms, across the due beat
            clock.advance(0.05)
            poked.set()
            next_beat = beat._tick(next_beat)
        churn = [t - start for t in writes[2:]]
        assert 3 <= len(churn) <= 4 and churn[0] >= 2.95, churn  # not 30 writes
        assert all(b - a >= 0.95 for a, b in zip(churn, churn[1:-1])), churn
        assert 5.0 <= churn[-1] <= 5.1 and next_beat - start == pytest.approx(churn[-1] + 5.0), churn  # the beat
        clock.advance(1.5)  # quiet again
        poked.set()
        beat._tick(next_beat)
        assert len(writes) == 2 + len(churn) + 1 and writes[-1] == round(clock.monotonic(), 2)  # at once
    finally:
        store.write_node = write
        board.close(unlink=True)


def test_a_beat_brought_back_by_a_stalled_read_counts_from_when_the_read_returned(store_config, store):
    """Found by the chaos soak: an observer paused (SIGSTOP) while its read of the nodes was in
    flight got a fresh beat back, counted it from before the pause, saw the same beat again
    10 ms later, and took over a live node's running jobs. A beat counts from the read's
    return; a node whose beat really stands still for the threshold is still judged dead."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    observer = Node(load_config(store_config), name="b", clock=clock, store=store)
    try:
        store.write_node(NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(),
                                 version="x", beat=7, info=json.dumps({"heartbeat_ms": 200, "miss": 5})))
        read = store.nodes
        store.nodes = lambda timeout=None: (clock.advance(2.4), read())[1]  # the observer is paused mid-read
        observer.reconciler._observe()
        store.nodes = read
        clock.advance(0.01)
        observer.reconciler._observe()  # a has not beaten again in these 10 ms
        assert not observer.liveness.is_dead("a") and observer.liveness.dead() == []
        clock.advance(1.0)
        observer.reconciler._observe()  # now a's beat has stood still for 1.01 s > 0.2 s x 5
        assert observer.liveness.is_dead("a")
    finally:
        observer.board.close(unlink=True)


def test_a_row_missing_from_a_stalled_read_counts_as_missing_from_when_the_read_returned(store_config, store):
    """The mirror case: a row absent from a read that stalled in flight (deleted, and the node
    not yet re-written by its next beat) was absent only as of the read's return."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    observer = Node(load_config(store_config), name="b", clock=clock, store=store)
    try:
        store.write_node(NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(),
                                 version="x", beat=7, info=json.dumps({"heartbeat_ms": 400, "miss": 5})))
        observer.reconciler._observe()
        store.delete_node(next(r for r in store.nodes() if r.name == "a"))
        read = store.nodes
        store.nodes = lambda timeout=None: (clock.advance(2.4), read())[1]  # paused mid-read
        observer.reconciler._observe()
        store.nodes = read
        assert not observer.liveness.is_dead("a")
        clock.advance(0.01)
        observer.reconciler._observe()
        assert not observer.liveness.is_dead("a")  # missing for 10 ms, not 2.41 s
        clock.advance(1.5)
        observer.reconciler._observe()
        assert not observer.liveness.is_dead("a")  # judged by its own threshold (0.4 s x 5 = 2 s)
        clock.advance(0.6)
        observer.reconciler._observe()
        assert observer.liveness.is_dead("a")
    finally:
        observer.board.close(unlink=True)


def test_a_fire_prepared_ahead_never_starts_before_its_due_time(monkeypatch):
    """The worker waits for a prepared fire's due time on the clock the job sees; a pause
    between two clock readings (a busy host) must not make it start early."""
    from fabricjobs.worker import process as worker_module

    class Clocks:  # monotonic and wall advance together; the first wall reading is paused 5 ms
        def __init__(self):
            self.mono, self.offset, self.paused = 100.0, 1_700_000_000.0, False

        def monotonic(self):
            return self.mono

        def time(self):
            if not self.paused:
                self.paused = True
                self.mono += 0.005
            return self.mono + self.offset

        def sleep(self, seconds):
            self.mono += max(seconds, 0.0001)

    clocks = Clocks()
    monkeypatch.setattr(worker_module, "time", clocks)
    due = clocks.mono + clocks.offset + 0.05
    assert worker_module.wait_until(due, lambda: False)
    assert clocks.time() >= due
    assert not worker_module.wait_until(due + 0.5, lambda: True)  # aborted while waiting: no start


def test_stopping_two_runs_of_one_train_reaches_both():
    """A worker may hold a train of runs; each place has its own abort flag, so a second
    STOPJOB does not cancel the first (or reach a train-mate)."""
    board = Board.create(2)
    try:
        board.set_abort(1, 0, 101)
        board.set_abort(1, 2, 103)
        assert board.aborted(1, 101) and board.aborted(1, 103)
        assert not board.aborted(1, 102) and not board.aborted(0, 101)  # the mate, the other worker
        board.clear_abort(1)  # a new message to that worker
        assert not board.aborted(1, 101) and not board.aborted(1, 103)
    finally:
        board.close(unlink=True)


def test_a_fire_is_known_as_prepared_before_its_row_is_written(tmp_path):
    """The node's loop may claim a row the moment the scheduler writes it WAITING, while the
    rest of the batch is still being written (LWT by LWT on Cassandra). A claim that does not
    know the fire was prepared ahead starts it at once, before its due time (chaos on
    Cassandra saw runs start 2 ms early): the scheduler marks it before the write."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    known_at_write: list[bool] = []

    class LoopsView:  # what the node's loop would see at the instant each row is written
        def __getattr__(self, name):
            return getattr(store, name)

        def cas_many(self, pairs, runs=None, **kw):
            known_at_write.extend(scheduler.prepared(new) for _, new in pairs)
            return store.cas_many(pairs, runs, **kw)

    scheduler = Scheduler(LoopsView(), clock, "n1", on_ready=lambda: None)
    due = clock.now() + timedelta(milliseconds=30)  # within the fire lead
    rows = [Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                execution_interval="00:00:01", next_run=due, worker_id="n1", epoch=1) for uid in ("a", "b")]
    for row in rows:
        store.insert(row)
    stale = store.get(rows[1].key)
    store.cas(stale, stale.replace(worker_id="n2", epoch=2))  # taken by another node meanwhile
    scheduler._fire([store.get(rows[0].key), stale])

    assert known_at_write == [True, True]
    fired, lost = store.get(rows[0].key), store.get(rows[1].key)
    assert fired.status is Status.WAITING and scheduler.prepared(fired)
    assert lost.status is Status.SCHEDULED and not scheduler.prepared(lost.replace(status=Status.WAITING))
    store.close()


def test_claims_wait_for_a_batch_of_fires_being_written_and_its_end_wakes_them(tmp_path):
    """On Cassandra each fire of a batch is its own LWT: a claim pass during the write saw
    eleven PRIORITY 4 fires and not the PRIORITY 9 one due the same second, and started them
    first. While a batch is written, claims wait (``writing``); its end wakes the loop, also
    when no row of it became ready; a write that takes longer than FIRE_WRITE_WAIT stops
    holding them."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import FIRE_WRITE_WAIT, Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    during: list[bool] = []
    woken: list[int] = []

    class Writing:  # a claim pass asking at the instant the batch is written
        def __getattr__(self, name):
            return getattr(store, name)

        def cas_many(self, pairs, runs=None, **kw):
            during.append(scheduler.writing())
            clock.advance(FIRE_WRITE_WAIT + 0.1)
            during.append(scheduler.writing())  # a write this long no longer holds claims
            return store.cas_many(pairs, runs, **kw)

    scheduler = Scheduler(Writing(), clock, "n1", on_ready=lambda: woken.append(1))
    assert not scheduler.writing()
    due = clock.now() + timedelta(milliseconds=30)
    row = Job(JobKey("USER_JOB", "Customer.userJob1", "a"), Status.SCHEDULED, clock.now(),
              execution_interval="00:00:01", next_run=due, worker_id="n1", epoch=1)
    store.insert(row)
    stale = store.get(row.key)
    store.cas(stale, stale.replace(worker_id="n2", epoch=2))  # taken by another node: nothing becomes ready
    scheduler._fire([stale])
    assert during == [True, False]
    assert woken == [1]  # the pass that waited is woken
    assert not scheduler.writing()
    store.close()


@contextlib.contextmanager
def one_slot_node(tmp_path):
    """An in-process node "a" with one slot on SQLite, its lease held, launching nothing: its
    claim step (node.reconciler.claims) runs in the test's thread. Yields (node, store, clock)."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.node.node import Node
    from fabricjobs.store.sqlite import SqliteStore
    from fabricjobs.testing.rig import write_config

    config = write_config(tmp_path / "c.ini", {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "j.db")},
                                               "jobs": {"K2JOBS_POOL_SIZE": 1}})
    store = SqliteStore(tmp_path / "j.db")
    clock = ManualClock()
    node = Node(load_config(config), name="a", clock=clock, store=store)
    try:
        node.board.set_lease(clock.monotonic() + 60, clock.monotonic())
        node.executor._launch = lambda *runs: None
        yield node, store, clock
    finally:
        node.board.close(unlink=True)
        store.close()


class StoreWith:
    """``store`` with some of its methods replaced (keyword arguments: name=function)."""

    def __init__(self, store, **methods) -> None:
        self._store, self.__dict__["_methods"] = store, methods

    def __getattr__(self, name):
        return self._methods.get(name) or getattr(self._store, name)


def test_a_passenger_takes_the_slot_of_a_slot_holder_whose_claim_another_node_won(tmp_path):
    """Four nodes draining one queue: a pass's slot holders are its oldest rows, the ones other
    nodes go for too. When another node wins a holder's claim, a passenger claimed with it
    holds that slot instead; left a passenger, it had no train to ride and was given back
    unstarted (up to 600 in one pass)."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path) as (node, store, clock):
        now = clock.now()
        keys = [JobKey("USER_JOB", "Customer.userJob1", f"u{i}") for i in range(4)]
        for i, key in enumerate(keys):
            store.insert(Job(key, Status.WAITING, now, next_run=now + timedelta(milliseconds=i)))
        node.executor.short_jobs.learn(("USER_JOB", "Customer.userJob1"), [0.0001] * 3)  # known short

        def cas_each(pairs, *args, **kwargs):  # node b claims the oldest row first
            assert pairs[0][0].key == keys[0]
            oldest = store.get(keys[0])
            assert store.cas(oldest, oldest.replace(status=Status.IN_PROCESS, worker_id="b", epoch=1)).applied
            return store.cas_each(pairs, *args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each=cas_each)
        with node.executor.holding_starts():
            claims.claim(clock.now())
            runs = {run.key.uid: run.holds_slot for run in node.executor.runs()}
        assert runs == {"u1": True, "u2": False, "u3": False}  # u1 holds the slot u0's claim was for
        assert node.executor.slots_used() == 1


def test_claims_another_node_won_ask_for_a_full_pass_that_reads_the_nodes_again(tmp_path):
    """A claim pass reads no nodes: lanes go by the live nodes of the last full pass. Lost
    claims are the sign that a node started since: the next pass is a full one, once per lane
    wait at most. Its first full pass, a node rings the nodes it sees, so that they count it in
    their lanes at once."""
    import json

    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.store.base import NodeRow

    with one_slot_node(tmp_path) as (node, store, clock):
        rung: list[list[str]] = []

        class Doorbell:
            enabled = True

            def ring(self, names):
                rung.append(list(names))

        node.reconciler.doorbell = Doorbell()
        store.write_node(NodeRow(name="b", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(),
                                 version="x", beat=1, info=json.dumps({"heartbeat_ms": 500, "miss": 8})))
        node.signals.full.clear()
        with node.executor.holding_starts():
            node.reconciler.run_pass(full=True)
            node.reconciler.run_pass(full=True)
        assert rung == [["b"]]  # once, at its first read of the nodes

        now = clock.now()
        key = JobKey("USER_JOB", "Customer.userJob1", "x")
        store.insert(Job(key, Status.WAITING, now, next_run=now))

        def cas_each(pairs, *args, **kwargs):  # node b wins the row first
            row = store.get(key)
            assert store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="b", epoch=1)).applied
            return store.cas_each(pairs, *args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each=cas_each)
        node.signals.full.clear()
        with node.executor.holding_starts():
            claims.claim(clock.now(), full=False)
        assert node.signals.full.is_set()  # the next pass reads the nodes


def test_a_claim_pass_reads_again_when_a_batch_of_fires_began_during_its_reads(tmp_path):
    """The third cause of the burst failure on Apache Cassandra: a claim pass began before the
    batch (``writing`` said no), its read of the PRIORITY 9 bucket came before the batch's LWT
    and its read of the default bucket after, so it started the PRIORITY 4 fires first. A pass
    during whose reads a batch began reads again: the PRIORITY 9 fire is claimed first."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path) as (node, store, clock):
        now = clock.now()
        store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", "b"), Status.WAITING, now, next_run=now, worker_id="a"))
        urgent = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", "urgent"), Status.SCHEDULED, now,
                                  next_run=now, worker_id="a", epoch=1, priority=9, execution_interval="00:01:00")).row
        reads: list[int] = []

        def waiting_by_priority(*args, **kwargs):  # the batch's LWT lands right after this read
            top = store.waiting_by_priority(*args, **kwargs)
            reads.append(len(top))
            if len(reads) == 1:
                node.scheduler._fire([urgent])
            return top

        claims = node.reconciler.claims
        claims.store = StoreWith(store, waiting_by_priority=waiting_by_priority)
        claims.claim(clock.now())
        assert store.get(urgent.key).status is Status.IN_PROCESS  # the one free slot: PRIORITY 9
        assert reads[0] == 1 and len(reads) > 1  # read again, after the batch
        assert store.get(JobKey("USER_JOB", "Customer.userJob1", "b")).status is Status.WAITING


def test_a_claim_pass_reads_again_only_once_under_a_steady_stream_of_fires(tmp_path):
    """On Cassandra a node with many recurring jobs writes batch after batch of fires: a pass
    that read again whenever a batch began during its reads would never claim. It waits for
    that batch and reads again once, then claims what it read."""
    from datetime import timedelta

    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path) as (node, store, clock):
        now = clock.now()
        first = JobKey("USER_JOB", "Customer.userJob1", "first")
        store.insert(Job(first, Status.WAITING, now - timedelta(seconds=1), next_run=now - timedelta(seconds=1)))
        reads: list[int] = []

        def waiting(*args, **kwargs):  # each read of the queue overlaps a new batch of fires
            page = store.waiting(*args, **kwargs)
            reads.append(len(page))
            row = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", f"tick{len(reads)}"), Status.SCHEDULED,
                                   now, next_run=now, worker_id="a", epoch=1, execution_interval="00:00:01")).row
            node.scheduler._fire([row])
            return page

        claims = node.reconciler.claims
        claims.store = StoreWith(store, waiting=waiting)
        claims.claim(clock.now())
        assert store.get(first).status is Status.IN_PROCESS  # claimed, not starved by the fires
        assert len(reads) == 2  # read once more, not once per batch


def test_wait_written_returns_when_the_batch_is_written_or_after_fire_write_wait(tmp_path):
    """A pass that read while a batch began waits for that batch: until its write returns, and
    never longer than FIRE_WRITE_WAIT after it began (a slow store must not stop claims). So
    does a pass that finds a batch being written right after one held it (``writing``): under
    a steady stream of fires claims are held once, then wait, and go on."""
    import threading
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import FIRE_WRITE_WAIT, Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    release, entered = threading.Event(), threading.Event()

    def slow_cas_many(pairs, runs=None):
        entered.set()
        release.wait(30)
        return store.cas_many(pairs, runs)

    clock = ManualClock()
    scheduler = Scheduler(StoreWith(store, cas_many=slow_cas_many), clock, "n1", on_ready=lambda: None)
    try:
        for uid in ("written", "slow"):
            release.clear()
            entered.clear()
            row = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                                   execution_interval="00:00:01", next_run=clock.now() + timedelta(seconds=1),
                                   worker_id="n1", epoch=1)).row
            firing = threading.Thread(target=scheduler._fire, args=([row],))
            firing.start()
            assert entered.wait(10)
            if uid == "written":
                assert scheduler.writing()  # a pass is held for the batch (its end wakes the loop) ...
                threading.Timer(0.1, release.set).start()  # the write returns; no time passes for the bound
                assert not scheduler.writing()  # ... but the next pass is not: it waits for the batch
                assert release.is_set() and not scheduler.writing()
            else:
                threading.Timer(0.1, clock.advance, args=(FIRE_WRITE_WAIT + 0.1,)).start()  # the write goes on
                scheduler.wait_written()
                assert not release.is_set()  # returned on the bound, the batch still being written
                release.set()
            firing.join(10)
    finally:
        release.set()
        store.close()


def test_a_pass_starts_each_batch_of_claims_at_once(tmp_path):
    """A pass commits each claim by itself: what one of its steps claimed (a due fire) starts
    then, not after the pass's slower steps (chaos on Cassandra saw fires start 0.6 s late
    behind them), and a batch's runs leave together, so that short ones share trains."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.executor import Executor
    from fabricjobs.store.sqlite import SqliteStore

    clock = ManualClock()
    store = SqliteStore(tmp_path / "jobs.db")
    executor = Executor(store, clock, None, None, me="n1", max_tries=10, retry_delay=1.0, output_max=1000,
                        log_max=1000, zone=None, on_scheduled=lambda row: None, on_freed=lambda: None,
                        on_tasks_changed=lambda: None)
    launched: list = []
    executor._launch = lambda *runs: launched.extend(run.key.uid for run in runs)

    def claimed(uid: str) -> Job:
        return Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.IN_PROCESS, clock.now(), worker_id="n1",
                   epoch=1, start_time=clock.now(), next_run=clock.now() + timedelta(milliseconds=10))

    with executor.holding_starts():  # a pass
        executor.start(claimed("fire"), "ANY", False, 1)
        executor.launch_held()  # the end of its claim batch
        assert launched == ["fire"]
        executor.start(claimed("later"), "ANY", False, 1)
        assert launched == ["fire"]  # trains still form within a batch
    assert launched == ["fire", "later"]
    with pytest.raises(RuntimeError), executor.holding_starts():  # a step failed after a claim:
        executor.start(claimed("claimed"), "ANY", False, 1)
        raise RuntimeError("the pass's next step failed")
    assert launched == ["fire", "later", "claimed"]  # ... its claim is committed, so it runs
    store.close()


def test_a_run_is_counted_as_ended_only_once_it_left_the_running_gauge(tmp_path):
    """A scrape reads fabricjobs_executions_total before fabricjobs_running_jobs: counting a
    run while it is still among the executor's runs let one scrape show it ended and running."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.worker.runner import OK, Outcome
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.executor import Executor
    from fabricjobs.store.sqlite import SqliteStore

    clock = ManualClock()
    store = SqliteStore(tmp_path / "jobs.db")
    running_when_counted: list[int] = []

    class Metrics:
        def execution(self, job_type: str, result: str) -> None:
            running_when_counted.append(executor.running())

    executor = Executor(store, clock, None, None, me="n1", max_tries=10, retry_delay=1.0, output_max=1000,
                        log_max=1000, zone=None, on_scheduled=lambda row: None, on_freed=lambda: None,
                        on_tasks_changed=lambda: None, metrics=Metrics())  # type: ignore[arg-type]
    executor._launch = lambda *runs: None
    for uid in ("a", "b"):
        row = Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.IN_PROCESS, clock.now(), worker_id="n1",
                  epoch=1, start_time=clock.now())
        store.insert(row)
        executor._finish_later(executor.start(row, "ANY", False, 1), Outcome(OK, output="{}"))
    executor.flush()
    assert running_when_counted == [1, 0]
    assert all(store.get(JobKey("USER_JOB", "Customer.userJob1", uid)).archived for uid in ("a", "b"))
    store.close()


def test_the_next_verdict_is_when_a_silent_node_may_first_be_judged_dead():
    """The node's loop reads the nodes again at that moment instead of at its next periodic
    pass, so a crash is noticed one read after the threshold (SPEC 8.1), not a period later."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    live = Liveness("me", clock, default_threshold=3.0)
    assert live.next_verdict() is None  # nobody watched

    def row(beat: int, state: str = "running") -> NodeRow:
        return NodeRow(name="a", incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=beat, state=state, info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    t0 = clock.monotonic()
    live.observe([row(1)])
    assert live.next_verdict() == pytest.approx(t0 + 1.0)  # a's own threshold: 200 ms x 5
    clock.advance(0.6)
    live.observe([row(2)])  # it beat: the verdict moves with it
    assert live.next_verdict() == pytest.approx(t0 + 1.6)
    clock.advance(1.0)
    live.observe([row(2)])  # read exactly at the verdict time: not yet dead
    assert not live.is_dead("a") and live.next_verdict() == pytest.approx(t0 + 1.6)
    clock.advance(0.002)
    live.observe([row(2)])  # the read the loop makes just after it
    assert live.is_dead("a") and live.next_verdict() is None  # judged: nothing left to wait for
    assert live.dead() == ["a"]
    live.observe([row(3)])
    assert not live.is_dead("a")
    live.observe([row(4, state="stopped")])
    assert live.is_dead("a") and live.next_verdict() is None  # a clean stop is dead at once
    live.is_dead("ghost")  # an owner with no row: judged after the default threshold
    assert live.next_verdict() == pytest.approx(clock.monotonic() + 3.0)


def test_a_read_of_some_nodes_rows_judges_those_nodes_only():
    """When the whole-table read fails (on Cassandra, a range read waiting out a cut-off
    replica), the node reads the rows of the nodes it watches one by one. Those are judged on
    that read; a node it did not ask about is judged on nothing newer than the last whole read,
    and a name asked with no row counts as gone, as in a whole read."""
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    live = Liveness("me", clock, default_threshold=1.0)

    def row(name: str, beat: int) -> NodeRow:
        return NodeRow(name=name, incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=beat, state="running", info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    live.observe([row("me", 1), row("a", 1), row("b", 1), row("c", 1)])
    assert live.watched() == ["a", "b", "c"]
    for beat in (2, 3, 4):  # whole reads fail from here; a and c are read alone, b is not asked
        clock.advance(0.6)
        live.observe([row("a", 1)], asked=["a", "c"])  # a stands still; c has no row any more
    assert live.is_dead("a") and live.is_dead("c")  # both covered by reads 1.8 s apart
    assert not live.is_dead("b")  # no read since the whole one has shown b's beat: not judged
    assert not live.is_dead("newcomer")  # an owner never read: not judged on reads that did not ask
    live.observe([row("a", 2)], asked=["a"])
    assert not live.is_dead("a")  # it beat again
    clock.advance(0.5)
    live.observe([row("a", 2), row("b", 1)])  # a whole read again: b's beat stood still 2.3 s
    assert live.is_dead("b") and not live.is_dead("a")
    assert live.is_dead("newcomer")  # no row in the whole reads 2.3 s apart: longer than the default threshold


def test_while_the_whole_read_fails_the_pass_judges_each_node_whose_row_it_read_in_time():
    """The reconcile pass's fallback: the rows of the watched nodes, one at a time, within one
    deadline (the whole read's timeout). A node whose row read failed or came too late is not
    judged on it; the others are; and the whole read is not tried again for 5 s."""
    import dataclasses
    import json

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.errors import StoreError
    from fabricjobs.node.liveness import Liveness
    from fabricjobs.node.parts import ReconcileParts
    from fabricjobs.node.reconcile import Reconciler
    from fabricjobs.node.settings import NodeSettings
    from fabricjobs.store.base import NodeRow

    clock = ManualClock()
    settings = dataclasses.replace(NodeSettings.from_config(load_config(None)), heartbeat_interval=0.2,
                                   heartbeat_miss=5)  # dead after 1 s; the whole read's timeout: 1 s

    def row(name: str) -> NodeRow:
        return NodeRow(name=name, incarnation="i1", dc="DC1", host="h", pid=1, started=clock.now(), version="x",
                       beat=1, state="running", info=json.dumps({"heartbeat_ms": 200, "miss": 5}))

    class Store:  # on Cassandra: a range read waiting out a cut-off replica; single rows mostly answer
        whole_reads = 0
        asked: list = []

        def nodes(self, timeout=None):
            self.whole_reads += 1
            raise StoreError("Cassandra: OperationTimedOut (the whole read)")

        def node(self, name, timeout=None):
            self.asked.append((name, timeout))
            clock.advance({"a": 0.1, "b": 0.6, "c": 0.2, "d": 0.2}[name])
            if name == "b":
                raise StoreError("Cassandra: OperationTimedOut (b's row)")
            return row(name)

    store = Store()
    live = Liveness("me", clock, default_threshold=1.0)
    live.observe([row("a"), row("b"), row("c"), row("d"), row("e"), row("me")])  # the last whole read
    parts = ReconcileParts(store=store, executor=None, scheduler=None, liveness=live, affinity=None, board=None,
                           clock=clock, metrics=None, signals=None, doorbell=None)
    reconciler = Reconciler("me", settings, parts)
    clock.advance(1.5)  # nobody has beaten since
    assert reconciler._observe()
    assert [n for n, _ in store.asked] == ["a", "b", "c", "d"]  # e: out of time (1.1 s of the 1 s gone)
    assert [t for _, t in store.asked] == pytest.approx([1.0, 0.9, 0.3, 0.1])  # each gets what is left
    assert live.is_dead("a") and live.is_dead("c") and live.is_dead("d")  # read: beat unchanged for 1.5 s
    assert not live.is_dead("b") and not live.is_dead("e")  # not read: judged on nothing newer than before
    store.asked.clear()
    clock.advance(1.0)
    assert reconciler._observe() and store.whole_reads == 1  # within 5 s: straight to the rows
    clock.advance(5.0)
    reconciler._observe()
    assert store.whole_reads == 2  # and once more after


def test_the_fire_lead_learns_how_long_this_node_takes_to_prepare_a_fire(tmp_path):
    """A fire is prepared ahead by as long as the node's recent fires took to reach a worker
    (1.5 x their 90th percentile), never less than FIRE_LEAD nor more than FIRE_LEAD_MAX, so
    that on a slow store (Cassandra: several LWT rounds per burst) jobs still start on time."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import FIRE_LEAD, FIRE_LEAD_MAX, Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    scheduler = Scheduler(store, clock, "n1", on_ready=lambda: None)
    assert scheduler.lead == FIRE_LEAD

    def fire_and_dispatch(uid: str, took: float) -> None:
        due = clock.now() + timedelta(seconds=0.02)
        row = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                               execution_interval="00:00:01", next_run=due, worker_id="n1", epoch=1)).row
        scheduler._fire([row])
        clock.advance(took)  # claimed and handed to a worker this long after it was taken
        scheduler.dispatched(row.key, due)

    for i in range(7):
        fire_and_dispatch(f"a{i}", 0.2)
    assert scheduler.lead == FIRE_LEAD  # not from a handful of fires
    fire_and_dispatch("a7", 0.2)
    assert scheduler.lead == pytest.approx(0.3)  # 1.5 x 0.2 s
    scheduler.dispatched(JobKey("USER_JOB", "Customer.userJob1", "other"), clock.now())  # not prepared here
    assert scheduler.lead == pytest.approx(0.3)
    for i in range(64):
        fire_and_dispatch(f"b{i}", 2.0)
    assert scheduler.lead == FIRE_LEAD_MAX
    for i in range(64):
        fire_and_dispatch(f"c{i}", 0.001)
    assert scheduler.lead == FIRE_LEAD  # fast again: back to the least lead

    # A prepared fire holds a pool slot until its due time: at 20 fires/s, a lead of 0.5 s
    # would hold 10 slots; with max_ahead 4 the lead is cut to 0.2 s (never under FIRE_LEAD).
    busy = Scheduler(store, clock, "n1", on_ready=lambda: None, max_ahead=4)
    busy.lead = 0.5
    due = clock.now() + timedelta(seconds=5)
    rows = [store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", f"d{i}"), Status.SCHEDULED, clock.now(),
                             execution_interval="00:00:01", next_run=due, worker_id="n1", epoch=1)).row
            for i in range(40)]
    busy._fire(rows)  # 40 fires within the last 2 s: 20 per second
    with busy._cond:
        assert busy._lead() == pytest.approx(0.2)
    clock.advance(2.5)  # the rate is measured over the last 2 s: nothing fired since
    with busy._cond:
        assert busy._lead() == pytest.approx(0.5)
    store.close()


def test_a_prepared_fire_starts_at_its_due_time_however_old_the_passes_now_is():
    """Found in review: a claim step reads ``now`` when its (possibly long) pass began, while
    the scheduler may prepare a fire up to the whole lead (1 s) after that. Bounding the wait
    by that ``now`` made such a fire start at once, before its due time."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import claim

    clock = ManualClock()
    pass_began = clock.now()
    due = pass_began + timedelta(seconds=1.6)  # prepared 1 s ahead, 0.6 s into a slow pass
    row = Job(JobKey("USER_JOB", "Customer.userJob1", "u"), Status.WAITING, pass_began, next_run=due,
              worker_id="n1", epoch=3)
    _, mine = claim(row, "n1", pass_began, prepared=True)
    assert mine.start_time == due and mine.epoch == 4
    _, other = claim(row, "n2", pass_began, prepared=False)  # not prepared here: starts now
    assert other.start_time == pass_began


def test_the_loop_looks_again_at_the_verdict_time_but_never_chases_a_past_one():
    """Found in review: while reads of the nodes failed, the verdict time stayed in the past
    and the loop ran full passes back to back, without its back-off after an error."""
    from fabricjobs.node.node import _VERDICT_GAP, next_full_pass

    assert next_full_pass(10.0, None, 5.0) == 10.0
    assert next_full_pass(10.0, 7.0, 5.0) == 7.0 + _VERDICT_GAP  # a peer may be dead at 7: look then
    assert next_full_pass(10.0, 12.0, 5.0) == 10.0  # the periodic pass comes first anyway
    assert next_full_pass(10.0, 4.0, 5.0) == 10.0  # past: its read failed; no busy loop


def test_a_retry_stands_for_the_same_due_time():
    """A failed run goes back to WAITING with its due time kept: a recurring job's fixed rate
    stays anchored on its fire, and the retry's current_job().due says which fire it is. This
    node waits the retry delay; others may take it at once."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.jobs.context import FailMode
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import failed

    clock = ManualClock()
    due = clock.now()
    clock.advance(2.5)
    row = Job(JobKey("USER_JOB", "Customer.userJob1", "u"), Status.IN_PROCESS, due, next_run=due,
              worker_id="n1", epoch=2, execution_interval="00:00:01")
    _, retry = failed(row, "boom", FailMode.RETRY_UNTIL_MAX, clock.now(), max_tries=3, retry_delay=timedelta(seconds=1))
    assert retry.status is Status.WAITING and retry.next_run == due and retry.tries == 1
    assert retry.hold_until == clock.now() + timedelta(seconds=1)


class _TrainsPool:
    """The executor's view of a worker pool, for tests of how runs are put on trains: the
    lease holds, reports are noted nowhere; the trains dispatched are kept by the test."""

    class board:
        @staticmethod
        def lease_valid(now, generation):
            return True

    @staticmethod
    def release(worker, task):
        pass


def _train_executor(tmp_path):
    """An executor on a SQLite store and a manual clock that knows Customer.userJob1 for a
    short job, and keeps the trains it would dispatch: (executor, clock, store, trains)."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.node.executor import Executor
    from fabricjobs.store.sqlite import SqliteStore

    clock = ManualClock()
    store = SqliteStore(tmp_path / "jobs.db")
    executor = Executor(store, clock, _TrainsPool(), None, me="n1", max_tries=10, retry_delay=1.0, output_max=1000,
                        log_max=1000, zone=None, on_scheduled=lambda row: None, on_freed=lambda: None,
                        on_tasks_changed=lambda: None)
    executor._learn(("USER_JOB", "Customer.userJob1"), [0.0002] * 3)
    trains: list[list] = []
    executor._dispatch = lambda train: trains.append(train)
    return executor, clock, store, trains


def _claimed(clock, uid: str, ahead: float = 0.0):
    """Customer.userJob1 ``uid`` as claimed by n1, starting ``ahead`` seconds from now."""
    from datetime import timedelta

    from fabricjobs.model import Job, JobKey, Status

    start = clock.now() + timedelta(seconds=ahead)
    return Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.IN_PROCESS, clock.now(), worker_id="n1",
               epoch=1, start_time=start, next_run=start)


def test_passengers_ride_on_the_trains_of_slot_holders_and_inherit_their_slots(tmp_path):
    """Known-short runs claimed beyond the free slots (passengers) hold no slot: each train
    is led by runs that do, passengers fill the trains in claim order, and a passenger takes
    a slot over only when a train-mate that held one is done, so the slots in use never
    exceed what was free. A passenger sent back by its worker has no slot to run in: it is
    given back to the store, not started elsewhere."""
    executor, clock, store, trains = _train_executor(tmp_path)
    executor._durations.clear()
    executor._short.clear()

    def claimed(uid: str):
        return _claimed(clock, uid)

    class Ended:
        elapsed = 0.0002

    for i in range(3):  # the job is known to be short: its last runs were quick
        executor._observe(executor.start(claimed(f"learn{i}"), "ANY", False, 1), Ended())
    for run in executor.runs():
        executor._forget(run)
    trains.clear()
    assert executor.slots_used() == 0 and executor.is_short(claimed("x"))

    with executor.holding_starts():
        holders = [executor.start(claimed(f"h{i}"), "ANY", False, 1) for i in range(2)]
        riders = [executor.start(claimed(f"p{i}"), "ANY", False, 1, passenger=True) for i in range(8)]
        assert executor.slots_used() == 2 and executor.running() == 10
    assert [[r.key.uid for r in t] for t in trains] == [["h0", "p0", "p1", "p2", "p3"], ["h1", "p4", "p5", "p6", "p7"]]
    for train in trains:
        for run in train:
            run.train = train  # as _dispatch records it

    executor._forget(holders[0])  # its outcome written: p0 (next on its train) takes its slot
    assert riders[0].holds_slot and executor.slots_used() == 2 and executor.running() == 9
    for run in (riders[0], riders[1], riders[2]):
        executor._forget(run)
    assert riders[3].holds_slot and executor.slots_used() == 2
    executor._forget(riders[3])  # the last of its train: the slot is free again
    assert executor.slots_used() == 1

    class Worker:
        pass

    worker = Worker()
    for run in trains[1]:
        run.worker = worker
    executor._on_bounced(worker, [r.task for r in riders[4:]], holders[1].task)
    assert [r.outcome.kind for r in riders[4:]] == ["released"] * 4  # back to the store, not started
    assert not executor.is_short(claimed("x"))  # the job ahead of them ran long
    assert executor._bounced == [] and executor.slots_used() == 1
    store.close()


def test_a_train_never_runs_a_fire_ahead_of_one_due_earlier(tmp_path):
    """Prepared fires of one lead (up to 1 s on a slow store) are due at different times, and a
    train runs in order: trains are cut by due time and run it in order, or a fire would wait
    behind one due later (chaos-like runs on the CQL test server saw fires ~1 s late)."""
    executor, clock, store, trains = _train_executor(tmp_path)
    offsets = [0.9, 0.1, 0.5, 0.0, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]  # due times in claim order (s ahead)
    with executor.holding_starts():
        for i, ahead in enumerate(offsets):
            executor.start(_claimed(clock, f"f{i}", ahead), "ANY", False, 1, passenger=i >= 4)
    ahead = [[round((run.facts.started - clock.now()).total_seconds(), 1) for run in train] for train in trains]
    assert ahead == [[0.0, 0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8, 0.9]]  # 4 slot holders, 6 passengers
    store.close()


def test_a_slot_holder_sent_back_from_behind_a_passenger_leaves_its_slot_to_it(tmp_path):
    """A train runs in due-time order, so a passenger may run ahead of the run holding the
    train's slot. If that passenger runs long, the worker sends the rest back; the one going
    on keeps the slot, and the holder sent back is given back to the store: the runs going on
    at once never exceed the slots."""
    executor, clock, store, trains = _train_executor(tmp_path)
    with executor.holding_starts():
        holder = executor.start(_claimed(clock, "h", 0.5), "ANY", False, 1)
        rider = executor.start(_claimed(clock, "p", 0.1), "ANY", False, 1, passenger=True)
    assert [[r.key.uid for r in t] for t in trains] == [["p", "h"]]  # the passenger is due first
    worker = object()
    for run in trains[0]:
        run.worker, run.train = worker, trains[0]
    executor._on_bounced(worker, [holder.task], rider.task)  # p ran long: h is sent back
    assert rider.holds_slot and not holder.holds_slot and executor.slots_used() == 1
    assert holder.outcome.kind == "released" and executor._bounced == []
    store.close()


def test_children_that_stay_blocked_do_not_hide_the_ones_behind_them(store_config, store, monkeypatch):
    """More blocked rows than a page (children of a FAILED parent, due first) and behind them
    one whose parent is PROCESSED: the dependency checks page on until they free it, then
    start over from the first page."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node import reconcile
    from fabricjobs.node.node import Node

    monkeypatch.setattr(reconcile, "_ADOPT_BATCH", 3)
    monkeypatch.setattr(reconcile, "MAX_PAGES", 1)  # one page per check: the next check goes on
    clock = ManualClock()
    node = Node(load_config(store_config), name="a", clock=clock, store=store)
    try:
        failed, done = JobKey("USER_JOB", "Customer.userJob1", "failed"), JobKey("USER_JOB", "Customer.userJob1", "done")
        t0 = clock.now()
        store.insert(Job(failed, Status.FAILED, t0, archived=True))
        store.insert(Job(done, Status.PROCESSED, t0, archived=True))
        for i in range(7):  # two of them share a due time across a page boundary
            store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", f"stuck{i}"), Status.WAITING, t0,
                             next_run=t0 + timedelta(seconds=min(i, 5)), blocked=True, depends_on=str(failed)))
        free = JobKey("USER_JOB", "Customer.userJob1", "free")
        store.insert(Job(free, Status.WAITING, t0, next_run=t0 + timedelta(seconds=9), blocked=True, depends_on=str(done)))
        checks = 0
        while store.get(free).blocked:
            checks += 1
            assert checks <= 5, "the job behind a page of stuck children was never checked"
            node.signals.parents_changed.set()  # a check now (as after a job ended here)
            node.reconciler._unblock(clock.now())
        node.signals.parents_changed.set()
        node.reconciler._unblock(clock.now())  # finds the end of the list ...
        assert node.reconciler._blocked_from is None  # ... so the next check starts over
        assert all(store.get(JobKey("USER_JOB", "Customer.userJob1", f"stuck{i}")).blocked for i in range(7))
        assert "is FAILED" in store.get(JobKey("USER_JOB", "Customer.userJob1", "stuck6")).error_msg
    finally:
        node.board.close(unlink=True)


def test_retention_goes_by_the_stores_clock_and_keeps_parents_that_blocked_children_wait_on(tmp_path):
    """Issue #18, item 8: a node whose clock ran 31 days fast deleted fresh archived rows, and a
    deleted FAILED parent (a missing parent counts as done) let its blocked child run."""
    from datetime import datetime, timedelta, timezone

    from fabricjobs.testing.rig import write_config
    from fabricjobs.clock import ManualClock
    from fabricjobs.config import load_config
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.node import Node
    from fabricjobs.store.sqlite import SqliteStore

    config = write_config(tmp_path / "c.ini", {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "j.db")},
                                               "jobs": {"K2JOB_ARCHIVING_TIME_HOUR": 24}})
    store = SqliteStore(tmp_path / "j.db")
    real_now = datetime.now(timezone.utc)

    def archived(uid, status, ended):
        row = store.insert(Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, ended, next_run=ended)).row
        store.cas(row, row.replace(status=status, archived=True, end_time=ended))

    archived("fresh", Status.PROCESSED, real_now - timedelta(minutes=5))
    archived("old", Status.PROCESSED, real_now - timedelta(days=3))
    archived("failed-parent", Status.FAILED, real_now - timedelta(days=3))
    store.insert(Job(JobKey("USER_JOB", "A.b", "child"), Status.WAITING, real_now, next_run=real_now,
                     depends_on="USER_JOB.A.b.failed-parent", blocked=True))
    fast = ManualClock(real_now + timedelta(days=31))
    node = Node(load_config(config), name="fast", clock=fast, store=store)
    try:
        node._purge_archive()
        left = {j.key.uid for j in store.archived_since(real_now - timedelta(days=30))}
        assert left == {"fresh", "failed-parent"}  # "old" went; the fast clock deleted nothing more
        assert store.get(JobKey("USER_JOB", "A.b", "child")).blocked
    finally:
        node.board.close(unlink=True)
        store.close()


def test_a_failing_store_logs_one_traceback_per_outage_not_one_per_retry(store, caplog):
    """A full disk fails every write of the outcomes kept, retried every 0.2 s: one traceback
    (with the job's key) when the outage begins, DEBUG lines while it lasts, one line when the
    store takes outcomes again; the outcome is written then, nothing lost."""
    from datetime import timedelta

    from fabricjobs.clock import ManualClock
    from fabricjobs.errors import StoreError
    from fabricjobs.model import Event, Job, JobKey, Status, advance
    from fabricjobs.node.decisions import RunFacts, claim
    from fabricjobs.node.runs import Run, RunTable
    from fabricjobs.node.writeback import OutcomeWriter
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
