"""Multi-column slices ``(c1, c2, ...) > (...)`` in SELECT, through the real cassandra-driver,
on the CQL test server and, when FABRICJOBS_CASSANDRA_HOSTS names one, on Apache Cassandra
itself with the same assertions (what keeps the double honest).

The store pages through k2_jobs_live (a partition per shard, clustered by the job key) in key
order: a page asks every shard for at most a page of keys after the last key it returned
(PER PARTITION LIMIT), merges the shards' answers by key and keeps a page of them. Which
statement asks depends on the fixed part of the key:

    ... WHERE shard IN ? AND (type, name, uid) > (?, ?, ?) PER PARTITION LIMIT ?
    ... WHERE shard IN ? AND type = ? AND (name, uid) > (?, ?) PER PARTITION LIMIT ?
    ... WHERE shard IN ? AND type = ? AND name = ? AND uid > ? PER PARTITION LIMIT ?
    ... WHERE shard IN ? AND type = ? PER PARTITION LIMIT ?    (a type's first page)
"""

from __future__ import annotations

import heapq
import random
import re
from itertools import groupby

import pytest
from cassandra import InvalidRequest
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import UNSET_VALUE, SimpleStatement

from backends import CQL_TARGETS, cql_session

SHARDS = list(range(8))
PAGE = 17
SELECT = "SELECT shard, type, name, uid FROM k2_jobs_live WHERE shard IN ?"
WHOLE_KEY = SELECT + " AND (type, name, uid) > (?, ?, ?) PER PARTITION LIMIT ?"
IN_TYPE = SELECT + " AND type = ? AND (name, uid) > (?, ?) PER PARTITION LIMIT ?"
IN_NAME = SELECT + " AND type = ? AND name = ? AND uid > ? PER PARTITION LIMIT ?"
TYPE_START = SELECT + " AND type = ? PER PARTITION LIMIT ?"
FILTER_MSG = "Cannot execute this query as it might involve data filtering"


def _live_rows() -> dict:
    """300 job keys -> their shard: names that share a prefix, upper case (before lower case)
    and a non-ASCII one (after), each (type, name) spread over several shards."""
    rnd = random.Random(20240611)
    names = [f"job{i}" for i in range(9)] + ["job10", "Zeta", "émile"]
    rows: dict = {}
    while len(rows) < 300:
        key = (rnd.choice(["cron", "python", "shell"]), rnd.choice(names), f"{rnd.randrange(1 << 24):06x}")
        rows[key] = rnd.choice(SHARDS)
    return rows


ROWS = _live_rows()
KEYS = sorted(ROWS)  # text compares by its UTF-8 bytes, as Python compares code points


@pytest.fixture(scope="module", params=CQL_TARGETS)
def db(request):
    """A session in a fresh keyspace: k2_jobs_live holding ROWS, and small tables for the
    bounds: ``t`` (ascending clustering), ``m`` (one descending clustering column)."""
    with cql_session(request.param, "multi_") as session:
        session.execute("CREATE TABLE k2_jobs_live (shard int, type text, name text, uid text, "
                        "PRIMARY KEY ((shard), type, name, uid))")
        session.execute("CREATE TABLE t (k int, a int, b int, c int, v int, PRIMARY KEY (k, a, b, c))")
        session.execute("CREATE TABLE m (k int, a int, b int, c int, PRIMARY KEY (k, a, b, c)) "
                        "WITH CLUSTERING ORDER BY (a ASC, b DESC, c ASC)")
        insert = session.prepare("INSERT INTO k2_jobs_live (shard, type, name, uid) VALUES (?, ?, ?, ?)")
        execute_concurrent_with_args(session, insert, [(shard,) + key for key, shard in ROWS.items()],
                                     raise_on_first_error=True)
        for a, b, c in T_ROWS:
            session.execute(f"INSERT INTO t (k, a, b, c, v) VALUES (1, {a}, {b}, {c}, 0)")
            session.execute(f"INSERT INTO m (k, a, b, c) VALUES (1, {a}, {b}, {c})")
        session.execute("INSERT INTO t (k, a, b, c, v) VALUES (2, 1, 1, 1, 0)")  # another partition
        yield session


# ---- the page walk ---------------------------------------------------------------------

def _page(session, stmt, params: list, fetch_size) -> list:
    """One page of keys: every shard's answer (in key order, at most PAGE keys), merged."""
    bound = stmt.bind([SHARDS] + params + [PAGE])
    bound.fetch_size = fetch_size
    rows = list(session.execute(bound))
    shards = [(shard, [tuple(r)[1:] for r in group]) for shard, group in groupby(rows, key=lambda r: r.shard)]
    # a shard's rows come together, in key order; the shards of an IN in the order of their values
    assert [shard for shard, _ in shards] == sorted({r.shard for r in rows})
    for _, keys in shards:
        assert keys == sorted(set(keys)) and len(keys) <= PAGE
    return list(heapq.merge(*(keys for _, keys in shards)))[:PAGE]


def _walk(session, first: tuple, then, fetch_size) -> list:
    """The keys of a key-ordered walk: ``first`` (statement, params) reads the first page,
    ``then(last key)`` says what reads the next."""
    out: list = []
    stmt, params = first
    while True:
        keys = _page(session, stmt, params, fetch_size)
        out += keys
        if len(keys) < PAGE:  # every shard had fewer left: the walk is done
            return out
        stmt, params = then(keys[-1])


@pytest.mark.parametrize("fetch_size", [None, 5])  # 5: the driver pages within each read too
def test_walk_by_the_whole_key_returns_every_row_once_in_key_order(db, fetch_size):
    whole = db.prepare(WHOLE_KEY)
    assert [c.name for c in whole.column_metadata] == ["in(shard)", "type", "name", "uid", "[per_partition_limit]"]
    walked = _walk(db, (whole, ["", "", ""]), lambda k: (whole, list(k)), fetch_size)
    assert walked == KEYS


@pytest.mark.parametrize("fetch_size", [None, 5])
def test_walks_within_a_type_and_within_a_name_return_every_row_once_in_key_order(db, fetch_size):
    start, in_type, in_name = db.prepare(TYPE_START), db.prepare(IN_TYPE), db.prepare(IN_NAME)
    by_type: list = []
    for typ in sorted({k[0] for k in KEYS}):
        by_type += _walk(db, (start, [typ]), lambda k, typ=typ: (in_type, [typ, k[1], k[2]]), fetch_size)
    assert by_type == KEYS
    by_name: list = []
    for typ, name in sorted({k[:2] for k in KEYS}):
        by_name += _walk(db, (in_name, [typ, name, ""]), lambda k, t=typ, n=name: (in_name, [t, n, k[2]]), fetch_size)
    assert by_name == KEYS


def test_limit_per_partition_limit_order_by_and_driver_pages(db):
    after = KEYS[100]
    above = [k for k in KEYS if k > after]
    shard = ROWS[KEYS[150]]
    mine = [k for k in above if ROWS[k] == shard]

    def keys(cql, params, fetch_size=None):
        return [tuple(r)[1:] for r in db.execute(SimpleStatement(cql, fetch_size=fetch_size), params)]

    everywhere = f"shard IN ({', '.join(map(str, SHARDS))})"
    # without PER PARTITION LIMIT a shard returns everything above the bound, LIMIT cuts the read
    got = keys(f"SELECT shard, type, name, uid FROM k2_jobs_live WHERE {everywhere} AND (type, name, uid) > "
               "(%s, %s, %s)", after, fetch_size=7)
    assert sorted(got) == above and len(got) == len(above)
    got = keys(f"SELECT shard, type, name, uid FROM k2_jobs_live WHERE {everywhere} AND (type, name, uid) > "
               "(%s, %s, %s) PER PARTITION LIMIT 2 LIMIT 9", after, fetch_size=4)
    assert len(got) == 9 and all(k in above for k in got)
    # ORDER BY over an IN sorts every shard's rows by key (paging off, as Cassandra requires)
    got = keys(f"SELECT shard, type, name, uid FROM k2_jobs_live WHERE {everywhere} AND (type, name, uid) > "
               "(%s, %s, %s) ORDER BY type DESC, name DESC, uid DESC LIMIT 10", after)
    assert got == above[::-1][:10]
    with pytest.raises(InvalidRequest, match="Cannot page queries with both ORDER BY and a IN restriction"):
        keys(f"SELECT shard, type, name, uid FROM k2_jobs_live WHERE {everywhere} AND (type, name, uid) > "
             "(%s, %s, %s) ORDER BY type DESC, name DESC, uid DESC LIMIT 10", after, fetch_size=10)  # sorted after
    # one shard, reversed, through the driver's pages
    got = keys("SELECT shard, type, name, uid FROM k2_jobs_live WHERE shard = %s AND (type, name, uid) > "
               "(%s, %s, %s) ORDER BY type DESC, name DESC, uid DESC", (shard,) + after, fetch_size=3)
    assert got == mine[::-1]
    got = keys("SELECT shard, type, name, uid FROM k2_jobs_live WHERE shard = %s AND (type, name, uid) <= "
               "(%s, %s, %s) AND (type, name, uid) > (%s, %s, %s)", (shard,) + mine[5] + after, fetch_size=2)
    assert got == mine[:6]


# ---- bounds --------------------------------------------------------------------------------

T_ROWS = [(0, 0, 0), (0, 1, 2), (1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 2, 0), (2, 0, 0)]


@pytest.mark.parametrize("where, params, expected", [
    ("(a, b, c) > (?, ?, ?)", (1, 1, 0), [(1, 1, 1), (1, 2, 0), (2, 0, 0)]),
    ("(a, b, c) >= (?, ?, ?)", (1, 1, 0), [(1, 1, 0), (1, 1, 1), (1, 2, 0), (2, 0, 0)]),
    ("(a, b) > (?, ?)", (1, 1), [(1, 2, 0), (2, 0, 0)]),  # a shorter tuple compares a prefix
    ("(a, b) <= (?, ?)", (1, 1), [(0, 0, 0), (0, 1, 2), (1, 0, 0), (1, 1, 0), (1, 1, 1)]),
    ("(a, b) < (?, ?)", (1, 1), [(0, 0, 0), (0, 1, 2), (1, 0, 0)]),
    ("(a) > (?)", (1,), [(2, 0, 0)]),
    ("(a, b) > (?, ?) AND (a, b) < (?, ?)", (0, 1, 1, 2), [(1, 0, 0), (1, 1, 0), (1, 1, 1)]),
    ("(a, b) > (?, ?) AND (a, b, c) <= (?, ?, ?)", (0, 1, 1, 1, 0), [(1, 0, 0), (1, 1, 0)]),
    # a one-column slice joins a multi-column slice on the same first column, either way round
    ("(a, b) > (?, ?) AND a < ?", (0, 1, 2), [(1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 2, 0)]),
    ("a > ? AND (a, b) < (?, ?)", (0, 1, 1), [(1, 0, 0)]),
    ("a >= ? AND (a, b, c) <= (?, ?, ?)", (1, 1, 1, 0), [(1, 0, 0), (1, 1, 0)]),
    # after an EQ prefix
    ("a = ? AND (b, c) > (?, ?)", (1, 1, 0), [(1, 1, 1), (1, 2, 0)]),
    ("a = ? AND (b) > (?)", (1, 0), [(1, 1, 0), (1, 1, 1), (1, 2, 0)]),
    ("a = ? AND (b, c) > (?, ?) AND (b, c) < (?, ?)", (1, 0, 0, 1, 1), [(1, 1, 0)]),
    ("a = ? AND (b, c) > (?, ?) AND b < ?", (1, 0, 0, 2), [(1, 1, 0), (1, 1, 1)]),
    ("a = ? AND b = ? AND (c) > (?)", (1, 1, 0), [(1, 1, 1)]),
    ("a IN (?, ?) AND (b, c) > (?, ?)", (0, 1, 0, 5), [(0, 1, 2), (1, 1, 0), (1, 1, 1), (1, 2, 0)]),
    # empty and single-row ranges
    ("(a, b, c) > (?, ?, ?) AND (a, b, c) < (?, ?, ?)", (1, 1, 0, 1, 1, 0), []),
    ("(a, b, c) > (?, ?, ?) AND (a, b, c) < (?, ?, ?)", (1, 1, 0, 0, 1, 0), []),
    ("(a, b, c) >= (?, ?, ?) AND (a, b, c) <= (?, ?, ?)", (1, 1, 0, 1, 1, 0), [(1, 1, 0)]),
])
def test_bounds_as_bind_markers_and_as_literals(db, where, params, expected):
    prepared = db.prepare(f"SELECT a, b, c FROM t WHERE k = ? AND {where}")
    assert [tuple(r) for r in db.execute(prepared, (1,) + params)] == expected
    literal = where.replace("?", "{}").format(*params)
    assert [tuple(r) for r in db.execute(f"SELECT a, b, c FROM t WHERE k = 1 AND {literal}")] == expected


@pytest.mark.parametrize("where, expected", [
    # tuples compare by value whatever the clustering order; rows come in clustering order
    ("(a, b) > (1, 0)", [(1, 2, 0), (1, 1, 0), (1, 1, 1), (2, 0, 0)]),
    ("(a, b) < (1, 1)", [(0, 1, 2), (0, 0, 0), (1, 0, 0)]),
    ("(a, b, c) > (1, 1, 0) AND (a, b, c) < (1, 2, 5)", [(1, 2, 0), (1, 1, 1)]),
    ("a = 1 AND (b, c) > (0, 0)", [(1, 2, 0), (1, 1, 0), (1, 1, 1)]),
    ("a = 1 AND (b, c) > (0, 0) ORDER BY a DESC, b ASC, c DESC", [(1, 1, 1), (1, 1, 0), (1, 2, 0)]),
])
def test_descending_clustering_column(db, where, expected):
    assert [tuple(r) for r in db.execute(f"SELECT a, b, c FROM m WHERE k = 1 AND {where}")] == expected


def test_range_deletion_after_an_equal_prefix(db):
    db.execute("CREATE TABLE IF NOT EXISTS d (k int, a int, b int, c int, PRIMARY KEY (k, a, b, c))")
    for a, b, c in T_ROWS:
        db.execute(f"INSERT INTO d (k, a, b, c) VALUES (1, {a}, {b}, {c})")
    db.execute(db.prepare("DELETE FROM d WHERE k = ? AND a = ? AND (b, c) >= (?, ?)"), (1, 1, 1, 1))
    rows = [tuple(r) for r in db.execute("SELECT a, b, c FROM d WHERE k = 1")]
    assert rows == [(0, 0, 0), (0, 1, 2), (1, 0, 0), (1, 1, 0), (2, 0, 0)]
    db.execute("DELETE FROM d WHERE k = 1 AND (a, b) > (0, 0) AND a < 2")
    assert [tuple(r) for r in db.execute("SELECT a, b, c FROM d WHERE k = 1")] == [(0, 0, 0), (2, 0, 0)]


# ---- rejections ------------------------------------------------------------------------------

def rejected(session, cql, message, params=None):
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        session.execute(cql, params)


@pytest.mark.parametrize("where, message", [
    # columns: clustering ones, each once, in clustering order, none skipped
    ("(b, a) > (1, 1)", "Clustering columns must appear in the PRIMARY KEY order in multi-column relations: "
                        "(b, a) > (1, 1)"),
    ("(a, c) > (1, 1)", "Clustering columns must appear in the PRIMARY KEY order in multi-column relations: "
                        "(a, c) > (1, 1)"),
    ("(a, a) > (1, 1)", 'Column "a" appeared twice in a relation: (a, a) > (1, 1)'),
    ("(k, a) > (1, 1)", "Multi-column relations can only be applied to clustering columns but was applied to: k"),
    ("(a, v) > (1, 1)", "Multi-column relations can only be applied to clustering columns but was applied to: v"),
    ("(a, nope) > (1, 1)", "Undefined column name nope"),
    ("(a, b) > (1, 2, 3)", "Expected 2 elements in value tuple, but got 3: (1, 2, 3)"),
    ("(a, b) > ('x', 1)", 'Invalid STRING constant (x) for "a" of type int'),
    ("(a, b) > (1, null)", "Invalid null value in condition for column b"),
    ("(a, b) != (1, 1)", 'Unsupported "!=" relation: (a, b) != (1, 1)'),
    # a slice right after the EQ prefix, nothing after it
    ("(b, c) > (1, 1)", 'PRIMARY KEY column "b" cannot be restricted as preceding column "a" is not restricted'),
    ("a > 0 AND (b, c) > (1, 1)",
     'Clustering column "b" cannot be restricted (preceding column "a" is restricted by a non-EQ relation)'),
    ("(a, b) > (1, 1) AND c = 1",
     'Clustering column "c" cannot be restricted (preceding column "a" is restricted by a non-EQ relation)'),
    ("c = 1 AND (a, b) > (1, 1)",
     'PRIMARY KEY column "c" cannot be restricted (preceding column "a" is restricted by a non-EQ relation)'),
    ("b > 1 AND (b, c) < (1, 1)", 'PRIMARY KEY column "b" cannot be restricted as preceding column "a" is not restricted'),
    # the same column in a one-column and a multi-column relation
    ("a = 1 AND (a, b) > (1, 1)", "a cannot be restricted by more than one relation if it includes an Equal"),
    ("(a, b) > (1, 1) AND a = 1", 'Column "a" cannot be restricted by both an equality and an inequality relation'),
    ("a IN (1, 2) AND (a, b) > (1, 1)", "a cannot be restricted by more than one relation if it includes a IN"),
    ("(a, b) > (1, 1) AND a IN (1, 2)", 'Column "a" cannot be restricted by both an equality and an inequality relation'),
    ("b = 0 AND (a, b) > (1, 1)", "b cannot be restricted by more than one relation if it includes an Equal"),
    ("(a, b) > (1, 1) AND a >= 1", "More than one restriction was found for the start bound on a"),
    ("a > 0 AND (a, b) > (1, 1)", "More than one restriction was found for the start bound on a"),
    ("(a, b) > (1, 1) AND a < 5 AND a < 6", "More than one restriction was found for the end bound on a"),
    ("(a, b) > (1, 1) AND b < 2", 'Column "b" cannot be restricted by two inequalities not starting with the same column'),
    ("b < 2 AND (a, b) > (1, 1)", 'Column "b" cannot be restricted by two inequalities not starting with the same column'),
    ("(a, b) > (1, 1) AND (b, c) < (1, 1)",
     'Column "b" cannot be restricted by two inequalities not starting with the same column'),
    # two multi-column slices with the same bound
    ("(a, b) > (1, 1) AND (a, b) > (0, 0)", "More than one restriction was found for the start bound on "),
    ("(a, b) < (1, 1) AND (a, b, c) <= (0, 0, 0)", "More than one restriction was found for the end bound on "),
    # a regular column beside it is a filter
    ("(a, b) > (0, 1) AND v = 0", FILTER_MSG),
])
def test_rejections(db, where, message):
    rejected(db, f"SELECT a, b, c FROM t WHERE k = 1 AND {where}", message)


def test_rejections_of_filtering_writes_and_bound_values(db):
    rejected(db, "SELECT a, b, c FROM t WHERE (a, b) > (1, 1)", FILTER_MSG)
    assert [tuple(r) for r in db.execute("SELECT a, b, c FROM t WHERE (a, b) > (1, 1) ALLOW FILTERING")] == \
        [(1, 2, 0), (2, 0, 0)]
    # a multi-column slice that is not on the clustering prefix would be a filter: Cassandra
    # prepares the statement and refuses to run it
    for where in ("(b, c) > (?, ?)", "a > 0 AND (b, c) > (?, ?)"):
        prepared = db.prepare(f"SELECT a FROM t WHERE k = 1 AND {where} ALLOW FILTERING")
        rejected(db, prepared, "Multi-column slice restrictions cannot be used for filtering.", (1, 1))
    filtered = db.prepare("SELECT a, b, c FROM t WHERE k = 1 AND c = ? AND (a, b) > (?, ?) ALLOW FILTERING")
    assert [tuple(r) for r in db.execute(filtered, (0, 0, 1))] == [(1, 0, 0), (1, 1, 0), (1, 2, 0), (2, 0, 0)]
    rejected(db, "UPDATE t SET v = 1 WHERE k = 1 AND (a, b, c) > (1, 1, 1)",
             "Slice restrictions are not supported on the clustering columns in UPDATE statements")
    rejected(db, "DELETE FROM t WHERE k = 1 AND (a, b) > (1, 1) IF v = 1", "DELETE statements must restrict all "
             "PRIMARY KEY columns with equality relations in order to delete non static columns")
    prepared = db.prepare("SELECT a FROM t WHERE k = ? AND (a, b) > (?, ?) AND (a, b) < (?, ?)")
    rejected(db, prepared, "Invalid unset value for tuple field number 1", (1, 0, UNSET_VALUE, 5, 5))
    rejected(db, prepared, "Invalid unset value for tuple field number 0", (1, None, 0, UNSET_VALUE, 5))
    rejected(db, prepared, "Invalid null value in condition for column a", (1, None, 0, 5, 5))
    rejected(db, prepared, "Invalid null value in condition for column b", (1, 0, 0, 5, None))
