#!/usr/bin/env python3
"""What contention costs a queue that claims jobs in batches from shared shard partitions
(docs/explanation/cassandra-queue.md, "Other designs").

    .venv/bin/python scripts/bench_lwt_shards.py [--cassandra-nodes 1] [--shards 64] [--writers 3]
        [--rows 6400] [--rounds 3] [--batch-sizes 1,10,50] [--json]

scripts/bench_lwt_batch.py measures a batch of conditional UPDATEs of one partition (one Paxos
round) from one client on distinct partitions. A sharded queue (jobs in --shards partitions) has
several nodes proposing to the same partitions at once, and Paxos on one partition serializes.
Here --rows rows (v = 0, owner null) are spread over the shards, and --writers processes (one per
simulated node, each its own driver session with 16 requests in flight) claim them by batches of
B rows of one shard (UPDATE ... SET v = 1, owner = ? ... IF v = 0), on fresh rows per run:

* lanes: a writer claims only its own shards (shard % writers == its index);
* shared: every writer claims every row, in the same order (they race for the same rows); a
  batch that does not apply is sent again without the rows its answer shows as taken;
* lanes + inserts: lanes, while one more process inserts new rows into every shard
  (INSERT ... IF NOT EXISTS, batches of B rows of one shard), as shells submitting jobs do.

A batch that fails with an unknown outcome (a CAS WriteTimeout) is settled by a SERIAL read of
its rows, as a node must before it sends it again. At the end the table is read back: every row
must have been claimed exactly once, by the writer that believes it claimed it. Each placement
runs --rounds times, interleaved; the round with the median rows/s is shown.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import statistics
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from bench_lwt_batch import CONCURRENCY, _session, new_keyspace, real_cassandra  # (it puts the test kit on sys.path)

PLACEMENTS = ("lanes", "shared", "lanes + inserts")
INSERTED_FROM = 1_000_000  # clustering keys of the rows the inserter adds (never claimed here)
MAX_TRIES = 30  # sends of one batch before a writer gives its rows up (counted)
START_TIMEOUT = 180.0


@dataclass(frozen=True)
class Run:
    """One placement at one batch size, as each process of it sees it."""
    hosts: tuple[str, ...]
    port: int
    table: str
    placement: str
    batch: int
    base: int  # this run's shards are partitions base .. base + shards - 1 (fresh rows)
    shards: int
    rows_per_shard: int
    writers: int


@dataclass
class Tally:
    """What one thread of a writer saw; merged per writer at the end."""
    batches: int = 0
    not_applied: int = 0
    cas_timeouts: int = 0
    serial_reads: int = 0
    given_up: int = 0
    inserted: int = 0
    errors: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    claimed: set[tuple[int, int]] = field(default_factory=set)

    def merge(self, other: Tally) -> None:
        for name in ("batches", "not_applied", "cas_timeouts", "serial_reads", "given_up", "inserted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        self.latencies += other.latencies
        self.claimed |= other.claimed


def work_of(run: Run, writer: int) -> list[tuple[int, tuple[int, ...]]]:
    """The batches a writer claims, in order: the first chunk of every shard of it, then the
    second..., so that its requests in flight are on different shards (a node would not pile its
    own Paxos rounds on one partition)."""
    shards = [s for s in range(run.shards) if run.placement == "shared" or s % run.writers == writer]
    chunks = [tuple(range(i, min(i + run.batch, run.rows_per_shard))) for i in range(0, run.rows_per_shard, run.batch)]
    return [(run.base + s, chunk) for chunk in chunks for s in shards]


def _execute(session, statement, params, tally: Tally):
    """Run one conditional batch, counting it; None when it failed (the error counted)."""
    from cassandra import WriteTimeout
    from cassandra.policies import WriteType

    tally.batches += 1
    began = time.perf_counter()
    try:
        result = session.execute(statement, params)
    except Exception as e:  # noqa: BLE001 - every failure is a figure here, none ends the run
        cas = isinstance(e, WriteTimeout) and e.write_type == WriteType.CAS
        if cas:
            tally.cas_timeouts += 1
        else:
            tally.errors[type(e).__name__] += 1
        tally.latencies.append(time.perf_counter() - began)
        time.sleep(random.uniform(0.01, 0.05))  # back off before the next proposal
        return None
    tally.latencies.append(time.perf_counter() - began)
    return result


def _settle(session, look, owner: str, p: int, left: set[int], tally: Tally) -> set[int] | None:
    """After an unknown outcome: a SERIAL read (it finishes any half-done proposal) of the rows
    still to claim; those now owned by ``owner`` are claimed, all taken ones are returned."""
    tally.serial_reads += 1
    try:
        rows = list(session.execute(look, (p, sorted(left))))
    except Exception as e:  # noqa: BLE001
        tally.errors[f"SERIAL read {type(e).__name__}"] += 1
        return None
    tally.claimed.update((p, r.c) for r in rows if r.owner == owner)
    return {r.c for r in rows if r.v}


def _claim(session, stmt, look, owner: str, p: int, rows: tuple[int, ...], tally: Tally) -> None:
    """Claim ``rows`` of shard ``p`` by one conditional batch, sent again without the rows
    others took, until none is left."""
    from cassandra.query import BatchStatement

    left, doubt = set(rows), False  # doubt: a batch of ours may have applied unseen
    for _ in range(MAX_TRIES):
        if not left:
            return
        batch = BatchStatement()
        for c in sorted(left):
            batch.add(stmt, (owner, p, c))
        result = _execute(session, batch, (), tally)
        if result is not None and result.was_applied:
            tally.claimed.update((p, c) for c in left)
            return
        if result is not None:
            tally.not_applied += 1
        taken = {r.c for r in result.current_rows if r.v} if result is not None and not doubt else None
        if taken is None:
            taken = _settle(session, look, owner, p, left, tally)
            doubt = taken is None
        left -= taken or set()
    tally.given_up += len(left)


def _serve(kind: str, index: int, cluster, loop, ready, go, out) -> None:
    """Report ready, wait for ``go``, run ``loop(tally)`` on CONCURRENCY threads (each its own
    tally), report the merged tally and the span it ran in."""
    tallies = [Tally() for _ in range(CONCURRENCY)]
    threads = [threading.Thread(target=loop, args=(t,)) for t in tallies]
    ready.put(index)
    go.wait()
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = time.monotonic()
    cluster.shutdown()
    total = Tally()
    for t in tallies:
        total.merge(t)
    out.put((kind, index, began, ended, vars(total)))  # plain values: Tally is __mp_main__'s here


def writer(run: Run, index: int, ready, go, out) -> None:
    """One simulated node: claims its work, CONCURRENCY batches in flight, and reports."""
    from cassandra import ConsistencyLevel

    cluster, session = _session(run.hosts, run.port)
    stmt = session.prepare(f"UPDATE {run.table} SET v = 1, owner = ? WHERE p = ? AND c = ? IF v = 0")
    look = session.prepare(f"SELECT c, v, owner FROM {run.table} WHERE p = ? AND c IN ?")
    look.consistency_level = ConsistencyLevel.SERIAL
    work, owner = deque(work_of(run, index)), f"w{index}"

    def loop(tally: Tally) -> None:
        while True:
            try:
                p, rows = work.popleft()
            except IndexError:
                return
            _claim(session, stmt, look, owner, p, rows, tally)

    _serve("writer", index, cluster, loop, ready, go, out)


def inserter(run: Run, ready, go, stop, out) -> None:
    """Shells submitting jobs: conditional batches of new rows into every shard in turn, until
    the writers are done."""
    from cassandra.query import BatchStatement

    cluster, session = _session(run.hosts, run.port)
    stmt = session.prepare(f"INSERT INTO {run.table} (p, c, v) VALUES (?, ?, 0) IF NOT EXISTS")
    counter = itertools.count()

    def loop(tally: Tally) -> None:
        while not stop.is_set():
            k = next(counter)
            p, first = run.base + k % run.shards, INSERTED_FROM + k // run.shards * run.batch
            batch = BatchStatement()
            for c in range(first, first + run.batch):
                batch.add(stmt, (p, c))
            result = _execute(session, batch, (), tally)
            tally.inserted += run.batch if result is not None and result.was_applied else 0

    _serve("inserter", -1, cluster, loop, ready, go, out)


def _fill(session, table: str, run: Run) -> None:
    from cassandra.concurrent import execute_concurrent_with_args

    ins = session.prepare(f"INSERT INTO {table} (p, c, v) VALUES (?, ?, 0)")
    keys = [(run.base + s, c) for s in range(run.shards) for c in range(run.rows_per_shard)]
    execute_concurrent_with_args(session, ins, keys, concurrency=128, raise_on_first_error=True)


def _start(run: Run):
    """Start the run's processes (spawned: a forked driver session is not safe); they report
    ready once connected, and begin together when ``go`` is set."""
    ctx = multiprocessing.get_context("spawn")
    ready, out, go, stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=writer, args=(run, w, ready, go, out)) for w in range(run.writers)]
    if run.placement == "lanes + inserts":
        procs.append(ctx.Process(target=inserter, args=(run, ready, go, stop, out)))
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=START_TIMEOUT)
    return procs, out, go, stop


def measure(session, run: Run) -> dict:
    """Fill the run's fresh rows, run its processes, read the table back."""
    _fill(session, run.table, run)
    procs, out, go, stop = _start(run)
    go.set()
    reports = [out.get(timeout=1800) for _ in range(run.writers)]
    stop.set()
    extra = [out.get(timeout=START_TIMEOUT)] if len(procs) > run.writers else []
    for proc in procs:
        proc.join(timeout=60)
    reports = sorted(((kind, i, began, ended, Tally(**t)) for kind, i, began, ended, t in reports), key=lambda r: r[1])
    seconds = max(r[3] for r in reports) - min(r[2] for r in reports)
    total = Tally()
    for r in reports:
        total.merge(r[4])
    check = verify(session, run, [r[4].claimed for r in reports])
    lat = sorted(total.latencies)
    figures = {"placement": run.placement, "batch": run.batch, "seconds": seconds,
               "rows_claimed": len(total.claimed), "rows_per_s": len(total.claimed) / seconds,
               "rounds_per_s": total.batches / seconds, "batches": total.batches, "not_applied": total.not_applied,
               "cas_timeouts": total.cas_timeouts, "errors": dict(total.errors), "serial_reads": total.serial_reads,
               "given_up": total.given_up, "p50_ms": 1000 * statistics.median(lat),
               "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], **check}
    if extra:
        ins = Tally(**extra[0][4])
        figures.update(inserted_per_s=ins.inserted / (extra[0][3] - extra[0][2]), insert_batches=ins.batches,
                       insert_cas_timeouts=ins.cas_timeouts, insert_errors=dict(ins.errors))
    return figures


def verify(session, run: Run, beliefs: list[set[tuple[int, int]]]) -> dict:
    """Read every claimable row back (SERIAL: no proposal left half done): each must be claimed,
    by exactly one writer, the one whose name it holds."""
    from cassandra import ConsistencyLevel

    read = session.prepare(f"SELECT c, v, owner FROM {run.table} WHERE p = ? AND c < {INSERTED_FROM}")
    read.consistency_level = ConsistencyLevel.SERIAL
    owners = {(run.base + s, r.c): (r.owner if r.v == 1 else None)
              for s in range(run.shards) for r in session.execute(read, (run.base + s,))}
    believed = Counter(key for b in beliefs for key in b)
    check = {
        "rows": len(owners),
        "unclaimed": sum(1 for o in owners.values() if o is None),
        "two_owners": sum(1 for n in believed.values() if n > 1),
        "wrong_owner": sum(1 for w, b in enumerate(beliefs) for key in b if owners.get(key) != f"w{w}"),
        "owner_unaware": sum(1 for key, o in owners.items() if o is not None and key not in beliefs[int(o[1:])]),
    }
    check["exactly_once"] = (check["rows"] == run.shards * run.rows_per_shard
                             and not any(check[k] for k in ("unclaimed", "two_owners", "wrong_owner", "owner_unaware")))
    return check


def _warm(session, ks: str) -> None:
    """Connections and the server's JIT, before the first measured run."""
    from cassandra.concurrent import execute_concurrent_with_args

    session.execute(f"CREATE TABLE {ks}.warm (k int PRIMARY KEY, v int)")
    session.cluster.control_connection.wait_for_schema_agreement()
    ins = session.prepare(f"INSERT INTO {ks}.warm (k, v) VALUES (?, 0)")
    upd = session.prepare(f"UPDATE {ks}.warm SET v = 1 WHERE k = ? IF v = 0")
    execute_concurrent_with_args(session, ins, [(k,) for k in range(300)], concurrency=64)
    execute_concurrent_with_args(session, upd, [(k,) for k in range(300)], concurrency=CONCURRENCY)


def run_all(args, hosts, port) -> list[dict]:
    """Every placement at every batch size, --rounds times interleaved (this machine's load
    drifts), after a discarded warm-up of the writers' path at each batch size."""
    cluster, session = _session(hosts, port)
    try:
        ks = new_keyspace(session, "lwtshards_", args.cassandra_nodes)
        session.execute(f"CREATE TABLE {ks}.q (p int, c int, v int, owner text, PRIMARY KEY ((p), c))")
        _warm(session, ks)
        per_shard, fresh = -(-args.rows // args.shards), itertools.count()

        def run(placement: str, b: int, rows_per_shard: int) -> Run:
            return Run(tuple(hosts), port, f"{ks}.q", placement, b, next(fresh) * args.shards, args.shards,
                       rows_per_shard, args.writers)

        for b in args.batch_sizes:
            measure(session, run("lanes", b, max(1, per_shard // 4)))
        cells: dict[tuple[str, int], list[dict]] = {}
        for n in range(args.rounds):
            for placement, b in itertools.product(PLACEMENTS, args.batch_sizes):
                f = measure(session, run(placement, b, per_shard))
                cells.setdefault((placement, b), []).append(f)
                print(f"  round {n + 1}, {placement}, {b} rows per batch: {f['rows_per_s']:,.0f} rows/s, "
                      f"{f['not_applied']} not applied, {f['cas_timeouts']} CAS timeouts", flush=True)
        return [_median(rounds) for rounds in cells.values()]
    finally:
        cluster.shutdown()


def _median(rounds: list[dict]) -> dict:
    """The round with the median rows/s, with every round's rows/s, and the failures and the
    exactly-once check summed over all rounds."""
    f = dict(sorted(rounds, key=lambda r: r["rows_per_s"])[len(rounds) // 2])
    f["rows_per_s_rounds"] = [r["rows_per_s"] for r in rounds]
    for key in ("cas_timeouts", "serial_reads", "given_up", "rows", "unclaimed", "two_owners", "wrong_owner",
                "owner_unaware"):
        f[key] = sum(r[key] for r in rounds)
    f["errors"] = dict(sum((Counter(r["errors"]) for r in rounds), Counter()))
    f["exactly_once"] = all(r["exactly_once"] for r in rounds)
    f["rounds"] = rounds
    return f


def _errors(f: dict) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(f["errors"].items())) or "0"


def table_of(figures: list[dict]) -> tuple[list[str], list[list[str]]]:
    base = next((f["rows_per_s"] for f in figures if f["placement"] == "lanes" and f["batch"] == 1), None)
    headers = ["placement", "rows per batch", "rows claimed", "seconds", "rows/s", "vs lanes, 1 row per LWT",
               "rows/s each round", "Paxos rounds/s", "not applied", "CAS timeouts, all rounds",
               "other errors, all rounds", "p50 ms", "p99 ms", "exactly once, all rounds", "inserted rows/s"]
    rows = [[f["placement"], str(f["batch"]), f"{f['rows_claimed']:,}", f"{f['seconds']:.2f}",
             f"{f['rows_per_s']:,.0f}", f"{f['rows_per_s'] / base:.1f}x" if base else "",
             " / ".join(f"{r:,.0f}" for r in f["rows_per_s_rounds"]),
             f"{f['rounds_per_s']:,.0f}", f"{f['not_applied']:,}", f"{f['cas_timeouts']:,}", _errors(f),
             f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", "yes" if f["exactly_once"] else "NO",
             f"{f['inserted_per_s']:,.0f}" if "inserted_per_s" in f else ""] for f in figures]
    return headers, rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cassandra-nodes", type=int, default=1)
    p.add_argument("--shards", type=int, default=64)
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--rows", type=int, default=6400, help="rows claimed per placement and batch size")
    p.add_argument("--rounds", type=int, default=3, help="times each placement runs; the median is shown")
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 50])
    p.add_argument("--json", action="store_true", help="write a result file under bench/results/")
    args = p.parse_args()
    if not (1 <= args.shards <= 10_000 and 1 <= args.writers <= 32 and 1 <= args.rows <= 1_000_000
            and 1 <= args.rounds <= 20 and all(1 <= b <= 1000 for b in args.batch_sizes)):
        p.error("--shards 1..10000, --writers 1..32, --rows 1..1000000, --rounds 1..20, batch sizes 1..1000")
    with real_cassandra(args.cassandra_nodes, "fj-bench-lwt-shards-") as cassandra:
        if cassandra is None:
            return 2
        figures = run_all(args, cassandra.hosts, cassandra.port)
    report(args, figures)
    return 0 if all(f["exactly_once"] for f in figures) else 1


def report(args, figures: list[dict]) -> None:
    from tabulate import tabulate

    n = args.cassandra_nodes
    where = f"Apache Cassandra 5.0, {n} node(s) on this host, RF {n}, QUORUM / SERIAL"
    title = (f"Claims by conditional batches of one shard, {args.writers} writer processes x {CONCURRENCY} in flight, "
             f"{args.shards} shards, {args.rows:,} rows per run, median of {args.rounds} rounds ({where})")
    headers, rows = table_of(figures)
    print(f"== {title}")
    print(tabulate(rows, headers=headers, disable_numparse=True))
    ok = all(f["exactly_once"] for f in figures)
    runs = sum(len(f["rounds"]) for f in figures)
    measured = (f"{sum(f['rows'] for f in figures):,} rows in {runs} runs: {sum(f['unclaimed'] for f in figures)} "
                f"unclaimed, {sum(f['two_owners'] for f in figures)} claimed by two writers, "
                f"{sum(f['wrong_owner'] + f['owner_unaware'] for f in figures)} owner mismatches")
    print(f"every row claimed exactly once (read back): {'yes' if ok else 'NO'} ({measured})")
    if args.json:
        from testkit.benchresult import write_result

        write_result(f"lwt-shards-{n}n-cassandra-real", "LWT batches under contention (bench_lwt_shards.py)",
                     f"cassandra-real, {n} node{'s' if n > 1 else ''}",
                     [{"goal": "every row claimed exactly once, in every placement (table read back at SERIAL)",
                       "measured": measured, "met": ok}],
                     [{"title": title, "headers": headers, "rows": rows}], runs=figures)


if __name__ == "__main__":
    sys.exit(main())
