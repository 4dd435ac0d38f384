#!/usr/bin/env python3
"""fabricjobs benchmarks (docs/benchmarks.md): each sub-command prints a table, the goal it is measured
against, and with --json FILE writes its figures as JSON.

  throughput [--jobs 5000] [--pool 25]
        --jobs no-op one-time USER_JOBs submitted at once (scripts of 200 STARTJOBs); time from
        the first submit until the last of them is PROCESSED (its end_time in the store), for
        fabricjobs with 1, 2 and 4 node processes on one store (a fresh one each; pool --pool,
        log level warning, each node ready and warmed up with one no-op per pool slot). In the
        same run: the same work on huey's SqliteHuey consumer with 4 worker threads at the same
        durability (WAL, synchronous=FULL; results stored, also for None, as fabricjobs stores
        an outcome row), and the engine's limit: durable single-row UPDATE commits per second on
        a file of the same kind (one transaction each, WAL, synchronous=FULL, one process).
        Goals: 1 node >= 1.0x huey, 4 nodes >= 1.5x huey, >= 50 % of the engine limit.
  firelag [--jobs 200] [--seconds 60]
        half EXEC_INTERVAL='00:00:01', half 6-field cron '* * * * * *', on 2 nodes (default
        settings, pool 25), each node warmed up with 9 runs of the job measured (a cluster that
        has run it before: it knows the job's runs are short), and the store warmed with the same
        load for --warm-seconds (20; a JVM's compiler that has seen the Paxos path, as in a cluster
        that has been up a while; 0 measures a store just started). Each run appends its start time. A fire's due time: creation + k s
        for an interval job, each whole second for cron. Printed: p50 / p99 / max delay from due
        time to start, missed fires (a due time in the window with no run starting in
        [due, due + 1 s)) and doubled fires (two runs in one such second); also the delays
        of the fires due 10 s or more after the submit (the start-up burst over), and the host's
        cores used meanwhile by the store, the nodes and the rest.
        Goal: p99 < 50 ms, zero missed and doubled.
  failover [--jobs 30]
        3 nodes (heartbeat --heartbeat-ms x --miss, RECONCILE_INTERVAL_MS 200), --jobs long jobs;
        once all run, SIGKILL the process group of the node holding most of them. Printed:
        seconds from the kill until each of its jobs started again on another node.
        Goal: every one within the dead threshold (interval x misses) + 1 s.
  scale [--archived 1000000] [--scheduled 100000]   (SQLite only)
        Stores bulk-loaded with sqlite3 executemany: empty; --archived archived PROCESSED rows
        (with as many run records in k2_job_runs, one per archived job);
        --scheduled SCHEDULED rows due in a year, owned by the measuring node. Measured in-process:
        a full reconcile pass (Node.start() once, then Reconciler.run_pass(True), median of
        many) and `jobstatus;` through Client.fetch (median). Goal: with the archive within
        1.2x of the empty store (the SCHEDULED case is reported; jobstatus lists all those rows).
  shell [--runs 10]
        cold start to first result of `fabricjobs shell -e 'jobstatus;'` on an empty SQLite
        store, median of --runs. Goal < 0.5 s.
  memory [--jobs 25]
        one node: RSS after start-up with no job run yet, then with --jobs running jobs: the node
        process alone, and the node with its fork server and worker processes (its process
        group; RSS sum and PSS sum). Goal: idle node RSS < 80 MB.
  web [--archived 100000] [--live 1000] [--requests 1000]   (SQLite only)
        GET /api/v1/jobs?limit=100 on a real `fabricjobs web` over HTTP, three bulk-loaded
        stores timed in turns: empty; --live live jobs; the same and --archived archived jobs
        (scripts/bench_web.py). Goal: p99 with the archive <= 1.2x without it. Then the
        console's live view on the CQL test server, watched by 1 and 10 polling browsers
        (--watch 30 s each): store requests/s. Goal: 10 browsers cost <= 1.2x what 1 does.
  isolation   (SQLite only)
        one node, with run cgroups and without ([jobs] RUN_CGROUPS = OFF): seconds from KILL, and
        from STOPJOB, until a run that left 50 daemons (double fork, setsid) has ended and the last
        daemon is gone; then 1 GiB of short lines from a USER_JOB and from a PROCESS job: MB/s
        beside `yes | head -c 1G | cat`, the node's peak RSS, store and node log growth
        (scripts/bench_isolation.py). Goals: ended within 2 s of KILL; within 3x cat; node peak
        RSS < 150 MB; store growth < MAX_OUTPUT_BYTES + 1 MB; node log growth < 64 KB.
  console [--live 10000] [--archived 100000]   (SQLite, or --backend cassandra-real)
        The web console on a store of --live live and --archived archived jobs (written as
        testkit/bulk.py writes them), a real `fabricjobs web` and no node (scripts/bench_console.py):
        the jobs table's first page (the data, and drawn in Chromium when it is there), paging
        through every live job, the history search for a job that ended two days ago, and the
        web process's CPU while a browser watches. Goals: first rows < 1 s, that job found on the
        first page < 1 s, the watched web process < 10 % of a core.
  all   every sub-command above in sequence, with its defaults.

--backend sqlite|cassandra|cassandra-real (throughput, firelag, failover, memory; default sqlite):
cassandra runs the nodes against the CQL test server (testkit/cqlserver, a test double, not
Cassandra: its figures say nothing about a real cluster) started in this process, a fresh
keyspace per store. huey and the engine limit are SQLite figures and are skipped there.
cassandra-real starts a real Apache Cassandra 5.0 (testkit/realcassandra; --cassandra-nodes N, 1 by
default; plain JVMs on 127.0.0.1..N in a temporary directory, stopped at the end, also on Ctrl-C
or error), keyspaces NetworkTopologyStrategy datacenter1 = min(3, N), QUORUM / SERIAL, protocol v5,
Paxos v2. Its throughput (--jobs 1000 by default) is set against the cluster's own limit: for
each node count n, right before the fabricjobs run, the raw rate of single-partition LWTs
(`UPDATE t SET v = ? WHERE k = ? IF v = ?` on distinct rows, no contention) from n client
processes (--raw-lwts each, --lwt-concurrency in flight each); the LWTs per job are measured on
the node processes (their store counters, read from each node's Prometheus metrics, plus the
submitting client's); ratio = jobs/s / (raw LWT/s / LWTs per job), goal >= 0.4. The WARN / ERROR
lines Cassandra's system.log gets after its start-up are printed at the end.

Requirements: the project's venv; for throughput also huey (not a fabricjobs dependency):
    .venv/bin/pip install huey          (or pass --install-huey to have this script do it)
psutil is used for RSS when installed; else /proc/PID/status and /proc/PID/smaps_rollup.

Everything lives in temporary directories removed at the end (unless --keep); every process
started is killed on exit, Ctrl-C or error. Node logs are scanned for WARNING / ERROR /
Traceback lines, which are printed.

usage: .venv/bin/python scripts/bench.py SUBCOMMAND [options] [--backend sqlite|cassandra|cassandra-real]
                                         [--cassandra-nodes N] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pickle
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
RESULTS_DIR = ROOT / "bench" / "results"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(ROOT))

from tabulate import tabulate  # noqa: E402

from bench_node import (  # noqa: E402
    BenchError, Rig, facts_line, group_stats, install_signal_handlers, machine_facts, percentile,
    print_log_findings, utc, wait_for,
)
from testkit.rig import (  # noqa: E402
    RigError, free_port, group_cpu_seconds, process_cpu_seconds, pythonpath_with, scrape_metrics, signal_group, write_config,
)
from fabricjobs.errors import FabricJobsError  # noqa: E402
from fabricjobs.model import Status  # noqa: E402

UTC = timezone.utc
FAILOVER_RECONCILE_MS = 200


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def print_goals(args, goals: list) -> None:
    """A sub-command's goals, unless it runs under `all` (which prints them all at the end)."""
    if goals and not getattr(args, "in_all", False):
        print(tabulate(goals, headers=["goal", "measured", ""], disable_numparse=True))


def fmt_rate(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def deep_merge(*dicts: dict) -> dict:
    out: dict[str, dict] = {}
    for d in dicts:
        for section, keys in (d or {}).items():
            out.setdefault(section, {}).update(keys)
    return out


class Backend:
    """Where the nodes' store lives. ``settings()`` gives the config sections of a fresh store (a
    fresh SQLite file per Rig, a fresh keyspace per call on a Cassandra); ``close()`` stops what the
    backend started. A real cluster also offers ``raw_lwt_rate`` (what it can do without
    fabricjobs) and the warnings of its own logs."""

    name = "?"
    cassandra = False  # a Cassandra store (the nodes count their LWTs)
    real = False  # a real Cassandra cluster (raw LWT rate, system.log)

    def __init__(self) -> None:
        self.findings: list[tuple[str, str]] = []  # (source, log line), filled by close()

    def settings(self) -> dict:
        return {}

    def rig(self, settings: dict, *, label: str, keep: bool, metered: bool = False) -> Rig:
        """A Rig on a fresh store of this backend with ``settings`` on top; ``metered``: its nodes
        serve their metrics (MeteredRig). On Cassandra the keyspace and schema are created here,
        by this process's client, before any node starts: nodes that start together on a fresh
        keyspace each run CREATE TABLE IF NOT EXISTS, and on a real Cassandra such concurrent
        creations can leave the table with two ids ("Unknown CF ..." server errors, a node
        exiting at start-up), which is not what these benchmarks measure."""
        rig = (MeteredRig if metered else Rig)(deep_merge(settings, self.settings()), label=label, keep=keep)
        if self.cassandra:
            try:
                rig.client
            except BaseException:
                rig.close()
                raise
        return rig

    def label(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqliteBackend(Backend):
    name = "sqlite"

    def label(self) -> str:
        return "SQLite (WAL, synchronous=FULL)"


class CqlTestServerBackend(Backend):
    """A fresh keyspace per store on the CQL test server (a test double) started in this process."""

    name = "cassandra"
    cassandra = True

    def __init__(self) -> None:
        super().__init__()
        self.server = None

    def settings(self) -> dict:
        if self.server is None:
            from testkit.cqlserver import CqlTestServer

            self.server = CqlTestServer().start()
        return {
            "store": {"BACKEND": "cassandra"},
            "cassandra": {"HOSTS": self.server.host, "PORT": self.server.port, "KEYSPACE": fresh_keyspace(),
                          "PROTOCOL_VERSION": 4, "CONSISTENCY": "QUORUM", "TOKEN_AWARE": "false",
                          "REQUEST_TIMEOUT_SEC": 10},
        }

    def label(self) -> str:
        return "Cassandra backend on the CQL test server (a test double; in this process)"

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class RealCassandraBackend(Backend):
    """A real Apache Cassandra (testkit/realcassandra: plain JVMs on 127.0.0.1..N, DC datacenter1),
    started by the first ``settings()`` in a temporary directory and stopped by ``close()``; a
    fresh keyspace per store, RF = min(3, nodes), QUORUM / SERIAL, protocol v5, Paxos v2."""

    name = "cassandra-real"
    cassandra = True
    real = True

    def __init__(self, nodes: int, keep: bool = False) -> None:
        super().__init__()
        self.nodes, self.keep = nodes, keep
        self.rf = min(3, nodes)
        self.cluster = None
        self.dir: Path | None = None
        self._log_offsets: list[int] = []
        self.stop_findings = 0  # WARN / ERROR lines logged while the cluster was being stopped

    def start(self):
        if self.cluster is None:
            from testkit.realcassandra import CassandraCluster, available

            why = available()
            if why is not None:
                raise BenchError(f"cannot start a real Cassandra: {why}")
            self.dir = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-cassandra-"))
            progress(f"starting a real Cassandra, {self.nodes} node(s), in {self.dir} ...")
            t = time.monotonic()
            cluster = CassandraCluster(self.dir, nodes=self.nodes, paxos_variant="v2", heap="768m")
            self.cluster = cluster  # before start(): close() stops a half-started one too
            cluster.start()
            progress(f"Cassandra {cluster.version} up in {time.monotonic() - t:.0f} s: "
                     f"hosts {','.join(cluster.hosts)}, port {cluster.port}")
            # what the nodes log from here on is the benchmark's (start-up warnings are not)
            self._log_offsets = [self._size(i) for i in range(self.nodes)]
        return self.cluster

    def _size(self, i: int) -> int:
        try:
            return self.cluster.log_path(i).stat().st_size
        except OSError:
            return 0

    @property
    def replication(self) -> str:
        return f"NetworkTopologyStrategy:datacenter1={self.rf}"

    def settings(self) -> dict:
        c = self.start()
        return {
            "store": {"BACKEND": "cassandra"},
            "cassandra": {"HOSTS": ",".join(c.hosts), "PORT": c.port, "KEYSPACE": fresh_keyspace(),
                          "REPLICATION": self.replication, "CONSISTENCY": "QUORUM",
                          "SERIAL_CONSISTENCY": "SERIAL", "PROTOCOL_VERSION": 5, "LOCAL_DC": "datacenter1"},
        }

    def label(self) -> str:
        version = self.cluster.version if self.cluster is not None else "?"
        return (f"real Apache Cassandra {version}, {self.nodes} node{'s' if self.nodes > 1 else ''} on this host, "
                f"RF {self.rf}, QUORUM / SERIAL, Paxos v2")

    def raw_lwt_rate(self, procs: int, per_proc: int, concurrency: int) -> dict:
        """Single-partition LWTs with no contention, ``UPDATE t SET v = 1 WHERE k = ? IF v = 0`` on
        distinct pre-inserted rows, from ``procs`` client processes (cassandra-driver, token-aware,
        QUORUM / SERIAL as the store, ``concurrency`` in flight each), all started together:
        LWTs / the slowest process's time. Every LWT must apply."""
        c = self.start()
        keyspace = "rawlwt_" + uuid.uuid4().hex[:10]
        warm = 200
        total_keys = procs * (per_proc + warm)
        cluster = _raw_cluster(c.hosts, c.port)
        try:
            s = cluster.connect()
            s.execute(f"CREATE KEYSPACE {keyspace} WITH replication = "
                      f"{{'class': 'NetworkTopologyStrategy', 'datacenter1': {self.rf}}}")
            s.execute(f"CREATE TABLE {keyspace}.t (k int PRIMARY KEY, v int)")
            cluster.control_connection.wait_for_schema_agreement()
            from cassandra.concurrent import execute_concurrent_with_args

            ins = s.prepare(f"INSERT INTO {keyspace}.t (k, v) VALUES (?, 0)")
            res = execute_concurrent_with_args(s, ins, [(k,) for k in range(total_keys)], concurrency=64,
                                               raise_on_first_error=True)
            assert all(ok for ok, _ in res)
        finally:
            cluster.shutdown()
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        ready, out = ctx.Queue(), ctx.Queue()
        go = ctx.Event()
        ps = [ctx.Process(target=_raw_lwt_client, args=(c.hosts, c.port, keyspace, me, procs, per_proc, warm,
                                                        concurrency, ready, go, out), daemon=True)
              for me in range(procs)]
        for p in ps:
            p.start()
        try:
            for _ in ps:
                r = ready.get(timeout=120)
                if isinstance(r, str):
                    raise BenchError(f"raw LWT client: {r}")
            go.set()
            results = [out.get(timeout=600) for _ in ps]
        finally:
            for p in ps:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        errors = [r for r in results if isinstance(r, str)]
        if errors:
            raise BenchError(f"raw LWT client: {errors[0]}")
        applied = sum(r[0] for r in results)
        if applied != procs * per_proc:
            raise BenchError(f"raw LWTs: {applied} of {procs * per_proc} applied (no contention: all should)")
        slowest = max(r[1] for r in results)
        return {"processes": procs, "lwts": applied, "concurrency_per_process": concurrency,
                "seconds": slowest, "lwts_per_s": applied / slowest,
                "statement": "UPDATE t SET v = ? WHERE k = ? IF v = ?"}

    def close(self) -> None:
        if self.cluster is None:
            return
        # What the nodes log while they are stopped (drain; LEAK DETECTED errors of the Reference-
        # Reaper for _paxos_repair_state files; schema pulls from nodes already down) is the stop's,
        # not the benchmark's: only counted.
        stop_offsets = [self._size(i) for i in range(self.nodes)]
        cluster, self.cluster = self.cluster, None
        try:
            cluster.stop()
        finally:
            for i in range(self.nodes):
                try:
                    with open(cluster.log_path(i), errors="replace") as f:
                        f.seek(self._log_offsets[i] if i < len(self._log_offsets) else 0)
                        text = f.read()
                except OSError:
                    continue
                start = self._log_offsets[i] if i < len(self._log_offsets) else 0
                cut = max(0, stop_offsets[i] - start)
                source = f"cassandra node{i} ({cluster.hosts[i]})"
                self.findings.extend((source, line) for line in cassandra_log_findings(text[:cut].splitlines()))
                self.stop_findings += len(cassandra_log_findings(text[cut:].splitlines()))
            if self.keep:
                print(f"[cassandra] kept {self.dir}", file=sys.stderr)
            elif self.dir is not None:
                import shutil

                shutil.rmtree(self.dir, ignore_errors=True)


CASSANDRA_LOG_PATTERN = re.compile(r"^(WARN|ERROR)\b")


def cassandra_log_findings(lines: list[str]) -> list[str]:
    """The WARN / ERROR lines of a Cassandra system.log, each with the first line after it when
    that is not a log line of its own (an ERROR's exception)."""
    out = []
    for i, line in enumerate(lines):
        if CASSANDRA_LOG_PATTERN.match(line):
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            out.append(line + (f" | {nxt}" if nxt and not CASSANDRA_ANY_LINE.match(lines[i + 1]) else ""))
    return out


CASSANDRA_ANY_LINE = re.compile(r"^(TRACE|DEBUG|INFO|WARN|ERROR)\b")


def _raw_cluster(hosts, port):
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, FallthroughRetryPolicy, TokenAwarePolicy

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1")),
        consistency_level=ConsistencyLevel.QUORUM, serial_consistency_level=ConsistencyLevel.SERIAL,
        retry_policy=FallthroughRetryPolicy(), request_timeout=30)
    return Cluster(list(hosts), port=port, protocol_version=5, execution_profiles={EXEC_PROFILE_DEFAULT: profile})


def _raw_lwt_client(hosts, port, keyspace, me, procs, per_proc, warm, concurrency, ready, go, out) -> None:
    """One client process of RealCassandraBackend.raw_lwt_rate (spawned)."""
    try:
        from cassandra.concurrent import execute_concurrent_with_args

        cluster = _raw_cluster(hosts, port)
        try:
            s = cluster.connect()
            stmt = s.prepare(f"UPDATE {keyspace}.t SET v = ? WHERE k = ? IF v = ?")
            keys = list(range(me, procs * (per_proc + warm), procs))
            # warm-up (connections to every node, the prepared statement, the JIT): keys of its own
            execute_concurrent_with_args(s, stmt, [(1, k, 0) for k in keys[:warm]], concurrency=concurrency)
            ready.put(me)
            go.wait()
            t = time.perf_counter()
            res = execute_concurrent_with_args(s, stmt, [(1, k, 0) for k in keys[warm:]], concurrency=concurrency,
                                               raise_on_first_error=False)
            elapsed = time.perf_counter() - t
            failed = [r for ok, r in res if not ok]
            if failed:
                raise BenchError(f"{len(failed)} of {len(res)} LWTs failed, first: {failed[0]!r}")
            out.put((sum(1 for _, r in res if r.was_applied), elapsed))
        finally:
            cluster.shutdown()
    except BaseException as exc:  # the parent waits on the queues: always answer
        ready.put(f"{type(exc).__name__}: {exc}")
        out.put(f"{type(exc).__name__}: {exc}")


def fresh_keyspace() -> str:
    return "bench_" + uuid.uuid4().hex[:12]


def make_backend(args) -> Backend:
    if args.backend == "sqlite":
        return SqliteBackend()
    if args.backend == "cassandra":
        return CqlTestServerBackend()
    return RealCassandraBackend(args.cassandra_nodes, keep=args.keep)


class MeteredRig(Rig):
    """A Rig whose nodes each serve Prometheus metrics on a loopback port of their own (a config
    file per node: the shared one plus ``[metrics] PORT``), so that the store's own counters
    (StoreStats: LWTs sent, contention retries, ...) of every node process can be read."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.metrics_ports: dict[str, int] = {}

    def start_node(self, name: str, log_level: str = "warning", config: Path | None = None):
        port = free_port()
        path = self.tmp / f"config-{name}.ini"
        write_config(path, deep_merge(self.settings, {"metrics": {"PORT": port, "ADDRESS": "127.0.0.1"}}))
        node = super().start_node(name, log_level, config=path)
        self.metrics_ports[name] = port
        return node

    def store_counters(self) -> dict[str, float]:
        """The store counters of every node, summed, plus the client's (this process's STARTJOBs),
        as {StoreStats field: value}."""
        total = {field: 0.0 for field in STORE_METRICS.values()}
        for name, port in self.metrics_ports.items():
            if self.nodes[name].killed:
                continue
            for metric, value in scrape_metrics(port).items():
                if metric in STORE_METRICS:
                    total[STORE_METRICS[metric]] += value
        stats = self.client.store.stats
        for field in total:
            total[field] += getattr(stats, field, 0)
        return total


#: fabricjobs/node/metrics.py exports these StoreStats fields (not writes / reads).
STORE_METRICS = {
    "fabricjobs_store_lwt_attempts_total": "lwt_attempts",
    "fabricjobs_store_lwt_contention_retries_total": "contention_retries",
    "fabricjobs_store_lwt_unknown_outcomes_total": "unknown_outcomes",
    "fabricjobs_store_index_repairs_total": "index_repairs",
}


# ==================================================================================================
# throughput
# ==================================================================================================


def engine_limit(directory: Path, rows: int = 20_000) -> dict:
    """Durable single-row UPDATE commits per second through bare sqlite3 (WAL, synchronous=FULL,
    BEGIN IMMEDIATE ... COMMIT per row, one process) on a k2_jobs table in ``directory``."""
    from fabricjobs.store.sqlite import SqliteStore

    path = directory / "engine-limit.db"
    SqliteStore(path).close()  # the real schema (indexes included)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO k2_jobs (type, name, uid, status, creation_time, next_run, revision) "
        "VALUES ('USER_JOB', 'Bench.noop', ?, 'WAITING', ?, ?, 1)",
        [(f"u{i:07d}", 0.0, 0.0) for i in range(rows)],
    )
    conn.execute("COMMIT")
    conn.close()
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    conn.execute("PRAGMA synchronous = FULL")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    uids = [f"u{i:07d}" for i in range(rows)]
    t = time.perf_counter()
    ok = 0
    for uid in uids:
        conn.execute("BEGIN IMMEDIATE")
        ok += conn.execute(
            "UPDATE k2_jobs SET status = 'IN_PROCESS', worker_id = 'p', epoch = epoch + 1, revision = revision + 1 "
            "WHERE type = 'USER_JOB' AND name = 'Bench.noop' AND uid = ? AND status = 'WAITING' AND epoch = 0",
            (uid,),
        ).rowcount
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t
    conn.close()
    if ok != rows:
        raise BenchError(f"engine limit: {ok} of {rows} UPDATEs applied")
    return {"commits_per_s": rows / elapsed, "rows": rows, "journal_mode": mode, "synchronous": sync}


HUEY_MODULE = '''\
"""huey side of scripts/bench.py throughput (written by it)."""
import logging
import os
import time

from huey import SqliteHuey

# fsync=True: PRAGMA synchronous = FULL (2); journal_mode WAL, as the fabricjobs store.
# store_none: the result of every task is written (fabricjobs writes an outcome row per job).
huey = SqliteHuey("fjbench", filename=os.environ["FJ_HUEY_DB"], fsync=True, journal_mode="wal",
                  store_none=True)


@huey.task()
def noop():
    return time.time()


def run_consumer():
    logging.basicConfig(level=logging.WARNING)
    consumer = huey.create_consumer(workers=4, worker_type="thread")
    consumer.run()
'''


def ensure_huey(install: bool) -> bool:
    if importlib.util.find_spec("huey") is not None:
        return True
    if not install:
        return False
    print("huey is not installed: installing it into this interpreter's environment "
          f"({sys.executable} -m pip install huey)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "huey"], check=True)
    importlib.invalidate_caches()
    return importlib.util.find_spec("huey") is not None


def _with_pythonpath(env: dict, directory: Path) -> dict:
    """``env`` with ``directory`` first on PYTHONPATH (where a huey module written here lives)."""
    return dict(env, PYTHONPATH=pythonpath_with(directory, env))


def _start_huey_consumer(hdir: Path, module: str, env: dict, keep_procs: list) -> subprocess.Popen:
    """huey's consumer for ``module`` (run_consumer), in a session of its own, logging to hdir."""
    with open(hdir / "consumer.log", "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-c", f"import {module}; {module}.run_consumer()"],
                                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=hdir, start_new_session=True)
    keep_procs.append(proc)
    return proc


def _kill_group(proc: subprocess.Popen) -> None:
    signal_group(proc.pid, signal.SIGKILL)


def _clean_up(procs: list, tmp: Path, keep: bool) -> None:
    """Kill what a benchmark left running; remove its directory unless --keep."""
    for p in procs:
        if p.poll() is None:
            _kill_group(p)
    if not keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def huey_throughput(directory: Path, jobs: int, keep_procs: list) -> dict:
    """The same work on huey: ``jobs`` no-op tasks enqueued at once (one enqueue each, as huey's
    API allows) into a SqliteHuey consumed by one consumer process with 4 worker threads."""
    import huey as huey_pkg

    hdir = directory / "huey"
    hdir.mkdir()
    (hdir / "fjhueybench.py").write_text(HUEY_MODULE)
    db = hdir / "huey.db"
    os.environ["FJ_HUEY_DB"] = str(db)
    sys.path.insert(0, str(hdir))
    import fjhueybench  # noqa: E402

    log_path = hdir / "consumer.log"
    proc = _start_huey_consumer(hdir, "fjhueybench", _with_pythonpath(dict(os.environ), hdir), keep_procs)
    try:
        h = fjhueybench.huey
        conn = h.storage.conn
        pragmas = (conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute("PRAGMA synchronous").fetchone()[0])
        # warm-up: the consumer is up and its 4 workers have run tasks (their poll delay is reset)
        warm = [fjhueybench.noop() for _ in range(100)]
        deadline = time.monotonic() + 60
        for r in warm:
            if proc.poll() is not None:
                raise BenchError(f"the huey consumer exited: {log_path.read_text()[-2000:]}")
            r.get(blocking=True, timeout=max(1, deadline - time.monotonic()))
        h.storage.flush_results()
        t_first = time.time()
        for _ in range(jobs):
            fjhueybench.noop()
        t_submitted = time.time()
        def consumer_alive() -> None:
            if proc.poll() is not None:
                raise BenchError(f"the huey consumer exited: {log_path.read_text()[-2000:]}")

        wait_for(lambda: h.storage.result_store_size() >= jobs, 60 + jobs * 0.1,
                 lambda: f"huey results: {h.storage.result_store_size()} of {jobs}", interval=0.05,
                 check=consumer_alive)
        ends = [pickle.loads(v) for (v,) in conn.execute("SELECT value FROM kv WHERE queue = ?", (h.name,))]
        ends = [float(e) for e in ends]
        t_last = max(ends)
        return {
            **rates(jobs, t_first, t_submitted, t_last),
            "huey_version": huey_pkg.__version__,
            "journal_mode": pragmas[0],
            "synchronous": pragmas[1],
            "workers": "4 threads",
        }
    finally:
        _kill_group(proc)
        proc.wait(timeout=10)
        sys.path.remove(str(hdir))


HUEY_PRELOAD_MODULE = '''\
"""huey side of scripts/bench.py throughput --preload (written by it)."""
import logging
import os
import time

from huey import SqliteHuey

# As huey sets itself up unless told otherwise (results kept, a None result not stored), but
# with fsync and WAL as the fabricjobs store. FJ_HUEY_RESULTS=1: every task stores its end time.
STORE = os.environ.get("FJ_HUEY_RESULTS") == "1"
huey = SqliteHuey("fjpreload", filename=os.environ["FJ_HUEY_DB"], fsync=True, journal_mode="wal")


@huey.task()
def noop():
    return time.time() if STORE else None


def run_consumer():
    logging.basicConfig(level=logging.WARNING)
    huey.create_consumer(workers=4, worker_type="thread").run()
'''


def huey_preload_throughput(directory: Path, jobs: int, keep_procs: list, results: bool) -> dict:
    """``jobs`` no-op tasks enqueued before the consumer (4 threads) starts, then drained. With
    ``results`` every task stores its end time and the rate is taken from those; without (huey's
    default for a task that returns None) from polling the queue every 5 ms."""
    import huey as huey_pkg

    hdir = directory / ("huey-preload-results" if results else "huey-preload")
    hdir.mkdir()
    (hdir / "fjhueypreload.py").write_text(HUEY_PRELOAD_MODULE)
    env = _with_pythonpath(dict(os.environ, FJ_HUEY_DB=str(hdir / "huey.db"), FJ_HUEY_RESULTS="1" if results else "0"),
                           hdir)
    enqueue = ("import sys, fjhueypreload as m\n"
               "for _ in range(int(sys.argv[1])): m.noop()\n")
    subprocess.run([sys.executable, "-c", enqueue, str(jobs)], env=env, cwd=hdir, check=True)
    probe = ("import sys, time, fjhueypreload as m\n"
             "h = m.huey; n = int(sys.argv[1])\n"
             "while h.pending_count() >= n: time.sleep(0.005)\n"
             "t0 = time.time()\n"
             "while h.pending_count() > 0: time.sleep(0.005)\n"
             "t1 = time.time()\n"
             "if m.STORE:\n"
             "    import pickle\n"
             "    while h.storage.result_store_size() < n: time.sleep(0.005)\n"
             "    ends = [float(pickle.loads(v)) for (v,) in h.storage.conn.execute('SELECT value FROM kv')]\n"
             "    t0, t1 = min(ends), max(ends)\n"
             "print(t0, t1)\n")
    watcher = subprocess.Popen([sys.executable, "-c", probe, str(jobs)], env=env, cwd=hdir, stdout=subprocess.PIPE,
                               text=True)
    proc = _start_huey_consumer(hdir, "fjhueypreload", env, keep_procs)
    try:
        out, _ = watcher.communicate(timeout=60 + jobs * 0.1)
        t0, t1 = (float(x) for x in out.split())
    finally:
        _kill_group(proc)
        proc.wait(timeout=10)
        if watcher.poll() is None:
            watcher.kill()
    return {"jobs": jobs, "jobs_per_s": (jobs - 1) / (t1 - t0), "drain_seconds": t1 - t0,
            "huey_version": huey_pkg.__version__, "results": results}


def fabricjobs_preload_throughput(rig: Rig, jobs: int, names: list[str]) -> dict:
    """``jobs`` no-op STARTJOBs written before any node starts; then the nodes start together
    and drain them. The rate runs from the first run's start to the last run's end (a node's
    start-up is not the queue's drain); how long the first run took to start after the nodes
    were launched is reported beside it."""
    rig.submit([f"startjob user_job name='Bench.noop' uid='t{i:06d}';" for i in range(jobs)])
    launched = time.time()
    for name in names:
        rig.start_node(name)
    store = rig.client.store
    db = Path(rig.settings["store"]["SQLITE_PATH"]) if "SQLITE_PATH" in rig.settings.get("store", {}) else None
    state = {"n": 0}

    def all_done():  # a cheap count: the poll must not slow the nodes it measures
        state["n"] = _count_done_sqlite(db, 0) if db is not None else len(store.archived_since(utc(0)))
        return state["n"] >= jobs

    wait_for(all_done, 60 + jobs * 0.2, lambda: f"the {jobs} preloaded jobs: {state['n']} PROCESSED",
             interval=0.25, check=rig.check_nodes)
    # CPU of every process of the nodes' groups (node, fork server, workers), start-up included,
    # and of the node processes alone: what each job costs, beside how fast the queue drained.
    cpu = sum(group_cpu_seconds(rig.nodes[n].pid) for n in names)
    node_cpu = sum(process_cpu_seconds(rig.nodes[n].pid) for n in names)
    rows = [j for j in store.archived_since(utc(0)) if j.key.name == "Bench.noop"]
    bad = [j for j in rows if j.status is not Status.PROCESSED]
    if bad or len(rows) != jobs:
        raise BenchError(f"{len(rows)} rows archived, {len(bad)} not PROCESSED (first: {bad[:1]})")
    t0 = min(j.start_time.timestamp() for j in rows)
    t1 = max(j.end_time.timestamp() for j in rows)
    per_node: dict[str, int] = {}
    for j in rows:
        per_node[j.worker_id or "?"] = per_node.get(j.worker_id or "?", 0) + 1
    return {"jobs": jobs, "jobs_per_s": (jobs - 1) / (t1 - t0), "drain_seconds": t1 - t0, "nodes": len(names),
            "first_run_after_launch": t0 - launched,
            "per_node": dict(sorted(per_node.items())), "cpu_seconds": cpu, "node_process_cpu_seconds": node_cpu}


def cmd_preload(args, backend: Backend, jobs: int, pool: int) -> dict:
    """throughput --preload (docs/benchmarks.md): the queue is full before anything consumes it.

    ``--rounds`` N measures every system N times, interleaved (huey, huey with results, then
    each node count, then again), and reports each system's median round: on a shared 2-core
    VM one system's figure moved by up to a fifth from one minute to the next (huey's default
    1,185-1,769 jobs/s in seven runs of one hour), more than the goals' margins."""
    out: dict = {"jobs": jobs, "pool": pool, "backend": backend.name, "preload": True, "rounds": args.rounds,
                 "fabricjobs": [], "huey": []}
    procs: list = []
    tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-preload-"))
    with_huey = backend.name == "sqlite" and not args.no_huey and ensure_huey(args.install_huey)
    try:
        for round_no in range(1, args.rounds + 1):
            rdir = tmp / f"round{round_no}"  # huey's queue files: fresh each round
            rdir.mkdir()
            if with_huey:
                for results in (False, True):
                    progress(f"throughput --preload, round {round_no}: huey, results "
                             f"{'stored' if results else 'not stored (default)'} ...")
                    out["huey"].append(dict(huey_preload_throughput(rdir, jobs, procs, results), round=round_no))
            for n in (int(x) for x in args.nodes.split(",")):
                progress(f"throughput --preload, round {round_no}: fabricjobs, {n} node(s) ...")
                rig = backend.rig({"jobs": {"K2JOBS_POOL_SIZE": pool}}, label=f"bench-pre{n}-{round_no}", keep=args.keep)
                try:
                    result = fabricjobs_preload_throughput(rig, jobs, [f"node{i + 1}" for i in range(n)])
                    out["fabricjobs"].append(dict(result, round=round_no))
                finally:
                    rig.close()
    finally:
        _clean_up(procs, tmp, args.keep)
    return _report_preload(args, out, backend, jobs, pool)


def _median_round(results: list[dict]) -> dict | None:
    """The round whose jobs/s is the median (the lower middle one of an even count)."""
    ranked = sorted(results, key=lambda r: r["jobs_per_s"])
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def _preload_goals(fabricjobs: list[dict], default: dict | None) -> list[tuple[str, float, float]]:
    """(goal, measured, bound) of docs/benchmarks.md for one set of figures: every node count against
    one node, and against huey's default."""
    one = next((r for r in fabricjobs if r["nodes"] == 1), None)
    goals = []
    if one:
        goals += [(f"{r['nodes']} nodes >= 0.9x 1 node", r["jobs_per_s"] / one["jobs_per_s"], 0.9)
                  for r in fabricjobs if r["nodes"] > 1]
    if default:
        goals += [(f"{r['nodes']} node(s) >= 1.5x huey (default)", r["jobs_per_s"] / default["jobs_per_s"], 1.5)
                  for r in fabricjobs]
    return goals


def _report_preload(args, out: dict, backend: Backend, jobs: int, pool: int) -> dict:
    rounds = args.rounds
    fabricjobs = [m for n in dict.fromkeys(r["nodes"] for r in out["fabricjobs"])
                  if (m := _median_round([r for r in out["fabricjobs"] if r["nodes"] == n])) is not None]
    huey = [m for flag in (False, True) if (m := _median_round([h for h in out["huey"] if h["results"] is flag]))]
    default = next((h for h in huey if not h["results"]), None)
    stored = next((h for h in huey if h["results"]), None)
    one = next((r for r in fabricjobs if r["nodes"] == 1), None)

    def spread(pick) -> str:
        rates = [r["jobs_per_s"] for r in pick]
        return f"{min(rates):,.0f}-{max(rates):,.0f}" if len(rates) > 1 else ""

    rows = []
    for r in fabricjobs:
        rows.append([f"fabricjobs, {r['nodes']} node{'s' if r['nodes'] > 1 else ''} (pool {pool} each)",
                     fmt_rate(r["jobs_per_s"]), spread([x for x in out["fabricjobs"] if x["nodes"] == r["nodes"]]),
                     f"{r['drain_seconds']:.2f}", f"{r['first_run_after_launch']:.2f}",
                     f"{r['jobs_per_s'] / one['jobs_per_s']:.2f}x" if one else "n/a",
                     f"{r['jobs_per_s'] / default['jobs_per_s']:.2f}x" if default else "n/a",
                     f"{r['jobs_per_s'] / stored['jobs_per_s']:.2f}x" if stored else "n/a",
                     " ".join(str(v) for v in r["per_node"].values()),
                     f"{r['cpu_seconds'] / r['jobs'] * 1e6:.0f} ({r['node_process_cpu_seconds'] / r['jobs'] * 1e6:.0f})"])
    for h in huey:
        rows.append([f"huey {h['huey_version']} SqliteHuey, 4 threads, results {'stored' if h['results'] else 'not stored'}",
                     fmt_rate(h["jobs_per_s"]), spread([x for x in out["huey"] if x["results"] is h["results"]]),
                     f"{h['drain_seconds']:.2f}", "", "", "", "", "", ""])
    print(f"\n== throughput --preload: {jobs:,} no-op jobs queued before any consumer starts, then drained "
          f"(first start -> last end; {backend.label()})" + (f"; the median of {rounds} interleaved rounds" if rounds > 1 else ""))
    print(tabulate(rows, headers=["system", "jobs/s", "rounds' range", "seconds", "1st run after start (s)", "vs 1 node",
                                  "vs huey default",
                                  "vs huey + results", "jobs per node", "CPU us/job (node processes)"], disable_numparse=True))
    goals = [[goal, f"{got:.2f}x", verdict(got >= bound)] for goal, got, bound in _preload_goals(fabricjobs, default)]
    if rounds > 1 and goals:
        every = 0
        for k in range(1, rounds + 1):
            round_huey = next((h for h in out["huey"] if h["round"] == k and not h["results"]), None)
            every += all(got >= bound for _, got, bound in
                         _preload_goals([r for r in out["fabricjobs"] if r["round"] == k], round_huey))
        goals.append(["every goal within one round", f"{every} of {rounds} rounds", ""])
    if goals:
        print_goals(args, goals)
    out["goals"] = {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}
    return out


def _count_done_sqlite(db: Path, since: float) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(
            "SELECT count(*) FROM k2_jobs INDEXED BY k2_jobs_archive WHERE archived = 1 AND end_time >= ? "
            "AND name = 'Bench.noop' AND uid GLOB 't[0-9]*'", (since,)).fetchone()[0]
    finally:
        conn.close()


def fabricjobs_throughput(rig: Rig, jobs: int, backend: Backend) -> dict:
    """Submit ``jobs`` no-op STARTJOBs at once; wait until all are PROCESSED. The figure uses the
    last end_time in the store, not the time the poll noticed."""
    statements = [f"startjob user_job name='Bench.noop' uid='t{i:06d}';" for i in range(jobs)]
    since = time.time()  # the warm-up jobs all ended before this
    store = rig.client.store
    db = Path(rig.settings["store"]["SQLITE_PATH"])

    def done() -> int:
        if backend.name == "sqlite":
            return _count_done_sqlite(db, since)
        return sum(1 for j in store.archived_since(utc(since)) if j.key.uid.startswith("t"))

    t_first, t_submitted = rig.submit(statements)
    state = {"n": 0}

    def all_done():
        state["n"] = done()
        return state["n"] >= jobs

    wait_for(all_done, 60 + jobs * 0.2, lambda: f"the {jobs} no-op jobs: {state['n']} PROCESSED",
             interval=0.1, check=rig.check_nodes)
    rows = [j for j in store.archived_since(utc(since)) if j.key.name == "Bench.noop" and j.key.uid.startswith("t")]
    bad = [j for j in rows if j.status is not Status.PROCESSED]
    if bad or len(rows) != jobs:
        raise BenchError(f"{len(rows)} rows archived, {len(bad)} not PROCESSED (first: {bad[:1]})")
    t_last = max(j.end_time.timestamp() for j in rows)
    per_node: dict[str, int] = {}
    for j in rows:
        per_node[j.worker_id or "?"] = per_node.get(j.worker_id or "?", 0) + 1
    return {**rates(jobs, t_first, t_submitted, t_last), "per_node": dict(sorted(per_node.items()))}


def rates(jobs: int, t_first: float, t_submitted: float, t_last: float) -> dict:
    """The throughput figures of one system: first submit, last submit, last job end."""
    return {
        "jobs": jobs,
        "jobs_per_s": jobs / (t_last - t_first),
        "end_to_end_seconds": t_last - t_first,
        "submit_per_s": jobs / (t_submitted - t_first),
        "last_submit_to_all_done_seconds": t_last - t_submitted,
    }


def cmd_throughput(args, backend: Backend, facts: dict, findings: list) -> dict:
    jobs, pool = args.jobs or (1000 if backend.real else 5000), args.pool
    if args.preload:
        return cmd_preload(args, backend, jobs, pool)
    out: dict = {"jobs": jobs, "pool": pool, "backend": backend.name, "fabricjobs": []}
    procs: list = []
    tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-tp-"))
    try:
        if backend.name == "sqlite":
            progress("throughput: engine limit ...")
            out["engine_limit"] = engine_limit(tmp)
            if args.no_huey:
                out["huey"] = None
            elif ensure_huey(args.install_huey):
                progress("throughput: huey ...")
                out["huey"] = huey_throughput(tmp, jobs, procs)
            else:
                out["huey"] = None
                print("throughput: huey is not installed, so the comparison is skipped. Install it with\n"
                      f"    {sys.executable} -m pip install huey\n"
                      "or run this script with --install-huey.", file=sys.stderr)
        for n in (int(x) for x in args.nodes.split(",")):
            raw = None
            if backend.real:
                progress(f"throughput: raw LWT rate of the cluster from {n} client process(es) ...")
                raw = backend.raw_lwt_rate(n, args.raw_lwts, args.lwt_concurrency)
                out.setdefault("raw_lwt", []).append(raw)
            progress(f"throughput: fabricjobs, {n} node(s) ...")
            rig = backend.rig({"jobs": {"K2JOBS_POOL_SIZE": pool}}, label=f"bench-tp{n}", keep=args.keep,
                              metered=backend.cassandra)
            try:
                names = [f"node{i + 1}" for i in range(n)]
                for name in names:
                    rig.start_node(name)
                rig.wait_ready(names, timeout=60)
                rig.warm_up(names, pool, timeout=120)
                counts = None
                if backend.cassandra:
                    c0 = rig.store_counters()
                    time.sleep(IDLE_SECONDS)  # the nodes' LWTs without jobs (none expected)
                    c1 = rig.store_counters()
                r = fabricjobs_throughput(rig, jobs, backend)
                if backend.cassandra:
                    c2 = rig.store_counters()
                    counts = {"idle_lwts_per_s": (c1["lwt_attempts"] - c0["lwt_attempts"]) / IDLE_SECONDS,
                              **{f: c2[f] - c1[f] for f in c2}}
                    r["store_counters"] = counts
                    r["lwts_per_job"] = counts["lwt_attempts"] / jobs
                r["nodes"] = n
                if raw is not None:
                    r["raw_lwt_per_s"] = raw["lwts_per_s"]
                    r["lwt_bound_jobs_per_s"] = raw["lwts_per_s"] / r["lwts_per_job"]
                    r["ratio_to_lwt_bound"] = r["jobs_per_s"] / r["lwt_bound_jobs_per_s"]
                out["fabricjobs"].append(r)
            finally:
                rig.close()
                findings.extend((f"throughput {n} nodes/{name}", line) for name, line in rig.log_findings)
    finally:
        _clean_up(procs, tmp, args.keep)

    huey = out.get("huey")
    limit = (out.get("engine_limit") or {}).get("commits_per_s")
    for r in out["fabricjobs"]:
        r["ratio_to_huey"] = r["jobs_per_s"] / huey["jobs_per_s"] if huey else None
        r["fraction_of_engine_limit"] = r["jobs_per_s"] / limit if limit else None
    rows = []
    for r in out["fabricjobs"]:
        rows.append([f"fabricjobs, {r['nodes']} node{'s' if r['nodes'] > 1 else ''} (pool {pool} each)",
                     fmt_rate(r["jobs_per_s"]), f"{r['end_to_end_seconds']:.2f}", fmt_rate(r["submit_per_s"]),
                     "n/a" if r["ratio_to_huey"] is None else f"{r['ratio_to_huey']:.2f}x",
                     "n/a" if r["fraction_of_engine_limit"] is None else f"{r['fraction_of_engine_limit'] * 100:.0f} %",
                     " ".join(str(v) for v in r["per_node"].values())])
    if huey:
        rows.append([f"huey {huey['huey_version']} SqliteHuey, {huey['workers']}", fmt_rate(huey["jobs_per_s"]),
                     f"{huey['end_to_end_seconds']:.2f}", fmt_rate(huey["submit_per_s"]), "1.00x",
                     f"{huey['jobs_per_s'] / limit * 100:.0f} %" if limit else "n/a", ""])
    if limit:
        el = out["engine_limit"]
        rows.append([f"engine limit: raw UPDATE commits/s ({el['rows']:,} rows, 1 process)", fmt_rate(limit),
                     "", "", "", "100 %", ""])
    print(f"\n== throughput: {jobs:,} no-op one-time jobs submitted at once; first submit -> all done "
          f"({backend.label()}; pool {pool} per node, log level warning)")
    goals = []
    if backend.real:
        print_lwt_bound(out, goals, args)
    else:
        print(tabulate(rows, headers=["system", "jobs/s", "seconds", "submit/s", "vs huey", "of engine limit",
                                      "jobs per node"], disable_numparse=True))
        if backend.cassandra:
            print("LWTs per job (all LWTs the nodes and the submitting client sent in the window / jobs): "
                  + ", ".join(f"{r['nodes']} node(s) {r['lwts_per_job']:.2f}" for r in out["fabricjobs"]))
    by_n = {r["nodes"]: r for r in out["fabricjobs"]}
    if huey:
        for n, want in ((1, 1.0), (4, 1.5)):
            if n in by_n:
                got = by_n[n]["ratio_to_huey"]
                goals.append([f"{n} node{'s' if n > 1 else ''} >= {want:.1f}x huey", f"{got:.2f}x", verdict(got >= want)])
    if limit:
        best = max(out["fabricjobs"], key=lambda r: r["jobs_per_s"])
        frac = best["fraction_of_engine_limit"]
        goals.append([">= 50 % of the engine limit (best node count)", f"{frac * 100:.0f} % ({best['nodes']} nodes)",
                      verdict(frac >= 0.5)])
    if goals:
        print_goals(args, goals)
    out["goals"] = {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}
    return out


IDLE_SECONDS = 2.0
LWT_GOAL = 0.4


def print_lwt_bound(out: dict, goals: list, args) -> None:
    """The real-cluster table: fabricjobs' jobs/s beside what the same cluster's raw LWT rate allows
    at the LWTs a job costs (its bound), and the ratio of the two (goal >= LWT_GOAL)."""
    rows = []
    for r in out["fabricjobs"]:
        c = r["store_counters"]
        ok = r["ratio_to_lwt_bound"] >= LWT_GOAL
        rows.append([r["nodes"], fmt_rate(r["jobs_per_s"]), f"{r['end_to_end_seconds']:.2f}",
                     f"{r['lwts_per_job']:.2f}", fmt_rate(r["jobs_per_s"] * r["lwts_per_job"]),
                     fmt_rate(r["raw_lwt_per_s"]), fmt_rate(r["lwt_bound_jobs_per_s"]),
                     f"{r['ratio_to_lwt_bound']:.2f}", "PASS" if ok else "FAIL",
                     f"{c['contention_retries']:.0f} / {c['unknown_outcomes']:.0f} / {c['index_repairs']:.0f}",
                     " ".join(str(v) for v in r["per_node"].values())])
        goals.append([f"{r['nodes']} node(s): jobs/s >= {LWT_GOAL} x (raw LWT/s / LWTs per job)",
                      f"{r['ratio_to_lwt_bound']:.2f}", verdict(ok)])
    print(tabulate(rows, headers=["nodes = client procs", "fabricjobs jobs/s", "seconds", "LWTs/job",
                                  "LWT/s fabricjobs sent", "raw LWT/s", "bound jobs/s", "ratio", f">= {LWT_GOAL}",
                                  "retries / unknown / repairs", "jobs per node"], disable_numparse=True))
    print(f"raw LWT/s: `UPDATE t SET v = ? WHERE k = ? IF v = ?` on distinct pre-inserted partitions (no "
          f"contention), {args.raw_lwts:,} per client process, {args.lwt_concurrency} in flight per process, "
          "as many processes as fabricjobs nodes, measured just before the fabricjobs run on the same cluster.")
    print("LWTs/job: measured on the node processes: their store counters (StoreStats.lwt_attempts, scraped from "
          "each node's Prometheus metrics, fabricjobs_store_lwt_attempts_total) plus the submitting client's "
          "(this process's store.stats), over the window from the first submit to all PROCESSED, / jobs; "
          "idle LWT/s of the nodes before the window: "
          + ", ".join(f"{r['store_counters']['idle_lwts_per_s']:.1f}" for r in out["fabricjobs"]) + ".")
    print("bound jobs/s = raw LWT/s / LWTs per job; ratio = fabricjobs jobs/s / bound jobs/s.")


# ==================================================================================================
# firelag
# ==================================================================================================


# Seconds after the submit from which fires count as settled: the first ones meet 200 new jobs'
# writes and each node's fire lead still learning (on Cassandra, about 4 s of late fires).
FIRELAG_SETTLED = 10.0
# Seconds of the same load before the measured one. A Cassandra started seconds before has a cold
# JIT: on this 2-core host it took 1.05-1.14 cores for the load that took 0.75-0.78 once warm, and
# 100-312 fires were missed against none (bench/results/raw/2026-11-30-warm-store/).
FIRELAG_WARM = 20.0


def host_busy_seconds() -> float:
    """CPU seconds the whole host has spent busy (all cores, every process: /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuShares:
    """Where the host's cores went during a measurement: the store's JVMs (a real Cassandra),
    the fabricjobs nodes (each node's process group: node, fork server, workers) and the rest
    (this process, the host's other tenants). A lag that grows with a saturated host is the
    host's queueing, not the scheduler's."""

    def __init__(self, backend: Backend, rig, names: list[str]) -> None:
        cluster = getattr(backend, "cluster", None)
        self._store_pids = [p for p in (cluster.pid(i) for i in range(backend.nodes)) if p] if cluster else []
        self._groups = [rig.nodes[n].pid for n in names]
        self._start = self._sample()
        self._end: tuple[float, float, float, float] | None = None

    def _sample(self) -> tuple[float, float, float, float]:
        return (time.monotonic(), sum(process_cpu_seconds(p) for p in self._store_pids),
                sum(group_cpu_seconds(g) for g in self._groups), host_busy_seconds())

    def stop(self) -> None:
        """The end of the measurement (the load still running: before its STOPJOB)."""
        self._end = self._sample()

    def cores(self) -> dict:
        """Cores used on average from when this meter was made until :meth:`stop`."""
        end = self._end or self._sample()
        wall = end[0] - self._start[0]
        store, nodes, busy = ((end[i] - self._start[i]) / wall for i in (1, 2, 3))
        return {"cores": os.cpu_count(), "host_busy": round(busy, 2), "store": round(store, 2),
                "nodes": round(nodes, 2), "rest": round(max(0.0, busy - store - nodes), 2)}


def cmd_firelag(args, backend: Backend, facts: dict, findings: list) -> dict:
    count, seconds = args.jobs, args.seconds
    n_interval = count // 2
    n_cron = count - n_interval
    rig = backend.rig({"jobs": {"K2JOBS_POOL_SIZE": args.pool}}, label="bench-firelag", keep=args.keep)
    try:
        names = ["node1", "node2"]
        for name in names:
            rig.start_node(name)
        rig.wait_ready(names, timeout=60)
        rig.warm_up(names, args.pool, timeout=120)
        log = rig.tmp / "stamps.jsonl"
        a = json.dumps({"log": str(log)})
        # As in a cluster that has run this job before: each node knows how long its runs take
        # (short ones ride on trains, node/trains.py), also for the first fires of the jobs below.
        rig.warm_up(names, 9, timeout=120, job="Bench.stamp", args=json.dumps({"log": str(rig.tmp / "warm.jsonl")}))

        def recurring(prefix: str, args_json: str) -> list[str]:
            return ([f"startjob user_job name='Bench.stamp' uid='{prefix}i{i:04d}' exec_interval='00:00:01' "
                     f"args='{args_json}';" for i in range(n_interval)]
                    + [f"startjob user_job name='Bench.stamp' uid='{prefix}c{i:04d}' exec_interval='* * * * * *' "
                       f"args='{args_json}';" for i in range(n_cron)])

        if args.warm_seconds > 0:
            # The same load once before, not measured: a store that has served it (a JVM whose
            # compiler has seen the Paxos path), as in a cluster that has been up a while.
            progress(f"firelag: warming the store with the same load for {args.warm_seconds:g} s ...")
            rig.submit(recurring("w", json.dumps({"log": str(rig.tmp / "warm-load.jsonl")})))
            rig.run_then_stop("Bench.stamp", time.time() + args.warm_seconds, 60)
        statements = recurring("", a)
        progress(f"firelag: {count} recurring jobs on 2 nodes for {seconds:g} s ...")
        store = rig.client.store
        cpu = CpuShares(backend, rig, names)
        t_first, t_submitted = rig.submit(statements)
        rows = {j.key.uid: j for j in store.live_jobs(type="USER_JOB", name="Bench.stamp")}
        if len(rows) != count:
            raise BenchError(f"expected {count} live recurring jobs after STARTJOB, found {len(rows)}")
        t_stop = rig.run_then_stop("Bench.stamp", t_submitted + seconds, 60, on_stop=cpu.stop)
        starts: dict[str, list[tuple[float, float | None]]] = {uid: [] for uid in rows}
        for rec in read_records(log):
            if rec.get("uid") in starts:
                starts[rec["uid"]].append((rec["start"], rec.get("due")))
    finally:
        rig.close()
        findings.extend((f"firelag/{name}", line) for name, line in rig.log_findings)
    print(f"\n(firelag store: {backend.label()}; the {count} STARTJOBs took {t_submitted - t_first:.2f} s to write)",
          end="")
    result = firelag_report(args, rows, starts, t_submitted, t_stop, seconds, count)
    result["submit_seconds"] = round(t_submitted - t_first, 3)
    result["warm_seconds"] = args.warm_seconds
    c = result["cpu_cores"] = cpu.cores()
    warmed = f"; warmed first with the same load for {args.warm_seconds:g} s" if args.warm_seconds else ""
    print(f"host CPU while they ran: {c['host_busy']:.2f} of {c['cores']} cores busy (store {c['store']:.2f}, "
          f"fabricjobs nodes {c['nodes']:.2f}, the rest {c['rest']:.2f}){warmed}")
    return result


def firelag_report(args, rows: dict, starts: dict[str, list[tuple[float, float | None]]], t_submitted: float,
                   t_stop: float, seconds: float, count: int) -> dict:
    """Due times per job: interval jobs creation + k s, cron jobs each whole second after
    creation. A fire is counted in the window [first due, t_stop - 1 s]. A run is the run of
    the fire its job was told it stands for (current_job().due); without that, of the due
    time whose second it starts in."""
    out: dict = {}
    later_fires: list[float] = []
    settled: list[float] = []  # fires due once the start-up burst is over
    for kind, prefix in (("interval 00:00:01", "i"), ("cron * * * * * *", "c"), ("all", "")):
        delays: list[float] = []
        missed = doubled = runs_total = early = 0
        jobs_missing: list[str] = []
        jobs_doubled: list[str] = []
        for uid, row in rows.items():
            if not uid.startswith(prefix):
                continue
            c = row.creation_time.timestamp()
            first = c if uid.startswith("i") else math.floor(c) + 1.0
            ts = sorted(starts[uid])
            runs_total += len(ts)
            k_last = math.floor(t_stop - 1.0 - first)
            per_due: dict[int, int] = {}
            for s, due in ts:
                k = round(due - first) if due is not None else math.floor(s - first + 1e-9)
                if k < 0:
                    early += 1
                    continue
                if k > k_last:
                    continue
                per_due[k] = per_due.get(k, 0) + 1
                delays.append(s - (first + k))
                if prefix == "" and k > 0:
                    later_fires.append(s - (first + k))
                if prefix == "" and first + k >= t_submitted + FIRELAG_SETTLED:
                    settled.append(s - (first + k))
            m = sum(1 for k in range(0, k_last + 1) if k not in per_due)
            d = sum(v - 1 for v in per_due.values() if v > 1)
            missed += m
            doubled += d
            if m:
                jobs_missing.append(uid)
            if d:
                jobs_doubled.append(uid)
        if not delays:
            raise BenchError(f"firelag: no run of the {kind} jobs started")
        out[kind] = {
            "runs_in_window": len(delays),
            "delay_p50_ms": percentile(delays, 50) * 1000,
            "delay_p99_ms": percentile(delays, 99) * 1000,
            "delay_max_ms": max(delays) * 1000,
            "missed_fires": missed,
            "jobs_with_missed_fires": jobs_missing[:20],
            "doubled_fires": doubled,
            "jobs_with_doubled_fires": jobs_doubled[:20],
            "runs_before_first_due": early,
        }
    for kind, delays in (("all but each job's first fire", later_fires),
                         (f"all due {FIRELAG_SETTLED:g} s or more after the submit", settled)):
        if delays:  # delays only: missed and doubled fires are counted in the rows above
            out[kind] = {"runs_in_window": len(delays), "delay_p50_ms": percentile(delays, 50) * 1000,
                         "delay_p99_ms": percentile(delays, 99) * 1000, "delay_max_ms": max(delays) * 1000,
                         "missed_fires": None, "doubled_fires": None}
    print(f"\n== firelag: {count} recurring jobs (half EXEC_INTERVAL='00:00:01', half cron '* * * * * *') "
          f"on 2 nodes for {seconds:g} s; delay = job start - due time")
    print(tabulate([[k, v["runs_in_window"], f"{v['delay_p50_ms']:.1f}", f"{v['delay_p99_ms']:.1f}",
                     f"{v['delay_max_ms']:.1f}", "" if v["missed_fires"] is None else v["missed_fires"],
                     "" if v["doubled_fires"] is None else v["doubled_fires"]] for k, v in out.items()],
                   headers=["jobs", "runs", "p50 ms", "p99 ms", "max ms", "missed", "doubled"],
                   disable_numparse=True))
    a = out["all"]
    goals = [["p99 < 50 ms", f"{a['delay_p99_ms']:.1f} ms", verdict(a["delay_p99_ms"] < 50)],
             ["zero missed and doubled fires", f"{a['missed_fires']} missed, {a['doubled_fires']} doubled",
              verdict(a["missed_fires"] == 0 and a["doubled_fires"] == 0)]]
    if a["delay_max_ms"] >= 1000:
        print("note: some runs started 1 s or more after their due time")
    print_goals(args, goals)
    return {"jobs": count, "seconds": seconds, "by_kind": out,
            "goals": {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}}


# ==================================================================================================
# failover
# ==================================================================================================


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a record cut by the kill
    return out


def cmd_failover(args, backend: Backend, facts: dict, findings: list) -> dict:
    count = args.jobs
    hb_ms, miss = args.heartbeat_ms, args.miss
    rig = backend.rig({
        "jobs": {"K2JOBS_POOL_SIZE": args.pool, "RECONCILE_INTERVAL_MS": FAILOVER_RECONCILE_MS},
        "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": hb_ms, "FABRIC_HEARTBEAT_MISS": miss},
    }, label="bench-failover", keep=args.keep)
    try:
        names = ["node1", "node2", "node3"]
        for name in names:
            rig.start_node(name)
        rig.wait_ready(names, timeout=60)
        rig.warm_up(names, 2, timeout=60)
        log = rig.tmp / "starts.jsonl"
        a = json.dumps({"log": str(log), "seconds": 60})
        progress(f"failover: {count} long jobs on 3 nodes ...")
        rig.submit([f"startjob user_job name='Bench.hold' uid='f{i:03d}' args='{a}';" for i in range(count)])
        store = rig.client.store

        def all_running():
            live = store.live_jobs(type="USER_JOB", name="Bench.hold")
            started = {r["uid"] for r in read_records(log)}
            running = [r for r in live if r.status is Status.IN_PROCESS and r.key.uid in started]
            return live if len(running) == count else None

        live = wait_for(all_running, 60, f"all {count} long jobs to be IN_PROCESS and started", interval=0.05,
                        check=rig.check_nodes)
        holding: dict[str, list[str]] = {}
        for r in live:
            holding.setdefault(r.worker_id, []).append(r.key.uid)
        victim_name = max(holding, key=lambda k: len(holding[k]))
        victim_jobs = set(holding[victim_name])
        victim = rig.nodes[victim_name]
        victim.killed = True
        t_kill = time.time()
        victim.kill_group()
        victim.proc.wait(timeout=10)
        restarted: dict[str, dict] = {}

        def all_restarted():
            for rec in read_records(log):
                if rec["uid"] in victim_jobs and rec["node"] != victim_name and rec["start"] > t_kill:
                    restarted.setdefault(rec["uid"], rec)
            return len(restarted) == len(victim_jobs)

        dead_after = hb_ms * miss / 1000
        wait_for(all_restarted, dead_after + 60,
                 lambda: f"the {len(victim_jobs)} jobs of killed node {victim_name} to start again elsewhere "
                         f"({len(restarted)} did)", interval=0.02, check=rig.check_nodes)
    finally:
        rig.close()
        findings.extend((f"failover/{name}", line) for name, line in rig.log_findings)
    delays = sorted(rec["start"] - t_kill for rec in restarted.values())
    taken: dict[str, int] = {}
    for rec in restarted.values():
        taken[rec["node"]] = taken.get(rec["node"], 0) + 1
    out = {
        "jobs": count, "held_before_kill": {k: len(v) for k, v in sorted(holding.items())},
        "killed": victim_name, "killed_jobs": len(victim_jobs), "restarted_on": dict(sorted(taken.items())),
        "min_s": delays[0], "median_s": statistics.median(delays), "max_s": delays[-1],
        "dead_threshold_s": dead_after, "heartbeat_interval_ms": hb_ms, "heartbeat_miss": miss,
        "reconcile_interval_ms": FAILOVER_RECONCILE_MS, "backend": backend.name,
    }
    print(f"\n== failover: 3 nodes ({backend.label()}), {count} long jobs; SIGKILL of {victim_name}'s process group "
          f"holding {len(victim_jobs)} of them (held before: "
          + ", ".join(f"{k} {v}" for k, v in out["held_before_kill"].items()) + ")")
    print(tabulate([[f"{out['min_s']:.2f}", f"{out['median_s']:.2f}", f"{out['max_s']:.2f}",
                     f"{dead_after:.1f} ({hb_ms} ms x {miss})", f"{FAILOVER_RECONCILE_MS} ms",
                     ", ".join(f"{k} {v}" for k, v in out["restarted_on"].items())]],
                   headers=["kill -> re-run min s", "median s", "max s", "dead threshold s", "reconcile", "re-run on"],
                   disable_numparse=True))
    goal = dead_after + 1.0
    goals = [[f"every job re-runs within dead threshold + 1 s ({goal:.1f} s)", f"max {out['max_s']:.2f} s",
              verdict(out["max_s"] <= goal)]]
    print_goals(args, goals)
    out["goals"] = {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}
    return out


# ==================================================================================================
# scale
# ==================================================================================================


def _load_rows(path: Path, archived: int, scheduled: int, owner: str) -> None:
    from fabricjobs.store.sqlite import SqliteStore

    SqliteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    now = time.time()
    batch = 50_000
    conn.execute("BEGIN")
    for lo in range(0, archived, batch):
        rows = []
        for i in range(lo, min(archived, lo + batch)):
            end = now - 60 - (i % (29 * 86400))  # within the last 29 days: inside the default retention
            rows.append((f"a{i:08d}", end - 2, end - 1, end, i % 7 + 1))
        conn.executemany(
            "INSERT INTO k2_jobs (type, name, uid, status, archived, creation_time, start_time, end_time, arguments,"
            " output, worker_id, epoch) VALUES ('USER_JOB', 'Archive.job', ?, 'PROCESSED', 1, ?, ?, ?, '{}',"
            " '{\"ok\": true}', 'old-node', ?)",
            rows,
        )
        # ... and each one's run in the run history (k2_job_runs: JOBHISTORY, JOBLOG)
        conn.executemany(
            "INSERT INTO k2_job_runs (type, name, uid, epoch, node, due, start, \"end\", result, status, tries, output,"
            " log) VALUES ('USER_JOB', 'Archive.job', ?, ?, 'old-node', ?, ?, ?, 'OK', 'PROCESSED', 0,"
            " '{\"ok\": true}', 'a log line of the run')",
            [(uid, epoch, created, start, end) for uid, created, start, end, epoch in rows],
        )
    far = now + 365 * 86400
    for lo in range(0, scheduled, batch):
        conn.executemany(
            "INSERT INTO k2_jobs (type, name, uid, status, archived, creation_time, next_run, execution_interval,"
            " worker_id, epoch) VALUES ('USER_JOB', 'Future.job', ?, 'SCHEDULED', 0, ?, ?, ?, ?, 1)",
            [(f"s{i:08d}", now, far + i, (datetime.fromtimestamp(far, UTC) + timedelta(seconds=i)).astimezone()
              .strftime("%Y-%m-%d %H:%M:%S"), owner)
             for i in range(lo, min(scheduled, lo + batch))],
        )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    # A store that grew over months has its WAL checkpointed all along (SQLite does it every
    # 1,000 pages); one bulk transaction leaves the whole load in the WAL until this.
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


class _ScaleCase:
    """One bulk-loaded store with a node started on it (no worker runs) and a client."""

    def __init__(self, tmp: Path, label: str, archived: int, scheduled: int) -> None:
        from fabricjobs.client import Client
        from fabricjobs.config import load_config
        from fabricjobs.node.node import Node

        self.label, self.archived, self.scheduled = label, archived, scheduled
        d = tmp / label
        d.mkdir()
        self.db = d / "jobs.db"
        name = "scale-node"
        t = time.perf_counter()
        _load_rows(self.db, archived, scheduled, name)
        self.load_s = time.perf_counter() - t
        cfg_path = d / "config.ini"
        cfg_path.write_text(f"[store]\nSQLITE_PATH = {self.db}\n[jobs]\nK2JOBS_POOL_SIZE = 25\n")
        self.node = Node(load_config(str(cfg_path)), name=name)
        self.node.start()
        self.node.reconciler.run_pass(True)  # the first pass warms caches
        self.client = Client.from_config(str(cfg_path))
        self.shown = len(self.client.fetch("jobstatus;").rows)  # warm
        self.passes: list[float] = []
        self.jobstatus: list[float] = []

    def time_pass(self) -> None:
        t = time.perf_counter()
        self.node.reconciler.run_pass(True)
        self.passes.append(time.perf_counter() - t)

    def time_jobstatus(self) -> None:
        t = time.perf_counter()
        self.client.fetch("jobstatus;")
        self.jobstatus.append(time.perf_counter() - t)

    def close(self) -> dict:
        self.client.close()
        self.node.stop()
        self.node.run()  # runs the shutdown (stop was set before the loop)
        return {
            "case": self.label, "archived_rows": self.archived, "scheduled_rows": self.scheduled,
            "load_seconds": self.load_s, "db_mb": self.db.stat().st_size / 1e6,
            "pass_median_ms": statistics.median(self.passes) * 1000,
            "pass_p90_ms": percentile(self.passes, 90) * 1000, "passes": len(self.passes),
            "jobstatus_median_ms": statistics.median(self.jobstatus) * 1000, "jobstatus_runs": len(self.jobstatus),
            "jobstatus_rows": self.shown,
        }


def cmd_scale(args, backend: Backend, facts: dict, findings: list) -> dict:
    if backend.name != "sqlite":
        raise BenchError("scale runs on SQLite only (rows are bulk-loaded with sqlite3)")
    tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-scale-"))
    stores: list[_ScaleCase] = []
    try:
        for label, archived, scheduled in (("empty", 0, 0), ("archived", args.archived, 0),
                                           ("scheduled", 0, args.scheduled)):
            progress(f"scale: loading {label} ({archived:,} archived, {scheduled:,} scheduled rows) ...")
            stores.append(_ScaleCase(tmp, label, archived, scheduled))
        # Measured in turns, one pass (or jobstatus) per store per round: this VM's speed
        # changes by 2x from one second to the next, and timing each store in a block of its
        # own compared the machine's moods, not the stores.
        progress(f"scale: {args.passes} rounds of passes, interleaved ...")
        for _ in range(args.passes):
            for c in stores:
                c.time_pass()
        for _ in range(200):
            for c in stores[:2]:
                c.time_jobstatus()
        for _ in range(5):  # 100,000 rows to list: a few are enough
            stores[2].time_jobstatus()
    finally:
        cases = [c.close() for c in stores]
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[scale] kept {tmp}", file=sys.stderr)
    base = cases[0]
    for c in cases:
        c["pass_ratio"] = c["pass_median_ms"] / base["pass_median_ms"]
        c["jobstatus_ratio"] = c["jobstatus_median_ms"] / base["jobstatus_median_ms"]
    print("\n== scale: SQLite store; a full reconcile pass measured in-process (Node.start(), then "
          f"Reconciler.run_pass(True), median of {args.passes}) and `jobstatus;` through Client.fetch (median of "
          "200, 5 for the SCHEDULED case), the stores measured in turns")
    print("(the archived case also holds each archived job's run in k2_job_runs: as many run records as rows)")
    print(tabulate([[f"{c['case']}: {c['archived_rows']:,} archived, {c['scheduled_rows']:,} SCHEDULED",
                     f"{c['db_mb']:.0f}", f"{c['pass_median_ms']:.3f}", f"{c['pass_ratio']:.2f}x",
                     f"{c['jobstatus_median_ms']:.3f}", f"{c['jobstatus_ratio']:.2f}x", f"{c['jobstatus_rows']:,}"]
                    for c in cases],
                   headers=["store", "file MB", "pass ms", "pass vs empty", "jobstatus ms", "jobstatus vs empty",
                            "rows shown"], disable_numparse=True))
    arch = cases[1]
    goals = [[f"pass with {arch['archived_rows']:,} archived rows <= 1.2x empty", f"{arch['pass_ratio']:.2f}x",
              verdict(arch["pass_ratio"] <= 1.2)],
             [f"jobstatus with {arch['archived_rows']:,} archived rows <= 1.2x empty",
              f"{arch['jobstatus_ratio']:.2f}x", verdict(arch["jobstatus_ratio"] <= 1.2)]]
    print_goals(args, goals)
    return {"cases": cases, "goals": {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}}


# ==================================================================================================
# shell
# ==================================================================================================


def cmd_shell(args, backend: Backend, facts: dict, findings: list) -> dict:
    if backend.name != "sqlite":
        raise BenchError("shell runs on SQLite only")
    exe = Path(sys.executable).with_name("fabricjobs")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fabricjobs"]
    with tempfile.TemporaryDirectory(prefix="fabricjobs-bench-shell-") as d:
        cfg = Path(d) / "config.ini"
        cfg.write_text(f"[store]\nSQLITE_PATH = {Path(d) / 'empty.db'}\n")
        run = cmd + ["--config", str(cfg), "shell", "-e", "jobstatus;"]
        subprocess.run(run, check=True, capture_output=True, cwd=d)  # creates the schema and the grammar cache
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            out = subprocess.run(run, check=True, capture_output=True, text=True, cwd=d)
            times.append(time.perf_counter() - t)
            if "(0 rows)" not in out.stdout:
                raise BenchError(f"unexpected shell output: {out.stdout!r}")
    r = {"runs": args.runs, "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
         "command": " ".join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd)) + " shell -e 'jobstatus;'"}
    print(f"\n== shell: cold start to first result of `fabricjobs shell -e 'jobstatus;'` on an empty SQLite store, "
          f"{args.runs} runs")
    print(tabulate([[f"{r['median_s'] * 1000:.0f}", f"{r['min_s'] * 1000:.0f}", f"{r['max_s'] * 1000:.0f}"]],
                   headers=["median ms", "min ms", "max ms"], disable_numparse=True))
    goals = [["cold start < 0.5 s", f"{r['median_s']:.3f} s", verdict(r["median_s"] < 0.5)]]
    print_goals(args, goals)
    r["goals"] = {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}
    return r


# ==================================================================================================
# memory
# ==================================================================================================


def _group_pids(pgid: int) -> list[int]:
    return sorted(pid for pid, fields in group_stats(pgid).items() if fields[0] != "Z")


def _rss_pss(pid: int) -> tuple[int, int | None]:
    """(RSS, PSS) in bytes: psutil when installed, else /proc."""
    try:
        import psutil  # type: ignore

        p = psutil.Process(pid)
        rss = p.memory_info().rss
        try:
            pss = p.memory_full_info().pss
        except (AttributeError, psutil.Error):
            pss = None
        return rss, pss
    except ImportError:
        pass
    rss = pss = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        return 0, None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss or 0, pss


def _memory_snapshot(pid: int) -> dict:
    node_rss, node_pss = _rss_pss(pid)
    pids = _group_pids(pid)
    rss = pss = 0
    for p in pids:
        r, s = _rss_pss(p)
        rss += r
        pss += s or 0
    return {"node_rss_mb": node_rss / 2**20, "node_pss_mb": (node_pss or 0) / 2**20, "group_processes": len(pids),
            "group_rss_mb": rss / 2**20, "group_pss_mb": pss / 2**20}


def cmd_memory(args, backend: Backend, facts: dict, findings: list) -> dict:
    rig = backend.rig({"jobs": {"K2JOBS_POOL_SIZE": max(25, args.jobs)}}, label="bench-memory", keep=args.keep)
    try:
        node = rig.start_node("node1")
        store = rig.client.store
        wait_for(lambda: any(r.name == "node1" and r.state == "running" and r.pid == node.pid for r in store.nodes()),
                 60, "the node's heartbeat row", check=rig.check_nodes)
        time.sleep(3.0)  # start-up done: a few reconcile passes and heartbeats, no job run yet
        idle = _memory_snapshot(node.pid)
        log = rig.tmp / "holds.jsonl"
        a = json.dumps({"log": str(log), "seconds": 120})
        rig.submit([f"startjob user_job name='Bench.hold' uid='m{i:03d}' args='{a}';" for i in range(args.jobs)])
        wait_for(lambda: len({r["uid"] for r in read_records(log)}) >= args.jobs, 60,
                 f"{args.jobs} jobs to run", check=rig.check_nodes)
        time.sleep(1.0)
        busy = _memory_snapshot(node.pid)
    finally:
        rig.close()
        findings.extend((f"memory/{name}", line) for name, line in rig.log_findings)
    tool = "psutil" if importlib.util.find_spec("psutil") else "/proc (VmRSS, smaps_rollup Pss)"
    print(f"\n== memory: one node ({backend.label()}, pool {max(25, args.jobs)}, jobs in worker processes); "
          f"measured with {tool}")
    print(tabulate([
        ["idle (after start-up, no job run)", f"{idle['node_rss_mb']:.1f}", f"{idle['node_pss_mb']:.1f}",
         idle["group_processes"], f"{idle['group_rss_mb']:.1f}", f"{idle['group_pss_mb']:.1f}"],
        [f"{args.jobs} running jobs", f"{busy['node_rss_mb']:.1f}", f"{busy['node_pss_mb']:.1f}",
         busy["group_processes"], f"{busy['group_rss_mb']:.1f}", f"{busy['group_pss_mb']:.1f}"],
    ], headers=["state", "node RSS MB", "node PSS MB", "processes (node+fork server+workers)", "all RSS MB",
                "all PSS MB"], disable_numparse=True))
    goals = [["idle node RSS < 80 MB", f"{idle['node_rss_mb']:.1f} MB", verdict(idle["node_rss_mb"] < 80)]]
    print_goals(args, goals)
    return {"idle": idle, "running": busy, "running_jobs": args.jobs, "tool": tool,
            "goals": {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}}


# ==================================================================================================
# main
# ==================================================================================================

def cmd_web_bench(args, backend: Backend, facts: dict, findings: list) -> dict:
    if backend.name != "sqlite":
        raise BenchError("web runs on SQLite only (rows are bulk-loaded with sqlite3)")
    from bench_web import cmd_web

    return cmd_web(args, _load_rows, print_goals, verdict, progress)


def cmd_isolation_bench(args, backend: Backend, facts: dict, findings: list) -> dict:
    if backend.name != "sqlite":
        raise BenchError("isolation runs on SQLite only (what it measures is the node's, not the store's)")
    from bench_isolation import cmd_isolation

    return cmd_isolation(args, backend, print_goals, verdict, progress)
def cmd_console_bench(args, backend: Backend, facts: dict, findings: list) -> dict:
    if backend.name not in ("sqlite", "cassandra-real"):
        raise BenchError("console runs on SQLite or a real Cassandra (--backend cassandra-real)")
    from bench_console import cmd_console

    return cmd_console(args, backend, print_goals, verdict, progress)


COMMANDS = {
    "throughput": cmd_throughput,
    "firelag": cmd_firelag,
    "failover": cmd_failover,
    "scale": cmd_scale,
    "shell": cmd_shell,
    "memory": cmd_memory,
    "web": cmd_web_bench,
    "isolation": cmd_isolation_bench,
    "console": cmd_console_bench,
}
BACKEND_AWARE = {"throughput", "firelag", "failover", "memory"}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--backend", choices=["sqlite", "cassandra", "cassandra-real"], default="sqlite",
                        help="store of the nodes (sqlite; cassandra = the CQL test server in this process; "
                             "cassandra-real = a real Apache Cassandra started by this run)")
    common.add_argument("--cassandra-nodes", type=int, default=1, metavar="N",
                        help="nodes of the real Cassandra cluster (cassandra-real; 1)")
    common.add_argument("--json", metavar="FILE", nargs="?", const=RESULTS_DIR,
                        help="also keep the figures as JSON: without FILE, one result file per benchmark under "
                             "bench/results/ (date, commit, machine, Python), which docs/benchmarks.md is made from "
                             "(scripts/gen_docs.py); with FILE, all of them in FILE")
    common.add_argument("--keep", action="store_true", help="keep the temporary directories (stores, node logs)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")

    def add_throughput(p):
        p.add_argument("--jobs", type=int, default=None, help="no-op jobs (5000; 1000 on cassandra-real)")
        p.add_argument("--pool", type=int, default=25, help="K2JOBS_POOL_SIZE of every node (25)")
        p.add_argument("--install-huey", action="store_true", help="pip install huey into this environment if missing")
        p.add_argument("--nodes", default="1,2,4", help="node counts to measure, comma-separated (1,2,4)")
        p.add_argument("--no-huey", action="store_true", help="skip the huey run (quicker, no ratio)")
        p.add_argument("--preload", action="store_true",
                       help="queue every job before any node (or huey's consumer) starts, then time the drain")
        p.add_argument("--rounds", type=int, default=3,
                       help="--preload: measure every system this many times, interleaved; report the medians (3)")
        p.add_argument("--raw-lwts", type=int, default=3000,
                       help="cassandra-real: LWTs per client process of the raw-rate run (3000)")
        p.add_argument("--lwt-concurrency", type=int, default=16,
                       help="cassandra-real: LWTs in flight per raw client process (16, as the store's CAS pool)")

    def add_firelag(p):
        p.add_argument("--jobs", type=int, default=200, help="recurring jobs (200), half interval, half cron")
        p.add_argument("--seconds", type=float, default=60.0, help="how long they run (60)")
        p.add_argument("--pool", type=int, default=25, help="K2JOBS_POOL_SIZE (25)")
        p.add_argument("--warm-seconds", type=float, default=FIRELAG_WARM,
                       help=f"run the same load this long first, unmeasured ({FIRELAG_WARM:g}; 0: a store just started)")

    def add_failover(p):
        p.add_argument("--jobs", type=int, default=30, help="long jobs (30)")
        p.add_argument("--pool", type=int, default=25, help="K2JOBS_POOL_SIZE (25)")
        p.add_argument("--heartbeat-ms", type=int, default=200, help="FABRIC_HEARTBEAT_INTERVAL_MS (200)")
        p.add_argument("--miss", type=int, default=5, help="FABRIC_HEARTBEAT_MISS (5)")

    def add_scale(p):
        p.add_argument("--archived", type=int, default=1_000_000, help="archived rows (1,000,000)")
        p.add_argument("--scheduled", type=int, default=100_000, help="far-future SCHEDULED rows (100,000)")
        p.add_argument("--passes", type=int, default=1000, help="reconcile passes timed per store (1000)")

    add_throughput(sub.add_parser("throughput", parents=[common], help="no-op jobs/s vs huey and the engine limit"))
    add_firelag(sub.add_parser("firelag", parents=[common], help="delay from due time to start of recurring jobs"))
    add_failover(sub.add_parser("failover", parents=[common], help="re-run delay after a node SIGKILL"))
    add_scale(sub.add_parser("scale", parents=[common], help="reconcile pass and jobstatus with a big history"))
    p = sub.add_parser("shell", parents=[common], help="shell cold start")
    p.add_argument("--runs", type=int, default=10, help="runs (10)")
    p = sub.add_parser("memory", parents=[common], help="node RSS idle and with running jobs")
    p.add_argument("--jobs", type=int, default=25, help="running jobs (25)")
    p = sub.add_parser("web", parents=[common], help="the HTTP API's job list with a big history")
    p.add_argument("--archived", type=int, default=100_000, help="archived jobs (100,000)")
    p.add_argument("--live", type=int, default=1_000, help="live jobs (1,000)")
    p.add_argument("--requests", type=int, default=1000, help="list requests timed per store (1000)")
    p.add_argument("--watch", type=float, default=30.0, help="seconds the live view is watched per browser count (30)")
    sub.add_parser("isolation", parents=[common], help="ending a run with 50 daemons; 1 GiB of printed output")
    p = sub.add_parser("console", parents=[common], help="the web console's jobs table and history with a big cluster")
    p.add_argument("--live", type=int, default=10_000, help="live jobs (10,000)")
    p.add_argument("--archived", type=int, default=100_000, help="archived jobs over three days (100,000)")
    p.add_argument("--requests", type=int, default=10, help="fresh reads of the jobs table's first page timed (10)")
    p.add_argument("--watch", type=float, default=30.0, help="seconds a browser watches, for the CPU figure (30)")
    p = sub.add_parser("all", parents=[common], help="every sub-command with its defaults")
    p.add_argument("--install-huey", action="store_true", help="pip install huey into this environment if missing")
    return ap


def defaults_for(name: str, parent: argparse.Namespace) -> argparse.Namespace:
    """The default options of sub-command ``name`` (for `all`), with the common ones of ``parent``."""
    ap = build_parser()
    ns = ap.parse_args([name])
    ns.backend, ns.json, ns.keep, ns.in_all = parent.backend, None, parent.keep, True
    ns.cassandra_nodes = parent.cassandra_nodes
    if hasattr(parent, "install_huey"):
        ns.install_huey = parent.install_huey
    return ns


def print_cassandra_findings(findings: list[tuple[str, str]], limit: int = 20) -> None:
    """The WARN / ERROR lines the Cassandra nodes logged (system.log) after their start-up."""
    if not findings:
        print("Cassandra system.log: no WARN / ERROR lines after start-up")
        return
    seen: dict[str, int] = {}
    for _, line in findings:  # a line without its time stamp, as a kind
        kind = re.sub(r"\d{4}-\d\d-\d\d[ T][\d:,.]+", "", line)
        kind = re.sub(r"\b\d+\b", "N", kind)
        seen[kind] = seen.get(kind, 0) + 1
    print(f"Cassandra system.log: {len(findings)} WARN / ERROR lines after start-up ({len(seen)} kinds); first ones:")
    shown = set()
    for source, line in findings:
        kind = re.sub(r"\b\d+\b", "N", re.sub(r"\d{4}-\d\d-\d\d[ T][\d:,.]+", "", line))
        if kind in shown:
            continue
        shown.add(kind)
        print(f"  [{source}] ({seen[kind]}x) {line[:400]}")
        if len(shown) >= limit:
            break


def compiled_checkout() -> None:
    """Byte-compile fabricjobs (as scripts/_venv.sh does) and let the nodes write what they
    import: with PYTHONDONTWRITEBYTECODE set, as on some machines, every node started
    compiled each module changed since the caches were last written, at each start, which an
    installed package never does. Four nodes start beside the first one's drain, so that cost
    was measured too, and two checkouts compared with each other differed by it."""
    import compileall

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(ROOT / "fabricjobs"), quiet=1, workers=0)


def main() -> int:
    args = build_parser().parse_args()
    install_signal_handlers()
    compiled_checkout()
    facts = machine_facts()
    findings: list[tuple[str, str]] = []
    backend = make_backend(args)
    names = list(COMMANDS) if args.command == "all" else [args.command]
    result: dict = {"machine": facts, "backend": args.backend}
    failed = []
    t0 = time.time()
    try:
        for name in names:
            ns = defaults_for(name, args) if args.command == "all" else args
            if args.command == "all" and args.backend != "sqlite" and name not in BACKEND_AWARE:
                print(f"\n== {name}: skipped (SQLite only)")
                continue
            try:
                result[name] = COMMANDS[name](ns, backend, facts, findings)
            except (BenchError, RigError, FabricJobsError) as exc:
                print(f"\n== {name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
                result[name] = {"error": str(exc)}
                failed.append(name)
    except KeyboardInterrupt:
        print("bench: interrupted; processes killed", file=sys.stderr)
        return 130
    finally:
        backend.close()
    print()
    if backend.real:
        print_cassandra_findings(backend.findings)
        if backend.stop_findings:
            print(f"(and {backend.stop_findings} WARN / ERROR lines while the cluster was stopped at the end, "
                  "not shown: e.g. Reference-Reaper LEAK DETECTED on _paxos_repair_state files)")
    if args.command == "all":
        rows = []
        for name in names:
            for goal, g in (result.get(name) or {}).get("goals", {}).items():
                rows.append([name, goal, g["measured"], verdict(g["met"])])
        print("== goals")
        print(tabulate(rows, headers=["benchmark", "goal", "measured", ""], disable_numparse=True))
        print(f"all benchmarks took {time.time() - t0:.0f} s")
    print(facts_line(facts))
    print_log_findings(findings)
    result["node_log_findings"] = [f"[{n}] {l}" for n, l in findings]
    if args.json == RESULTS_DIR:
        for name in names:
            if name in result and name not in failed:
                backend = args.backend + (f", {args.cassandra_nodes} nodes"
                                          if args.backend == "cassandra-real" and args.cassandra_nodes > 1 else "")
                path = write_result(name, backend, result[name], facts)
                print(f"figures written to {path.relative_to(ROOT)}")
    elif args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"figures written to {args.json}")
    return 1 if failed else 0


def write_result(name: str, backend: str, figures: dict, facts: dict) -> Path:
    """One benchmark's figures as a result file under bench/results/: what docs/benchmarks.md
    shows (the latest file of each benchmark and backend), and the history of the others."""
    now = datetime.now(timezone.utc)
    commit = (facts.get("commit") or "uncommitted").split("+")[0]
    benchmark = name + (" --preload" if figures.get("preload") else "")
    record = {
        "benchmark": benchmark,
        "backend": backend,
        "date": now.strftime("%Y-%m-%d"),
        "time": now.isoformat(timespec="seconds"),
        "commit": facts.get("commit"),
        "python": facts.get("python"),
        "machine": {k: v for k, v in facts.items() if k not in ("python", "commit")},
        "command": "scripts/bench.py " + " ".join(sys.argv[1:]),
        "goals": [{"goal": goal, "measured": g["measured"], "met": g["met"]}
                  for goal, g in (figures.get("goals") or {}).items()],
        "figures": {k: v for k, v in figures.items() if k != "goals"},
    }
    slug = re.sub(r"[^a-z0-9]+", "-", f"{benchmark} {backend}".lower()).strip("-")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{record['date']}-{commit}-{slug}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
