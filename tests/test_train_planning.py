"""Trains and passengers (fabricjobs/node/trains.py): stopping runs of one train, passengers
that take over slots, and the order of a train's fires (docs/explanation/nodes.md)."""

from __future__ import annotations

from datetime import timedelta

from node_parts import StoreWith, one_slot_node

from fabricjobs.worker.board import Board


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
            return store.cas_each_within(pairs, *args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=cas_each)
        with node.executor.holding_starts():
            claims.claim(clock.now())
            runs = {run.key.uid: run.holds_slot for run in node.executor.runs()}
        assert runs == {"u1": True, "u2": False, "u3": False}  # u1 holds the slot u0's claim was for
        assert node.executor.slots_used() == 1


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
    offsets = [1.0, 0.2, 0.6, 0.1, 0.8, 0.4, 0.9, 0.3, 0.7, 0.5]  # due times in claim order (s ahead)
    with executor.holding_starts():
        for i, ahead in enumerate(offsets):
            executor.start(_claimed(clock, f"f{i}", ahead), "ANY", False, 1, passenger=i >= 4)
    ahead = [[round((run.facts.started - clock.now()).total_seconds(), 1) for run in train] for train in trains]
    assert ahead == [[0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.7, 0.8, 0.9, 1.0]]  # 4 slot holders, 6 passengers
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


def test_prepared_fires_ride_their_train_even_when_its_holders_come_due_before_the_launch(tmp_path):
    """Whether a run is a fire prepared ahead (riding apart from work due now) is decided once,
    by its claim. Judged again at the launch, holders whose due time passed during the rest of
    the pass (up to 0.5 s) went with work due now, and their 20 passengers, left without a
    slot holder, were all given back unstarted."""
    executor, clock, store, trains = _train_executor(tmp_path)
    with executor.holding_starts():
        for i in range(2):
            executor.start(_claimed(clock, f"h{i}", 0.05), "ANY", False, 1, prepared=True)
        for i in range(20):
            executor.start(_claimed(clock, f"p{i:02d}", 0.3), "ANY", False, 1, passenger=True, prepared=True)
        clock.advance(0.1)  # the pass goes on: the holders' due time passes before its claims are launched
    assert sorted(run.key.uid for train in trains for run in train) == ["h0", "h1"] + [f"p{i:02d}" for i in range(20)]
    assert len(trains) == 2 and all(run.prepared for train in trains for run in train)
    store.close()
