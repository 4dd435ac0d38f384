#!/usr/bin/env python3
"""CAS claims per second through the SQLite store, next to the engine's own limit.

For 1 and 4 processes on one database file (WAL, synchronous=FULL unless --synchronous):

  store CAS      store.cas(): one claim, one transaction (what a lone claim costs)
  store batched  store.cas_many() with --batch claims per transaction (how nodes claim)
  raw UPDATE     the equivalent bare `BEGIN IMMEDIATE; UPDATE ... WHERE key AND status AND
                 epoch; COMMIT` through sqlite3, no fabricjobs code: the engine's limit

and prints our overhead as the ratio store CAS / raw UPDATE. Each process claims its own
share of the rows (contention is the contract suite's job, not this benchmark's).

usage: python scripts/bench_store.py [--rows N] [--batch B] [--synchronous FULL|NORMAL]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fabricjobs.model import Job, JobKey, Status  # noqa: E402
from fabricjobs.store.sqlite import SqliteStore  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def seed(path: str, rows: int, sync: str) -> None:
    store = SqliteStore(path, synchronous="OFF")
    batch = []
    conn = store._conn()
    conn.execute("BEGIN")
    for i in range(rows):
        j = Job(JobKey("USER_JOB", "Bench.noop", f"u{i:07d}"), Status.WAITING, T0, next_run=T0, revision=1)
        batch.append(j)
    conn.executemany(
        "INSERT INTO k2_jobs (type, name, uid, status, creation_time, next_run, revision) VALUES (?, ?, ?, 'WAITING', ?, ?, 1)",
        [(j.type, j.name, j.uid, T0.timestamp(), T0.timestamp()) for j in batch],
    )
    conn.execute("COMMIT")
    store.close()


def _share(rows: int, procs: int, me: int) -> list[str]:
    return [f"u{i:07d}" for i in range(me, rows, procs)]


def worker_store(path, sync, rows, procs, me, batch, start, out):
    store = SqliteStore(path, synchronous=sync)
    jobs = [store.get(JobKey("USER_JOB", "Bench.noop", uid)) for uid in _share(rows, procs, me)]
    start.wait()
    t = time.perf_counter()
    ok = 0
    if batch <= 1:
        for j in jobs:
            ok += store.cas(j, j.replace(status=Status.IN_PROCESS, worker_id=f"p{me}", epoch=j.epoch + 1)).applied
    else:
        for i in range(0, len(jobs), batch):
            pairs = [(j, j.replace(status=Status.IN_PROCESS, worker_id=f"p{me}", epoch=j.epoch + 1)) for j in jobs[i:i + batch]]
            ok += sum(r.applied for r in store.cas_many(pairs))
    out.put((ok, time.perf_counter() - t))
    store.close()


def worker_raw(path, sync, rows, procs, me, batch, start, out):
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    uids = _share(rows, procs, me)
    start.wait()
    t = time.perf_counter()
    ok = 0
    for uid in uids:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "UPDATE k2_jobs SET status = 'IN_PROCESS', worker_id = ?, epoch = epoch + 1, revision = revision + 1 "
            "WHERE type = 'USER_JOB' AND name = 'Bench.noop' AND uid = ? AND status = 'WAITING' AND epoch = 0",
            (f"p{me}", uid),
        )
        ok += cur.rowcount
        conn.execute("COMMIT")
    out.put((ok, time.perf_counter() - t))
    conn.close()


def run(kind, path, sync, rows, procs, batch) -> float:
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(procs + 1), ctx.Queue()
    target = worker_raw if kind == "raw" else worker_store
    ps = [ctx.Process(target=target, args=(path, sync, rows, procs, i, batch, start, out)) for i in range(procs)]
    for p in ps:
        p.start()
    start.wait()
    results = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    claimed = sum(r[0] for r in results)
    if claimed != rows:
        raise SystemExit(f"{kind}: claimed {claimed} of {rows}")
    return rows / max(r[1] for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--synchronous", default="FULL")
    ap.add_argument("--dir", default=None, help="directory for the database file (default: a temp dir)")
    args = ap.parse_args()
    from tabulate import tabulate

    table = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for procs in (1, 4):
            rates = {}
            for kind, batch in (("raw", 1), ("cas", 1), ("batched", args.batch)):
                path = os.path.join(d, f"bench-{procs}-{kind}.db")
                seed(path, args.rows, args.synchronous)
                rates[kind] = run(kind, path, args.synchronous, args.rows, procs, batch)
            table.append([
                procs, f"{rates['cas']:,.0f}", f"{rates['batched']:,.0f}", f"{rates['raw']:,.0f}",
                f"{rates['cas'] / rates['raw']:.2f}", f"{rates['batched'] / rates['raw']:.2f}",
            ])
    print(f"SQLite {sqlite3.sqlite_version}, WAL, synchronous={args.synchronous}, {args.rows:,} rows, batch {args.batch}")
    print(tabulate(
        table,
        headers=["processes", "store CAS/s", "store batched claims/s", "raw UPDATE commits/s", "CAS / raw", "batched / raw"],
        tablefmt="psql", disable_numparse=True,
    ))


if __name__ == "__main__":
    main()
