"""Claim passes: lost claims ask for a full pass, each batch of claims starts at once, and a
run counts as ended only once it left the running gauge."""

from __future__ import annotations

from datetime import timedelta

import pytest
from node_parts import StoreWith, one_slot_node


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
            return store.cas_each_within(pairs, *args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=cas_each)
        node.signals.full.clear()
        with node.executor.holding_starts():
            claims.claim(clock.now(), full=False)
        assert node.signals.full.is_set()  # the next pass reads the nodes


def test_a_pass_starts_each_batch_of_claims_at_once(tmp_path):
    """A pass commits each claim by itself: what one of its steps claimed (a due fire) starts
    then, not after the pass's slower steps (chaos on Cassandra saw fires start 0.6 s late
    behind them), and a batch's runs leave together, so that short ones share trains."""

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
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.node.executor import Executor
    from fabricjobs.store.sqlite import SqliteStore
    from fabricjobs.worker.runner import OK, Outcome

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


def test_a_claim_pass_that_finds_nothing_waiting_reads_no_more(tmp_path):
    """Most claim passes of a busy node (one per run that ends, per fire offered) find nothing
    WAITING. An empty first page says there is nothing by priority either: on Cassandra the
    second read was an index read per pass for nothing. With rows waiting, both are read."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path) as (node, store, clock):
        asked: list[str] = []

        def waiting(*args, **kwargs):
            asked.append("waiting")
            return store.waiting(*args, **kwargs)

        def waiting_by_priority(*args, **kwargs):
            asked.append("by priority")
            return store.waiting_by_priority(*args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, waiting=waiting, waiting_by_priority=waiting_by_priority)
        with node.executor.holding_starts():
            claims.claim(clock.now(), full=False)
        assert asked == ["waiting"]
        now = clock.now()
        for uid, priority in (("low", 2), ("high", 7)):
            store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.WAITING, now, next_run=now,
                             priority=priority))
        asked.clear()
        with node.executor.holding_starts():
            claims.claim(clock.now(), full=False)
        assert asked[:2] == ["waiting", "by priority"]
        assert store.get(JobKey("USER_JOB", "Customer.userJob1", "high")).status is Status.IN_PROCESS


def test_a_fire_the_scheduler_had_whole_is_claimed_without_reading_its_row_back(tmp_path):
    """A recurring job's row comes back whole from its last run's outcome write: the claim of
    its next fire is written as a whole row, which the store answers without reading the row
    back (on Cassandra one read per fire, on the fire's way to its worker). A fire known only
    from the index (a refresh) is claimed as a candidate; so is one whose row changed since;
    all in one write."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path, pool_size=3) as (node, store, clock):
        due = clock.now() + timedelta(milliseconds=30)  # within the fire lead
        rows = [store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                                 execution_interval="00:00:01", next_run=due, worker_id="a", epoch=1,
                                 arguments=f'{{"x": "{uid}"}}')).row for uid in ("whole", "indexed", "changed")]
        writes: list[list[tuple[str, bool]]] = []
        returned: list[Job] = []

        def cas_each_within(pairs, *args, **kwargs):
            results = store.cas_each_within(pairs, *args, **kwargs)
            writes.append([(res.row.arguments, flag) for res, flag in zip(results, kwargs["whole"])])
            returned.extend(res.row for res in results)
            return results

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=cas_each_within)
        node.scheduler.add_whole(store.get(rows[0].key))  # as its last run's outcome write returned it
        node.scheduler.add_whole(store.get(rows[2].key))
        changed = store.get(rows[2].key)
        store.cas(changed, changed.replace(priority=7))  # an UPDATEJOB since
        node.scheduler._fire([rows[0], rows[1], store.get(rows[2].key)])
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert len(writes) == 1  # one write for the pass
        assert sorted(writes[0]) == [('{"x": "changed"}', False), ('{"x": "indexed"}', False), ('{"x": "whole"}', True)]
        assert [store.get(row.key).status for row in rows] == [Status.IN_PROCESS] * 3
        assert all(row == store.get(row.key) for row in returned)  # what the runs start with is what is stored
        assert node.scheduler.whole_row(rows[0]) is None  # used once


def test_a_new_cron_job_due_within_a_second_is_owned_by_its_first_fires_claim(tmp_path):
    """A new cron job due within a second (a script of every-second jobs) is not adopted and
    then fired: the claim of its first fire makes the node its owner, one write where there
    were two (on Cassandra an LWT fewer per new job, in the burst when a script's jobs are all
    first due at once). Until then nothing is written; a job due later is adopted as before,
    and its row comes back whole, so the claim of its first fire needs no read either (a
    script of 100 cron jobs is 100 reads fewer on Cassandra)."""
    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path) as (node, store, clock):
        soon, later = (JobKey("USER_JOB", "Customer.userJob1", uid) for uid in ("soon", "later"))
        store.insert(Job(soon, Status.SCHEDULED, clock.now(), execution_interval="* * * * * *",
                         next_run=clock.now() + timedelta(milliseconds=300)))
        store.insert(Job(later, Status.SCHEDULED, clock.now(), execution_interval="* * * * *",
                         next_run=clock.now() + timedelta(minutes=1)))
        before = store.get(soon)
        node.reconciler._adopt_scheduled(clock.now())
        assert store.get(soon) == before  # nothing written for it yet
        adopted = store.get(later)
        assert adopted.worker_id == "a"  # adopted: its fire is a minute away
        assert node.scheduler.whole_row(adopted) == adopted  # kept whole for its first fire's claim
        writes: list[list[tuple[JobKey, bool]]] = []

        def cas_each_within(pairs, *args, **kwargs):
            writes.append([(old.key, flag) for (old, _), flag in zip(pairs, kwargs["whole"])])
            return store.cas_each_within(pairs, *args, **kwargs)

        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=cas_each_within)
        node.scheduler._fire([before])
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert writes == [[(soon, True)]]  # one write, of the whole row as the adoption read it
        row = store.get(soon)
        assert row.status is Status.IN_PROCESS and row.worker_id == "a" and row.epoch == before.epoch + 1


def _unowned_cron(store, clock, uid: str, due_in: float, **kw):
    from fabricjobs.model import Job, JobKey, Status

    return store.insert(Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.SCHEDULED, clock.now(),
                            execution_interval="* * * * * *", next_run=clock.now() + timedelta(seconds=due_in), **kw)).row


def _fire_due(scheduler, row):
    """What the scheduler's thread does when ``row`` comes due: take it from its heap, fire it."""
    with scheduler._cond:
        held = scheduler._rows.pop(row.key)
    scheduler._fire([held])


def test_an_unowned_fire_whose_claim_was_not_written_is_fired_again(tmp_path):
    """A first fire taken unowned whose claim's write failed (the store away: no answer) is
    not lost: the scheduler, reading the unchanged row again, fires it again; so does the next
    adoption pass, if the scheduler let it go. Before, the row, still nobody's, was turned away
    by the scheduler and left by the adoption pass as if the scheduler still held it: on a
    node alone, that job never ran again."""
    from fabricjobs.model import Status

    with one_slot_node(tmp_path) as (node, store, clock):
        row = _unowned_cron(store, clock, "flaky", 0.3)
        node.reconciler._adopt_scheduled(clock.now())
        assert node.scheduler.holds(row)
        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=lambda pairs, **kw: [None] * len(pairs))  # not written
        _fire_due(node.scheduler, row)
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert store.get(row.key) == row and not node.scheduler.holds(row)  # (gone from the offers)
        node.scheduler._read_again(node.scheduler._recheck)
        assert node.scheduler.holds(row)  # read again, unchanged: to be fired again
        node.scheduler._rows.clear()  # ... or let go: the next adoption pass takes it again
        node.reconciler._adopt_scheduled(clock.now())
        assert node.scheduler.holds(row)
        claims.store = store
        _fire_due(node.scheduler, row)
        with node.executor.holding_starts():
            claims.claim(clock.now())
        taken = store.get(row.key)
        assert taken.status is Status.IN_PROCESS and taken.worker_id == "a"


def test_a_skipped_first_fire_of_an_unowned_job_makes_the_node_its_owner(tmp_path):
    """A first fire taken unowned that its late threshold skips is written as a skip that also
    makes this node the owner (one write), so the next fires are scheduled here; left nobody's,
    each next fire waited for an adoption pass, late again. The history line names the node."""
    with one_slot_node(tmp_path) as (node, store, clock):
        row = _unowned_cron(store, clock, "late", -2.5, late_threshold="00:00:01")
        node.reconciler._adopt_scheduled(clock.now())
        _fire_due(node.scheduler, row)
        skipped = store.get(row.key)
        assert skipped.worker_id == "a" and skipped.epoch == row.epoch + 1 and skipped.next_run > clock.now()
        assert [(str(r.result), r.node) for r in store.runs("USER_JOB", "Customer.userJob1", "late")] == [("SKIPPED", "a")]
        assert node.scheduler.holds(skipped)  # its next fire is this node's


def test_another_lanes_new_job_due_within_a_second_is_taken_after_the_lane_wait(tmp_path):
    """Another lane's new job due within a second is left to its lane's node for the lane
    wait, as an adoption is, then fired here too (nothing written until the claim): in the
    burst of a script's first fires one node's were 2.1 s late when the other left them to it
    until they were due. Of the two claims of one fire, one applies."""
    from fabricjobs.model import JobKey

    with one_slot_node(tmp_path) as (node, store, clock):
        node.liveness.alive = lambda: ["a", "b"]
        node.reconciler.claims.lanes.patience = 0.2
        uid = next(u for u in (f"u{i}" for i in range(100)) if JobKey("USER_JOB", "Customer.userJob1", u).lane(2) == 1)
        row = _unowned_cron(store, clock, uid, 0.8)
        node.reconciler._adopt_scheduled(clock.now())  # first seen: b's for the lane wait
        assert not node.scheduler.holds(row)
        clock.advance(0.3)
        node.reconciler._adopt_scheduled(clock.now())
        assert node.scheduler.holds(row) and store.get(row.key) == row  # to be fired here, nothing written yet
