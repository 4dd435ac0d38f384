#!/usr/bin/env python3
"""What the index repair pass costs (docs/explanation/cassandra-queue.md, "The repair pass").

    .venv/bin/python scripts/bench_repair.py [--rows 100000] [--live 0.1] [--lost 100] [--json]

On a one-node Apache Cassandra 5.0 this starts (testkit/realcassandra; or --cassandra-hosts):
--rows rows in k2_jobs, --live of them live (WAITING, with their index and listing entries), the
rest archived (as a month of history is), written the fastest way (plain writes); --lost live
rows then lose their index entry (raw CQL). One unthrottled pass over the whole table (one
share, pages of 200 rows, as a node's pass) is timed, and the requests and rows it read are
counted by the store's own counters. Printed per 100,000 rows: seconds, requests, rows read;
and how long a pass takes at the default pace (INDEX_REPAIR_ROWS_PER_SEC = 500). Goal: every
lost entry restored.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # fabricjobs and the test kit (testkit/)

from fabricjobs.config import load_config  # noqa: E402
from fabricjobs.model import Job, JobKey, Status  # noqa: E402
from fabricjobs.node.repair import PAGE  # noqa: E402
from fabricjobs.store import open_store  # noqa: E402
from testkit.rig import write_config  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
DEFAULT_PACE = 500


def load(store, rows: int, live: int) -> list[JobKey]:
    """``rows`` rows, the first ``live`` of them live with their entries; the live keys."""
    from cassandra.concurrent import execute_concurrent

    row = store._stmt(("bench-row",), "UPDATE k2_jobs SET status = ?, creation_time = ?, archived = ?, next_run = ?, "
                                      "end_time = ?, revision = ?, epoch = ?, priority = ?, arguments = ? WHERE type = ? "
                                      "AND name = ? AND uid = ?")
    keys, writes = [], []
    for i in range(rows):
        k = JobKey("USER_JOB", "Bench.job", f"u{i:07d}")
        alive = i < live
        job = Job(k, Status.WAITING if alive else Status.PROCESSED, T0, next_run=T0 + timedelta(milliseconds=i),
                  archived=not alive, end_time=None if alive else T0, revision=1)
        writes.append((row, (job.status.value, T0, job.archived, job.next_run, job.end_time, 1, 0, 4, "{}",
                             k.type, k.name, k.uid)))
        if alive:
            keys.append(k)
            writes += [(w.stmt, w.params) for w in (store._entry_write(job, 1), store._listed_write(job))]
    for ok, result in execute_concurrent(store._session._s, writes, concurrency=256, raise_on_first_error=True):
        assert ok, result
    return keys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--live", type=float, default=0.1, help="share of the rows that are live")
    p.add_argument("--lost", type=int, default=100, help="live rows whose index entry is deleted")
    p.add_argument("--cassandra-hosts", help="host[:port] of a running cluster instead of starting one")
    p.add_argument("--json", action="store_true", help="write a result file under bench/results/")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fj-bench-repair-"))
    cassandra = None
    if args.cassandra_hosts:
        host, _, port = args.cassandra_hosts.partition(":")
        hosts, port_n = [host], int(port or 9042)
    else:
        from testkit.realcassandra import CassandraCluster, available

        if (why := available()) is not None:
            print(f"no Apache Cassandra here: {why}")
            return 2
        cassandra = CassandraCluster(tmp / "cassandra", nodes=1, heap="768m").start()
        hosts, port_n = cassandra.hosts, cassandra.port
    try:
        config = write_config(tmp / "config.ini", {"store": {"BACKEND": "cassandra"}, "cassandra": {
            "HOSTS": ",".join(hosts), "PORT": port_n, "KEYSPACE": "fj_" + uuid.uuid4().hex[:12], "PROTOCOL_VERSION": 5,
            "TOKEN_AWARE": "false"}})
        store = open_store(load_config(config))
        began = time.monotonic()
        live = load(store, args.rows, int(args.rows * args.live))
        print(f"loaded {args.rows:,} rows ({len(live):,} live) in {time.monotonic() - began:.1f} s")
        ks = store.keyspace
        for k in live[:args.lost]:
            store._session.execute(f"DELETE FROM {ks}.k2_jobs_index WHERE bucket = 'WAITING|4' AND shard IN "
                                   "(0, 1, 2, 3, 4, 5, 6, 7) AND next_run = %s AND type = %s AND name = %s AND uid = %s "
                                   "AND revision = 1", (T0 + timedelta(milliseconds=int(k.uid[1:])), k.type, k.name, k.uid))
        before = (store.stats.reads, store.stats.rows_read, store.stats.writes)
        began = time.monotonic()
        cursor, read, restored, pages = None, 0, 0, 0
        while True:
            page = store.repair_index((1, 0), cursor, PAGE)
            read, restored, pages = read + page.read, restored + page.restored, pages + 1
            if page.cursor is None:
                break
            cursor = page.cursor
        took = time.monotonic() - began
        requests = store.stats.reads - before[0]
        rows_read = store.stats.rows_read - before[1]
        store.close()
        per = 100_000 / max(read, 1)
        table = [
            ["rows in k2_jobs (live)", f"{read:,} ({len(live):,})"],
            ["pass, unthrottled", f"{took:.1f} s ({read / took:,.0f} rows/s)"],
            ["per 100,000 rows: seconds", f"{took * per:.1f}"],
            ["per 100,000 rows: read requests", f"{requests * per:,.0f}"],
            ["per 100,000 rows: rows read", f"{rows_read * per:,.0f}"],
            [f"per 100,000 rows at the default pace ({DEFAULT_PACE} rows/s)", f"{100_000 / DEFAULT_PACE:.0f} s"],
            ["lost entries restored", f"{restored} of {args.lost}"],
        ]
        width = max(len(r[0]) for r in table)
        for name, value in table:
            print(f"{name:<{width}}  {value}")
        met = restored == args.lost
        print(f"goal: every lost entry restored: {'met' if met else 'NOT MET'}")
        if args.json:
            from testkit.benchresult import write_result

            write_result("repair-pass-cassandra-real", "repair pass (bench_repair.py)", "cassandra-real",
                         [{"goal": "every lost index entry restored", "measured": f"{restored} of {args.lost}", "met": met}],
                         [{"title": f"One pass over {read:,} rows of k2_jobs ({len(live):,} live), one-node Apache "
                                    "Cassandra 5.0, pages of 200", "headers": ["", "measured"], "rows": table}])
        return 0 if met else 1
    finally:
        if cassandra is not None:
            cassandra.stop(wipe=True)


if __name__ == "__main__":
    sys.exit(main())
