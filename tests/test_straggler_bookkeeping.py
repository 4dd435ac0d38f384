"""The bookkeeping of writes that straggle (docs/explanation/nodes.md, "Writes that straggle"),
on an in-process node: a store that answers some writes only later, by a Future, as the
Cassandra store does for an LWT not answered within the loop's patience. A claim still being
written holds its slot and is not sent again; its run starts when it applies, under the epoch
it wrote; one that lost gives its slot back; an outcome still being written keeps its run until
it answers. (tests/test_straggling_writes.py shows the same on Apache Cassandra, end to end.)"""

from __future__ import annotations

from concurrent.futures import Future
from contextlib import contextmanager

from node_parts import StoreWith, one_slot_node


class LateAnswers:
    """``cas_each_within`` of ``store`` that answers the writes of ``keys`` by a Future, written
    to the store only when the test says (:meth:`answer`); every other write at once."""

    def __init__(self, store, keys) -> None:
        self.store, self.keys, self.left = store, set(keys), []

    def __call__(self, pairs, runs=None, on_error=lambda expected: None, *, whole=False, patience):
        from fabricjobs.store.base import each_whole

        out = []
        for i, (pair, flag) in enumerate(zip(pairs, each_whole(whole, len(pairs)))):
            record = runs[i] if runs else None
            if pair[0].key in self.keys:
                future: Future = Future()
                self.left.append((future, pair, record, flag))
                out.append(future)
            else:
                out.append(self.store.cas_each([pair], [record], on_error, whole=flag)[0])
        return out

    def answer(self) -> None:
        left, self.left = self.left, []
        for future, pair, record, whole in left:
            future.set_result(self.store.cas_each([pair], [record], whole=whole)[0])


def _job(uid, clock):
    from fabricjobs.model import Job, JobKey, Status

    return Job(JobKey("USER_JOB", "Customer.userJob1", uid), Status.WAITING, clock.now(), next_run=clock.now())


def test_a_claim_still_being_written_holds_its_slot_and_its_run_starts_when_it_applies(tmp_path):
    from fabricjobs.model import Status

    with one_slot_node(tmp_path, pool_size=4) as (node, store, clock):  # room for a takeover, too
        slow, quick = (store.insert(_job(uid, clock)).row for uid in ("slow", "quick"))
        late = LateAnswers(store, {slow.key})
        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=late)
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert node.executor.run_for(quick.key) is not None  # the write that answered: its run starts now
        assert node.executor.run_for(slow.key) is None and slow.key in claims.stragglers
        assert node.executor.slots_used() == 2  # the quick run's, and the one held for the slow claim

        store.insert(_job("third", clock))
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert len(late.left) == 1  # the slow claim is not sent again meanwhile
        assert node.executor.slots_used() == 3

        late.answer()  # it applied ...
        node.reconciler._take_over(clock.now())  # ... and before the loop acts on that, this node's
        row = store.get(slow.key)  # IN_PROCESS row without a run is not taken for an orphan
        assert (row.status, row.worker_id, row.epoch) == (Status.IN_PROCESS, "a", 1)
        with node.executor.holding_starts():
            claims.claim(clock.now())
        run = node.executor.run_for(slow.key)
        assert run is not None and run.facts.epoch == 1 and slow.key not in claims.stragglers
        assert node.executor.slots_used() == 3  # the held slot became the run's


@contextmanager
def a_late_claim(tmp_path):
    """A node with two slots that has claimed the job 'slow', whose claim has not answered:
    yields (node, store, the row as claimed, its LateAnswers)."""
    with one_slot_node(tmp_path, pool_size=2) as (node, store, clock):
        slow = store.insert(_job("slow", clock)).row
        late = LateAnswers(store, {slow.key})
        node.reconciler.claims.store = StoreWith(store, cas_each_within=late)
        with node.executor.holding_starts():
            node.reconciler.claims.claim(clock.now())
        assert node.executor.slots_used() == 1 and slow.key in node.reconciler.claims.stragglers
        yield node, store, slow, late


def test_a_claim_still_being_written_that_loses_gives_its_slot_back(tmp_path):
    from fabricjobs.model import Status

    with a_late_claim(tmp_path) as (node, store, slow, late):
        store.cas(slow, slow.replace(status=Status.IN_PROCESS, worker_id="b", epoch=1))  # another node won it
        late.answer()
        with node.executor.holding_starts():
            node.reconciler.claims.claim(node.clock.now())
        assert node.executor.run_for(slow.key) is None and not node.reconciler.claims.stragglers
        assert node.executor.slots_used() == 0
        assert store.get(slow.key).worker_id == "b"


def test_a_claim_that_applies_after_the_node_lost_its_lease_starts_no_run(tmp_path):
    """Fenced (a lost lease, another instance of its name) the node runs nothing new: a claim
    that applies late leaves its row to be taken over, and its slot goes back."""
    with a_late_claim(tmp_path) as (node, store, slow, late):
        node.signals.fenced = True
        late.answer()
        with node.executor.holding_starts():
            node.reconciler.run_pass(full=False)
        assert node.executor.run_for(slow.key) is None and not node.reconciler.claims.stragglers
        assert node.executor.slots_used() == 0
        assert store.get(slow.key).worker_id == "a"  # claimed: its row is this node's to be taken over


def test_an_outcome_still_being_written_keeps_its_run_until_it_answers(tmp_path):
    from fabricjobs.model import Event, Status, advance
    from fabricjobs.node.decisions import claim
    from fabricjobs.worker.protocol import OK, Outcome

    with one_slot_node(tmp_path) as (node, store, clock):
        row = store.insert(advance(None, Event.START, _job("u1", clock))).row
        row = store.cas(row, advance(row, *claim(row, "a", clock.now()))).row
        node.executor.start(row, "ANY", False, node.board.generation())
        run = node.executor.run_for(row.key)
        writer = node.executor.writer
        late = LateAnswers(store, {row.key})
        writer.store = StoreWith(store, cas_each_within=late)
        answered: list[bool] = []
        writer.on_answered = lambda: answered.append(True)
        node.executor.table.finish(run, Outcome(OK, output="1"), clock.now())
        node.executor.flush()
        assert store.get(row.key).status is Status.IN_PROCESS and writer.straggling()
        assert node.executor.run_for(row.key) is run and node.executor.slots_used() == 1  # kept
        late.answer()
        assert answered == [True]  # the answer wakes the loop ...
        node.executor.flush()  # ... which acts on it
        assert store.get(row.key).status is Status.PROCESSED
        assert node.executor.run_for(row.key) is None and node.executor.slots_used() == 0
        assert not writer.straggling()


def test_a_claim_still_being_written_is_not_published_as_a_run(tmp_path):
    """Peers read a node's runs per pool from its heartbeat (the give-back rule compares them
    with the recommended counts), and the node compares its own with them: a claim that has not
    answered may still lose, so only its run, once it applies, is counted there."""
    with a_late_claim(tmp_path) as (node, store, slow, late):
        assert node.executor.per_pool() == {}  # published: no run yet
        assert node.executor.slots_running("ANY") == 0
        assert node.executor.slots_used() == 1  # but its slot is not claimed twice
        late.answer()
        with node.executor.holding_starts():
            node.reconciler.claims.claim(node.clock.now())
        assert node.executor.run_for(slow.key) is not None
        assert node.executor.per_pool() == {"ANY": 1} and node.executor.slots_used() == 1


def test_prepared_fires_whose_claims_straggle_count_in_the_half_of_the_pool_held_ahead(tmp_path):
    """Fires prepared ahead of their due time hold at most half the pool; a prepared fire whose
    claim has not answered holds its slot ahead as well, so fires prepared after it are not
    claimed ahead beyond that half (they are claimed when due)."""
    from datetime import timedelta

    from fabricjobs.model import Job, JobKey, Status

    with one_slot_node(tmp_path, pool_size=8) as (node, store, clock):
        due = clock.now() + timedelta(seconds=0.9)
        long_ones = [Job(JobKey("USER_JOB", "Customer.long", f"l{i}"), Status.SCHEDULED, clock.now(),
                         execution_interval="* * * * * *", next_run=due, worker_id="a", epoch=1) for i in range(4)]
        store.insert_many(long_ones)
        late = LateAnswers(store, {row.key for row in long_ones})
        claims = node.reconciler.claims
        claims.store = StoreWith(store, cas_each_within=late)
        node.scheduler._fire([store.get(row.key) for row in long_ones])
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert len(claims.stragglers) == 4 and node.executor.slots_used() == 4

        later = due + timedelta(seconds=0.05)
        node.executor.short_jobs.learn(("USER_JOB", "Customer.cron"), [0.001] * 3)
        fires = [Job(JobKey("USER_JOB", "Customer.cron", f"c{i:03d}"), Status.SCHEDULED, clock.now(),
                     execution_interval="* * * * * *", next_run=later, worker_id="a", epoch=1) for i in range(10)]
        store.insert_many(fires)
        node.scheduler._fire([store.get(row.key) for row in fires])
        with node.executor.holding_starts():
            claims.claim(clock.now())
        assert all(store.get(row.key).status is Status.SCHEDULED for row in fires)  # not ahead: no room left
        assert node.executor.slots_used() == 4  # the other half stays free for work due now
