"""What only the Cassandra backend has: unknown LWT outcomes, the index, TTL, its schema.

Through the real cassandra-driver against the CQL test server (testkit/cqlserver), which
injects the failures a real cluster produces.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.errors import SchemaVersionError, StoreError, StoreUnavailable
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.base import RunRecord
from fabricjobs.store.cassandra import CassandraStore, parse_replication
from fabricjobs.store.cassandra import history as cassandra_history, index as cassandra_index, session as cassandra_session
from fabricjobs.store.cassandra.schema import SCHEMA_VERSION
from harness import wait_for
from upgrades import assert_issue_22_columns_round_trip

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


@pytest.fixture
def server(cql_server):
    cql_server.faults.clear()
    yield cql_server
    cql_server.faults.clear()


def open_store(server, keyspace, **kw):
    """(A connect timeout of 30 s: the server is a thread of this niced test process, slow to
    answer on a loaded machine.)"""
    return CassandraStore(hosts=[server.host], port=server.port, keyspace=keyspace, consistency="ONE",
                          request_timeout=kw.pop("request_timeout", 5.0), connect_timeout=kw.pop("connect_timeout", 30.0),
                          **kw)


def driver_cluster(server):
    """A bare driver Cluster on the test server, for tests that run CQL of their own. With the
    store's 10 s timeouts: the driver's 2 s control connection timeout is too short for a test
    server sharing a loaded machine (a fresh run saw it time out reading the schema tables)."""
    from cassandra.cluster import Cluster

    return Cluster([server.host], port=server.port, protocol_version=4, connect_timeout=10,
                   control_connection_timeout=10)


@pytest.fixture
def keyspace():
    return "fj_" + uuid.uuid4().hex[:12]


@pytest.fixture
def pair(server, keyspace):
    """Two stores on one keyspace: two nodes racing for the same row. ``a``'s request timeout
    is short enough for the "delay" fault to outlast it, long enough for the driver to connect
    again after the "disconnect" one (its first try comes after 1 s; a fresh run's loaded
    machine once took longer than a 1 s timeout, and the next write failed)."""
    a = open_store(server, keyspace, request_timeout=3.0)
    b = open_store(server, keyspace)
    yield a, b
    a.close()
    b.close()


def waiting_job(uid="u1") -> Job:
    return Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, T0, next_run=T0, arguments='{"x": 1}')


def claim(row: Job, node: str) -> Job:
    return row.replace(status=Status.IN_PROCESS, worker_id=node, epoch=row.epoch + 1, start_time=T0)


CLAIM_LWT = r"UPDATE \w+\.k2_jobs .* IF status"

UNKNOWN = [
    ("write_timeout", dict(write_type="CAS")),
    ("write_timeout", dict(write_type="SIMPLE")),
    ("cas_write_unknown", {}),
    ("write_failure", dict(write_type="CAS")),
    ("disconnect", {}),  # the connection is lost with the LWT in flight
    ("delay", dict(delay=4.0)),  # longer than the client's 3 s request timeout: OperationTimedOut
    ("unavailable", {}),  # Cassandra also raises it at the commit of an accepted proposal
]
UNKNOWN_IDS = ["WriteTimeout-CAS", "WriteTimeout-SIMPLE", "0x1700", "WriteFailure", "connection-lost", "OperationTimedOut",
               "Unavailable"]


@pytest.mark.parametrize("kind, kw", UNKNOWN, ids=UNKNOWN_IDS)
def test_unknown_outcome_that_did_apply_is_recognised_as_ours(server, pair, kind, kw):
    a, b = pair
    row = a.insert(waiting_job()).row
    server.faults.add(kind, CLAIM_LWT, applied=True, times=1, **kw)
    res = a.cas(row, claim(row, "node-a"))
    assert res.applied, "the SERIAL read shows our (worker_id, epoch): the claim applied"
    assert (res.row.worker_id, res.row.epoch, res.row.revision) == ("node-a", 1, 2)
    # node-b, racing with the same read, loses: no double claim
    assert not b.cas(row, claim(row, "node-b")).applied
    assert a.get(row.key).worker_id == "node-a"
    assert server.stats["serial_reads"] >= 1


@pytest.mark.parametrize("kind, kw", UNKNOWN, ids=UNKNOWN_IDS)
def test_unknown_outcome_when_someone_else_owns_the_row(server, pair, kind, kw):
    a, b = pair
    row = a.insert(waiting_job()).row
    assert b.cas(row, claim(row, "node-b")).applied  # node-b won meanwhile
    server.faults.add(kind, CLAIM_LWT, applied=True, times=1, **kw)  # a's LWT runs (and fails its IF) but the reply is lost
    res = a.cas(row, claim(row, "node-a"))
    assert not res.applied
    assert res.current.worker_id == "node-b" and res.current.epoch == 1
    stored = a.get(row.key)
    assert (stored.worker_id, stored.epoch, stored.revision) == ("node-b", 1, 2)


def test_an_unavailable_paxos_round_is_a_refusal_not_an_unknown_outcome(server, pair):
    """Too few replicas for the Paxos round itself (Unavailable at the serial level): nothing
    was proposed, so nothing is settled (an outage would make each claim wait for its reads)."""
    a, _ = pair
    row = a.insert(waiting_job()).row
    server.faults.add("unavailable", CLAIM_LWT, times=1, at_serial=True)
    before = server.stats["serial_reads"]
    with pytest.raises(StoreError, match="too few replicas for a lightweight transaction"):
        a.cas(row, claim(row, "node-a"))
    assert server.stats["serial_reads"] == before and a.get(row.key).status is Status.WAITING


@pytest.mark.parametrize("kind, kw", UNKNOWN[:5], ids=UNKNOWN_IDS[:5])
def test_an_unknown_outcome_that_did_not_apply_on_an_unchanged_row_is_contention_and_is_retried(server, pair, kind, kw):
    a, _ = pair
    row = a.insert(waiting_job()).row
    before = server.stats.snapshot()
    server.faults.add(kind, CLAIM_LWT, applied=False, times=2, **kw)
    res = a.cas(row, claim(row, "node-a"))
    assert res.applied and res.row.worker_id == "node-a" and res.row.epoch == 1
    after = server.stats.snapshot()
    assert after["faults_fired"] - before["faults_fired"] == 2  # two contended attempts ...
    assert after["lwts_applied"] - before["lwts_applied"] == 1  # ... then the third applied, once


def test_a_retry_answered_not_applied_is_recognised_as_our_own_earlier_attempt(server, pair):
    """The first attempt timed out on an unchanged row (contention, it seemed), yet it did
    apply, late: the retry then meets our own write and answers "not applied". That is ours."""
    a, _ = pair
    row = a.insert(waiting_job()).row
    applied_late = {}
    original = a._select_job

    def serial_read_before_the_late_commit(key, serial=False):
        if serial and not applied_late:  # the settle read sees the row unchanged ...
            applied_late["row"] = original(key, serial)
            b_stmt = a._session.prepare(f"UPDATE {a.keyspace}.k2_jobs SET status = 'IN_PROCESS', worker_id = 'node-a', epoch = 1, "
                                        "revision = 2 WHERE type = ? AND name = ? AND uid = ? IF revision = 1")
            a._session.execute(b_stmt, (key.type, key.name, key.uid))  # ... then our first attempt lands
            return applied_late["row"]
        return original(key, serial)

    a._select_job = serial_read_before_the_late_commit
    server.faults.add("write_timeout", CLAIM_LWT, applied=False, times=1, write_type="CAS")
    before = a.stats.unknown_outcomes
    res = a.cas(row, claim(row, "node-a"))
    assert res.applied and (res.row.worker_id, res.row.epoch, res.row.revision) == ("node-a", 1, 2)
    assert a.stats.unknown_outcomes == before + 2 and a.stats.contention_retries >= 1


def test_the_intent_is_written_again_before_each_retry(server, pair):
    a, _ = pair
    row = a.insert(waiting_job()).row
    writes = []
    original = a._entry_write
    a._entry_write = lambda job, revision: (writes.append((job.status, revision)), original(job, revision))[1]
    server.faults.add("write_timeout", CLAIM_LWT, applied=False, times=2, write_type="CAS")
    assert a.cas(row, claim(row, "node-a")).applied
    assert writes == [(Status.IN_PROCESS, 2)] * 3  # the intent, then once more before each of the two retries


@pytest.mark.parametrize("micros", [0, 123_456])  # a creation time in microseconds is kept in whole ms
def test_an_unknown_insert_outcome_is_settled_too(server, pair, micros):
    a, b = pair
    server.faults.add("write_timeout", r"UPDATE \w+\.k2_jobs SET .* IF revision = null", applied=True, times=1, write_type="CAS")
    job = waiting_job("i1")
    res = a.insert(job.replace(creation_time=job.creation_time.replace(microsecond=micros)))
    assert res.applied and res.row.revision == 1
    again = b.insert(waiting_job("i1"))
    assert not again.applied and again.row.arguments == '{"x": 1}'


def test_an_unknown_insert_outcome_is_ours_even_once_a_node_has_claimed_the_row(server, pair, monkeypatch):
    """A STARTJOB whose write timed out but applied, and whose job a node claimed before the
    SERIAL read that settles it: the row is past revision 1, yet it is ours (our creation time
    and arguments). It was reported "Job is running" (partition scenario 4 in a fresh run)."""
    a, b = pair
    server.faults.add("write_timeout", r"UPDATE \w+\.k2_jobs SET .* IF revision = null", applied=True, times=1, write_type="CAS")
    settle = a._settle_read

    def claimed_first(key):
        row = b.get(key)
        assert b.cas(row, claim(row, "node-b")).applied
        return settle(key)

    monkeypatch.setattr(a, "_settle_read", claimed_first)
    res = a.insert(waiting_job("i2"))
    assert res.applied and res.row.status is Status.IN_PROCESS and res.row.worker_id == "node-b"


def test_lwts_are_never_resent_by_the_driver(server, pair):
    a, _ = pair
    row = a.insert(waiting_job()).row
    server.faults.add("overloaded", CLAIM_LWT, times=1)
    before = server.stats["faults_fired"]
    with pytest.raises(Exception):
        a.cas(row, claim(row, "node-a"))
    assert server.stats["faults_fired"] - before == 1  # one send, no retry on another host


def test_a_prepare_left_unanswered_gives_up_after_the_request_timeout_not_the_drivers_ten_seconds(server, keyspace):
    """The first use of a statement after a partition prepares it on a host that may be cut
    off: the node's main thread must not wait 10 s there (the driver's own default)."""
    store = open_store(server, keyspace, request_timeout=0.5)
    try:
        server.faults.add("delay", "nodes WHERE name", statements="prepare", delay=30.0, applied=False, times=2)
        began = time.monotonic()
        with pytest.raises(StoreError, match="cannot prepare"):
            store.node("n1")
        assert time.monotonic() - began < 8.0  # two tries of 0.5 s each (slower under load), not 10 s or more
        assert store.node("n1") is None  # answered once the host answers again
    finally:
        store.close()


def test_the_reads_of_opening_wait_as_long_as_connecting_may_not_only_the_request_timeout(server, keyspace):
    """A node starting on a busy cluster: a slow answer to the nodes' placement read or the
    listing mark is waited for up to CONNECT_TIMEOUT_SEC, as the connection was; requests
    after opening keep the request timeout."""
    open_store(server, keyspace).close()  # the schema exists: what is left of opening is reads
    server.faults.delay(r"store_consistency FROM \w+\.nodes", 1.0, regex=True, times=1)
    server.faults.delay(r"FROM \w+\.fabricjobs_schema WHERE id = 'k2_jobs_live'", 1.0, regex=True, times=1)
    store = open_store(server, keyspace, request_timeout=0.3, connect_timeout=5.0)
    try:
        assert server.stats["faults_fired"] >= 2  # both reads were slow, and waited for
        server.faults.delay(r"FROM \w+\.nodes", 1.0, regex=True, times=1, statements="read")
        with pytest.raises(StoreError, match="OperationTimedOut|timed out|timeout"):
            store.nodes()
    finally:
        store.close()


def test_only_statements_safe_to_send_twice_may_go_to_a_second_host(server, keyspace, monkeypatch):
    """Speculative execution ([cassandra] SPECULATIVE_DELAY_MS) sends an unanswered idempotent
    statement to another host too: every LWT the store sends must be marked otherwise, and the
    reads and plain writes that make up the rest of a job's life may be sent twice."""
    store = open_store(server, keyspace)
    sent: list[tuple[str, bool]] = []
    real = store._session.execute_async

    def recording(stmt, params=None, execution_profile=None, **kw):
        sent.append((getattr(stmt, "query_string", None) or getattr(getattr(stmt, "prepared_statement", None),
                                                                          "query_string", "batch"), stmt.is_idempotent))
        return real(stmt, params, execution_profile, **kw) if execution_profile is not None else real(stmt, params, **kw)

    monkeypatch.setattr(store._session, "execute_async", recording)
    try:
        row = store.insert(waiting_job("twice")).row
        claimed = store.cas(row, claim(row, "n1")).row
        store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0))
        store.waiting(10)
        conditional = [q for q, safe in sent if " IF " in q.upper()]
        assert conditional and all(not safe for q, safe in sent if q in conditional), sent
        assert any(safe for q, safe in sent if q.upper().startswith("SELECT")), sent
    finally:
        store.close()


def test_every_job_row_change_is_an_lwt_and_the_index_follows_it(server, keyspace):
    store = open_store(server, keyspace)
    try:
        before, counted = server.stats.snapshot(), dataclasses.replace(store.stats)
        row = store.insert(waiting_job("life")).row
        claimed = store.cas(row, claim(row, "n1")).row
        done = store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=1)))
        after = server.stats.snapshot()
        assert done.applied
        assert after["lwts"] - before["lwts"] == 3  # insert, claim, outcome: one LWT each
        # The store counts what it sends (metrics, bench_cassandra.py on a real cluster) as the server does.
        mine = {k: getattr(store.stats, k) - getattr(counted, k) for k in ("lwt_attempts", "writes", "reads")}
        assert mine == {"lwt_attempts": after["lwts"] - before["lwts"], "writes": after["writes"] - before["writes"],
                        "reads": after["reads"] + after["serial_reads"] - before["reads"] - before["serial_reads"]}
        assert store.waiting(10) == [] and store.by_owner(["n1"], [Status.IN_PROCESS]) == []
        assert [j.uid for j in store.archived_since(T0)] == ["life"]
        ttl = store._session.execute(f"SELECT TTL(arguments) AS t FROM {store.keyspace}.k2_jobs WHERE type='USER_JOB' AND name='A.b' AND uid='life'").one()["t"]
        assert 0 < ttl <= 720 * 3600  # the whole archived row carries the TTL
    finally:
        store.close()


def test_the_rows_of_a_group_of_claims_are_read_back_with_the_group(server, keyspace):
    """A conditional UPDATE that applies returns no row, and a claim of an index candidate must
    hand its run the whole row: the group's rows are read back together once its writes have
    answered (one read each, sent at once), each claim with its own row."""
    store = open_store(server, keyspace)
    try:
        rows = [r.row for r in store.insert_many([waiting_job(f"g{i:02d}") for i in range(30)])]
        candidates = store.waiting(100)  # index entries: no whole row, as a claim pass has them
        assert sorted(c.key.uid for c in candidates) == [r.key.uid for r in rows]
        reads = store.stats.reads
        results = store.cas_each_within([(c, claim(c, "n1")) for c in candidates], patience=30)
        assert store.stats.reads - reads == 30
        assert [res.row for res in results] == [store.get(c.key) for c in candidates]
        assert all(res.row.arguments == '{"x": 1}' and res.row.worker_id == "n1" for res in results)

        more = [r.row for r in store.insert_many([waiting_job(f"h{i:02d}") for i in range(3)])]
        candidates = store.waiting(100)
        reads = store.stats.reads
        done = store.cas_many([(c, claim(c, "n2")) for c in candidates])
        assert store.stats.reads - reads == 3
        assert sorted(res.row.key.uid for res in done) == [r.key.uid for r in more]
    finally:
        store.close()


def test_a_read_back_that_does_not_answer_in_time_leaves_futures_and_one_that_fails_an_error(server, keyspace, monkeypatch):
    """The group's read of its rows runs while the node's loop waits: a slow one must not hold
    the loop (its claims come back as Futures answered by the read, as writes that straggle),
    and a failed one is tried again; one that keeps failing reports the claims as not written
    (on_error), never as applied without a row."""
    import threading
    from concurrent.futures import Future

    from fabricjobs.errors import StoreError

    store = open_store(server, keyspace)
    try:
        store.insert_many([waiting_job(f"s{i}") for i in range(3)])
        release, reading = threading.Event(), store.get_many

        def slow_get_many(keys):
            release.wait(30)
            return reading(keys)

        monkeypatch.setattr(store, "get_many", slow_get_many)
        results = store.cas_each_within([(c, claim(c, "n1")) for c in store.waiting(10)], patience=0.05)
        assert all(isinstance(res, Future) and not res.done() for res in results)
        release.set()
        rows = [res.result(timeout=30).row for res in results]
        assert all(row.worker_id == "n1" and row.arguments == '{"x": 1}' for row in rows)

        def failing_get_many(keys):
            raise StoreError("Cassandra: ReadTimeout")

        monkeypatch.setattr(store, "get_many", reading)
        store.insert_many([waiting_job(f"t{i}") for i in range(2)])
        candidates = store.waiting(10)
        monkeypatch.setattr(store, "get_many", failing_get_many)
        failed: list = []
        results = store.cas_each_within([(c, claim(c, "n1")) for c in candidates], on_error=failed.append, patience=5)
        # (tried again twice within the patience first: the claims applied)
        assert results == [None, None] and len(failed) == 2
    finally:
        store.close()


class _Answers:
    """Futures answered at given times of a fake clock, and a ``wait`` that moves the clock to
    the next answer (or by its timeout): cas_each_within's wait, replayed without sleeping."""

    def __init__(self, at: list[float | None]) -> None:
        from concurrent.futures import Future

        self.now = 0.0
        self.futures = [Future() for _ in at]
        self.at = dict(zip(self.futures, at))

    def wait(self, pending, timeout, return_when):
        due = [t for f, t in self.at.items() if f in pending and t is not None]
        if not due or min(due) - self.now > timeout:
            self.now += timeout
            return set(), set(pending)
        self.now = min(due)
        done = {f for f in pending if self.at[f] is not None and self.at[f] <= self.now}
        for f in done:
            f.set_result(None)
        return done, set(pending) - done


@pytest.mark.parametrize("at, waited, answered", [
    ([0.4, 0.8, 1.2, 1.6, None], 2.1, 4),  # a slow group: waited for while it answers, then 0.5 s for the last
    ([0.01, 0.02, 0.03, None], 0.53, 3),  # one straggler among quick ones: 0.5 s after the others
    ([0.3 * k for k in range(1, 40)], 4.0, 13),  # answers that never stop: 4 s at most
    ([0.1, 0.2], 0.2, 2),  # all answered: no wait beyond the last
])
def test_a_group_of_writes_is_waited_for_while_its_writes_keep_answering(at, waited, answered):
    """A write straggles when it is slower than its group, not when the whole group is slow: on
    three Cassandra nodes under load whole groups of claims took over 0.5 s, and a fixed 0.5 s
    wait left most of each to answer late (its passengers given back: 7 LWTs a job)."""
    from fabricjobs.store.cassandra.store import _wait_while_answering

    answers = _Answers(at)
    _wait_while_answering(answers.futures, 0.5, monotonic=lambda: answers.now, wait_for=answers.wait)
    assert answers.now == pytest.approx(waited)
    assert sum(f.done() for f in answers.futures) == answered


def test_archived_keys_are_spread_over_partitions_per_day_and_the_version_3_table_is_still_read(server, keyspace):
    """JOBSTATUS n DAYS AGO: a day's archived keys go to 16 partitions (one a day held every
    job of the day), and keys that an upgraded cluster wrote to the old one-partition-a-day
    table before the upgrade are still found until their TTL has run out."""
    store = open_store(server, keyspace)
    try:
        for uid in ("new-1", "new-2", "old"):
            row = store.insert(waiting_job(uid)).row
            claimed = store.cas(row, claim(row, "n1")).row
            assert store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True,
                                                      end_time=T0 + timedelta(seconds=1))).applied
        ks = store.keyspace
        shards = {r["shard"] for r in store._session.execute(f"SELECT shard FROM {ks}.k2_jobs_archived")}
        assert len(shards) >= 2  # spread, not one partition
        # As a version-3 node wrote it: the old table only.
        store._session.execute(f"DELETE FROM {ks}.k2_jobs_archived WHERE day = %s AND shard IN ({', '.join(map(str, range(16)))})",
                               (T0.strftime("%Y-%m-%d"),))
        store._session.execute(f"INSERT INTO {ks}.k2_jobs_archive (day, end_time, type, name, uid) VALUES (%s, %s, %s, %s, %s)",
                               (T0.strftime("%Y-%m-%d"), T0 + timedelta(seconds=1), "USER_JOB", "A.b", "old"))
        assert [j.uid for j in store.archived_since(T0)] == ["old"]
    finally:
        store.close()


def test_archived_jobs_since_long_ago_cost_what_is_kept_not_a_read_per_day_of_the_calendar(server, keyspace):
    """GET /api/v1/jobs?scope=archived&since=2000-01-01 (or JOBSTATUS 10000 DAYS AGO) asks for every
    archived job still kept. Reading two partitions for each day since then was ~20,000 reads,
    5 s on the test server (and a since of year 1, millions): with a window longer than the
    retention, the archive's few kept entries are read instead, and the answer is the same."""
    store = open_store(server, keyspace)
    try:
        for uid, end in (("long-ago", T0 - timedelta(days=60)), ("recent", datetime.now(UTC))):
            row = store.insert(waiting_job(uid)).row
            claimed = store.cas(row, claim(row, "n1")).row
            assert store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=end)).applied
        for since, want in ((datetime(2000, 1, 1, tzinfo=UTC), ["long-ago", "recent"]),
                            (datetime(1, 1, 2, tzinfo=UTC), ["long-ago", "recent"]),
                            (T0 - timedelta(days=59), ["recent"])):
            before = server.stats.snapshot()
            assert [j.uid for j in store.archived_since(since)] == want, since
            reads = server.stats.snapshot()["reads"] - before["reads"]
            assert reads <= 10, (since, reads)  # the archive (2 tables) and the rows found
        recent = datetime.now(UTC) - timedelta(days=2)  # within the retention: a read per day, as before
        assert [j.uid for j in store.archived_since(recent)] == ["recent"]
    finally:
        store.close()


def test_run_history_is_kept_in_buckets_of_runs_and_the_version_3_tables_are_still_read(server, keyspace, monkeypatch):
    """A job that runs every second must not grow one partition for its whole retention: its
    runs go to partitions of RUN_BUCKET runs, found through k2_job_run_keys; lines an upgraded
    cluster wrote to the version-3 table (one partition per job) are still read."""
    monkeypatch.setattr(cassandra_history, "RUN_BUCKET", 2)
    store = open_store(server, keyspace)
    try:
        key = JobKey("USER_JOB", "A.b", "tick")
        end = datetime.now(timezone.utc)
        store.add_runs([RunRecord(key, e, "n1", end, end, end + timedelta(seconds=e), "OK", "SCHEDULED", 0)
                        for e in range(1, 6)])
        ks = store.keyspace
        buckets = {r["bucket"] for r in store._session.execute(f"SELECT bucket FROM {ks}.k2_job_run_history")}
        assert buckets == {0, 1, 2}
        old = RunRecord(JobKey("USER_JOB", "A.b", "before"), 7, "n1", end, end, end, "ERROR", "FAILED", 0)
        store._session.execute(
            f"INSERT INTO {ks}.k2_job_runs (type, name, uid, epoch, node, end_time, result, status, tries) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            ("USER_JOB", "A.b", "before", 7, "n1", end, "ERROR", "FAILED", 0))
        store._session.execute(f"INSERT INTO {ks}.k2_job_run_uids (type, name, uid) VALUES ('USER_JOB', 'A.b', 'before')")
        assert [r.epoch for r in store.runs("USER_JOB", "A.b", "tick")] == [5, 4, 3, 2, 1]
        assert [r.epoch for r in store.runs("USER_JOB", "A.b", "tick", limit=2)] == [5, 4]
        assert [(r.key.uid, r.epoch) for r in store.runs("USER_JOB", "A.b")][:2] == [("tick", 5), ("tick", 4)]
        assert ("before", 7) in [(r.key.uid, r.epoch) for r in store.runs("USER_JOB", "A.b")]
        assert store.run(key, 3).epoch == 3 and store.run(old.key, 7).result == "ERROR"
    finally:
        store.close()


def test_a_lost_index_write_is_repaired_not_lost(server, keyspace):
    """An index entry left behind by a crash between the LWT and the index delete is dropped
    by the first reader that meets it; the row stays findable."""
    store = open_store(server, keyspace)
    try:
        row = store.insert(waiting_job("r")).row
        # The claim's LWT applies, but the delete of its WAITING entry is lost (as in a crash).
        server.faults.add("write_timeout", r"DELETE FROM \w+\.k2_jobs_index", applied=False, times=1, write_type="SIMPLE")
        assert store.cas(row, claim(row, "n1")).applied
        stale = store.waiting(10)
        assert [j.uid for j in stale] == ["r"]  # the stale WAITING entry
        res = store.cas(stale[0], claim(stale[0], "n2"))
        assert not res.applied and res.current.worker_id == "n1"  # CAS protects the row ...
        assert store.waiting(10) == []  # ... and the stale entry is gone
        assert [j.uid for j in store.by_owner(["n1"], [Status.IN_PROCESS])] == ["r"]
    finally:
        store.close()


def test_schema_is_created_on_first_use_and_versioned(server, keyspace):
    store = open_store(server, keyspace)
    assert store.schema_version() == SCHEMA_VERSION
    store._session.execute(f"UPDATE {keyspace}.fabricjobs_schema SET version = 99 WHERE id = 'k2_jobs'")
    store.close()
    with pytest.raises(SchemaVersionError, match="schema version 99, newer than this fabricjobs understands"):
        open_store(server, keyspace)


def test_a_version_1_keyspace_is_upgraded_in_place(server, keyspace):
    from fabricjobs.store.cassandra.schema import SCHEMA_V1 as SCHEMA

    cluster = driver_cluster(server)
    s = cluster.connect()
    s.execute(f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}")
    s.set_keyspace(keyspace)
    for ddl in SCHEMA:
        s.execute(ddl)
    s.execute("INSERT INTO fabricjobs_schema (id, version) VALUES ('k2_jobs', 1)")
    s.execute("INSERT INTO k2_jobs (type, name, uid, status, archived, creation_time, revision, epoch, tries) "
              "VALUES ('USER_JOB', 'A.b', 'old', 'WAITING', false, '2026-01-01T00:00:00Z', 1, 0, 0)")
    s.execute("INSERT INTO k2_jobs_index (bucket, shard, next_run, type, name, uid, revision, status, epoch, tries) "
              "VALUES ('WAITING|4', %s, 0, 'USER_JOB', 'A.b', 'old', 1, 'WAITING', 0, 0)",
              (cassandra_index._shard(JobKey("USER_JOB", "A.b", "old")),))
    cluster.shutdown()
    with pytest.raises(StoreError, match=f"schema version 1; this fabricjobs needs {SCHEMA_VERSION}"):
        open_store(server, keyspace, create_schema=False)
    store = open_store(server, keyspace)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert [j.uid for j in store.live_jobs()] == ["old"]  # listed at the upgrade to version 16 (listing.py)
        old = store.get(JobKey("USER_JOB", "A.b", "old"))
        assert old.runs == 0 and old.status is Status.WAITING and old.finishing is False
        assert old.resume_at is None
        kept = datetime(2027, 1, 1, tzinfo=timezone.utc)
        assert (old.owner, old.requestor) == ("", "")  # version 10's columns, empty for old rows
        changed = store.cas(old, old.replace(finishing=True, resume_at=kept, late_action="RUN",
                                            on_failure="USER_JOB.A.c", owner="alice", requestor="payments")).row  # versions 6-10
        assert (changed.finishing, changed.resume_at, changed.late_action, changed.on_failure) == (True, kept, "RUN", "USER_JOB.A.c")
        assert (changed.owner, changed.requestor) == ("alice", "payments")
        assert store.get(old.key) == changed
        assert_issue_22_columns_round_trip(store, changed)  # later versions' columns and table
        assert store.runs("USER_JOB", "A.b") == []
    finally:
        store.close()


def test_the_printed_schema_cql_makes_a_store_that_works_without_create_schema(server, keyspace):
    from fabricjobs.store.cassandra import schema_cql

    cluster = driver_cluster(server)
    session = cluster.connect()
    for statement in schema_cql(keyspace, "SimpleStrategy:1").split("\n"):
        session.execute(statement.rstrip(";"))
    cluster.shutdown()
    store = open_store(server, keyspace, create_schema=False)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        row = store.insert(waiting_job("s")).row
        assert store.cas(row, claim(row, "n1")).applied
        assert store.mark_file(JobKey("INTERFACE_LISTENER", "A.b", "l"), "f", "x")
    finally:
        store.close()


def test_without_create_schema_a_missing_keyspace_is_a_clear_error(server):
    with pytest.raises(StoreError, match="CREATE_SCHEMA"):
        open_store(server, "fj_absent_" + uuid.uuid4().hex[:6], create_schema=False)


def test_an_unreachable_cluster_is_a_clear_error():
    with pytest.raises(StoreError, match="cannot connect to Cassandra at 127.0.0.1:1"):
        CassandraStore(hosts=["127.0.0.1"], port=1, connect_timeout=1.0)


def test_username_and_password_from_config_ini_log_in(tmp_path):
    """[cassandra] USERNAME / PASSWORD reach the driver (PasswordAuthenticator on the server);
    a wrong password is one clear error."""
    from testkit.rig import write_config
    from testkit.cqlserver import CqlTestServer

    from fabricjobs.config import load_config
    from fabricjobs.store import open_store as open_configured

    with CqlTestServer(username="fabric", password="s3cret") as srv:
        def config(password: str):
            return load_config(write_config(tmp_path / f"{password}.ini", {
                "store": {"BACKEND": "cassandra"},
                "cassandra": {"HOSTS": srv.host, "PORT": srv.port, "KEYSPACE": "fj_auth", "PROTOCOL_VERSION": 4,
                              "CONSISTENCY": "QUORUM", "USERNAME": "fabric", "PASSWORD": password, "CONNECT_TIMEOUT_SEC": 2}}))

        store = open_configured(config("s3cret"))
        try:
            assert store.insert(Job(JobKey("USER_JOB", "A.b", "u"), Status.WAITING, T0, next_run=T0)).applied
        finally:
            store.close()
        with pytest.raises(StoreError, match="cannot connect to Cassandra") as refused:
            open_configured(config("wrong"))
        assert not isinstance(refused.value, StoreUnavailable)  # waiting cannot fix it: a node exits 2


def test_a_cassandra_that_cannot_read_its_roles_yet_is_waited_for_and_a_wrong_password_is_not():
    """Cassandra answers a login it cannot check (system_auth's replicas not up: a cluster still
    starting) as bad credentials, with this text; a starting node waits for that to pass
    (docs/guides/cluster.md, "Starting a node"), not for a wrong password."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    from fabricjobs.store.cassandra.session import driver_error

    def login_failed(text: str):
        return NoHostAvailable("Unable to connect to any servers", {"10.0.0.1:9042": AuthenticationFailed(
            f'Failed to authenticate to 10.0.0.1:9042: Error from server: code=0100 [Bad credentials] message="{text}"')})

    starting = driver_error(login_failed("Unable to perform authentication: Cannot achieve consistency level QUORUM"), "x")
    wrong = driver_error(login_failed("Provided username fabric and/or password are incorrect"), "x")
    assert isinstance(starting, StoreUnavailable)
    assert isinstance(wrong, StoreError) and not isinstance(wrong, StoreUnavailable)


def test_a_host_name_that_does_not_resolve_yet_is_a_store_that_does_not_answer():
    """A host booted before its DNS: a node waits for the name to resolve, as for a store that
    is down; the message names the setting."""
    with pytest.raises(StoreUnavailable, match=r"cannot resolve any Cassandra host of \[cassandra\] HOSTS "
                                               r"\(no-such-host\.invalid\)"):
        CassandraStore(hosts=["no-such-host.invalid"], port=9042, connect_timeout=1.0)


def test_replication_settings():
    assert parse_replication("SimpleStrategy:3") == {"class": "SimpleStrategy", "replication_factor": 3}
    assert parse_replication("NetworkTopologyStrategy:DC1=3, DC2=2") == {
        "class": "NetworkTopologyStrategy", "DC1": 3, "DC2": 2}
    with pytest.raises(StoreError, match="REPLICATION"):
        parse_replication("Everywhere")


def test_bad_keyspace_names_are_refused_before_any_cql(server):
    with pytest.raises(StoreError, match="not a valid keyspace name"):
        open_store(server, "ks; DROP KEYSPACE system")


def test_the_driver_is_imported_only_for_this_backend(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from fabricjobs.client import Client; "
            f"c = Client.from_config({str(tmp_path / 'c.ini')!r}); c.fetch('jobstatus;'); "
            "print('cassandra' in sys.modules)")
    (tmp_path / "c.ini").write_text(f"[store]\nSQLITE_PATH = {tmp_path / 'x.db'}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_runs_history_line_is_readable_by_the_time_its_row_change_lands(server, keyspace, monkeypatch):
    """WAITJOB then JOBLOG: whoever sees the outcome row must find its run. Cassandra cannot
    put both in one transaction, so the line goes first and a losing writer takes it back."""
    store = open_store(server, keyspace)
    try:
        inserted = store.insert(waiting_job("h")).row
        row = store.cas(inserted, claim(inserted, "n1")).row
        seen_at_lwt = []
        real_apply = store._apply

        def spying_apply(change):  # the LWT of the change
            seen_at_lwt.append(store.run(change.key, change.expected.epoch))
            return real_apply(change)

        monkeypatch.setattr(store, "_apply", spying_apply)
        done = row.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=1))
        rec = RunRecord(row.key, row.epoch, "n1", T0, T0, T0 + timedelta(seconds=1), "OK", "PROCESSED", 0)
        assert store.cas_many([(row, done)], runs=[rec])[0].applied
        assert seen_at_lwt[0] is not None and seen_at_lwt[0].result == "OK"
        # The same write again is fenced (the row moved on): its line is taken back.
        stale = dataclasses.replace(rec, end=T0 + timedelta(seconds=2), result="ERROR")
        later = row.replace(status=Status.FAILED, end_time=T0 + timedelta(seconds=2))
        assert not store.cas_many([(row, later)], runs=[stale])[0].applied
        assert [r.result for r in store.runs("USER_JOB", "A.b", "h")] == ["OK"]
    finally:
        store.close()


def test_a_forgotten_node_leaves_the_owners_registry(server, keyspace):
    """k2_jobs_owners lists the owners whose buckets a full read must visit; a node forgotten
    (gone longer than the retention, owning nothing) must not stay there for ever."""
    from fabricjobs.store.base import NodeRow

    store = open_store(server, keyspace)
    try:
        for node in ("n1", "n2"):
            row = store.insert(waiting_job(f"j-{node}")).row
            done = store.cas(row, claim(row, node)).row
            store.cas(done, done.replace(status=Status.PROCESSED, archived=True, end_time=T0))
            store.write_node(NodeRow(node, "i", "DC1", "h", 1, T0, "v", 1))
        assert sorted(store._registry("owner")) == ["n1", "n2"]
        store.delete_node(next(r for r in store.nodes() if r.name == "n1"))
        assert store._registry("owner") == ["n2"]
    finally:
        store.close()


def test_a_node_restarted_under_a_forgotten_name_stays_in_the_owners_registry(server, keyspace):
    """A peer forgets a dead node n1 (it owns nothing) just as a new node n1 starts and takes a
    job: the peer's delete of n1 from the owners registry must not hide the new node's buckets
    from listings for good. A delete stamped with the read beat leaves a later registration
    alone; one that covers it anyway (the old node's clock was ahead) is undone by the new node's
    renewals."""
    from fabricjobs.store.base import NodeRow
    from fabricjobs.store.cassandra.nodes import OWNER_RENEW_SEC

    new, peer = open_store(server, keyspace), open_store(server, keyspace)
    try:
        peer.write_node(NodeRow("n1", "old", "DC1", "h", 1, T0, "v", 1))  # the old n1's last beat
        stale = next(r for r in peer.nodes() if r.name == "n1")  # what the peer judged gone
        clock = [1000.0]
        new._monotonic = lambda: clock[0]
        new.write_node(NodeRow("n1", "new", "DC1", "h", 2, T0, "v", 1))
        row = new.insert(waiting_job("taken")).row
        new.cas(row, claim(row, "n1"))

        def listed() -> bool:
            return [j.key.uid for j in peer.by_status([Status.IN_PROCESS])] == ["taken"]

        assert listed()
        peer.delete_node(stale)  # stamped with the old beat: the new registration stays
        assert listed()
        peer.delete_node(dataclasses.replace(stale, stamp=stale.stamp + 2 * 10**6))  # the old n1's clock 2 s ahead
        assert not listed()
        beats = iter(range(2, 10**6))

        def renewed() -> bool:  # the new n1 beats; every OWNER_RENEW_SEC it registers its name again
            clock[0] += OWNER_RENEW_SEC
            new.write_node(NodeRow("n1", "new", "DC1", "h", 2, T0, "v", next(beats)))
            return listed()

        wait_for(renewed, 10, "the new n1's buckets to be listed again, once its clock passed the old beat")
    finally:
        new.close()
        peer.close()


def test_a_heartbeat_request_gives_up_after_its_own_timeout(server, keyspace):
    """A beat stuck on an unresponsive coordinator must not use up the node's lease: with a
    timeout the write (and the read of the nodes) fails fast, and the next beat tries again."""
    import time

    from fabricjobs.store.base import NodeRow

    store = open_store(server, keyspace)  # request timeout 5 s
    try:
        row = NodeRow("n1", "i", "DC1", "h", 1, T0, "v", 1)
        store.write_node(row)
        for call in (lambda: store.write_node(row, timeout=0.3), lambda: store.nodes(timeout=0.3)):
            server.faults.add("delay", r"\w+\.nodes", delay=10.0, times=1)
            began = time.monotonic()
            with pytest.raises(StoreError):
                call()
            assert time.monotonic() - began < 5.0  # 0.3 s (slower under load), not the 10 s the host holds it
    finally:
        store.close()


def test_a_server_warning_on_a_response_that_lands_while_the_callback_is_added_is_counted():
    """The driver runs a callback added just after the response is stored but before the
    future is marked finished; reading `warnings` there raised into the caller (a claim
    race on real Cassandra died of it). The warning must be counted, and nothing raised."""
    from unittest import mock

    from cassandra.cluster import ResponseFuture

    future = ResponseFuture(mock.MagicMock(), None, None, None)
    future._warnings = ["Read 10 live rows and 1500 tombstone cells for query SELECT ..."]
    future._final_result = []  # stored by the driver's I/O thread, which has yet to set the event
    driver = mock.MagicMock()
    driver.execute_async.return_value = future
    session = cassandra_session._CountingSession(driver, cassandra_session.StoreStats())

    assert session.execute_async("SELECT 1") is future
    assert session.stats.server_warnings == 1


def test_a_host_that_left_a_request_unanswered_is_tried_last_and_longer_if_it_stays_silent():
    """A silent partition keeps a host's connections open, so the driver does not mark it down:
    the store's query plans try a host that timed out last (session.Unanswered), for 10 s, and
    for twice as long each time it times out again just after."""
    from cassandra import OperationTimedOut

    now, hosts, unanswered, policy = _three_hosts_avoiding_the_unanswered()
    unanswered.learn(OperationTimedOut(errors={hosts[2]: "Client request timeout"}, last_host=hosts[2]))
    plans = [[str(h) for h in policy.make_query_plan()] for _ in range(6)]
    assert all(plan[-1] == "10.0.0.3:9042" and len(plan) == 3 for plan in plans)  # last, never dropped
    now[0] += 10.5
    assert not unanswered.suspect(hosts[2])  # the penalty ended: the next request tries it again
    unanswered.learn(OperationTimedOut(errors={hosts[2]: "Client request timeout"}, last_host=hosts[2]))
    now[0] += 15
    assert unanswered.suspect(hosts[2])  # still silent at once: 20 s this time
    now[0] += 6
    assert not unanswered.suspect(hosts[2])
    unanswered.learn(ValueError("not a timeout"))
    assert not unanswered.suspect(hosts[0])


def test_a_host_beaten_by_a_speculative_copy_goes_behind_answering_hosts_but_ahead_of_silent_ones():
    """A speculative copy that answers first marks the first host slow: behind the hosts that
    answer for 2 s, but ahead of a host that let a request time out, which stays last."""
    from cassandra import OperationTimedOut

    now, hosts, unanswered, policy = _three_hosts_avoiding_the_unanswered()
    unanswered.learn(OperationTimedOut(errors={hosts[0]: "Client request timeout"}, last_host=hosts[0]))
    unanswered.slow(hosts[1])
    plans = [[str(h) for h in policy.make_query_plan()] for _ in range(6)]
    assert all(plan == ["10.0.0.3:9042", "10.0.0.2:9042", "10.0.0.1:9042"] for plan in plans), plans
    assert not unanswered.suspect(hosts[1])  # slow is not silent
    now[0] += 2.5
    plans = [[str(h) for h in policy.make_query_plan()] for _ in range(6)]
    assert all(plan[-1] == "10.0.0.1:9042" for plan in plans) and {p[0] for p in plans} == {"10.0.0.2:9042", "10.0.0.3:9042"}


def test_a_host_that_answers_again_is_no_longer_tried_last():
    """On a loaded cluster every host may miss a beat's short timeout now and then; once all
    three are last, the one that answers a request goes first again, and a host that stays
    silent stays last."""
    from cassandra import OperationTimedOut

    now, hosts, unanswered, policy = _three_hosts_avoiding_the_unanswered()
    for host in hosts:
        unanswered.learn(OperationTimedOut(errors={host: "Client request timeout"}, last_host=host))
    unanswered.answered(hosts[1])
    plans = [[str(h) for h in policy.make_query_plan()] for _ in range(6)]
    assert all(plan[0] == "10.0.0.2:9042" and len(plan) == 3 for plan in plans), plans
    assert not unanswered.suspect(hosts[1]) and unanswered.suspect(hosts[0]) and unanswered.suspect(hosts[2])


def _three_hosts_avoiding_the_unanswered():
    """A clock, hosts 10.0.0.1-3, an Unanswered on that clock and a round-robin policy it orders."""
    from cassandra.connection import DefaultEndPoint
    from cassandra.policies import RoundRobinPolicy, SimpleConvictionPolicy
    from cassandra.pool import Host

    from fabricjobs.store.cassandra.hosts import Unanswered, policy_avoiding

    now = [100.0]
    hosts = [Host(DefaultEndPoint(f"10.0.0.{i}", 9042), SimpleConvictionPolicy) for i in (1, 2, 3)]
    unanswered = Unanswered(clock=lambda: now[0])
    policy = policy_avoiding(RoundRobinPolicy(), unanswered)
    policy.populate(None, hosts)
    return now, hosts, unanswered, policy


def test_a_node_starting_just_after_a_heal_reads_the_schema_version_again_when_a_host_leaves_it_unanswered(
        server, keyspace):
    """Found by the partition tests: a node started right after a partition healed asked a
    replica that had not caught up yet for the schema version, timed out, and exited."""
    open_store(server, keyspace).close()  # the schema exists
    server.faults.add("delay", "fabricjobs_schema WHERE id = 'k2_jobs'", statements="read", delay=30.0, times=1)
    began = time.monotonic()
    store = open_store(server, keyspace, request_timeout=0.5)
    try:
        # Read again after its 0.5 s timeout, not after the 30 s the first read was held (a
        # loaded machine took 5.9 s once: open_store's other reads go on meanwhile).
        assert time.monotonic() - began < 20.0
        assert store.node("n1") is None  # open, on the schema it found
    finally:
        store.close()


def test_a_node_starting_beside_another_reads_the_schema_version_again_while_the_new_table_settles(server, keyspace):
    """Found on Apache Cassandra: two nodes started together on a new keyspace; the second one's
    first read of the schema version met a coordinator that did not know the table the first
    one had just made ('Unknown CF', a Server error), and it exited."""
    open_store(server, keyspace).close()  # the schema exists (made by the other node)
    server.faults.add("unknown_table", "fabricjobs_schema WHERE id = 'k2_jobs'", statements="read", times=2)
    store = open_store(server, keyspace)
    try:
        assert store.schema_version() == SCHEMA_VERSION and store.node("n1") is None
    finally:
        store.close()


class QueueReads:
    """Counts a store's reads of the registry (k2_jobs_owners) and of the index (its scans),
    not the clock's own queries, which a thread of the store sends now and then."""

    def __init__(self, store, monkeypatch):
        self.registry = self.index = 0
        run, unpaged = store._run, store._unpaged

        def counted_run(stmt, params=(), timeout=None):
            self.registry += "k2_jobs_owners" in stmt.query_string
            return run(stmt, params, timeout)

        def counted_unpaged(stmt, params):
            self.index += "k2_jobs_index" in stmt.query_string
            return unpaged(stmt, params)

        monkeypatch.setattr(store, "_run", counted_run)
        monkeypatch.setattr(store, "_unpaged", counted_unpaged)

    def __call__(self) -> tuple[int, int]:
        return self.registry, self.index


def test_claim_passes_between_full_passes_read_the_priority_registry_once(server, keyspace, monkeypatch):
    """A node's claim passes, many a second, each named the WAITING buckets by a read of
    k2_jobs_owners: as many reads per recurring fire as the index's own. Kept between full
    passes (JobStore.refresh), a claim pass is one read: the index."""
    store = open_store(server, keyspace)
    try:
        store.insert(Job(JobKey("USER_JOB", "A.b", "w"), Status.WAITING, T0, next_run=T0))
        reads = QueueReads(store, monkeypatch)
        store.refresh()
        for _ in range(5):
            assert [j.key.uid for j in store.waiting(10)] == ["w"]
        assert reads() == (5, 5)
        store.refresh(keep_for=3600)
        for _ in range(5):
            assert [j.key.uid for j in store.waiting(10)] == ["w"]
        assert reads() == (6, 10)  # the registry once more; the index each pass (it is not empty)
    finally:
        store.close()


def test_an_empty_queue_is_read_once_per_tenth_of_a_second_between_full_passes(server, keyspace, monkeypatch):
    """A node's claim passes, woken by every run that ends and every fire offered, read an
    empty WAITING queue dozens of times a second. Between full passes an empty read is kept
    for EMPTY_WAITING_KEEP, unless this process made a row WAITING since; another process's
    new row is seen once that time has passed (or at the next full pass)."""
    from fabricjobs.store.cassandra import queue

    store, other = open_store(server, keyspace), open_store(server, keyspace)
    try:
        now = [1000.0]
        store._monotonic = lambda: now[0]
        reads = QueueReads(store, monkeypatch)
        store.refresh(keep_for=3600)
        for _ in range(5):
            assert store.waiting(10) == []
        assert reads() == (1, 1)
        served = (0, 4)  # node.id's PRIORITIES: an empty read of every priority does not answer for them
        assert store.waiting(10, priorities=served) == [] and reads() == (1, 2)
        other.insert(Job(JobKey("USER_JOB", "A.b", "theirs"), Status.WAITING, T0, next_run=T0))
        assert store.waiting(10, priorities=served) == [] and reads() == (1, 2)  # not read again yet
        now[0] += queue.EMPTY_WAITING_KEEP
        assert [j.key.uid for j in store.waiting(10, priorities=served)] == ["theirs"] and reads() == (1, 3)
    finally:
        store.close()
        other.close()


def test_a_read_between_a_new_entry_and_its_lwt_is_not_kept(server, keyspace, monkeypatch):
    """This process's new WAITING row: its entry is written, then its LWT. A read of the queue
    that reached Cassandra before the entry did comes back empty; it must not be kept once the
    LWT has applied, or the node's next claim passes would not see the row."""
    import threading

    store = open_store(server, keyspace)
    try:
        store.refresh(keep_for=3600)
        at_lwt, release = threading.Event(), threading.Event()
        lwt = store._execute_lwt

        def held(*args, **kwargs):
            at_lwt.set()
            assert release.wait(10), "the test never released the held LWT"
            return lwt(*args, **kwargs)

        monkeypatch.setattr(store, "_execute_lwt", held)
        row = Job(JobKey("USER_JOB", "A.b", "mine"), Status.WAITING, T0, next_run=T0)
        writer = threading.Thread(target=store.insert, args=(row,))
        writer.start()
        assert at_lwt.wait(10)  # its entry is written, its LWT not yet sent
        page = store._waiting_page
        monkeypatch.setattr(store, "_waiting_page", lambda *args: [])  # a read that missed the entry
        assert store.waiting(10) == []
        monkeypatch.setattr(store, "_waiting_page", page)
        release.set()
        writer.join(10)
        assert [j.key.uid for j in store.waiting(10)] == ["mine"]
    finally:
        store.close()


def test_claims_of_whole_rows_are_not_read_back(server, keyspace, monkeypatch):
    """An LWT that applies returns no row, so a group's candidate claims are read back; the
    claims of whole rows (fires whose rows the node has from their last outcome write) are
    answered from the row given, with no read: one read less per recurring fire."""
    store = open_store(server, keyspace)
    try:
        fire = store.insert(Job(JobKey("USER_JOB", "A.b", "fire"), Status.SCHEDULED, T0, next_run=T0, worker_id="n1",
                                execution_interval="00:00:01", arguments='{"x": 1}')).row
        store.insert(Job(JobKey("USER_JOB", "A.b", "new"), Status.WAITING, T0, next_run=T0, arguments='{"x": 2}'))
        candidate = store.waiting(10)[0]
        whole = store.get(fire.key)
        read_back: list[list[str]] = []
        get_many = store.get_many
        monkeypatch.setattr(store, "get_many", lambda keys: read_back.append([k.uid for k in keys]) or get_many(keys))

        def claimed(row: Job) -> Job:
            return row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=row.epoch + 1, start_time=T0)

        results = store.cas_each_within([(whole, claimed(whole)), (candidate, claimed(candidate))],
                                        whole=[True, False], patience=5.0)
        assert [r.applied for r in results] == [True, True]
        assert read_back == [["new"]]  # the candidate only
        monkeypatch.setattr(store, "get_many", get_many)
        assert [r.row for r in results] == [store.get(fire.key), store.get(candidate.key)]
    finally:
        store.close()
