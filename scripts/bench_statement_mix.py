#!/usr/bin/env python3
"""What a job's statements cost on Apache Cassandra, and what batching its LWTs could buy
(docs/explanation/cassandra-queue.md, "Why claims are not batched yet").

    .venv/bin/python scripts/bench_statement_mix.py [--cassandra-nodes 1] [--writers 3]
        [--seconds 6] [--rounds 3] [--json]

A job on the Cassandra backend costs LWTs, plain writes and reads; the newest
``bench/results/*cost-per-job*`` file (scripts/bench_cassandra.py --real) counts them per job.
Here each kind of statement runs alone, --writers processes x 16 in flight for --seconds, on a
fresh real Cassandra (--rounds times, interleaved; the median round is kept):

* LWT, 1 row:            UPDATE ... IF v = null on a fresh partition (as a STARTJOB's insert);
* LWT, 10 rows:          a conditional batch of 10 such rows of one partition (one Paxos round);
* plain write:           UPDATE of one row, QUORUM;
* plain writes, batch 10: an unlogged batch of 10 rows of 10 partitions (as the nodes send
                         their index, history and listing writes);
* read:                  SELECT of one row by key, QUORUM;
* read, 10 keys (IN):    SELECT of 10 rows of 10 partitions by one IN (as a claim's rows could
                         be read back together).

Rows per second of each give its cost on this cluster, 1/rate, when the cluster is the limit.
Added up over a job's statements, that bounds the jobs per second the store could serve: today,
with the LWTs in batches of 10 rows, and with the reads by 10 keys too. A model (costs do not add
exactly, and the nodes' own CPU shares the machine), meant to say which part of a job's cost
batching removes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench_lwt_batch import CONCURRENCY, ROOT, _session, new_keyspace, real_cassandra  # (it puts the test kit on sys.path)

KINDS = ("LWT, 1 row", "LWT, 10 rows", "plain write", "plain writes, batch 10", "read", "read, 10 keys (IN)")
ROWS_PER = {"LWT, 1 row": 1, "LWT, 10 rows": 10, "plain write": 1, "plain writes, batch 10": 10, "read": 1,
            "read, 10 keys (IN)": 10}
READ_ROWS = 20_000  # rows the reads pick from (written first)
START_TIMEOUT = 180.0


def _statements(session, table: str):
    from cassandra.query import BatchStatement, BatchType

    lwt = session.prepare(f"UPDATE {table} SET v = 1 WHERE p = ? AND c = ? IF v = null")
    plain = session.prepare(f"UPDATE {table} SET v = 1 WHERE p = ? AND c = ?")
    read = session.prepare(f"SELECT v FROM {table} WHERE p = ? AND c = 0")
    read_in = session.prepare(f"SELECT p, v FROM {table} WHERE p IN ? AND c = 0")

    def make(kind: str, p: int):
        if kind == "LWT, 1 row":
            return lwt, (p, 0)
        if kind == "LWT, 10 rows":
            batch = BatchStatement()
            for c in range(10):
                batch.add(lwt, (p, c))
            return batch, ()
        if kind == "plain write":
            return plain, (p, 0)
        if kind == "plain writes, batch 10":
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for k in range(10):
                batch.add(plain, (p * 10 + k, 0))
            return batch, ()
        if kind == "read":
            return read, (p % READ_ROWS,)
        return read_in, ([(p * 10 + k) % READ_ROWS for k in range(10)],)

    return make


def client(index: int, hosts, port: int, table: str, plan: list[str], seconds: float, barrier, out) -> None:
    """One process: for each kind of ``plan`` in turn, at the barrier with the others, CONCURRENCY
    threads send that kind for ``seconds``; reports the statements done per kind."""
    cluster, session = _session(hosts, port)
    make = _statements(session, table)
    keys = itertools.count((index + 1) * 10**9)  # fresh partitions of this process
    lock = threading.Lock()

    def send(kind: str, deadline: float) -> tuple[int, int]:
        """One thread's statements of ``kind`` until ``deadline``: (done, failed)."""
        sent = failed = 0
        while time.monotonic() < deadline:
            with lock:
                p = next(keys)
            stmt, params = make(kind, p)
            try:
                result = session.execute(stmt, params)
                if kind.startswith("LWT") and not result.was_applied:
                    raise RuntimeError("not applied")
                sent += 1
            except Exception:  # noqa: BLE001 - counted; a figure, not the end of the run
                failed += 1
        return sent, failed

    done: list[tuple[str, int, int, float]] = []
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        for kind in plan:
            barrier.wait(timeout=START_TIMEOUT)
            began = time.monotonic()
            tallies = list(pool.map(lambda _, kind=kind, end=began + seconds: send(kind, end), range(CONCURRENCY)))
            done.append((kind, sum(n for n, _ in tallies), sum(e for _, e in tallies), time.monotonic() - began))
    cluster.shutdown()
    out.put((index, done))


def _fill_reads(session, table: str) -> None:
    from cassandra.concurrent import execute_concurrent_with_args

    ins = session.prepare(f"INSERT INTO {table} (p, c, v) VALUES (?, 0, 1)")
    execute_concurrent_with_args(session, ins, [(p,) for p in range(READ_ROWS)], concurrency=128,
                                 raise_on_first_error=True)


def run_all(args, hosts, port) -> dict[str, list[dict]]:
    cluster, session = _session(hosts, port)
    try:
        ks = new_keyspace(session, "stmtmix_", args.cassandra_nodes)
        session.execute(f"CREATE TABLE {ks}.q (p bigint, c int, v int, PRIMARY KEY ((p), c))")
        session.cluster.control_connection.wait_for_schema_agreement()
        _fill_reads(session, f"{ks}.q")
    finally:
        cluster.shutdown()
    plan = list(KINDS) * (args.rounds + 1)  # the first pass warms up the server and is dropped
    ctx = multiprocessing.get_context("spawn")  # a forked driver session is not safe
    barrier, out = ctx.Barrier(args.writers), ctx.Queue()
    procs = [ctx.Process(target=client, args=(i, tuple(hosts), port, f"{ks}.q", plan, args.seconds, barrier, out))
             for i in range(args.writers)]
    for proc in procs:
        proc.start()
    reports = [out.get(timeout=START_TIMEOUT + len(plan) * (args.seconds + 30)) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    by_kind: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for step, kind in enumerate(plan):
        if step < len(KINDS):
            continue  # warm-up
        statements = sum(done[step][1] for _, done in reports)
        errors = sum(done[step][2] for _, done in reports)
        seconds = max(done[step][3] for _, done in reports)
        by_kind[kind].append({"statements": statements, "errors": errors, "seconds": seconds,
                              "rows_per_s": statements * ROWS_PER[kind] / seconds})
        print(f"  {kind}: {statements * ROWS_PER[kind] / seconds:,.0f} rows/s ({errors} errors)", flush=True)
    return by_kind


def job_mix() -> tuple[dict[str, dict[str, float]], str]:
    """Statements per job from the newest cost-per-job result: {kind of job: {LWTs, plain
    writes, reads}}, and the file's name."""
    files = sorted((ROOT / "bench" / "results").glob("*cost-per-job-cassandra-real.json"))
    if not files:
        raise SystemExit("no bench/results/*cost-per-job-cassandra-real.json: run scripts/bench_cassandra.py --real --json")
    data = json.loads(files[-1].read_text())
    table = data["tables"][0]
    mixes = {row[0]: {h: float(v) for h, v in zip(table["headers"][1:], row[1:])} for row in table["rows"]}
    return mixes, files[-1].name


def model(rates: dict[str, float], mix: dict[str, float], lwt_kind: str, read_kind: str = "read") -> float:
    """Jobs per second the store could serve if it were the only limit and costs added up."""
    seconds = (mix["LWTs"] / rates[lwt_kind] + mix["plain writes"] / rates["plain writes, batch 10"]
               + mix["reads"] / rates[read_kind])
    return 1 / seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cassandra-nodes", type=int, default=1)
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="write a result file under bench/results/")
    args = p.parse_args()
    if not (1 <= args.writers <= 16 and 1 <= args.seconds <= 120 and 1 <= args.rounds <= 10
            and 1 <= args.cassandra_nodes <= 5):
        p.error("--writers 1..16, --seconds 1..120, --rounds 1..10, --cassandra-nodes 1..5")
    mixes, source = job_mix()
    with real_cassandra(args.cassandra_nodes, "fj-bench-stmt-mix-") as cassandra:
        if cassandra is None:
            return 2
        by_kind = run_all(args, cassandra.hosts, cassandra.port)
    report(args, by_kind, mixes, source)
    return 0


def report(args, by_kind: dict[str, list[dict]], mixes: dict[str, dict[str, float]], source: str) -> None:
    from tabulate import tabulate

    n = args.cassandra_nodes
    where = f"Apache Cassandra 5.0, {n} node(s) on this host, RF {n}, QUORUM / SERIAL"
    median = {kind: statistics.median(r["rows_per_s"] for r in rounds) for kind, rounds in by_kind.items()}
    title = (f"Statements alone, {args.writers} client processes x {CONCURRENCY} in flight, {args.seconds:g} s each, "
             f"median of {args.rounds} rounds ({where})")
    headers = ["statement", "rows/s", "rows/s each round", "cost per row (ms of the cluster)", "errors, all rounds"]
    rows = [[kind, f"{median[kind]:,.0f}", " / ".join(f"{r['rows_per_s']:,.0f}" for r in by_kind[kind]),
             f"{1000 / median[kind]:.3f}", str(sum(r["errors"] for r in by_kind[kind]))] for kind in KINDS]
    print(f"== {title}")
    print(tabulate(rows, headers=headers, disable_numparse=True))
    model_title = (f"Jobs/s the store could serve by that cost (a bound: costs added, the nodes' CPU not counted), "
                   f"statements per job from {source}")
    model_headers = ["job", "LWTs", "plain writes", "reads", "LWT share of the cost", "jobs/s, 1 row per LWT",
                     "jobs/s, LWTs in batches of 10", "gain", "jobs/s, LWTs and reads by 10", "gain "]
    model_rows = []
    for job, mix in mixes.items():
        today, batched = model(median, mix, "LWT, 1 row"), model(median, mix, "LWT, 10 rows")
        both = model(median, mix, "LWT, 10 rows", "read, 10 keys (IN)")
        share = (mix["LWTs"] / median["LWT, 1 row"]) * today
        model_rows.append([job, f"{mix['LWTs']:g}", f"{mix['plain writes']:g}", f"{mix['reads']:g}", f"{share:.0%}",
                           f"{today:,.0f}", f"{batched:,.0f}", f"{batched / today:.1f}x", f"{both:,.0f}",
                           f"{both / today:.1f}x"])
    print(f"== {model_title}")
    print(tabulate(model_rows, headers=model_headers, disable_numparse=True))
    if args.json:
        from testkit.benchresult import write_result

        best = max(float(r[7][:-1]) for r in model_rows)
        write_result(f"statement-mix-{n}n-cassandra-real", "What a job's statements cost (bench_statement_mix.py)",
                     f"cassandra-real, {n} node{'s' if n > 1 else ''}",
                     [{"goal": "LWTs in batches of 10 alone give 5x the jobs/s (the queue's goal)",
                       "measured": f"at most {best:.1f}x by this model", "met": best >= 5}],
                     [{"title": title, "headers": headers, "rows": rows},
                      {"title": model_title, "headers": model_headers, "rows": model_rows}],
                     runs={"by_kind": by_kind, "mix_source": source})


if __name__ == "__main__":
    sys.exit(main())
