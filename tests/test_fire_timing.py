"""Scheduled fires: prepared ahead by the fire lead and started at their due time, never
before; claims and batches of fires being written; a retry keeps its due time
(docs/explanation/nodes.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from node_parts import StoreWith, one_slot_node


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


def _write_waiting(scheduler, rows):
    """What the scheduler does with fires its node could not seat by their due time (and
    before, with every fire): a batch of them written WAITING, for any node."""
    from fabricjobs.model import advance
    from fabricjobs.node.decisions import fire

    scheduler._write(rows, [(row, advance(row, *fire(row))) for row in rows], [])


def test_a_due_fire_is_offered_to_its_nodes_claims_and_taken_in_one_write(tmp_path):
    """A fire cost three writes: the scheduler marked the row WAITING, the loop claimed it,
    the outcome made it SCHEDULED again. The scheduler now offers it to its own node's
    claims, which take it straight from SCHEDULED to IN_PROCESS (docs/explanation/nodes.md):
    nothing is written until then. A fire whose row changed meanwhile (taken by another
    node) is not run and is read again; one blocked by its parents is not claimed; one the
    node cannot seat is written WAITING at its due time plus the grace, for any node."""
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import OFFER_GRACE

    with one_slot_node(tmp_path, pool_size=2) as (node, store, clock):
        due = clock.now() + timedelta(milliseconds=30)  # within the fire lead
        rows = [store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                                 execution_interval="00:00:01", next_run=due, worker_id="a", epoch=1)).row
                for uid in ("a", "b", "c")]
        stale = store.get(rows[1].key)
        store.cas(stale, stale.replace(worker_id="n2", epoch=2))  # taken by another node meanwhile
        writes: list[int] = []
        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=lambda pairs, **kw: writes.append(len(pairs)) or store.cas_each_within(pairs, **kw))
        node.scheduler._fire(rows[:2])

        assert [store.get(row.key).status for row in rows[:2]] == [Status.SCHEDULED] * 2  # offered, not written
        assert node.scheduler.prepared(rows[0])
        claims.claim(clock.now())
        mine = store.get(rows[0].key)
        assert mine.status is Status.IN_PROCESS and mine.worker_id == "a" and mine.start_time == due
        assert writes == [2]  # one claim each, no WAITING write before it
        assert store.get(rows[1].key).worker_id == "n2"  # the other node's: left alone ...
        assert node.scheduler._recheck == {rows[1].key}  # ... and read again by the scheduler

        blocked = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", "d"), Status.SCHEDULED, clock.now(),
                                   execution_interval="00:00:01", next_run=due, worker_id="a", epoch=1, blocked=True,
                                   depends_on="USER_JOB.Customer.userJob1.parent")).row
        node.scheduler._fire([blocked])
        claims.claim(clock.now())  # a slot is free, but its parent has not run
        assert store.get(blocked.key).status is Status.SCHEDULED
        node.scheduler.offers.take([blocked.key])
        store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", "w"), Status.WAITING, clock.now(), next_run=clock.now()))
        claims.claim(clock.now())  # the other slot
        node.scheduler._fire([rows[2]])  # no slot left: this fire waits on offer
        claims.claim(clock.now())
        assert store.get(rows[2].key).status is Status.SCHEDULED and len(node.scheduler.offers) == 1
        clock.advance(0.03 + OFFER_GRACE)
        node.scheduler._step()  # due + grace: given to any node
        waiting = store.get(rows[2].key)
        assert waiting.status is Status.WAITING and waiting.next_run == due and not node.scheduler.offers


def test_an_offer_is_prepared_before_the_claims_see_it_and_their_write_sets_the_first_lead(tmp_path):
    """The claims may take an offer the moment it is put: a claim that did not know the fire
    was prepared ahead would seat it on a train of work due now. And before fires have
    reached workers to learn from, the claim's write of the first batch says the least lead
    (a node's first second of fires on Cassandra went out with the 50 ms lead)."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path, pool_size=4) as (node, store, clock):
        due = clock.now() + timedelta(milliseconds=30)
        rows = [store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                                 execution_interval="00:00:01", next_run=due, worker_id="a", epoch=1)).row
                for uid in ("a", "b")]
        scheduler, seen = node.scheduler, []
        put = scheduler.offers.put
        scheduler.offers.put = lambda offered, now: seen.extend(scheduler.prepared(r) for r in offered) or put(offered, now)

        def slow_claims(pairs, **kw):
            clock.advance(0.2)
            return store.cas_each_within(pairs, **kw)

        node.reconciler.claims.store = StoreWith(store, cas_each_within=slow_claims)
        scheduler._fire(rows)
        node.reconciler.claims.claim(clock.now())
        assert seen == [True, True]
        assert all(store.get(row.key).status is Status.IN_PROCESS for row in rows)
        assert scheduler.lead == pytest.approx(0.3)  # 1.5 x the claim's 0.2 s


def test_offers_late_gone_or_failed_to_write(tmp_path):
    """Found in review: a fire offered after its due time (a node's start, a takeover, a
    retry) was written WAITING at once, before the claims could take it; a refresh that read
    a row before its offer was taken offered the fire again; a claim whose write failed (the
    store down) was read again, fired and claimed again in a tight loop."""
    from fabricjobs.clock import ManualClock
    from fabricjobs.errors import StoreError
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import OFFER_GRACE, Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    reads: list[int] = []

    def down(keys):
        reads.append(len(keys))
        raise StoreError("store unreachable")

    scheduler = Scheduler(StoreWith(store, get_many=down), clock, "n1", on_ready=lambda: None)
    try:
        late = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", "late"), Status.SCHEDULED, clock.now(),
                                execution_interval="00:00:01", next_run=clock.now() - timedelta(seconds=2),
                                worker_id="n1", epoch=1)).row
        scheduler._fire([late])
        assert scheduler.offers.expired(clock.now()) == []  # its grace counts from the offer
        clock.advance(OFFER_GRACE)
        assert scheduler.offers.expired(clock.now()) == [late]

        scheduler._fire([late])
        assert scheduler.offers.take([late.key]) == {late.key}
        scheduler.add(late)  # a refresh that read the row before the claim
        assert scheduler.size() == 0 and not scheduler.offers

        scheduler.claimed([(late, None)], 0.01)  # its write failed: the store is down
        for _ in range(5):
            scheduler._step()
        assert reads == []  # not read again before a second has passed
        clock.advance(1.1)
        for _ in range(5):
            scheduler._step()
        assert reads == [1]  # once, then a second's rest again
    finally:
        store.close()


def test_claims_wait_for_a_batch_of_fires_being_written_and_its_end_wakes_them(tmp_path):
    """On Cassandra each fire of a batch is its own LWT: a claim pass during the write saw
    eleven PRIORITY 4 fires and not the PRIORITY 9 one due the same second, and started them
    first. While a batch is written, claims wait (``writing``); its end wakes the loop, also
    when no row of it became ready; a write that takes longer than FIRE_WRITE_WAIT stops
    holding them."""

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
    _write_waiting(scheduler, [stale])
    assert during == [True, False]
    assert woken == [1]  # the pass that waited is woken
    assert not scheduler.writing()
    store.close()


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
                _write_waiting(node.scheduler, [urgent])
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
            _write_waiting(node.scheduler, [row])
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
            firing = threading.Thread(target=_write_waiting, args=(scheduler, [row]))
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


def test_the_fire_lead_learns_how_long_this_node_takes_to_prepare_a_fire(tmp_path):
    """A fire is prepared ahead by as long as the node's fires of the last 30 s took to reach
    a worker (1.5 x their 99th percentile), never less than FIRE_LEAD nor more than
    FIRE_LEAD_MAX, so that on a slow store (Cassandra: several LWT rounds per burst, and now
    and then a round three times slower) jobs still start on time."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import FIRE_LEAD_MAX
    from fabricjobs.node.firelead import _LEARN_WINDOW, FIRE_LEAD
    from fabricjobs.node.scheduler import Scheduler
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
    assert scheduler.lead == FIRE_LEAD_MAX  # the slow round is remembered for the learning window
    clock.advance(_LEARN_WINDOW)
    for i in range(64):
        fire_and_dispatch(f"e{i}", 0.001)
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


def test_a_fire_given_back_before_its_due_time_and_claimed_by_another_node_starts_at_it():
    """A node that stops gives back the fires it prepared; their due times are still ahead,
    and no other node waits for a stopped owner. Claimed elsewhere, such a fire started at
    once, up to a second early. A row due within FIRE_LEAD_MAX waits for its due time on
    any node; one due later was prepared by no scheduler (a writer whose clock runs fast)."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import FIRE_LEAD_MAX, claim

    clock = ManualClock()
    for ahead, waits in ((0.4, True), (FIRE_LEAD_MAX, True), (FIRE_LEAD_MAX + 0.5, False)):
        due = clock.now() + timedelta(seconds=ahead)
        row = Job(JobKey("USER_JOB", "Customer.userJob1", "u"), Status.WAITING, clock.now(), next_run=due,
                  worker_id="n1", epoch=3)
        _, taken = claim(row, "n2", clock.now(), prepared=False)
        assert taken.start_time == (due if waits else clock.now()), ahead


def test_a_retry_stands_for_the_same_due_time():
    """A failed run goes back to WAITING with its due time kept: a recurring job's fixed rate
    stays anchored on its fire, and the retry's current_job().due says which fire it is. This
    node waits the retry delay; others may take it at once."""

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


def _prepare(node, store, clock, uids, due, name="Customer.cron", affinity="ANY"):
    """Short recurring jobs of node "a", due at ``due``, fired ahead by its scheduler: on
    offer to its claims, marked prepared (what the node's scheduler thread does one lead
    before ``due``)."""
    from fabricjobs.model import Job, JobKey, Status

    node.executor.short_jobs.learn(("USER_JOB", name), [0.001] * 3)
    rows = [Job(JobKey("USER_JOB", name, uid), Status.SCHEDULED, clock.now(), execution_interval="* * * * * *",
                next_run=due, worker_id="a", epoch=1, affinity=affinity) for uid in uids]
    store.insert_many(rows)
    node.scheduler._fire([store.get(row.key) for row in rows])
    return rows


def test_a_burst_of_short_fires_prepared_ahead_rides_trains_and_leaves_the_pool_to_work_due_now(tmp_path):
    """A node owning 100 short cron jobs due each second prepares them ahead (a lead of up to
    1 s on Cassandra). Were each to hold a slot until its due time, the scheduler's cap of half
    the pool would cut the lead to a tenth of a second (fires on Apache Cassandra started
    220 ms late at the median) or the burst would take the whole pool. They hold only the
    slots that seat them all on trains, the rest ride as passengers, and work due now still
    finds its slots."""

    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.worker.board import TRAIN_RUNS

    with one_slot_node(tmp_path, pool_size=8) as (node, store, clock):
        due = clock.now() + timedelta(seconds=0.6)
        fires = _prepare(node, store, clock, [f"c{i:03d}" for i in range(40)], due)
        now_due = [Job(JobKey("PROCESS", "Customer.report", f"r{i}"), Status.WAITING, clock.now(), next_run=clock.now())
                   for i in range(4)]
        store.insert_many(now_due)

        node.reconciler.claims.claim(clock.now())

        runs = {run.key.uid: run for run in node.executor.table.all()}
        assert {row.key.uid for row in fires} <= set(runs)  # every fire claimed ahead, to start at `due`
        assert all(runs[row.key.uid].facts.started == due for row in fires)
        holding = [uid for uid, run in runs.items() if run.holds_slot and uid.startswith("c")]
        assert len(holding) == -(-len(fires) // TRAIN_RUNS)  # 2 slots seat 40 short runs
        assert node.executor.slots_ahead(clock.now()) == 2
        assert {f"r{i}" for i in range(4)} <= set(runs)  # the work due now was not crowded out
        assert node.executor.slots_used() == 2 + 4
        assert all(store.get(row.key).status is Status.IN_PROCESS for row in fires + now_due)


def test_prepared_fires_never_ride_on_trains_of_work_due_now_nor_take_more_than_half_the_pool(tmp_path):
    """Passengers inherit their train-mates' slots. Short work due now filled the pool, and
    100 prepared fires rode on its trains: once that work was done, every slot of the pool
    waited for their due time and work due meanwhile found none. A prepared fire rides only
    on a train of prepared fires, within half the pool; with no room, it is claimed when due
    (the claim pass is woken for it)."""

    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.trains import plan_trains

    with one_slot_node(tmp_path, pool_size=8) as (node, store, clock):
        launched: list = []
        node.executor._launch = lambda *runs: launched.extend(runs)
        due = clock.now() + timedelta(seconds=0.9)
        fires = _prepare(node, store, clock, [f"c{i:03d}" for i in range(100)], due)
        node.executor.short_jobs.learn(("USER_JOB", "Customer.quick"), [0.001] * 3)
        now_due = [Job(JobKey("USER_JOB", "Customer.quick", f"q{i}"), Status.WAITING, clock.now(), next_run=clock.now())
                   for i in range(8)]
        store.insert_many(now_due)

        claims = node.reconciler.claims
        claims.claim(clock.now())

        claimed = {run.key.uid for run in node.executor.table.all()}
        assert {f"q{i}" for i in range(8)} <= claimed  # the work due now first: it fills the 8 slots
        assert not claimed & {row.key.uid for row in fires}  # no prepared fire rides on its trains
        trains, _ = plan_trains(launched, node.executor.is_short)
        assert all(run.key.uid.startswith("q") for train in trains for run in train)

    (tmp_path / "full").mkdir()
    with one_slot_node(tmp_path / "full", pool_size=8) as (node, store, clock):
        due = clock.now() + timedelta(seconds=0.9)
        long_ones = [Job(JobKey("USER_JOB", "Customer.long", f"l{i}"), Status.SCHEDULED, clock.now(),
                         execution_interval="* * * * * *", next_run=due, worker_id="a", epoch=1) for i in range(4)]
        store.insert_many(long_ones)
        node.scheduler._fire([store.get(row.key) for row in long_ones])
        claims = node.reconciler.claims
        claims.claim(clock.now())
        assert node.executor.slots_ahead(clock.now()) == 4  # half the pool waits for `due` already
        later = due + timedelta(seconds=0.05)
        fires = _prepare(node, store, clock, [f"c{i:03d}" for i in range(10)], later)
        claims.claim(clock.now())
        assert all(store.get(row.key).status is Status.SCHEDULED for row in fires)  # not ahead: no room left
        assert node.executor.slots_used() == 4  # the other half stays free for work due now
        assert claims.next_wake == later  # ... and the pass is woken to claim them when due

    (tmp_path / "half").mkdir()
    with one_slot_node(tmp_path / "half", pool_size=8) as (node, store, clock):
        due = clock.now() + timedelta(seconds=0.9)
        groups = [_prepare(node, store, clock, [f"{g}{i:03d}" for i in range(40)], due, name=f"Customer.cron{g}",
                           affinity=affinity) for g, affinity in (("a", "ANY"), ("b", "ANY"))]
        node.reconciler.claims.claim(clock.now())
        assert node.executor.slots_ahead(clock.now()) <= 4  # half the pool at most
        assert node.executor.slots_used() <= 4
        assert all(store.get(row.key).status is Status.IN_PROCESS for group in groups for row in group)


def test_fires_of_short_jobs_take_a_share_of_a_slot_in_the_lead_cap(tmp_path):
    """The lead is cut so that the fires of one lead hold at most ``max_ahead`` slots; a
    short job's fire holds 1/TRAIN_RUNS of one (it rides a train), so bursts of them keep the
    lead they need."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.scheduler import Scheduler
    from fabricjobs.node.trains import slot_share
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    due = clock.now() + timedelta(seconds=5)

    def burst(prefix: str) -> list[Job]:
        return [store.insert(Job(JobKey("USER_JOB", f"Customer.{prefix}", f"{prefix}{i}"), Status.SCHEDULED,
                                 clock.now(), execution_interval="00:00:01", next_run=due, worker_id="n1",
                                 epoch=1)).row for i in range(40)]

    for name, short, lead in (("slow", False, 0.2), ("quick", True, 0.5)):
        scheduler = Scheduler(store, clock, "n1", on_ready=lambda: None, max_ahead=4,
                              slot_share=lambda row, short=short: slot_share(short))
        scheduler.lead = 0.5
        scheduler._fire(burst(name))  # 40 fires in the last 2 s: 20 a second
        with scheduler._cond:
            assert scheduler._lead() == pytest.approx(lead)  # 20/s x 0.2 s = 4 slots; short: 0.3 slots at 0.5 s
    store.close()


def test_before_fires_have_reached_workers_the_lead_learns_from_the_claim_of_a_batch(tmp_path):
    """A node's first batch of fires on Cassandra took 0.9 s to reach its workers; the next
    second's fires were prepared with the 50 ms lead meanwhile, and started late too. The
    claim of the first batch (its one write) sets the least lead until enough fires have been
    measured whole."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import FIRE_LEAD_MAX
    from fabricjobs.node.firelead import FIRE_LEAD
    from fabricjobs.node.scheduler import Scheduler
    from fabricjobs.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "jobs.db")
    clock = ManualClock()
    write_takes = [0.2]
    scheduler = Scheduler(store, clock, "n1", on_ready=lambda: None)

    def fire(uid: str) -> Job:
        """One fire offered, and claimed by the node's claims in ``write_takes`` seconds."""
        due = clock.now() + timedelta(seconds=0.02)
        row = store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                               execution_interval="00:00:01", next_run=due, worker_id="n1", epoch=1)).row
        scheduler._fire([row])
        assert scheduler.offers.take([row.key]) == {row.key}
        clock.advance(write_takes[0])
        scheduler.claimed([(row, True)], write_takes[0])
        return row

    assert scheduler.lead == FIRE_LEAD
    fire("a0")
    assert scheduler.lead == pytest.approx(0.3)  # 1.5 x the claim's write
    write_takes[0] = 2.0
    fire("a1")
    assert scheduler.lead == FIRE_LEAD_MAX
    write_takes[0] = 0.0
    for i in range(8):  # measured whole from now on: take -> worker 0.1 s
        row = fire(f"b{i}")
        clock.advance(0.1)
        scheduler.dispatched(row.key, row.next_run)
    assert scheduler.lead == pytest.approx(0.15)
    write_takes[0] = 0.5
    fire("c0")
    assert scheduler.lead == pytest.approx(0.15)  # a write no longer moves it

    # A node that fires now and then (fewer than 8 fires in the 30 s window): a slow first
    # write must not hold the lead at 1 s for good; its fires bring it down again.
    sparse = Scheduler(store, clock, "n1", on_ready=lambda: None)
    scheduler = sparse
    write_takes[0] = 0.7
    fire("s0")
    assert sparse.lead == FIRE_LEAD_MAX
    write_takes[0] = 0.0
    for i in range(1, 4):
        clock.advance(5.0)
        row = fire(f"s{i}")
        clock.advance(0.01)
        sparse.dispatched(row.key, row.next_run)
    assert sparse.lead == FIRE_LEAD  # 1.5 x 10 ms is under the least lead
    store.close()


def test_a_prepared_fire_sent_back_before_its_due_time_keeps_it_and_runs_once_then():
    """A passenger prepared ahead is sent back from its train when a train-mate runs long
    (0.2 s), before its due time. Given back WAITING with "now" as its due time it was claimed
    again as not prepared and started at once, 0.5 s early, and its run's success scheduled
    the same fire again: it ran twice. It keeps its due time, and this node's claim of it
    waits for that time again."""

    from fabricjobs.clock import ManualClock
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.decisions import RELEASED, RunFacts, after_run, claim
    from fabricjobs.worker.protocol import Outcome

    clock = ManualClock()
    due = clock.now() + timedelta(seconds=1)
    row = Job(JobKey("USER_JOB", "Customer.userJob1", "u"), Status.WAITING, clock.now(), next_run=due,
              execution_interval="00:00:01", worker_id="n1", epoch=3)
    _, running = claim(row, "n1", clock.now(), prepared=True)
    run = RunFacts("n1", running.epoch, due, running.start_time)
    clock.advance(0.45)  # sent back from its train
    _, back = after_run(running, run, Outcome(RELEASED), clock.now(), max_tries=10,
                        retry_delay=timedelta(seconds=1), zone=None)
    assert back.status is Status.WAITING and back.next_run == due
    _, again = claim(back, "n1", clock.now(), prepared=True)  # the scheduler's mark is (due, ...)
    assert again.start_time == due
