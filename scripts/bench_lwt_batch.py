#!/usr/bin/env python3
"""How many rows a second one Paxos round can change: the headroom of a queue that claims in
batches (docs/explanation/cassandra-queue.md, "Other designs").

    .venv/bin/python scripts/bench_lwt_batch.py [--cassandra-nodes 1] [--rows 6000] [--json]

Today's queue changes one job row per lightweight transaction (a job is its own partition). A
batch of conditional UPDATEs of rows of ONE partition is one Paxos round in Cassandra, and all
or none of it applies. On an Apache Cassandra 5.0 this starts (testkit/realcassandra, RF = its
node count, QUORUM / SERIAL), one client process with 16 requests in flight changes --rows rows

* one row per LWT, each row its own partition (today's claim), and
* in batches of 10 and of 50 rows of one partition, one LWT each;

and prints rows/s and Paxos rounds/s of each. Then a batch of 10 whose one row's condition is
false: it must change nothing and name the row that failed (what a batched claim relies on).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test kit (testkit/)

if TYPE_CHECKING:
    from testkit.realcassandra import CassandraCluster

CONCURRENCY = 16
BATCHES = (10, 50)


def _session(hosts, port):
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, FallthroughRetryPolicy, TokenAwarePolicy

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1")),
        consistency_level=ConsistencyLevel.QUORUM, serial_consistency_level=ConsistencyLevel.SERIAL,
        retry_policy=FallthroughRetryPolicy(), request_timeout=60)
    cluster = Cluster(list(hosts), port=port, protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    return cluster, cluster.connect()


def new_keyspace(session, prefix: str, nodes: int) -> str:
    """A fresh keyspace replicated to every node of the cluster (RF = ``nodes``); its name."""
    ks = prefix + uuid.uuid4().hex[:10]
    session.execute(f"CREATE KEYSPACE {ks} WITH replication = "
                    f"{{'class': 'NetworkTopologyStrategy', 'datacenter1': {nodes}}}")
    return ks


@contextmanager
def real_cassandra(nodes: int, prefix: str) -> Iterator[CassandraCluster | None]:
    """A fresh Apache Cassandra of ``nodes`` nodes in a temporary directory, stopped and wiped
    at the end; None (the reason printed) where none can run."""
    from testkit.realcassandra import CassandraCluster, available

    if (why := available()) is not None:
        print(f"no Apache Cassandra here: {why}")
        yield None
        return
    cassandra = CassandraCluster(Path(tempfile.mkdtemp(prefix=prefix)) / "cassandra", nodes=nodes, heap="768m")
    cassandra.start()
    try:
        yield cassandra
    finally:
        cassandra.stop(wipe=True)


def _timed(session, statements) -> float:
    """Seconds to run ``statements`` CONCURRENCY at a time; every one must apply."""
    from cassandra.concurrent import execute_concurrent

    began = time.perf_counter()
    results = execute_concurrent(session, statements, concurrency=CONCURRENCY, raise_on_first_error=True)
    took = time.perf_counter() - began
    missed = [r for ok, r in results if not ok or not r.was_applied]
    if missed:
        raise SystemExit(f"{len(missed)} of {len(results)} LWTs did not apply (no contention: all should)")
    return took


def measure(session, ks: str, rows: int) -> list[dict]:
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.query import BatchStatement

    session.execute(f"CREATE TABLE {ks}.one (k int PRIMARY KEY, v int)")
    session.execute(f"CREATE TABLE {ks}.many (p int, c int, v int, PRIMARY KEY ((p), c))")
    session.cluster.control_connection.wait_for_schema_agreement()
    warm = 200
    ins_one = session.prepare(f"INSERT INTO {ks}.one (k, v) VALUES (?, 0)")
    ins_many = session.prepare(f"INSERT INTO {ks}.many (p, c, v) VALUES (?, ?, 0)")
    execute_concurrent_with_args(session, ins_one, [(k,) for k in range(rows + warm)], concurrency=128,
                                 raise_on_first_error=True)
    per_size = {b: [(p, c) for p in range((rows + warm) // b + 1) for c in range(b)] for b in BATCHES}
    for b, keys in per_size.items():
        execute_concurrent_with_args(session, ins_many, [(p + b * 1_000_000, c) for p, c in keys], concurrency=128,
                                     raise_on_first_error=True)
    one = session.prepare(f"UPDATE {ks}.one SET v = 1 WHERE k = ? IF v = 0")
    many = session.prepare(f"UPDATE {ks}.many SET v = 1 WHERE p = ? AND c = ? IF v = 0")
    out = []
    _timed(session, [(one, (k,)) for k in range(rows, rows + warm)])  # connections, JIT
    took = _timed(session, [(one, (k,)) for k in range(rows)])
    out.append({"rows_per_round": 1, "rows": rows, "seconds": took, "rows_per_s": rows / took,
                "rounds_per_s": rows / took})
    for b in BATCHES:
        warm_n = max(1, warm // b)
        batches = []
        for p in range(rows // b + warm_n):
            batch = BatchStatement()
            for c in range(b):
                batch.add(many, (p + b * 1_000_000, c))
            batches.append((batch, ()))
        _timed(session, batches[-warm_n:])
        work = batches[:-warm_n]
        took = _timed(session, work)
        out.append({"rows_per_round": b, "rows": len(work) * b, "seconds": took,
                    "rows_per_s": len(work) * b / took, "rounds_per_s": len(work) / took})
    return out


def all_or_nothing(session, ks: str) -> dict:
    """A batch of 10 rows of one partition, one of them already changed: nothing applies, and
    Cassandra answers with the current values of the rows it checked (the one with v = 1 is the
    row whose condition failed)."""
    from cassandra.query import BatchStatement

    session.execute(f"CREATE TABLE {ks}.probe (p int, c int, v int, PRIMARY KEY ((p), c))")
    session.cluster.control_connection.wait_for_schema_agreement()
    for c in range(10):
        session.execute(f"INSERT INTO {ks}.probe (p, c, v) VALUES (0, %s, %s)", (c, 1 if c == 7 else 0))
    stmt = session.prepare(f"UPDATE {ks}.probe SET v = 2 WHERE p = 0 AND c = ? IF v = 0")
    batch = BatchStatement()
    for c in range(10):
        batch.add(stmt, (c,))
    result = session.execute(batch)
    failed = [(r.c, r.v) for r in result.current_rows if getattr(r, "v", 0) != 0]
    changed = [r.c for r in session.execute(f"SELECT c, v FROM {ks}.probe WHERE p = 0") if r.v == 2]
    return {"applied": result.was_applied, "rows_changed": len(changed), "rows_named_as_failed": failed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cassandra-nodes", type=int, default=1)
    p.add_argument("--rows", type=int, default=6000)
    p.add_argument("--json", action="store_true", help="write a result file under bench/results/")
    args = p.parse_args()
    with real_cassandra(args.cassandra_nodes, "fj-bench-lwt-batch-") as cassandra:
        if cassandra is None:
            return 2
        cluster, session = _session(cassandra.hosts, cassandra.port)
        try:
            ks = new_keyspace(session, "lwtbatch_", args.cassandra_nodes)
            figures = measure(session, ks, args.rows)
            probe = all_or_nothing(session, ks)
        finally:
            cluster.shutdown()
    single = figures[0]["rows_per_s"]
    table = [[f"{f['rows_per_round']}", f"{f['rows']:,}", f"{f['seconds']:.2f}", f"{f['rows_per_s']:,.0f}",
              f"{f['rounds_per_s']:,.0f}", f"{f['rows_per_s'] / single:.1f}x"] for f in figures]
    headers = ["rows per LWT", "rows", "seconds", "rows/s", "Paxos rounds/s", "rows/s vs one row per LWT"]
    from tabulate import tabulate

    where = f"Apache Cassandra 5.0, {args.cassandra_nodes} node(s) on this host, RF {args.cassandra_nodes}, QUORUM / SERIAL"
    print(f"== conditional UPDATEs, {CONCURRENCY} in flight from one client process ({where})")
    print(tabulate(table, headers=headers, disable_numparse=True))
    ok = not probe["applied"] and probe["rows_changed"] == 0 and [c for c, _ in probe["rows_named_as_failed"]] == [7]
    print(f"a batch of 10 with one false condition: applied {probe['applied']}, rows changed {probe['rows_changed']}, "
          f"rows named as failed {probe['rows_named_as_failed']} -> {'all or nothing, as expected' if ok else 'UNEXPECTED'}")
    if args.json:
        from testkit.benchresult import write_result

        write_result(f"lwt-batches-{args.cassandra_nodes}n-cassandra-real", "LWT batches (bench_lwt_batch.py)",
                     f"cassandra-real, {args.cassandra_nodes} node{'s' if args.cassandra_nodes > 1 else ''}",
                     [{"goal": "a batch with one false condition changes nothing and names that row",
                       "measured": f"applied {probe['applied']}, {probe['rows_changed']} rows changed, "
                                   f"failed rows {probe['rows_named_as_failed']}", "met": ok}],
                     [{"title": f"Conditional UPDATEs, {CONCURRENCY} in flight from one client ({where})",
                       "headers": headers, "rows": table}])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
