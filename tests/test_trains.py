"""Trains and passengers planned by pure functions (fabricjobs/node/trains.py), and the run
table's slot bookkeeping (fabricjobs/node/runs.py): no store, no workers, no clock."""

from __future__ import annotations

import gc
import weakref
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.config import AffinityLimit
from fabricjobs.worker.board import TRAIN_RUNS
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.node.decisions import RunFacts
from fabricjobs.node.runs import Run, RunTable
from fabricjobs.node.trains import (PROBE_RUNS, SHORT_RUN, ShortJobs, chunks, passenger_room, plan_trains, riding,
                                   seat_passengers)

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def row(uid: str, name: str = "Customer.short", job_type: str = "USER_JOB") -> Job:
    return Job(JobKey(job_type, name, uid), Status.IN_PROCESS, T0, worker_id="n1", epoch=1, start_time=T0)


def run(uid: str, ahead: float = 0.0, *, pool: str = "ANY", passenger: bool = False, name: str = "Customer.short",
        task: int | None = None, prepared: bool = False) -> Run:
    start = T0 + timedelta(seconds=ahead)
    return Run(task=task if task is not None else abs(hash(uid)) % 100_000, row=row(uid, name),
               facts=RunFacts("n1", 1, start, start), pool=pool, exceptional=False, generation=1, started_mono=0.0,
               holds_slot=not passenger, prepared=prepared)


def short_names(*names: str):
    return lambda r: r.key.name in names


def uids(trains):
    return [[r.key.uid for r in t] for t in trains]


def test_chunks_are_contiguous_and_even():
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunks([1, 2], 0) == []
    assert chunks([], 2) == [[], []]


def test_runs_of_jobs_not_known_short_go_alone():
    trains, no_room = plan_trains([run("a", name="Slow.job"), run("b", name="Slow.job")], short_names())
    assert uids(trains) == [["a"], ["b"]] and no_room == []


def test_a_new_jobs_first_burst_goes_out_in_probe_trains_of_its_own_job():
    """Runs of a job this node cannot tell yet (too few seen): up to PROBE_RUNS a train, at least
    two trains, one job a train (a long new job holds up only its own runs); runs of a job
    known to be long still go alone."""
    runs = [run(f"n{i}", i / 100, name="New.job") for i in range(9)]
    runs += [run("o1", name="Other.new"), run("o2", name="Other.new"), run("k", name="Known.long")]
    trains, no_room = plan_trains(runs, short_names(), lambda r: r.key.name != "Known.long")
    assert sorted(uids(trains)) == [["k"], ["n0", "n1", "n2"], ["n3", "n4", "n5"], ["n6", "n7", "n8"], ["o1"], ["o2"]]
    assert no_room == [] and PROBE_RUNS == 4
    trains, _ = plan_trains([run(f"n{i}", i / 100, name="New.job") for i in range(3 * PROBE_RUNS)], short_names(),
                            lambda r: True)
    assert [len(t) for t in trains] == [PROBE_RUNS] * 3


def test_one_short_run_goes_alone_and_more_make_at_least_two_trains():
    assert uids(plan_trains([run("a")], short_names("Customer.short"))[0]) == [["a"]]
    trains, _ = plan_trains([run(f"r{i}", i / 10) for i in range(4)], short_names("Customer.short"))
    assert uids(trains) == [["r0", "r1"], ["r2", "r3"]]


def test_trains_hold_at_most_train_runs_and_never_more_trains_than_slot_holders():
    runs = [run(f"r{i:02}", i / 100) for i in range(3 * TRAIN_RUNS)]
    trains, _ = plan_trains(runs, short_names("Customer.short"))
    assert len(trains) == 3 and all(len(t) == TRAIN_RUNS for t in trains)
    holders = [run(f"h{i}", i / 100) for i in range(2)]
    riders = [run(f"p{i}", 1 + i / 100, passenger=True) for i in range(8)]
    trains, no_room = plan_trains(holders + riders, short_names("Customer.short"))
    assert uids(trains) == [["h0", "p0", "p1", "p2", "p3"], ["h1", "p4", "p5", "p6", "p7"]] and no_room == []


def test_a_train_runs_in_start_time_order_and_pools_do_not_mix():
    offsets = [0.9, 0.1, 0.5, 0.0, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    runs = [run(f"f{i}", ahead, passenger=i >= 4) for i, ahead in enumerate(offsets)]
    trains, _ = plan_trains(runs, short_names("Customer.short"))
    assert [[round((r.facts.started - T0).total_seconds(), 1) for r in t] for t in trains] == \
        [[0.0, 0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8, 0.9]]
    trains, _ = plan_trains([run("a", pool="A"), run("b", pool="B")], short_names("Customer.short"))
    assert uids(trains) == [["a"], ["b"]]


def test_passengers_beyond_the_room_of_the_trains_are_left_over():
    holders = [run("h0")]
    riders = [run(f"p{i}", 0.1 * (i + 1), passenger=True) for i in range(TRAIN_RUNS)]
    trains, no_room = plan_trains(holders + riders, short_names("Customer.short"))
    assert [len(t) for t in trains] == [TRAIN_RUNS] and [r.key.uid for r in no_room] == [f"p{TRAIN_RUNS - 1}"]
    trains, no_room = plan_trains([run("p", passenger=True)], short_names())  # no slot holder at all
    assert trains == [] and [r.key.uid for r in no_room] == ["p"]


def test_passenger_room_counts_chosen_short_runs_that_are_not_exceptional():
    a, b = AffinityLimit("A", 2, 2), AffinityLimit("B", 2, 4)
    chosen = [(row("1"), (a, False)), (row("2"), (a, False)), (row("3"), (b, True)), (row("4", "Slow.job"), (b, False))]
    assert passenger_room(chosen, short_names("Customer.short")) == {"A": 2 * (TRAIN_RUNS - 1)}
    assert passenger_room([], short_names("Customer.short")) == {}


def test_passengers_take_the_first_of_their_pools_with_room_until_the_room_is_full():
    a, b = AffinityLimit("A", 1, 1), AffinityLimit("B", 1, 1)
    pools = {"x": [a], "y": [b, a], "z": [], "w": [a]}
    riders = [row(u) for u in ("x", "z", "y", "w")]
    room = {"A": 1, "B": 1}
    seated = seat_passengers(riders, room, lambda r: pools[r.key.uid])
    assert [(r.key.uid, lim.name, exceptional, rides) for r, (lim, exceptional), rides in seated] == \
        [("x", "A", False, True), ("y", "B", False, True)]  # w: no room left in A, and none left at all
    assert room == {"A": 1, "B": 1}  # the caller's room is not used up


def test_a_passenger_whose_pools_slot_holder_lost_its_claim_takes_that_slot():
    """Without this, passengers whose slot holders all lost their claims (the oldest rows,
    which other nodes go for too) reached the executor with no train to ride (plan_trains'
    no_room) and were given back unstarted."""
    a, b = AffinityLimit("A", 2, 2), AffinityLimit("B", 2, 4)
    chosen = [(row("h1"), (a, False), False), (row("h2"), (a, False), False), (row("h3"), (b, True), False),
              (row("p1"), (a, False), True), (row("p2"), (a, False), True), (row("p3"), (a, False), True),
              (row("p4"), (b, False), True)]
    won = [False, True, False, False, True, True, True]  # h1 lost (A), h3 lost (B, exceptional), p1 lost
    assert riding(chosen, won) == [False, False, False, True, False, True, True]  # p2 holds h1's slot
    assert riding(chosen, [True] * 7) == [c[2] for c in chosen]  # nothing lost: nothing changes
    trains, no_room = plan_trains([run("p2", passenger=False), run("p3", passenger=True)], short_names("Customer.short"))
    assert no_room == [] and [[r.key.uid for r in t] for t in trains] == [["p2", "p3"]]


def test_fires_prepared_ahead_ride_apart_from_runs_due_now_and_take_only_their_kinds_slots():
    """A passenger inherits a train-mate's slot: a fire waiting for its due time on a train of
    work due now would take that work's slot as soon as the work is done, and hold it."""
    runs = [run("n1"), run("n2"), run("f1", 0.5, prepared=True), run("f2", 0.5, passenger=True, prepared=True),
            run("n3", passenger=True), run("f3", 0.6, passenger=True, prepared=True)]
    trains, no_room = plan_trains(runs, short_names("Customer.short"))
    assert no_room == []
    assert sorted(sorted(t) for t in uids(trains)) == [["f1", "f2", "f3"], ["n1", "n3"], ["n2"]]

    a = AffinityLimit("A", 4, 4)
    chosen = [(row("h1"), (a, False), False), (row("f1"), (a, False), True), (row("n1"), (a, False), True)]
    ahead = lambda r: r.key.uid.startswith("f")  # noqa: E731
    assert riding(chosen, [False, True, True], ahead) == [False, True, False]  # h1's slot goes to n1 only


def test_a_job_is_short_after_a_few_quick_runs_and_long_again_after_one_held_up_a_train():
    jobs = ShortJobs()
    quick = row("q")
    for _ in range(2):
        jobs.observe(quick, SHORT_RUN / 5)
    assert not jobs.is_short(quick)  # not seen often enough yet
    jobs.observe(quick, SHORT_RUN / 5)
    assert jobs.is_short(quick)
    jobs.observe(quick, 5.0)  # one slow run (a busy host) among quick ones: the median stays quick
    assert jobs.is_short(quick)
    jobs.ran_long(quick)
    assert not jobs.is_short(quick)
    process = row("p", "p.sh", "PROCESS")
    for _ in range(5):
        jobs.observe(process, SHORT_RUN / 5)
    assert not jobs.is_short(process)  # only user jobs ride on trains


def test_a_job_is_new_until_a_few_quick_runs_are_seen_and_not_after_a_long_one():
    jobs = ShortJobs()
    quick, slow, process = row("q"), row("s", "Slow.job"), row("p", "p.sh", "PROCESS")
    assert jobs.is_new(quick) and jobs.is_new(slow) and not jobs.is_new(process)  # processes never share a worker
    for _ in range(2):
        jobs.observe(quick, SHORT_RUN / 5)
    assert jobs.is_new(quick) and not jobs.is_short(quick)
    jobs.observe(quick, SHORT_RUN / 5)
    assert jobs.is_short(quick) and not jobs.is_new(quick)
    jobs.observe(slow, 0.5)
    assert not jobs.is_new(slow) and not jobs.is_short(slow)  # known long: alone from now on
    jobs.ran_long(row("q2"))  # held up a probe train: long
    assert not jobs.is_new(quick) and not jobs.is_short(quick)


def test_a_run_taken_over_from_a_lost_node_makes_a_new_job_known_but_not_a_short_one_long():
    """A takeover's runs go to workers of their own at once (no probe train and its 0.2 s
    patience: stop 30 saw a 20-run takeover 0.2 s late so); one lost run does not outweigh a
    short job's record."""
    jobs = ShortJobs()
    new = row("n", "Taken.over")
    assert jobs.is_new(new)
    jobs.lost(new)
    assert not jobs.is_new(new) and not jobs.is_short(new)
    quick = row("q")
    for _ in range(5):
        jobs.observe(quick, SHORT_RUN / 5)
    jobs.lost(quick)
    assert jobs.is_short(quick)


def test_a_slot_passes_to_a_train_mate_waiting_without_one_then_back_to_the_pool():
    table = RunTable()
    holder, rider = run("h", task=1), run("p", passenger=True, task=2)
    for r in (holder, rider):
        table.add(r)
    holder.train = rider.train = [holder, rider]
    assert table.slots_used() == 1 and table.running() == 2 and table.per_pool() == {"ANY": 1}
    table.forget(holder)
    assert rider.holds_slot and table.slots_used("ANY") == 1 and table.for_key(holder.key) is None
    table.forget(rider)
    assert table.slots_used() == 0 and table.per_pool() == {} and table.running() == 0
    table.forget(rider)  # twice: nothing more happens
    assert table.slots_used() == 0


def test_a_trains_runs_are_freed_by_reference_counting_once_forgotten():
    """A train's runs all hold its list: a reference cycle that left every run of a drain
    (row, outcome and all) to the cyclic garbage collector, 0.1 s of a node's CPU per 5,000
    runs. Forgetting a run drops its hold on the list."""
    table = RunTable()
    train = [run(f"t{i}", task=10 + i, passenger=i > 0) for i in range(3)]
    for r in train:
        table.add(r)
    table.assign(train, worker=None)  # type: ignore[arg-type]
    gone = [weakref.ref(r) for r in train]
    gc.disable()
    try:
        for r in list(train):
            table.forget(r)
        del train, r
        assert [w() for w in gone] == [None, None, None]
    finally:
        gc.enable()


def test_only_give_up_fields_are_changed_from_outside():
    table = RunTable()
    r = run("g", task=3)
    table.add(r)
    table.update(r, give_up_at=T0)
    assert r.give_up_at == T0
    with pytest.raises(AttributeError):
        table.update(r, holds_slot=False)
    assert r.holds_slot
