"""token(): selectors and WHERE restrictions on a partition's token, through the real
cassandra-driver, on the CQL test server and, when FABRICJOBS_CASSANDRA_HOSTS names one, on
Apache Cassandra itself with the same assertions (what keeps the double honest).

The store walks k2_jobs page by page in token order (a repair pass):
``token(type, name, uid) > ? AND token(type, name, uid) <= ? LIMIT ?``.
"""

from __future__ import annotations

import re
import uuid

import pytest
from cassandra import InvalidRequest
from cassandra.metadata import Murmur3Token
from cassandra.protocol import SyntaxException
from cassandra.query import SimpleStatement

from backends import CQL_TARGETS, cql_session

MIN, MAX = -(1 << 63), (1 << 63) - 1
PARTITIONS = 200
TOKEN = "token(type, name, uid)"
FILTER_MSG = "Cannot execute this query as it might involve data filtering"


@pytest.fixture(scope="module", params=CQL_TARGETS)
def db(request):
    """A session in a fresh keyspace holding ``jobs`` (k2_jobs' key: PRIMARY KEY ((type, name,
    uid))) with PARTITIONS rows, and ``kc`` (one int partition key, a clustering column).
    Yields (session, {(type, name, uid): token the driver computes from the routing key})."""
    with cql_session(request.param, "tok_") as session:
        session.execute("CREATE TABLE jobs (type text, name text, uid uuid, status text, PRIMARY KEY ((type, name, uid)))")
        session.execute("CREATE TABLE kc (k int, c int, v int, PRIMARY KEY (k, c))")
        insert = session.prepare("INSERT INTO jobs (type, name, uid, status) VALUES (?, ?, ?, ?)")
        tokens = {}
        for i in range(PARTITIONS):
            key = (f"type{i % 3}", f"job{i}", uuid.UUID(int=i * 7919))
            bound = insert.bind(key + ("queued",))
            assert bound.routing_key is not None  # the driver's own serialization of the composite key
            tokens[key] = Murmur3Token.from_key(bound.routing_key).value
            session.execute(bound)
        for k in range(1, 6):
            session.execute("INSERT INTO kc (k, c, v) VALUES (%s, 1, %s)", (k, k))
        yield session, tokens


def rejected(session, cql, message, params=None, exc=InvalidRequest):
    with pytest.raises(exc, match=re.escape(message)):
        session.execute(cql, params)


def test_page_walk_in_token_order_returns_every_partition_once(db):
    session, tokens = db
    page = session.prepare(f"SELECT {TOKEN} AS t, type, name, uid, status FROM jobs "
                           f"WHERE {TOKEN} > ? AND {TOKEN} <= ? LIMIT ?")
    assert [c.name for c in page.column_metadata] == ["partition key token", "partition key token", "[limit]"]
    walked, lo, pages = [], MIN, 0
    while True:
        rows = list(session.execute(page, (lo, MAX, 17)))
        if not rows:
            break
        assert len(rows) <= 17
        walked += rows
        lo, pages = rows[-1].t, pages + 1
    assert pages == -(-PARTITIONS // 17)
    assert [r.t for r in walked] == sorted(tokens.values())  # strictly rising: each partition once
    assert {(r.type, r.name, r.uid): r.t for r in walked} == tokens
    assert {r.status for r in walked} == {"queued"}


def test_token_bounds_as_literals_markers_and_driver_pages(db):
    session, tokens = db
    ring = sorted(tokens.values())
    a, b = ring[40], ring[120]

    def tokens_of(where, params=None, fetch_size=None):
        st = SimpleStatement(f"SELECT {TOKEN} FROM jobs WHERE {where}", fetch_size=fetch_size)
        return [r[0] for r in session.execute(st, params)]

    assert tokens_of(f"{TOKEN} = {a}") == [a]
    assert tokens_of(f"{TOKEN} = %s", (a + 1,)) == []
    assert tokens_of(f"{TOKEN} >= %s AND {TOKEN} < %s", (a, b)) == ring[40:120]
    assert tokens_of(f"{TOKEN} > {a} AND {TOKEN} <= {b}") == ring[41:121]
    assert tokens_of(f"{TOKEN} < {a}") == ring[:40]
    assert tokens_of(f"{TOKEN} >= {b}", fetch_size=7) == ring[120:]  # the driver's paging
    assert tokens_of(f"{TOKEN} <= %s AND {TOKEN} >= %s", (b, a), fetch_size=9) == ring[40:121]
    assert tokens_of(f"{TOKEN} > {a} LIMIT 5") == ring[41:46]
    # a start past the end selects nothing; the minimum token as a bound is the ring's start or end
    assert tokens_of(f"{TOKEN} > {b} AND {TOKEN} < {a}") == []
    assert tokens_of(f"{TOKEN} > {a} AND {TOKEN} < {a}") == []
    assert tokens_of(f"{TOKEN} > {MIN}") == ring
    assert tokens_of(f"{TOKEN} < {MIN}") == ring
    assert tokens_of(f"{TOKEN} > {MAX}") == []
    key = next(k for k, t in tokens.items() if t == a)
    assert tokens_of(f"{TOKEN} >= token(%s, %s, %s) AND {TOKEN} < %s", key + (b,)) == ring[40:120]


def test_token_filters_keys_named_by_eq_and_in(db):
    """With every partition key column given, token() filters those keys (a wrapping range)."""
    session, _ = db
    kt = {r.k: r.t for r in session.execute("SELECT DISTINCT k, token(k) AS t FROM kc")}
    assert len(kt) == 5
    mid = sorted(kt.values())[2]
    below = {k for k, t in kt.items() if t < mid}

    def ks(where):
        return {r.k for r in session.execute(f"SELECT k FROM kc WHERE k IN (1, 2, 3, 4, 5) AND {where}")}

    assert ks(f"token(k) < {mid}") == below
    assert ks(f"token(k) = {mid}") == {k for k, t in kt.items() if t == mid}
    assert ks(f"token(k) > {mid} AND token(k) < {mid}") == set()
    assert ks(f"token(k) > {MAX - 1} AND token(k) < {mid}") == below  # wraps, unlike a scan
    assert [r.v for r in session.execute(f"SELECT v FROM kc WHERE k = 3 AND c = 1 AND token(k) = {kt[3]}")] == [3]
    # a write whose token restriction drops its partition writes nothing
    session.execute(f"UPDATE kc SET v = 30 WHERE k = 3 AND c = 1 AND token(k) = {kt[3] + 1}")
    assert session.execute("SELECT v FROM kc WHERE k = 3 AND c = 1").one().v == 3


@pytest.mark.parametrize("cql, message", [
    ("SELECT * FROM jobs WHERE token(type, name) > 0",
     "The token() function must be applied to all partition key components or none of them"),
    ("SELECT * FROM jobs WHERE token(name, type, uid) > 0",
     "The token function arguments must be in the partition key order: type, name, uid"),
    ("SELECT * FROM jobs WHERE token(type, name, uid, uid) > 0",
     "The token() function contains duplicate partition key components"),
    ("SELECT * FROM jobs WHERE token(type, name, uid, status) > 0",
     "The token() function must contains only partition key components"),
    ("SELECT * FROM jobs WHERE token(type, name, nope) > 0", "Undefined column name nope"),
    (f"SELECT * FROM jobs WHERE {TOKEN} > 0 AND type = 'a'", FILTER_MSG),
    (f"SELECT * FROM jobs WHERE {TOKEN} > 0 AND type = 'a' AND name = 'b'", FILTER_MSG),
    ("SELECT * FROM kc WHERE token(k) > 0 AND c = 1", FILTER_MSG),
    (f"SELECT * FROM jobs WHERE {TOKEN} > 0 ORDER BY type",
     "ORDER BY is only supported when the partition key is restricted by an EQ or an IN."),
    (f"SELECT * FROM jobs WHERE {TOKEN} > 5 AND {TOKEN} >= 3",
     "More than one restriction was found for the start bound on type, name, uid"),
    (f"SELECT * FROM jobs WHERE {TOKEN} = 5 AND {TOKEN} > 3",
     "type, name, uid cannot be restricted by more than one relation if it includes an Equal"),
    (f"SELECT * FROM jobs WHERE {TOKEN} < 5 AND {TOKEN} = 3",
     'Columns "type, name, uid" cannot be restricted by both an equality and an inequality relation'),
    (f"SELECT * FROM jobs WHERE {TOKEN} != 5", f'Unsupported "!=" relation: {TOKEN} != 5'),
    (f"SELECT * FROM jobs WHERE {TOKEN} > 'abc'", 'Invalid STRING constant (abc) for "partition key token" of type bigint'),
    (f"SELECT * FROM jobs WHERE {TOKEN} > null", "Invalid null token value"),
    ("SELECT token(type, name) FROM jobs",
     "Invalid number of arguments in call to function system.token: 3 required but 2 provided"),
    ("SELECT token(type, name, status) FROM jobs",
     "Type error: status cannot be passed as argument 2 of function system.token of type uuid"),
    (f"UPDATE jobs SET status = 'x' WHERE {TOKEN} = 0",
     "The token function cannot be used in WHERE clauses for UPDATE statements"),
    (f"DELETE FROM jobs WHERE {TOKEN} > 0", "The token function cannot be used in WHERE clauses for DELETE statements"),
    ("DELETE FROM kc WHERE token(k) = 0 AND c = 1",
     "The token function cannot be used in WHERE clauses for DELETE statements"),
])
def test_rejections(db, cql, message):
    rejected(db[0], cql, message)


def test_rejections_by_the_grammar_and_what_needs_allow_filtering(db):
    session, tokens = db
    rejected(session, f"SELECT * FROM jobs WHERE {TOKEN} IN (5, 6)", "no viable alternative", exc=SyntaxException)
    rejected(session, "UPDATE kc SET v = 1 WHERE k = 1 AND c = 1 IF token(k) = 0", "no viable alternative",
             exc=SyntaxException)
    rejected(session, f"SELECT * FROM jobs WHERE {TOKEN} > %s", "Invalid null token value", (None,))
    # a partition key column beside token() is a filter: allowed with ALLOW FILTERING
    rows = session.execute(f"SELECT {TOKEN} FROM jobs WHERE {TOKEN} > {MIN} AND type = 'type1' ALLOW FILTERING")
    assert [r[0] for r in rows] == sorted(t for k, t in tokens.items() if k[0] == "type1")
