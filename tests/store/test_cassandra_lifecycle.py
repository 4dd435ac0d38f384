"""A job row's life on Cassandra, on the real server where its TTL must really run out.

An archived row is written with a TTL (K2JOB_ARCHIVING_TIME_HOUR). When it expires, nothing may
be left of it: an ``INSERT`` writes a row marker that a later ``UPDATE ... USING TTL`` does not
cover, and such a key-only row made STARTJOB of the same key answer "Job is running" for ever.
Run against the CQL test server (its clock moved on) and against Apache Cassandra (waited for).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from backends import BACKENDS, make_backend_config
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.store.base import RunRecord
from harness import wait_for

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
TTL_SECONDS = 2
CASSANDRA_BACKENDS = [b for b in BACKENDS if b.startswith("cassandra")]


@pytest.fixture(params=CASSANDRA_BACKENDS)
def short_lived(request, tmp_path):
    """A store whose archived rows live TTL_SECONDS, and a way to let that time pass."""
    config = make_backend_config(request, request.param, tmp_path,
                                 {"jobs": {"K2JOB_ARCHIVING_TIME_HOUR": TTL_SECONDS / 3600}})
    store = open_store(load_config(config))

    def let_expire(key: JobKey) -> None:
        if request.param == "cassandra":
            server = request.getfixturevalue("cql_server")
            server.advance(TTL_SECONDS + 1)
            request.addfinalizer(lambda: setattr(server, "time_offset", server.time_offset - TTL_SECONDS - 1))
        wait_for(lambda: store.get(key) is None, 30, "the archived row to expire")

    yield store, let_expire
    store.close()


def raw_rows(store, table: str, key: JobKey) -> list:
    """Every row of ``table`` whose columns name ``key`` (ALLOW FILTERING: a test's small keyspace)."""
    rows = store._session.execute(
        f"SELECT * FROM {store.keyspace}.{table} WHERE type = %s AND name = %s AND uid = %s ALLOW FILTERING",
        (key.type, key.name, key.uid))
    return list(rows)


def test_an_archived_key_whose_ttl_expired_leaves_nothing_behind_and_can_be_started_again(short_lived):
    store, let_expire = short_lived
    key = JobKey("USER_JOB", "Customer.userJob1", "expiring")
    row = store.insert(Job(key, Status.WAITING, T0, next_run=T0, arguments='{"a": 1}')).row
    running = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1, start_time=T0)).row
    done = running.replace(status=Status.PROCESSED, archived=True, end_time=datetime.now(UTC), output='"ok"')
    record = RunRecord(key, 1, "n1", T0, T0, done.end_time, "OK", "PROCESSED", 0, output='"ok"')
    assert store.cas_many([(running, done)], runs=[record])[0].applied
    assert store.get(key).archived and store.runs(key.type, key.name, key.uid)

    let_expire(key)
    # (k2_job_run_keys is left out: its note that the uid ran that day outlives the day's last
    # history line by up to a day, on purpose, and then expires too.)
    for table in ("k2_jobs", "k2_jobs_index", "k2_jobs_archived", "k2_job_run_history"):
        assert raw_rows(store, table, key) == [], f"{table} keeps a row of the expired job"

    again = store.insert(Job(key, Status.WAITING, T0, next_run=T0, arguments='{"a": 2}'))
    assert again.applied, f"STARTJOB of an expired key was refused by {again.row}"
    assert (again.row.revision, again.row.arguments, again.row.output) == (1, '{"a": 2}', None)
    assert [j.uid for j in store.live_jobs()] == ["expiring"]


def test_absent_values_are_not_written_as_nulls(cql_server, tmp_path, request):
    """Absent values are bound "unset", not null: a null is a cell tombstone, and binding one per
    absent column made every insert leave a dozen of them. Read off the CQL test server's
    storage (CQL cannot tell a tombstoned cell from a missing one)."""
    config = make_backend_config(request, "cassandra", tmp_path)
    store = open_store(load_config(config))
    try:
        key = JobKey("USER_JOB", "Customer.userJob1", "sparse")
        row = store.insert(Job(key, Status.WAITING, T0, next_run=T0)).row
        store.cas_many([(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1, start_time=T0))],
                       runs=[RunRecord(key, 1, "n1", None, None, T0, "OK", "IN_PROCESS", 0)])
        keyspace = load_config(config).get("cassandra", "KEYSPACE")
        tables = cql_server.engine.keyspaces[keyspace].tables
        nulls = {(name, col) for name in ("k2_jobs", "k2_jobs_index", "k2_job_run_history")
                 for partition in tables[name].data.values() for r in partition.rows.values()
                 for col, cell in r.cells.items() if cell.value is None}
        assert nulls == set()
    finally:
        store.close()


@pytest.mark.real_cassandra  # (not parametrized: conftest would not mark it)
@pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="needs Apache Cassandra (./scripts/test starts one)")
def test_statements_are_routed_to_a_replica_of_their_partition(request, tmp_path):
    """TOKEN_AWARE (the default): the driver knows the ring and the keyspace's replicas, so a
    job's statements go to a node that holds its partition (on one node: that node)."""
    config = make_backend_config(request, "cassandra-real", tmp_path, {"cassandra": {"TOKEN_AWARE": "true"}})
    store = open_store(load_config(config))
    try:
        from cassandra.policies import TokenAwarePolicy

        key = JobKey("USER_JOB", "Customer.userJob1", "routed")
        row = store.insert(Job(key, Status.WAITING, T0, next_run=T0)).row
        assert store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1)).applied
        policy = store._cluster.profile_manager.default.load_balancing_policy
        assert isinstance(policy.child, TokenAwarePolicy)  # under the unanswered-hosts-last wrapper
        get = store._stmt(("get",), "SELECT status FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?")
        bound = get.bind((key.type, key.name, key.uid))
        replicas = store._cluster.metadata.get_replicas(store.keyspace, bound.routing_key)
        assert [h.address for h in replicas] == [load_config(config).get("cassandra", "HOSTS")[0]]
        assert next(iter(policy.make_query_plan(store.keyspace, bound))) == replicas[0]  # the replica first
    finally:
        store.close()


@pytest.mark.parametrize("backend", CASSANDRA_BACKENDS)
def test_nodes_that_start_together_on_a_new_keyspace_make_one_schema(request, tmp_path, backend):
    """Four stores open a fresh keyspace at once (nodes started together): one makes the
    schema under the lock, the others wait for it; nobody fails on a table another has just
    made (seen on Apache Cassandra as 'Unknown CF' and 'table ... does not exist')."""
    import threading

    from fabricjobs.store.cassandra.schema import SCHEMA_VERSION

    config = load_config(make_backend_config(request, backend, tmp_path))
    stores, errors = [], []

    def start():
        try:
            stores.append(open_store(config))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert errors == [] and len(stores) == 4
        assert {s.schema_version() for s in stores} == {SCHEMA_VERSION}
        key = JobKey("USER_JOB", "Customer.userJob1", "together")
        assert stores[0].insert(Job(key, Status.WAITING, T0, next_run=T0)).applied
        assert all(s.get(key) is not None for s in stores)
    finally:
        for s in stores:
            s.close()
