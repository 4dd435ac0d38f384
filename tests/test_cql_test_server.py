"""Tests of the CQL test server, through the real cassandra-driver."""

from __future__ import annotations

import datetime
import itertools
import logging
import uuid

import pytest
from cassandra import (AlreadyExists, ConsistencyLevel as CL, InvalidRequest, OperationTimedOut, Unavailable,
                       WriteTimeout, WriteType)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import FallthroughRetryPolicy, WhiteListRoundRobinPolicy
from cassandra.protocol import ErrorMessage, OverloadedErrorMessage, SyntaxException
from cassandra.query import BatchStatement, BatchType, SimpleStatement, dict_factory, named_tuple_factory

from testkit.cqlserver import ControlClient, CqlTestServer

KS = "cqltest"
_names = itertools.count()


def _profiles(host, **kw):
    lbp = lambda: WhiteListRoundRobinPolicy([host])  # noqa: E731
    base = dict(retry_policy=FallthroughRetryPolicy(), **kw)
    return {
        EXEC_PROFILE_DEFAULT: ExecutionProfile(load_balancing_policy=lbp(), **base),
        "dict": ExecutionProfile(load_balancing_policy=lbp(), row_factory=dict_factory, **base),
        "lwt": ExecutionProfile(load_balancing_policy=lbp(), serial_consistency_level=CL.SERIAL,
                                row_factory=dict_factory, **base),
        "serial": ExecutionProfile(load_balancing_policy=lbp(), consistency_level=CL.SERIAL,
                                   row_factory=dict_factory, **base),
        "short": ExecutionProfile(load_balancing_policy=lbp(), request_timeout=0.3, row_factory=dict_factory, **base),
    }


def connect(server, keyspace=None, **kw):
    cluster = Cluster([server.host], port=server.port, protocol_version=4, schema_metadata_enabled=False,
                      token_metadata_enabled=False, execution_profiles=_profiles(server.host), **kw)
    return cluster, cluster.connect(keyspace)


@pytest.fixture(scope="module")
def server():
    with CqlTestServer(control_port=0) as s:
        yield s


@pytest.fixture(scope="module")
def session(server):
    cluster, session = connect(server)
    session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KS} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.set_keyspace(KS)
    yield session
    cluster.shutdown()


@pytest.fixture(autouse=True)
def _clean_faults(server):
    yield
    server.faults.clear()


def table(session, columns: str, options: str = "") -> str:
    name = f"t{next(_names)}"
    session.execute(f"CREATE TABLE {name} ({columns}){' WITH ' + options if options else ''}")
    return name


def jobs_table(session):
    return table(session, "job_id text PRIMARY KEY, status text, owner text, epoch int, lease_until timestamp")


def rejected(session, cql, match, params=None, exc=InvalidRequest):
    with pytest.raises(exc, match=match):
        session.execute(cql, params)


# ---- connecting --------------------------------------------------------------------------

def test_connect_with_default_settings_steps_down_and_logs_no_errors(server, caplog):
    caplog.set_level(logging.WARNING)
    # protocol v5/DSE first, schema + token metadata on; only the control connection's 2 s
    # timeout is raised (a loaded machine's test server can take longer to list its schema)
    cluster = Cluster([server.host], port=server.port, control_connection_timeout=10)
    try:
        s = cluster.connect()
        assert cluster.protocol_version == 4
        s.execute("CREATE KEYSPACE IF NOT EXISTS meta_ks WITH replication = "
                  "{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}")
        s.execute("CREATE TABLE IF NOT EXISTS meta_ks.t (k int, c timestamp, m map<text, text>, v text, "
                  "PRIMARY KEY ((k), c)) WITH CLUSTERING ORDER BY (c DESC) AND default_time_to_live = 60")
        tmeta = cluster.metadata.keyspaces["meta_ks"].tables["t"]
        assert [c.name for c in tmeta.partition_key] == ["k"]
        assert [c.name for c in tmeta.clustering_key] == ["c"] and tmeta.clustering_key[0].is_reversed
        assert tmeta.options["default_time_to_live"] == 60
        assert "m map<text, text>" in tmeta.export_as_string()
        assert s.execute("SELECT cluster_name FROM system.local WHERE key='local'").one().cluster_name
    finally:
        cluster.shutdown()
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or
           (r.levelno >= logging.WARNING and "Downgrading" not in r.message and "load_balancing_policy" not in r.message)]
    assert not bad, [r.getMessage() for r in bad]


def test_connect_metadata_off_protocol_4(server, caplog):
    caplog.set_level(logging.WARNING)
    cluster, s = connect(server)
    try:
        row = s.execute("SELECT release_version, schema_version FROM system.local WHERE key='local'").one()
        assert row.release_version.startswith("4.")
        assert list(s.execute("SELECT * FROM system.peers_v2")) == []
    finally:
        cluster.shutdown()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_password_authenticator():
    with CqlTestServer(username="cassandra", password="secret") as srv:
        cluster, s = connect(srv, auth_provider=PlainTextAuthProvider("cassandra", "secret"))
        assert s.execute("SELECT key FROM system.local").one().key == "local"
        cluster.shutdown()
        with pytest.raises(NoHostAvailable, match="incorrect"):
            connect(srv, auth_provider=PlainTextAuthProvider("cassandra", "wrong"))


# ---- DDL and types -----------------------------------------------------------------------

def test_ddl(session):
    with pytest.raises(AlreadyExists):
        session.execute(f"CREATE KEYSPACE {KS} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}")
    name = table(session, "k int PRIMARY KEY, v text")
    with pytest.raises(AlreadyExists):
        session.execute(f"CREATE TABLE {name} (k int PRIMARY KEY)")
    session.execute(f"CREATE TABLE IF NOT EXISTS {name} (k int PRIMARY KEY)")
    session.execute(f"ALTER TABLE {name} ADD extra bigint")
    cols = {r.column_name: (r.kind, r.type) for r in session.execute(
        "SELECT * FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s", (KS, name))}
    assert cols == {"k": ("partition_key", "int"), "v": ("regular", "text"), "extra": ("regular", "bigint")}
    session.execute(f"INSERT INTO {name} (k, v, extra) VALUES (1, 'x', 5)")
    session.execute(f"TRUNCATE {name}")
    assert list(session.execute(f"SELECT * FROM {name}")) == []
    session.execute(f"DROP TABLE {name}")
    session.execute(f"DROP TABLE IF EXISTS {name}")
    rejected(session, f"SELECT * FROM {name}", f"table {name} does not exist")
    rejected(session, "SELECT * FROM nope.t", "keyspace nope does not exist")
    rejected(session, "CREATE INDEX ON x (v)", "not supported by the CQL test server")
    rejected(session, "SELEC * FROM x", "no viable alternative at input 'SELEC'", exc=SyntaxException)


ALL_TYPES = ("k uuid PRIMARY KEY, a ascii, t text, vc varchar, i int, b bigint, s smallint, bo boolean, d double, "
             "f float, ts timestamp, tu timeuuid, bl blob, m map<text, text>, st set<text>, l list<text>")


def test_every_type_prepared_and_simple(session):
    name = table(session, ALL_TYPES)
    ts = datetime.datetime(2024, 5, 6, 7, 8, 9, 123000)
    values = dict(a="ascii", t="tëxt 'quoted'", vc="varchar", i=-7, b=2 ** 40, s=300, bo=True, d=1.25, f=0.5,
                  ts=ts, tu=uuid.uuid1(), bl=b"\x00\xff", m={"x": "1", "y": "2"}, st={"b", "a"}, l=["z", "a", "z"])
    cols = ", ".join(values)
    k1, k2 = uuid.uuid4(), uuid.uuid4()
    prep = session.prepare(f"INSERT INTO {name} (k, {cols}) VALUES (?, {', '.join('?' * len(values))})")
    session.execute(prep, (k1, *values.values()))
    session.execute(f"INSERT INTO {name} (k, {cols}) VALUES (%s, {', '.join(['%s'] * len(values))})",
                    (k2, *values.values()))
    for k in (k1, k2):
        row = session.execute(f"SELECT * FROM {name} WHERE k = %s", (k,), execution_profile="dict").one()
        got = {c: row[c] for c in values}
        assert got["st"] == {"a", "b"} and got["m"] == {"x": "1", "y": "2"} and got["l"] == ["z", "a", "z"]
        for c in ("a", "t", "vc", "i", "b", "s", "bo", "d", "f", "ts", "tu", "bl"):
            assert got[c] == values[c], c
    # literals written directly in CQL
    session.execute(f"INSERT INTO {name} (k, ts, bl, m, st, l, bo, d) VALUES "
                    f"({k1}, '2024-05-06 07:08:09.123+0000', 0xcafe, {{'a': 'b'}}, {{'q'}}, ['r'], false, -1.5e3)")
    row = session.execute(f"SELECT ts, bl, m, st, l, bo, d FROM {name} WHERE k = {k1}").one()
    assert row == (ts, b"\xca\xfe", {"a": "b"}, {"q"}, ["r"], False, -1500.0)
    # an empty collection is null, as in Cassandra
    session.execute(f"UPDATE {name} SET m = {{}}, l = [] WHERE k = {k1}")
    assert session.execute(f"SELECT m, l FROM {name} WHERE k = {k1}").one() == (None, None)


def test_named_markers_and_unset(session):
    name = jobs_table(session)
    upd = session.prepare(f"UPDATE {name} SET status = :status, owner = :owner WHERE job_id = :id")
    session.execute(upd, {"status": "WAITING", "owner": "me", "id": "j1"})
    bound = upd.bind({"status": "RUNNING", "id": "j1"})  # owner left unset: not overwritten
    session.execute(bound)
    assert session.execute(f"SELECT status, owner FROM {name} WHERE job_id = 'j1'").one() == ("RUNNING", "me")


# ---- reads: restrictions, ordering, paging -----------------------------------------------

def test_clustering_order_ranges_and_order_by(session):
    name = table(session, "p int, c int, v text, PRIMARY KEY (p, c)", "CLUSTERING ORDER BY (c DESC)")
    ins = session.prepare(f"INSERT INTO {name} (p, c, v) VALUES (?, ?, ?)")
    for p in (1, 2):
        for c in range(5):
            session.execute(ins, (p, c, f"{p}-{c}"))
    assert [r.c for r in session.execute(f"SELECT c FROM {name} WHERE p = 1")] == [4, 3, 2, 1, 0]
    assert [r.c for r in session.execute(f"SELECT c FROM {name} WHERE p = 1 AND c >= 1 AND c < 4 ORDER BY c ASC")] == [1, 2, 3]
    assert [r.c for r in session.execute(f"SELECT c FROM {name} WHERE p = 1 LIMIT 2")] == [4, 3]
    rows = session.execute(f"SELECT p, c FROM {name} WHERE p IN (1, 2) PER PARTITION LIMIT 1")
    assert sorted(rows) == [(1, 4), (2, 4)]
    assert session.execute(f"SELECT COUNT(*) FROM {name} WHERE p = 2").one().count == 5
    assert session.execute(f"SELECT count(*) FROM {name}").one()[0] == 10
    assert [r.v for r in session.execute(f"SELECT v FROM {name} WHERE p = 1 AND c IN (0, 3)")] == ["1-3", "1-0"]
    assert [r.p for r in session.execute(f"SELECT DISTINCT p FROM {name}")] in ([1, 2], [2, 1])
    stmt = SimpleStatement(f"SELECT c FROM {name} WHERE p IN (1, 2) ORDER BY c ASC", fetch_size=None)
    assert [r.c for r in session.execute(stmt)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    rows = session.execute(f"SELECT v FROM {name} WHERE v = '2-3' ALLOW FILTERING")
    assert [r.v for r in rows] == ["2-3"]


def test_paging_over_many_rows(session):
    name = table(session, "p int, c int, v int, PRIMARY KEY (p, c)")
    ins = session.prepare(f"INSERT INTO {name} (p, c, v) VALUES (?, ?, ?)")
    n, per_batch = 5600, 200
    for start in range(0, n, per_batch):
        b = BatchStatement(batch_type=BatchType.UNLOGGED)
        for i in range(start, start + per_batch):
            b.add(ins, (i % 7, i, i))
        session.execute(b)
    rs = session.execute(SimpleStatement(f"SELECT p, c FROM {name}", fetch_size=1000))
    assert rs.has_more_pages and len(rs.current_rows) == 1000
    seen = [(r.p, r.c) for r in rs]
    assert len(seen) == n and len(set(seen)) == n
    assert sorted(c for _, c in seen) == list(range(n))
    # paging within one partition, with a LIMIT spanning pages, and a prepared statement
    sel = session.prepare(f"SELECT c FROM {name} WHERE p = ? LIMIT 450")
    sel.fetch_size = 100
    got = [r.c for r in session.execute(sel, (3,))]
    assert got == [c for c in range(n) if c % 7 == 3][:450]
    # the driver's explicit paging_state
    rs = session.execute(SimpleStatement(f"SELECT c FROM {name} WHERE p = 0", fetch_size=10))
    first = [r.c for r in rs.current_rows]
    rs2 = session.execute(SimpleStatement(f"SELECT c FROM {name} WHERE p = 0", fetch_size=10), paging_state=rs.paging_state)
    assert [r.c for r in rs2.current_rows] == [c for c in range(n) if c % 7 == 0][10:20] and first[-1] == 63
    rejected(session, SimpleStatement(f"SELECT c FROM {name} WHERE p IN (1, 2) ORDER BY c DESC", fetch_size=100),
             "Cannot page queries with both ORDER BY and a IN restriction")


# ---- lightweight transactions -------------------------------------------------------------

@pytest.mark.parametrize("factory", ["dict", "named_tuple"])
def test_lwt_result_shapes(session, factory):
    name = table(session, "p text, c int, zeta text, beta map<text, int>, alpha int, PRIMARY KEY (p, c)")
    profile = session.execution_profile_clone_update("lwt", row_factory=dict_factory if factory == "dict" else named_tuple_factory)

    def run(cql, params=()):
        rs = session.execute(cql, params, execution_profile=profile)
        row = rs.one()
        return rs.was_applied, (row if factory == "dict" else row._asdict())

    ins = session.prepare(f"INSERT INTO {name} (p, c, zeta, alpha, beta) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS")
    assert run(ins, ("a", 1, "z", 5, {"x": 1})) == (True, {"[applied]" if factory == "dict" else "applied": True})
    ok = "[applied]" if factory == "dict" else "applied"
    # IF NOT EXISTS on an existing row: all columns, partition key, clustering, then the rest sorted by name
    applied, row = run(ins, ("a", 1, "other", 6, None))
    assert not applied and list(row.items()) == [(ok, False), ("p", "a"), ("c", 1), ("alpha", 5),
                                                 ("beta", {"x": 1}), ("zeta", "z")]
    # failed conditions: the condition columns in IF order
    upd = f"UPDATE {name} SET alpha = 9 WHERE p = 'a' AND c = 1 IF zeta = 'nope' AND alpha = 5"
    assert run(upd) == (False, {ok: False, "zeta": "z", "alpha": 5})
    upd2 = f"UPDATE {name} SET alpha = 9 WHERE p = 'a' AND c = 1 IF alpha > 7 AND zeta IN ('z', 'y')"
    assert run(upd2) == (False, {ok: False, "alpha": 5, "zeta": "z"})
    # missing row: only [applied]
    assert run(f"UPDATE {name} SET alpha = 1 WHERE p = 'b' AND c = 1 IF alpha = 1") == (False, {ok: False})
    assert run(f"UPDATE {name} SET alpha = 1 WHERE p = 'b' AND c = 1 IF EXISTS") == (False, {ok: False})
    assert run(f"DELETE FROM {name} WHERE p = 'b' AND c = 1 IF EXISTS") == (False, {ok: False})
    # IF c = null matches a missing row and creates it
    assert run(f"UPDATE {name} SET zeta = 'new' WHERE p = 'b' AND c = 1 IF zeta = null")[0]
    assert run(f"UPDATE {name} SET alpha = 2 WHERE p = 'b' AND c = 1 IF alpha = null AND zeta != 'x'")[0]
    assert run(f"UPDATE {name} SET alpha = 3 WHERE p = 'b' AND c = 1 IF EXISTS")[0]
    assert run(f"DELETE FROM {name} WHERE p = 'b' AND c = 1 IF alpha = 3")[0]
    assert session.execute(f"SELECT * FROM {name} WHERE p = 'b'").one() is None


def test_lwt_prepared_has_no_result_metadata_and_plain_read_back(session):
    name = jobs_table(session)
    claim = session.prepare(f"UPDATE {name} SET status = 'RUNNING', owner = ?, epoch = ? WHERE job_id = ? "
                            "IF status = 'WAITING' AND epoch = ?")
    assert not claim.result_metadata
    session.execute(f"INSERT INTO {name} (job_id, status, epoch) VALUES ('j', 'WAITING', 1)")
    rs = session.execute(claim, ("me", 2, "j", 1), execution_profile="lwt")
    assert rs.was_applied
    rs = session.execute(claim, ("you", 3, "j", 2), execution_profile="lwt")
    assert not rs.was_applied and rs.one() == {"[applied]": False, "status": "RUNNING", "epoch": 2}


# ---- TTL ---------------------------------------------------------------------------------

def test_ttl_and_clock(session, server):
    name = table(session, "k int PRIMARY KEY, a text, b text", "default_time_to_live = 100")
    session.execute(f"INSERT INTO {name} (k, a, b) VALUES (1, 'x', 'y') USING TTL 10")
    session.execute(f"UPDATE {name} USING TTL 30 SET b = 'z' WHERE k = 1")
    session.execute(f"UPDATE {name} SET a = 'only-update' WHERE k = 2")  # table default TTL, no row marker
    session.execute(f"INSERT INTO {name} (k, a) VALUES (3, 'forever') USING TTL 0")
    row = session.execute(f"SELECT TTL(a), TTL(b), WRITETIME(a) FROM {name} WHERE k = 1", execution_profile="dict").one()
    assert row["ttl(a)"] in (9, 10) and row["ttl(b)"] in (29, 30) and row["writetime(a)"] > 0
    server.advance(11)
    assert session.execute(f"SELECT a, b FROM {name} WHERE k = 1").one() == (None, "z")  # marker + a expired
    server.advance(20)
    assert session.execute(f"SELECT * FROM {name} WHERE k = 1").one() is None
    assert session.execute(f"SELECT a FROM {name} WHERE k = 2").one().a == "only-update"
    server.advance(100)
    assert sorted(r.k for r in session.execute(f"SELECT k FROM {name}")) == [3]
    # an LWT on an expired row sees nothing
    rs = session.execute(f"UPDATE {name} SET a = 'x' WHERE k = 1 IF a = 'x'", execution_profile="lwt")
    assert rs.one() == {"[applied]": False}
    now = session.execute("SELECT toTimestamp(now()) AS now FROM system.local").one().now
    utc_now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert abs((now - utc_now).total_seconds() - server.time_offset) < 5


def test_write_timestamps_and_tombstones(session):
    name = table(session, "k int PRIMARY KEY, v text")
    session.execute(f"INSERT INTO {name} (k, v) VALUES (1, 'new') USING TIMESTAMP 2000")
    session.execute(f"UPDATE {name} USING TIMESTAMP 1000 SET v = 'old' WHERE k = 1")  # older: ignored
    assert session.execute(f"SELECT v, WRITETIME(v) AS wt FROM {name} WHERE k = 1").one() == ("new", 2000)
    session.execute(f"DELETE FROM {name} USING TIMESTAMP 1500 WHERE k = 1")  # older than the data
    assert session.execute(f"SELECT v FROM {name} WHERE k = 1").one().v == "new"
    session.execute(f"DELETE FROM {name} USING TIMESTAMP 2000 WHERE k = 1")  # tie: the tombstone wins
    assert session.execute(f"SELECT v FROM {name} WHERE k = 1").one() is None
    rng = table(session, "p int, c int, v int, PRIMARY KEY (p, c)")
    for c in range(6):
        session.execute(f"INSERT INTO {rng} (p, c, v) VALUES (1, {c}, {c})")
    session.execute(f"DELETE FROM {rng} WHERE p = 1 AND c > 1 AND c <= 3")
    session.execute(f"DELETE v FROM {rng} WHERE p = 1 AND c = 5")
    assert list(session.execute(f"SELECT c, v FROM {rng} WHERE p = 1")) == [(0, 0), (1, 1), (4, 4), (5, None)]


def test_multi_column_range_deletions_stamped_in_the_past(session):
    """What the index sweep sends (outcomes taken from Apache Cassandra 5.0): tuple slices over
    a clustering prefix, of mixed lengths, and a USING TIMESTAMP that spares newer writes."""
    name = table(session, "p int, a int, b text, v int, PRIMARY KEY (p, a, b)")
    for a, b in [(1, "x"), (1, "y"), (1, "z"), (2, "x"), (2, "y"), (3, "x")]:
        session.execute(f"INSERT INTO {name} (p, a, b, v) VALUES (1, {a}, '{b}', 0) USING TIMESTAMP 1000")
    session.execute(f"DELETE FROM {name} USING TIMESTAMP 2000 WHERE p = 1 AND (a, b) > (1, 'x') AND (a, b) < (2, 'y')")
    assert [(r.a, r.b) for r in session.execute(f"SELECT a, b FROM {name} WHERE p = 1")] == [(1, "x"), (2, "y"), (3, "x")]
    # Mixed lengths: everything from (2, 'y') on, up to a = 3 excluded.
    session.execute(f"INSERT INTO {name} (p, a, b, v) VALUES (1, 2, 'z', 0) USING TIMESTAMP 3000")  # newer: spared
    session.execute(f"DELETE FROM {name} USING TIMESTAMP 2500 WHERE p = 1 AND (a, b) >= (2, 'y') AND (a) < (3)")
    assert [(r.a, r.b) for r in session.execute(f"SELECT a, b FROM {name} WHERE p = 1")] == [(1, "x"), (2, "z"), (3, "x")]
    # A later write stamped before the range tombstone stays hidden by it.
    session.execute(f"INSERT INTO {name} (p, a, b, v) VALUES (1, 2, 'ya', 0) USING TIMESTAMP 2400")
    assert [(r.a, r.b) for r in session.execute(f"SELECT a, b FROM {name} WHERE p = 1")] == [(1, "x"), (2, "z"), (3, "x")]
    prepared = session.prepare(f"DELETE FROM {name} USING TIMESTAMP ? WHERE p = ? AND (a, b) < (?, ?)")
    session.execute(prepared, (4000, 1, 3, "x"))
    assert [(r.a, r.b) for r in session.execute(f"SELECT a, b FROM {name} WHERE p = 1")] == [(3, "x")]
    with pytest.raises(InvalidRequest, match="cannot be restricted by more than one relation"):
        session.execute(f"DELETE FROM {name} WHERE p = 1 AND a = 1 AND (a, b) > (1, 'x')")
    with pytest.raises(InvalidRequest, match="PRIMARY KEY order"):
        session.execute(f"DELETE FROM {name} WHERE p = 1 AND (b, a) > ('x', 1)")


# ---- rejections --------------------------------------------------------------------------

def test_rejections(session):
    name = table(session, "p int, c int, v text, w int, PRIMARY KEY (p, c)")
    two = table(session, "a int, b int, v text, PRIMARY KEY ((a, b))")
    rejected(session, f"UPDATE {name} SET v = 'x' WHERE p = 1 AND c = 1 IF c = 1",
             "PRIMARY KEY column 'c' cannot have IF conditions")
    rejected(session, f"UPDATE {name} USING TIMESTAMP 5 SET v = 'x' WHERE p = 1 AND c = 1 IF v = 'y'",
             "Cannot provide custom timestamp for conditional updates")
    rejected(session, f"INSERT INTO {name} (p, c) VALUES (1, 1) IF NOT EXISTS USING TIMESTAMP 5",
             "Cannot provide custom timestamp for conditional updates")
    rejected(session, f"SELECT * FROM {name} WHERE v = 'x'", "use ALLOW FILTERING")
    rejected(session, f"SELECT * FROM {name} WHERE c = 1", "use ALLOW FILTERING")
    rejected(session, f"SELECT * FROM {two} WHERE a = 1", "use ALLOW FILTERING")
    session.execute(f"SELECT * FROM {two} WHERE a = 1 ALLOW FILTERING")
    rejected(session, f"UPDATE {name} SET v = 'x' WHERE p = 1", "Some clustering keys are missing: c")
    rejected(session, f"UPDATE {two} SET v = 'x' WHERE a = 1", "Some partition key parts are missing: b")
    rejected(session, f"DELETE FROM {name} WHERE c = 1", "Some partition key parts are missing: p")
    rejected(session, f"UPDATE {name} SET v = 'x' WHERE p = 1 AND c = 1 AND w = 2", "Non PRIMARY KEY columns found")
    rejected(session, f"UPDATE {name} SET p = 2 WHERE p = 1 AND c = 1", "PRIMARY KEY part p found in SET part")
    rejected(session, f"DELETE v FROM {name} WHERE p = 1 AND c > 1", "Range deletions are not supported for specific columns")
    rejected(session, f"SELECT nope FROM {name}", f"Undefined column name nope in table {KS}.{name}")
    rejected(session, f"INSERT INTO {name} (p, c, nope) VALUES (1, 1, 1)", "Undefined column name nope")
    rejected(session, "SELECT * FROM no_such_table", "table no_such_table does not exist")
    rejected(session, f"INSERT INTO {name} (p, c, v) VALUES (1, 1, 5)", 'Invalid INTEGER constant \\(5\\) for "v" of type text')
    rejected(session, f"INSERT INTO {name} (p, c, w) VALUES (1, 1, 'x')", 'Invalid STRING constant \\(x\\) for "w" of type int')
    rejected(session, f"INSERT INTO {name} (p, c, v) VALUES (1, 1)", "Unmatched column names/values")
    rejected(session, f"INSERT INTO {name} (p, c, v) VALUES (null, 1, 'x')", "Invalid null value in condition for column p")
    rejected(session, f"SELECT * FROM {name} WHERE p = 1 AND c = 1 AND c = 2", "more than one relation")
    rejected(session, f"SELECT * FROM {name} ORDER BY c DESC", "ORDER BY is only supported when the partition key")
    rejected(session, f"SELECT * FROM {name} WHERE p = 1 LIMIT 0", "LIMIT must be strictly positive")
    rejected(session, SimpleStatement(f"SELECT * FROM {name} WHERE p IN (1, 2)", consistency_level=CL.SERIAL),
             "SERIAL/LOCAL_SERIAL consistency may only be requested for one partition at a time")
    rejected(session, SimpleStatement(f"SELECT * FROM {name}", consistency_level=CL.SERIAL),
             "may only be requested for one partition at a time")
    rejected(session, SimpleStatement(f"UPDATE {name} SET v = 'x' WHERE p = 1 AND c = 1", consistency_level=CL.SERIAL),
             "You must use conditional updates for serializable writes")
    rejected(session, f"UPDATE {name} SET v = 'x' WHERE p IN (1, 2) AND c = 1 IF v = 'y'",
             "IN on the partition key is not supported with conditional updates")
    # wrong number of bound values (sent as protocol values by a prepared statement)
    prep = session.prepare(f"SELECT * FROM {name} WHERE p = ?")
    from cassandra.query import BoundStatement
    bs = BoundStatement(prep)
    bs.values = []
    rejected(session, bs, "Invalid amount of bind variables")
    bs.values = [b"\x00\x01"]  # raw bytes of the wrong size for an int
    rejected(session, bs, "Expected 4 or 0 byte int \\(2\\)")
    with pytest.raises(SyntaxException):
        session.execute(f"SELECT * FROM {name} WHERE")


# ---- batches -----------------------------------------------------------------------------

def test_batches(session):
    name = table(session, "p text, c int, v text, n int, PRIMARY KEY (p, c)")
    other = table(session, "k text PRIMARY KEY, v text")
    ins = session.prepare(f"INSERT INTO {name} (p, c, v) VALUES (?, ?, ?)")
    b = BatchStatement()  # logged, mixing prepared and simple statements
    b.add(ins, ("a", 1, "one"))
    b.add(SimpleStatement(f"INSERT INTO {name} (p, c, v) VALUES (%s, %s, %s)"), ("a", 2, "two"))
    b.add(SimpleStatement(f"INSERT INTO {other} (k, v) VALUES ('x', 'y')"))
    session.execute(b)
    assert [r.v for r in session.execute(f"SELECT v FROM {name} WHERE p = 'a'")] == ["one", "two"]
    # a conditional batch on one partition is all or nothing
    cond = BatchStatement(serial_consistency_level=CL.SERIAL)
    cond.add(SimpleStatement(f"UPDATE {name} SET n = 1 WHERE p = 'a' AND c = 1 IF v = 'one'"))
    cond.add(SimpleStatement(f"UPDATE {name} SET n = 2 WHERE p = 'a' AND c = 2 IF v = 'wrong'"))
    cond.add(SimpleStatement(f"INSERT INTO {name} (p, c, v) VALUES ('a', 3, 'three')"))
    rs = session.execute(cond, execution_profile="dict")
    assert not rs.was_applied
    assert list(rs) == [{"[applied]": False, "p": "a", "c": 1, "v": "one"},
                        {"[applied]": False, "p": "a", "c": 2, "v": "two"}]
    assert [r.n for r in session.execute(f"SELECT n FROM {name} WHERE p = 'a'")] == [None, None]
    good = BatchStatement(serial_consistency_level=CL.SERIAL)
    good.add(SimpleStatement(f"UPDATE {name} SET n = 1 WHERE p = 'a' AND c = 1 IF v = 'one'"))
    good.add(SimpleStatement(f"INSERT INTO {name} (p, c, v) VALUES ('a', 3, 'three') IF NOT EXISTS"))
    assert session.execute(good, execution_profile="dict").was_applied
    assert [r.n for r in session.execute(f"SELECT n FROM {name} WHERE p = 'a'")] == [1, None, None]
    cross = BatchStatement()
    cross.add(SimpleStatement(f"UPDATE {name} SET n = 1 WHERE p = 'a' AND c = 1 IF v = 'one'"))
    cross.add(SimpleStatement(f"UPDATE {name} SET n = 1 WHERE p = 'b' AND c = 1"))
    rejected(session, cross, "Batch with conditions cannot span multiple partitions")
    tables = BatchStatement()
    tables.add(SimpleStatement(f"UPDATE {name} SET n = 1 WHERE p = 'a' AND c = 1 IF v = 'one'"))
    tables.add(SimpleStatement(f"UPDATE {other} SET v = 'z' WHERE k = 'a'"))
    rejected(session, tables, "Batch with conditions cannot span multiple tables")
    rejected(session, f"BEGIN BATCH USING TIMESTAMP 5 UPDATE {name} SET n = 1 WHERE p = 'a' AND c = 1 IF v = 'one'; "
             "APPLY BATCH", "Cannot provide custom timestamp for conditional BATCH")
    prepared_batch = session.prepare(f"BEGIN UNLOGGED BATCH INSERT INTO {other} (k, v) VALUES (?, ?); "
                                     f"DELETE FROM {other} WHERE k = 'x'; APPLY BATCH")
    session.execute(prepared_batch, ("q", "r"))
    assert sorted(session.execute(f"SELECT k, v FROM {other}")) == [("q", "r")]


# ---- fault injection ---------------------------------------------------------------------

def _claim_setup(session):
    name = jobs_table(session)
    session.execute(f"INSERT INTO {name} (job_id, status, epoch) VALUES ('j', 'WAITING', 1)")
    claim = session.prepare(f"UPDATE {name} SET status = 'RUNNING', owner = ?, epoch = ? WHERE job_id = ? "
                            "IF status = 'WAITING' AND epoch = ?")
    read = session.prepare(f"SELECT owner, epoch, status FROM {name} WHERE job_id = ?")
    return name, claim, read


def _serial_owner(session, read):
    return session.execute(read, ("j",), execution_profile="serial").one()["owner"]


@pytest.mark.parametrize("applied", [True, False])
@pytest.mark.parametrize("write_type", ["CAS", "SIMPLE"])
def test_write_timeout(session, server, applied, write_type):
    name, claim, read = _claim_setup(session)
    server.faults.write_timeout(f"UPDATE {name}", write_type=write_type, applied=applied)
    with pytest.raises(WriteTimeout) as ei:
        session.execute(claim, ("me", 2, "j", 1), execution_profile="lwt")
    assert ei.value.write_type == getattr(WriteType, write_type)
    assert _serial_owner(session, read) == ("me" if applied else None)


@pytest.mark.parametrize("applied", [True, False])
def test_cas_write_unknown_0x1700(session, server, applied):
    name, claim, read = _claim_setup(session)
    server.faults.cas_write_unknown(name, applied=applied, statements="lwt")
    with pytest.raises(ErrorMessage) as ei:
        session.execute(claim, ("me", 2, "j", 1), execution_profile="lwt")
    assert type(ei.value) is ErrorMessage and ei.value.code == 0x1700
    assert _serial_owner(session, read) == ("me" if applied else None)


@pytest.mark.parametrize("applied", [True, False])
def test_delay_causes_client_timeout(session, server, applied):
    name, claim, read = _claim_setup(session)
    server.faults.delay(f"UPDATE {name}", seconds=0.6, applied=applied)
    with pytest.raises(OperationTimedOut):
        session.execute(claim, ("me", 2, "j", 1), execution_profile="short")
    assert _serial_owner(session, read) == ("me" if applied else None)


def test_unavailable_overloaded_and_times(session, server):
    name, claim, read = _claim_setup(session)
    server.faults.unavailable(read.query_string, regex=False, times=2)
    for _ in range(2):
        with pytest.raises(Unavailable):
            session.execute(read, ("j",))
    assert session.execute(read, ("j",)).one().status == "WAITING"
    server.faults.overloaded(f"UPDATE {name}")
    with pytest.raises(OverloadedErrorMessage):  # FallthroughRetryPolicy: not retried on another host
        session.execute(claim, ("me", 2, "j", 1), execution_profile="lwt")
    assert server.faults.pending() == 0


def test_control_port_and_stats(session, server):
    name, claim, read = _claim_setup(session)
    with ControlClient(server.control.host, server.control.port) as ctl:
        ctl.reset_stats()
        session.execute(claim, ("me", 2, "j", 1), execution_profile="lwt")
        session.execute(claim, ("me", 3, "j", 1), execution_profile="lwt")
        session.execute(f"UPDATE {name} SET owner = 'x' WHERE job_id = 'k'")
        session.execute(read, ("j",))
        session.execute(read, ("j",), execution_profile="serial")
        stats = ctl.stats()
        assert {k: stats[k] for k in ("lwts", "lwts_applied", "lwts_not_applied", "writes", "reads",
                                      "serial_reads", "executes", "queries")} == {
            "lwts": 2, "lwts_applied": 1, "lwts_not_applied": 1, "writes": 1, "reads": 1, "serial_reads": 1,
            "executes": 4, "queries": 1}
        rule = ctl.inject("write_timeout", f"UPDATE {name}", write_type="CAS", applied=True)
        assert rule["remaining"] == 1
        with pytest.raises(WriteTimeout):
            session.execute(f"UPDATE {name} SET owner = 'y' WHERE job_id = 'j' IF epoch = 2", execution_profile="lwt")
        assert ctl.faults()[0]["fired"] == 1
        before = server.now()
        assert ctl.advance(5) >= before + 5
        with pytest.raises(RuntimeError, match="unknown fault kind"):
            ctl.inject("nonsense", "x")


def test_reprepare_after_table_recreated(session):
    name = table(session, "k int PRIMARY KEY, v text")
    sel = session.prepare(f"SELECT v FROM {name} WHERE k = ?")
    session.execute(f"INSERT INTO {name} (k, v) VALUES (1, 'a')")
    assert session.execute(sel, (1,)).one().v == "a"
    session.execute(f"DROP TABLE {name}")
    session.execute(f"CREATE TABLE {name} (k int PRIMARY KEY, v text)")
    session.execute(f"INSERT INTO {name} (k, v) VALUES (1, 'b')")
    assert session.execute(sel, (1,)).one().v == "b"  # the server answered Unprepared; the driver re-prepared


def test_prepared_statement_keeps_its_keyspace(server, session):
    name = table(session, "k int PRIMARY KEY, v text")
    session.execute(f"INSERT INTO {name} (k, v) VALUES (1, 'in {KS}')")
    session.execute("CREATE KEYSPACE IF NOT EXISTS other_ks WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"CREATE TABLE other_ks.{name} (k int PRIMARY KEY, v text)")
    session.execute(f"INSERT INTO other_ks.{name} (k, v) VALUES (1, 'in other_ks')")
    cluster, s = connect(server, KS)
    try:
        sel = s.prepare(f"SELECT v FROM {name} WHERE k = 1")
        s.set_keyspace("other_ks")
        assert s.execute(sel).one().v == f"in {KS}"
        assert s.execute(f"SELECT v FROM {name} WHERE k = 1").one().v == "in other_ks"
        with pytest.raises(InvalidRequest, match="Key may not be empty"):
            s.execute(f"INSERT INTO {KS}.{jobs_table(session)} (job_id) VALUES ('')")
    finally:
        cluster.shutdown()
