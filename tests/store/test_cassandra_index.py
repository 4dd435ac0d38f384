"""The Cassandra index (k2_jobs_index) never loses a live row's true entry.

A change writes its new entry (an *intent*) before its LWT; a reader must not take an intent
for a stale entry just because the row is behind it (or does not exist yet), and must not take
the row's true entry for a stale one just because an intent of the same key is newer. Each race
is replayed deterministically: a writer is held between its intent and its LWT (by wrapping
``_execute_lwt``), or dies there (its intent is written with ``_index_upsert`` and nothing
else). Through the real cassandra-driver against the CQL test server (testkit/cqlserver).
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.cassandra import index as cassandra_index, rows as cassandra_rows
from fabricjobs.store.cassandra import CassandraStore
from harness import wait_for

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
DEADLINE = 10.0  # seconds; only ever reached when a test fails
LIVE = [s for s in Status if not s.is_final]


@pytest.fixture
def server(cql_server):
    cql_server.faults.clear()
    yield cql_server
    cql_server.faults.clear()


@pytest.fixture
def stores(server):
    """Two stores on one fresh keyspace: a writer and a reader (two processes, two nodes)."""
    keyspace = "fj_" + uuid.uuid4().hex[:12]
    opened = [CassandraStore(hosts=[server.host], port=server.port, keyspace=keyspace, consistency="ONE",
                             request_timeout=5.0, connect_timeout=30.0) for _ in range(2)]
    yield opened
    for s in opened:
        s.close()


def waiting_job(uid: str) -> Job:
    return Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, T0, next_run=T0, arguments='{"x": 1}')


def claim(row: Job, node: str) -> Job:
    return row.replace(status=Status.IN_PROCESS, worker_id=node, epoch=row.epoch + 1, start_time=T0)


def entries(store: CassandraStore, key: JobKey) -> list[tuple[str, int]]:
    """(bucket, revision) of every index entry of ``key`` (a raw read: it tidies nothing)."""
    found = {(e.bucket, e.revision) for b in store._buckets(LIVE, None) for e in store._scan(b) if e.key == key}
    return sorted(found, key=lambda x: (x[1], x[0]))


def age_entries(store: CassandraStore, key: JobKey) -> None:
    """Let INTENT_GRACE pass on ``store``'s own clock: an intent's age is measured on the
    reader's monotonic clock, from when it first saw the entry (never by comparing clocks)."""
    real = store._monotonic
    store._monotonic = lambda: real() + cassandra_index.INTENT_GRACE.total_seconds() + 60


class HeldLwt:
    """Holds a store's next LWT between its index intent and the LWT itself, until released."""

    def __init__(self, store: CassandraStore, monkeypatch):
        self.at_lwt, self.release = threading.Event(), threading.Event()
        original = store._execute_lwt

        def held(*args, **kwargs):
            monkeypatch.setattr(store, "_execute_lwt", original)  # only the first one
            self.at_lwt.set()
            assert self.release.wait(DEADLINE), "the test never released the held LWT"
            return original(*args, **kwargs)

        monkeypatch.setattr(store, "_execute_lwt", held)

    def run(self, fn, *args):
        """Start ``fn(*args)`` in a thread and return once it is held before its LWT."""
        self.result: dict = {}

        def target():
            try:
                self.result["value"] = fn(*args)
            except BaseException as exc:  # reported by finish()
                self.result["error"] = exc

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        assert self.at_lwt.wait(DEADLINE), "the writer never reached its LWT"
        return self

    def finish(self):
        self.release.set()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the held writer did not finish"
        if "error" in self.result:
            raise self.result["error"]
        return self.result["value"]


# -- an insert's intent met before its IF NOT EXISTS -------------------------------------------------

FAILED_CHANGES = {
    "claim": lambda c: claim(c, "n1"),
    "archive": lambda c: c.replace(status=Status.TERMINATED, archived=True, end_time=T0),  # the full-rewrite path
}


@pytest.mark.parametrize("change", sorted(FAILED_CHANGES))
def test_a_change_that_meets_an_insert_before_its_lwt_does_not_hide_the_job(stores, monkeypatch, change):
    client, node = stores
    job = waiting_job("lost")
    insert = HeldLwt(client, monkeypatch).run(client.insert, job)

    seen = node.waiting(10)
    assert [c.uid for c in seen] == ["lost"]  # the insert's intent: the row does not exist yet
    res = node.cas(seen[0], FAILED_CHANGES[change](seen[0]))
    assert not res.applied and res.current is None
    assert entries(node, job.key) == [("WAITING|4", 1)]  # the intent is not taken for a stale entry
    # ... nor offered again while its row is not there: each offer would be another lost LWT,
    # contending with the insert's own (nodes woken during a bulk STARTJOB lost 3 each).
    assert node.waiting(10) == [] and node.waiting_by_priority(10) == []

    assert insert.finish().applied
    assert [c.uid for c in node.waiting(10)] == ["lost"]
    assert [j.uid for j in node.live_jobs()] == ["lost"]
    row = node.waiting(10)[0]
    assert node.cas(row, claim(row, "n1")).applied
    assert [j.uid for j in node.by_owner(["n1"], [Status.IN_PROCESS])] == ["lost"]


def test_an_insert_intent_whose_writer_died_is_dropped_after_the_grace(stores):
    client, node = stores
    job = waiting_job("dead")
    client._index_upsert(job.replace(revision=1), 1)  # the writer dies before its IF NOT EXISTS

    candidate = node.waiting(10)[0]
    assert not node.cas(candidate, claim(candidate, "n1")).applied
    assert entries(node, job.key) == [("WAITING|4", 1)]  # within the grace: it may still come
    assert node.waiting(10) == []  # but not offered again until a read shows its row

    age_entries(node, job.key)
    assert node.waiting(10) == [] and entries(node, job.key) == []  # that read drops it after the grace


def test_an_insert_that_cannot_see_a_row_leaves_its_intent_to_the_grace_rule(server, stores, monkeypatch):
    """Two inserts of one key with the same due time write the very same index entry. One that
    gives up (every attempt had an unknown outcome, and no row can be seen) must not delete it:
    it may be the other insert's, still before its LWT."""
    a, b = stores
    job = waiting_job("twin")
    other = HeldLwt(b, monkeypatch).run(b.insert, job)
    monkeypatch.setattr(cassandra_rows, "_CONTENTION_RETRIES", 2)
    server.faults.add("write_timeout", r"UPDATE \w+\.k2_jobs SET .* IF revision = null", applied=False, times=2, write_type="CAS")
    gave_up = a.insert(job)
    assert not gave_up.applied and gave_up.row is None
    assert entries(a, job.key) == [("WAITING|4", 1)]

    assert other.finish().applied
    assert [c.uid for c in a.waiting(10)] == ["twin"]
    assert [j.uid for j in a.live_jobs()] == ["twin"]


def test_a_repeated_insert_of_the_same_job_keeps_the_entry_it_shares_with_the_first(stores):
    """A retried STARTJOB (the same Job, due time with microseconds) writes the very entry the
    first insert wrote; losing to it must not delete that entry (Cassandra keeps milliseconds,
    so the due times differ only as Python sees them)."""
    a, b = stores
    due = T0.replace(microsecond=123456)
    job = waiting_job("again").replace(creation_time=due, next_run=due)
    assert a.insert(job).applied
    again = b.insert(job)
    assert not again.applied and again.row.revision == 1
    assert entries(b, job.key) == [("WAITING|4", 1)]
    assert [c.uid for c in b.waiting(10)] == ["again"]


# -- a writer that dies between its intent and its LWT ---------------------------------------------


def _claimed_with_dead_outcome(n1: CassandraStore, uid: str) -> tuple[Job, Job]:
    """A recurring job claimed by n1, whose outcome (back to SCHEDULED) was cut short: n1 died
    after writing the SCHEDULED|n1 intent at revision 3, before its LWT."""
    job = waiting_job(uid).replace(execution_interval="* * * * * *")
    assert n1.insert(job).applied
    row = n1.get(job.key)
    claimed = n1.cas(row, claim(row, "n1")).row
    assert (claimed.status, claimed.revision) == (Status.IN_PROCESS, 2)
    outcome = claimed.replace(status=Status.SCHEDULED, next_run=T0 + timedelta(seconds=1))
    n1._index_upsert(outcome, claimed.revision + 1)
    return claimed, outcome


def test_a_dead_writers_intent_does_not_hide_the_row_from_a_takeover(stores):
    n1, n2 = stores
    claimed, _ = _claimed_with_dead_outcome(n1, "stuck")
    key = claimed.key

    found = n2.by_owner(["n1"], [Status.IN_PROCESS, Status.SCHEDULED])  # the takeover scan of dead n1
    assert [(j.uid, j.status, j.revision) for j in found] == [("stuck", Status.IN_PROCESS, 2)]
    assert entries(n2, key) == [("IN_PROCESS|n1", 2), ("SCHEDULED|n1", 3)]  # the true entry stays
    assert [j.uid for j in n2.by_owner(["n1"], [Status.IN_PROCESS])] == ["stuck"]

    taken = n2.cas(found[0], found[0].replace(status=Status.WAITING, worker_id=None))
    assert taken.applied and taken.row.revision == 3
    assert [c.uid for c in n2.waiting(10)] == ["stuck"]


@pytest.mark.parametrize("met_by", ["a scan of every bucket", "the dead node's own CAS"])
def test_a_dead_writers_intent_at_the_revision_a_takeover_reached_is_dropped(stores, met_by):
    """After the takeover the row is at revision 3 too, elsewhere: the dead intent at revision 3
    can never apply, and must not haunt n1's SCHEDULED bucket forever."""
    n1, n2 = stores
    claimed, _ = _claimed_with_dead_outcome(n1, "haunt")
    key = claimed.key
    assert n2.cas(claimed, claimed.replace(status=Status.WAITING, worker_id=None)).applied
    assert entries(n2, key) == [("SCHEDULED|n1", 3), ("WAITING|4", 3)]

    if met_by == "a scan of every bucket":
        live = [s for s in Status if not s.is_final]
        assert [j.uid for j in n2.by_status(live)] == ["haunt"]
    else:
        ghost = n1.due_scheduled("n1", T0 + timedelta(days=1), 10)
        assert [(j.uid, j.revision) for j in ghost] == [("haunt", 3)]
        assert not n1.cas(ghost[0], ghost[0].replace(status=Status.IN_PROCESS, epoch=ghost[0].epoch + 1)).applied
    assert entries(n2, key) == [("WAITING|4", 3)]
    assert n1.due_scheduled("n1", T0 + timedelta(days=1), 10) == []
    assert [c.uid for c in n2.waiting(10)] == ["haunt"]


def test_a_dead_writers_intent_newer_than_the_row_is_dropped_after_the_grace(stores):
    n1, n2 = stores
    claimed, _ = _claimed_with_dead_outcome(n1, "late")
    key = claimed.key
    assert [j.revision for j in n2.by_owner(["n1"], [Status.IN_PROCESS, Status.SCHEDULED])] == [2]
    assert entries(n2, key) == [("IN_PROCESS|n1", 2), ("SCHEDULED|n1", 3)]

    age_entries(n2, key)
    assert [j.revision for j in n2.by_owner(["n1"], [Status.IN_PROCESS, Status.SCHEDULED])] == [2]
    assert entries(n2, key) == [("IN_PROCESS|n1", 2)]  # the intent went; the true entry stays


def test_a_scan_during_a_change_in_flight_keeps_both_entries(stores, monkeypatch):
    writer, reader = stores
    job = waiting_job("flight")
    row = writer.insert(job).row
    change = HeldLwt(writer, monkeypatch).run(writer.cas, row, claim(row, "n1"))

    # Both entries are there: the reader gets the row's true one and deletes neither.
    assert [(j.uid, j.status) for j in reader.by_status([Status.WAITING, Status.IN_PROCESS])] == \
        [("flight", Status.WAITING)]
    assert entries(reader, job.key) == [("WAITING|4", 1), ("IN_PROCESS|n1", 2)]

    assert change.finish().applied
    assert [(j.uid, j.status) for j in reader.by_status([Status.WAITING, Status.IN_PROCESS])] == \
        [("flight", Status.IN_PROCESS)]
    assert entries(reader, job.key) == [("IN_PROCESS|n1", 2)]


def test_a_page_of_live_jobs_reads_only_its_rows_and_reads_on_past_an_archived_one(stores, monkeypatch):
    """The live list's page reads the listing (k2_jobs_live) for keys, then rows for the page
    only; a key whose row turns out archived (here its listing entry written again after the
    archive, as a resume whose LWT lost would leave it) costs one more row read, not a short
    page."""
    writer, reader = stores
    rows = {uid: writer.insert(waiting_job(uid)).row for uid in ("a", "b", "c", "d", "e")}
    writer.cas(rows["b"], rows["b"].replace(status=Status.TERMINATED, archived=True, end_time=T0))
    writer._send([writer._listed_write(rows["b"].replace(creation_time=T0 + timedelta(days=1)))], bounded=False)
    asked: list[list[str]] = []
    get_many = reader.get_many
    monkeypatch.setattr(reader, "get_many", lambda keys: asked.append([k.uid for k in keys]) or get_many(keys))

    assert [j.uid for j in reader.live_jobs(limit=2)] == ["a", "c"]
    assert asked == [["a", "b"], ["c"]]
    asked.clear()
    assert [j.uid for j in reader.live_jobs(after=JobKey("USER_JOB", "A.b", "c"), limit=1)] == ["d"]
    assert asked == [["d"]]
    assert [j.uid for j in reader.live_jobs()] == ["a", "c", "d", "e"]


def test_a_live_listing_keeps_a_job_that_moved_on_while_it_was_read(stores, monkeypatch):
    """The listing's scan saw a change in flight (the old entry and the intent); by the time it
    read the row, the row had moved on again, so neither entry is its true one. The job is
    still live and listed (the firelag benchmark on Apache Cassandra listed 82 of 100)."""
    writer, reader = stores
    row = writer.insert(waiting_job("mover")).row
    writer.insert(waiting_job("still"))
    change = HeldLwt(writer, monkeypatch).run(writer.cas, row, claim(row, "n1"))
    get_many = reader.get_many

    def moved_on_first(keys):
        if not change.release.is_set():
            running = change.finish().row
            writer.cas(running, running.replace(status=Status.WAITING, worker_id=None, start_time=None))
        return get_many(keys)

    monkeypatch.setattr(reader, "get_many", moved_on_first)
    assert [(j.uid, j.status, j.revision) for j in reader.live_jobs()] == \
        [("mover", Status.WAITING, 3), ("still", Status.WAITING, 1)]


# -- sweeps: range deletes over the tombstones of claimed entries (cassandra/sweep.py) ----------

def index_rows(server, store: CassandraStore, bucket: str, key: JobKey) -> int:
    """Rows (live or tombstoned) the test server keeps in ``key``'s partition of ``bucket``:
    a row shadowed by a range tombstone is dropped, as compaction would drop it."""
    table = server.engine.keyspaces[store.keyspace].tables["k2_jobs_index"]
    partition = table.data.get((bucket, cassandra_index._shard(key)))
    return 0 if partition is None else len(partition.rows)


def test_a_sweep_covers_claimed_entries_and_spares_one_written_after_its_read(server, stores, monkeypatch):
    """The sweep that follows a read shadows what was deleted before it, and nothing written
    since the read: its range tombstone is stamped SWEEP_LAG before the read."""
    from fabricjobs.store.cassandra.sweep import SWEEP_LAG

    writer, other = stores
    # One shard, so that every entry below shares a partition.
    monkeypatch.setattr(cassandra_index, "_shard", lambda key: 0)
    due = [T0 + timedelta(milliseconds=i) for i in range(4)]
    rows = [writer.insert(Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, T0, next_run=d)).row
            for uid, d in zip("abxc", due)]
    for row in rows[1:3]:  # deletes the WAITING entries of b and x (two: worth a range tombstone)
        assert writer.cas(row, claim(row, "n1")).applied
    deleted_at = time.time()
    assert index_rows(server, writer, "WAITING|4", rows[1].key) == 4  # a, c and two tombstones
    wait_for(lambda: time.time() > deleted_at + SWEEP_LAG + 0.05, SWEEP_LAG + 5, "the sweep lag to pass")

    sweeps = []
    original = writer._sweep

    def late_write_then_sweep(plan):
        if plan.partition == ("WAITING|4", 0):
            # Between the read and its sweep another node writes an entry into the very gap.
            other.insert(Job(JobKey("USER_JOB", "A.b", "late"), Status.WAITING, T0, next_run=due[1]))
            sweeps.append(original(plan))
            return sweeps[-1]
        return original(plan)

    monkeypatch.setattr(writer, "_sweep", late_write_then_sweep)
    assert [j.uid for j in writer.waiting(10)] == ["a", "c"]
    assert sweeps, "the read was not followed by a sweep"
    sweeps[0].result()
    assert [j.uid for j in other.waiting(10)] == ["a", "late", "c"]  # spared
    assert index_rows(server, writer, "WAITING|4", rows[1].key) == 3  # a, late, c: the tombstones are gone


def test_an_index_write_acknowledged_too_late_is_written_again(server, stores):
    """A sweep may shadow an entry whose write took longer than ENTRY_WRITE_BOUND (it can be
    missed by a read and still be stamped before the sweep's cutoff): such an entry is
    written again, with a fresh stamp, before the LWT relies on it."""
    from fabricjobs.store.cassandra.sweep import ENTRY_WRITE_BOUND

    writer, reader = stores
    server.faults.add("delay", r"INSERT INTO \w+\.k2_jobs_index", delay=ENTRY_WRITE_BOUND + 0.3, applied=True, times=1)
    assert writer.insert(waiting_job("slow")).applied
    assert writer.stats.slow_entry_writes == 1
    assert [j.uid for j in reader.waiting(10)] == ["slow"]


def test_an_index_write_as_slow_as_a_degraded_network_is_not_written_again(server, stores):
    """An index write acknowledged after 1.6 s (a QUORUM write where every path between hosts
    is 200 ms +- 100 ms one way with some loss took 1.0-1.6 s) counts as written: the bound is
    above it. With a 1 s bound such writes were sent again five times and then failed, and
    nodes on that network claimed nothing for 20 s (tests/test_partitions.py, scenario 4)."""
    writer, reader = stores
    server.faults.add("delay", r"INSERT INTO \w+\.k2_jobs_index", delay=1.6, applied=True, times=1)
    assert writer.insert(waiting_job("slow")).applied
    assert writer.stats.slow_entry_writes == 0
    assert [j.uid for j in reader.waiting(10)] == ["slow"]
