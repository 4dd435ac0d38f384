#!/usr/bin/env python3
"""Statements per job life cycle on the Cassandra backend, and claims/s through the CQL test server.

Everything runs against an in-process CQL test server (testkit/cqlserver: a TEST DOUBLE, not
Cassandra; its speed says nothing about a real cluster). Statements are counted on the server,
per statement text, and attributed to the process that sent them.

1. Idle node      a real node process (`fabricjobs node`) on an empty keyspace: its background
                  traffic (heartbeats, reconcile polls, scheduler refreshes) per second.
2. One-time job   N STARTJOBs through fabricjobs.client.Client (one fetch each, from this
                  process, as an application on the node's host would send them), the node
                  claims and runs them (a no-op USER_JOB), writes PROCESSED + archived. The
                  window ends when every row is PROCESSED and the index is settled.
3. Recurring fire M jobs with EXEC_INTERVAL '00:00:01' on the same node; a window of about W
                  seconds between two quiet points (every row SCHEDULED, index settled). A
                  fire = one claim = one run; fires are counted by the rows' epochs.
4. Claims/s       K WAITING rows claimed through store.cas / store.cas_many from 1 and 4
                  processes (each its own share, no contention), like scripts/bench_store.py.
5. Arithmetic     what the LWT count means on a real cluster (Paxos v1: 4 round trips per LWT
                  write, v2: 2; a plain statement: 1). Arithmetic, not measurement.

Per-job and per-fire figures are printed raw (everything the server saw in the window, divided
by the jobs or fires) and net (minus the idle node's background rate x the window's length).
The net figure is the cost the jobs add; the statements that belong to one job's own rows
(LWTs, reads of k2_jobs, index and archive writes) are the same in both up to rounding.

--real: phases 1-3 on a real Apache Cassandra 5.0 instead (a 1-node cluster this run starts
                  in a temporary directory and stops; testkit/realcassandra), counted client side
                  by the stores themselves: the StoreStats of the node process's CassandraStore
                  and of this process's (the STARTJOB client). The node runs as this script with
                  --run-node: fabricjobs.cli.main(["node", ...]) unchanged, plus a thread that
                  serves its StoreStats and a per-statement tally (taken in the same
                  _CountingSession._count call) on a loopback port; its LWT count is checked
                  against its Prometheus fabricjobs_store_lwt_attempts_total (the metrics export
                  no writes / reads). No claims/s phase (see bench.py throughput --backend
                  cassandra-real). Cassandra's WARN / ERROR log lines after start-up are printed.

usage: .venv/bin/python scripts/bench_cassandra.py [--jobs N] [--recurring M] [--window W]
           [--idle SEC] [--rows K] [--batch B] [--json FILE] [--real [--keep]]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the test kit (testkit/) and fabricjobs of this checkout
    sys.path.insert(0, str(ROOT))

from fabricjobs.model import Job, JobKey, Status  # noqa: E402
from testkit import rig  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
KINDS = ("lwt", "write", "read", "serial_read", "system", "other")
KIND_HEAD = {"lwt": "LWTs", "write": "plain writes", "read": "reads", "serial_read": "SERIAL reads",
             "system": "system queries"}
_TABLE_RE = re.compile(r"\b(?:FROM|INTO)\s+([\w.\"]+)|^\s*UPDATE\s+([\w.\"]+)", re.I)
NOTE = ("The CQL test server is a test double (one in-memory Python 'node', in this process): its "
        "speed says nothing about a real cluster. The statement counts are the product's own and "
        "hold for any cluster.")


# -- counting statements on the server ------------------------------------------------------------

def _own_tcp_ports() -> set[int]:
    """Local ports of this process's TCP sockets (Linux /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for name in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


class Recorder:
    """Counts every statement the server executes by (origin, kind, label).

    origin: 'bench' (a connection from this process: the Client's STARTJOBs) or 'node' (any
    other process: the node). kind: as the server's own stats classify it. label: verb + table.
    """

    def __init__(self, server) -> None:
        self.server = server
        self._lock = threading.Lock()
        self._c: Counter = Counter()

    def install(self) -> None:
        from testkit.cqlserver.engine import BatchPlan, SERIAL_CLS
        from testkit.cqlserver.server import _Connection

        original = _Connection.run_statement
        rec = self

        def run_statement(conn, stream, plan, text, opts, fn):
            origin = getattr(conn, "_bench_origin", None)
            if origin is None:
                try:
                    peer = conn.sock.getpeername()[1]
                    origin = "bench" if peer in _own_tcp_ports() else "node"
                except OSError:
                    origin = "node"
                conn._bench_origin = origin
            verb = (text.split(None, 1) or ["?"])[0].upper()
            m = _TABLE_RE.search(text)
            table = (m.group(1) or m.group(2)).split(".")[-1].strip('"') if m else "?"
            if plan.is_system:
                kind, label = "system", "system tables"
            elif isinstance(plan, BatchPlan):
                kind, label = ("lwt" if plan.kind == "lwt" else "write"), f"BATCH {table}"
            elif plan.kind == "read":
                serial = opts.consistency in SERIAL_CLS
                kind, label = ("serial_read" if serial else "read"), f"SELECT {table}" + (" @SERIAL" if serial else "")
            elif plan.kind == "lwt":
                kind, label = "lwt", f"{verb} {table} IF ..."
            elif plan.kind == "write":
                kind, label = "write", f"{verb} {table}"
            else:
                kind, label = "other", f"{verb} {table}"
            with rec._lock:
                rec._c[(origin, kind, label)] += 1
            return original(conn, stream, plan, text, opts, fn)

        _Connection.run_statement = run_statement

    def snapshot(self) -> Counter:
        with self._lock:
            return Counter(self._c)


def diff(after: Counter, before: Counter) -> Counter:
    out = Counter()
    for k in set(after) | set(before):
        v = after[k] - before[k]
        if v:
            out[k] = v
    return out


def by_kind(c: Counter, origin: str | None = None) -> dict[str, float]:
    out = {k: 0.0 for k in KINDS}
    for (o, kind, _label), n in c.items():
        if origin is None or o == origin:
            out[kind] += n
    return out


# -- where the statements go and how they are counted -----------------------------------------------

class Target:
    """The CQL server of a run: its config section, uncounted reads of its data (for waiting), the
    statement counts so far, and how the node is started."""

    def cassandra_section(self, keyspace: str) -> str:
        raise NotImplementedError

    def peek(self, keyspace: str, cql: str) -> list:
        raise NotImplementedError

    def snapshot(self) -> Counter:
        raise NotImplementedError

    def node_command(self, cfg: Path, name: str, tmp: Path) -> list[str]:
        exe = Path(sys.executable).parent / "fabricjobs"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fabricjobs"]
        return cmd + ["--config", str(cfg), "node", "--name", name, "--log-level", "warning"]

    def extra_sections(self, tmp: Path) -> str:
        return ""


class TestServerTarget(Target):
    """The CQL test server in this process; statements counted on the server (Recorder)."""

    def __init__(self, server, rec: Recorder) -> None:
        self.server, self.rec = server, rec

    def cassandra_section(self, keyspace: str) -> str:
        return (f"[cassandra]\nHOSTS = {self.server.host}\nPORT = {self.server.port}\nKEYSPACE = {keyspace}\n"
                "PROTOCOL_VERSION = 4\n")

    def peek(self, keyspace: str, cql: str) -> list:
        """Direct, uncounted reads of the server's data (not through CQL)."""
        from testkit.cqlserver.engine import QueryOptions

        e = self.server.engine
        return e.execute(e.plan(cql, keyspace), QueryOptions()).rows

    def snapshot(self) -> Counter:
        return self.rec.snapshot()


# A real Cassandra (--real): the store counts what it sends (StoreStats, client side). The node
# runs as `scripts/bench_cassandra.py --run-node`: fabricjobs.cli.main(["node", ...]) itself, in a
# process that also tallies each statement by kind and table (the same _count call that feeds
# StoreStats) and answers snapshots of both on a loopback port.

STATS_FIELDS = ("lwt_attempts", "writes", "reads", "serial_reads", "contention_retries", "unknown_outcomes",
                "index_repairs")


class Tally:
    """Every statement the CassandraStores of this process send, by (origin, kind, label), and
    the sum of their StoreStats, as one Counter: statement keys (origin, kind, label) and
    (origin, "stats", field) keys for the store's own counters."""

    def __init__(self, origin: str) -> None:
        import fabricjobs.store.cassandra as fc

        self.origin = origin
        self._lock = threading.Lock()
        self._c: Counter = Counter()
        self._stats: dict[int, object] = {}
        original = fc._CountingSession._count
        tally = self

        def _count(session, stmt, profile):
            original(session, stmt, profile)
            kind, label = classify(stmt, profile)
            with tally._lock:
                tally._stats.setdefault(id(session.stats), session.stats)
                tally._c[(tally.origin, kind, label)] += 1

        fc._CountingSession._count = _count

    def snapshot(self) -> Counter:
        with self._lock:
            out = Counter(self._c)
            for st in self._stats.values():
                for f in STATS_FIELDS:
                    out[(self.origin, "stats", f)] += getattr(st, f)
        return out


def classify(stmt, profile) -> tuple[str, str]:
    """(kind, label) of a statement the store sends, by the rules of _CountingSession._count."""
    text = getattr(stmt, "query_string", None) or getattr(getattr(stmt, "prepared_statement", None),
                                                          "query_string", "") or ""
    verb = (text.split(None, 1) or ["?"])[0].upper()
    m = _TABLE_RE.search(text)
    table = (m.group(1) or m.group(2)).split(".")[-1].strip('"') if m else "?"
    if profile == "lwt":
        return "lwt", f"{verb} {table} IF ..."
    if verb == "SELECT":
        if table in ("local", "peers", "peers_v2") or text.count("system."):
            return "system", "system tables"
        return ("serial_read", f"SELECT {table} @SERIAL") if profile == "serial" else ("read", f"SELECT {table}")
    return ("write", f"{verb} {table}") if text else ("other", "?")


def run_node(cfg: str, name: str, port_file: str) -> int:
    """The node of --real: `fabricjobs node` in this process, with the tally served on a port."""
    import socket

    tally = Tally("node")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def serve():
        while True:
            conn, _ = sock.accept()
            with conn:
                conn.sendall(json.dumps([[*k, v] for k, v in tally.snapshot().items()]).encode())

    threading.Thread(target=serve, daemon=True, name="bench-tally").start()
    tmp = port_file + ".tmp"
    Path(tmp).write_text(str(sock.getsockname()[1]))
    os.replace(tmp, port_file)
    from fabricjobs.cli import main as cli_main

    return cli_main(["--config", cfg, "node", "--name", name, "--log-level", "warning"])


class RealTarget(Target):
    """A real Apache Cassandra started by this run (1 node, testkit/realcassandra); the counts are
    the stores' own: the node's (its tally port, and its Prometheus metrics for a cross-check)
    and this process's client."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.local = Tally("bench")
        self._sessions: dict = {}
        self._driver = None
        self.port_files: list[Path] = []
        self.metrics_port: int | None = None

    def cassandra_section(self, keyspace: str) -> str:
        c = self.cluster
        return (f"[cassandra]\nHOSTS = {','.join(c.hosts)}\nPORT = {c.port}\nKEYSPACE = {keyspace}\n"
                "REPLICATION = SimpleStrategy:1\nCONSISTENCY = QUORUM\nSERIAL_CONSISTENCY = SERIAL\n"
                "PROTOCOL_VERSION = 5\nLOCAL_DC = datacenter1\n\n")

    def extra_sections(self, tmp: Path) -> str:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.metrics_port = s.getsockname()[1]
        return f"[metrics]\nPORT = {self.metrics_port}\n"

    def node_command(self, cfg: Path, name: str, tmp: Path) -> list[str]:
        port_file = tmp / f"{name}.tally-port"
        self.port_files.append(port_file)
        return [sys.executable, str(Path(__file__).resolve()), "--run-node", str(cfg), name, str(port_file)]

    def peek(self, keyspace: str, cql: str) -> list:
        """Reads of the data through a driver session of this script's own (not a store: not
        counted), at ONE (1 node)."""
        if self._driver is None:
            from cassandra.cluster import Cluster

            self._driver = Cluster(self.cluster.hosts, port=self.cluster.port, protocol_version=5)
        if keyspace not in self._sessions:
            self._sessions[keyspace] = self._driver.connect(keyspace)
        return list(self._sessions[keyspace].execute(cql))

    def snapshot(self) -> Counter:
        import socket
        import urllib.request

        out = self.local.snapshot()
        for pf in self.port_files:
            if not pf.exists():
                continue
            with socket.create_connection(("127.0.0.1", int(pf.read_text())), timeout=10) as conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            for *k, v in json.loads(data):
                out[tuple(k)] += v
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
                    for line in r.read().decode().splitlines():
                        if line.startswith("fabricjobs_store_lwt_attempts_total "):
                            out[("node", "stats", "prometheus_lwt_attempts")] += float(line.split()[1])
            except OSError:
                pass
        return out

    def close(self) -> None:
        if self._driver is not None:
            self._driver.shutdown()


def split_stats(c: Counter) -> tuple[Counter, Counter]:
    """(statement counts, store counters) of a Counter from RealTarget.snapshot."""
    return (Counter({k: v for k, v in c.items() if k[1] != "stats"}),
            Counter({k: v for k, v in c.items() if k[1] == "stats"}))


def write_setup(tmp: Path, target: Target, keyspace: str) -> Path:
    (tmp / "jobs").mkdir()
    (tmp / "jobs" / "Bench.py").write_text('"""Jobs for scripts/bench_cassandra.py."""\n\n\ndef noop():\n    return None\n')
    cfg = tmp / "config.ini"
    cfg.write_text(
        "[node]\nDC = DC1\n\n"
        f"[jobs]\nUSER_JOBS_DIR = {tmp / 'jobs'}\n\n"
        "[store]\nBACKEND = cassandra\n\n"
        + target.cassandra_section(keyspace) + target.extra_sections(tmp)
    )
    return cfg


def start_node(target: Target, cfg: Path, tmp: Path, name: str) -> subprocess.Popen:
    log = open(tmp / f"{name}.log", "w")
    env = dict(os.environ, PYTHONPATH=rig.pythonpath_with(ROOT))
    return subprocess.Popen(target.node_command(cfg, name, tmp), stdout=log, stderr=subprocess.STDOUT,
                            cwd=str(tmp), env=env)


def wait_for(pred, timeout: float, what: str, node: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """The rig's wait (testkit/rig.py), ending the benchmark if the node exits."""
    def node_alive() -> None:
        if node is not None and node.poll() is not None:
            raise SystemExit(f"the node exited ({node.returncode}) while waiting for {what}:\n"
                             + (log.read_text() if log else ""))

    try:
        rig.wait_for(pred, timeout, what, check=node_alive)
    except rig.RigTimeout:
        raise SystemExit(f"timed out waiting for {what}" + (f"; node log:\n{log.read_text()}" if log else "")) from None


def node_phases(args, target: Target) -> dict:
    from fabricjobs.client import Client

    keyspace = "bench_" + uuid.uuid4().hex[:10]
    tmp = Path(tempfile.mkdtemp(prefix="bench_cassandra-"))
    cfg = write_setup(tmp, target, keyspace)
    client = Client.from_config(cfg)  # creates the keyspace and schema
    node = start_node(target, cfg, tmp, "n1")

    def peek(cql: str) -> list:
        return target.peek(keyspace, cql)

    log = tmp / "n1.log"
    try:
        def beats() -> int:
            rows = peek("SELECT name, beat FROM nodes")
            return max((r[1] or 0 for r in rows if r[0] == "n1"), default=-1)

        wait_for(lambda: beats() >= 1, 60, "node n1 to start", node, log)
        time.sleep(args.warmup)

        # 1. idle background
        b = target.snapshot()
        t = time.monotonic()
        time.sleep(args.idle)
        idle_sec = time.monotonic() - t
        idle = diff(target.snapshot(), b)
        idle_rate = {k: v / idle_sec for k, v in idle.items()}

        def settled_once(n: int) -> bool:
            jobs = peek("SELECT status, archived FROM k2_jobs")
            failed = [r for r in jobs if r[0] == "FAILED"]
            if failed:
                raise SystemExit(f"{len(failed)} jobs FAILED; node log:\n{log.read_text()}")
            done = sum(1 for r in jobs if r[0] == "PROCESSED" and r[1])
            return (done == n and not peek("SELECT bucket FROM k2_jobs_index")
                    and len(peek("SELECT uid FROM k2_jobs_archived")) == n)

        # 2. one-time jobs
        b = target.snapshot()
        t = time.monotonic()
        for i in range(args.jobs):
            client.fetch(f"startjob user_job name='Bench.noop' uid='once-{i:05d}';")
        submit_sec = time.monotonic() - t
        wait_for(lambda: settled_once(args.jobs), 300, "the one-time jobs to be PROCESSED", node, log)
        once_sec = time.monotonic() - t
        once = diff(target.snapshot(), b)

        # 3. recurring fires
        for i in range(args.recurring):
            client.fetch(f"startjob user_job name='Bench.noop' uid='every-{i:03d}' exec_interval='00:00:01';")

        def quiet_recurring() -> int | None:
            """Sum of the recurring rows' epochs if all are SCHEDULED and the index holds exactly
            their SCHEDULED entries (no fire, claim or outcome under way); else None."""
            rows = [r for r in peek("SELECT uid, status, epoch FROM k2_jobs") if r[0].startswith("every-")]
            if len(rows) != args.recurring or any(r[1] != "SCHEDULED" for r in rows):
                return None
            entries = peek("SELECT bucket, uid FROM k2_jobs_index")
            if len(entries) != args.recurring or any(not e[0].startswith("SCHEDULED|") for e in entries):
                return None
            return sum(r[2] for r in rows)

        wait_for(lambda: (quiet_recurring() or 0) >= 2 * args.recurring, 60, "every recurring job to fire twice", node, log)
        time.sleep(0.3)
        marks = []
        for when in ("start", "end"):
            if when == "end":
                time.sleep(args.window)
            deadline = time.monotonic() + 30
            while (epochs := quiet_recurring()) is None:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise SystemExit(f"no quiet moment between fires; node log:\n{log.read_text()}")
                time.sleep(0.005)
            marks.append((target.snapshot(), epochs, time.monotonic()))
        fires = marks[1][1] - marks[0][1]
        rec_sec = marks[1][2] - marks[0][2]
        recurring = diff(marks[1][0], marks[0][0])
    finally:
        client.close()
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
    warnings = [line for line in log.read_text().splitlines() if line.strip()]
    return {
        "keyspace": keyspace, "tmp": str(tmp), "node_log_lines": warnings[-20:],
        "idle": {"seconds": idle_sec, "counts": idle, "rate": idle_rate},
        "once": {"jobs": args.jobs, "seconds": once_sec, "submit_seconds": submit_sec, "counts": once},
        "recurring": {"jobs": args.recurring, "fires": fires, "seconds": rec_sec, "counts": recurring},
    }


# -- claims/s ----------------------------------------------------------------------------------------

def _open(host, port, keyspace):
    from fabricjobs.store.cassandra import CassandraStore

    return CassandraStore(hosts=[host], port=port, keyspace=keyspace, protocol_version=4)


def _key(i: int) -> JobKey:
    return JobKey("USER_JOB", "Bench.noop", f"u{i:07d}")


def claim_worker(host, port, keyspace, rows, procs, me, batch, ready, start, out):
    store = _open(host, port, keyspace)
    try:
        jobs = [store.get(_key(i)) for i in range(me, rows, procs)]
        ready.put(me)
        start.wait()
        t = time.perf_counter()
        ok = 0
        if batch <= 1:
            for j in jobs:
                ok += store.cas(j, j.replace(status=Status.IN_PROCESS, worker_id=f"p{me}", epoch=j.epoch + 1)).applied
        else:
            for i in range(0, len(jobs), batch):
                pairs = [(j, j.replace(status=Status.IN_PROCESS, worker_id=f"p{me}", epoch=j.epoch + 1))
                         for j in jobs[i:i + batch]]
                ok += sum(r.applied for r in store.cas_many(pairs))
        out.put((ok, time.perf_counter() - t))
    finally:
        store.close()


def claims_run(server, rows: int, procs: int, batch: int) -> dict:
    keyspace = "claims_" + uuid.uuid4().hex[:10]
    seed = _open(server.host, server.port, keyspace)
    try:
        with ThreadPoolExecutor(16) as pool:
            res = list(pool.map(lambda i: seed.insert(Job(_key(i), Status.WAITING, T0, next_run=T0)), range(rows)))
        assert all(r.applied for r in res)
    finally:
        seed.close()
    ctx = mp.get_context("spawn")  # this process runs the server's threads: do not fork it
    ready, start, out = ctx.Queue(), ctx.Barrier(procs + 1), ctx.Queue()
    ps = [ctx.Process(target=claim_worker, args=(server.host, server.port, keyspace, rows, procs, i, batch, ready, start, out))
          for i in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.get(timeout=300)
    before = server.stats.snapshot()
    start.wait()
    results = [out.get(timeout=600) for _ in ps]
    after = server.stats.snapshot()
    for p in ps:
        p.join()
    claimed = sum(r[0] for r in results)
    if claimed != rows:
        raise SystemExit(f"claims: {claimed} of {rows} applied")
    d = {k: after[k] - before[k] for k in after}
    return {"procs": procs, "batch": batch, "rows": rows, "rate": rows / max(r[1] for r in results),
            "per_claim": {k: d[k] / rows for k in ("lwts", "writes", "reads", "serial_reads")}}


# -- printing ----------------------------------------------------------------------------------------

def per_unit(counts: Counter, seconds: float, idle_rate: dict, units: int) -> dict:
    """{(origin, kind, label): (raw per unit, net per unit)}"""
    keys = set(counts) | {k for k, v in idle_rate.items() if v}
    return {k: (counts.get(k, 0) / units, (counts.get(k, 0) - idle_rate.get(k, 0.0) * seconds) / units) for k in keys}


def kind_totals(pu: dict, origin: str | None = None) -> dict:
    out = {k: [0.0, 0.0] for k in KINDS}
    for (o, kind, _l), (raw, net) in pu.items():
        if origin is None or o == origin:
            out[kind][0] += raw
            out[kind][1] += net
    return out


def fmt(x: float) -> str:
    return f"{x:.2f}" if abs(x) >= 0.005 else "0"


def breakdown_table(pu: dict) -> list:
    rows = []
    for (origin, kind, label), (raw, net) in sorted(pu.items(), key=lambda kv: (KINDS.index(kv[0][1]), kv[0][0], kv[0][2])):
        if kind in ("other",) or (abs(raw) < 0.005 and abs(net) < 0.005):
            continue
        rows.append([KIND_HEAD.get(kind, kind), "client (STARTJOB)" if origin == "bench" else "node", label, fmt(raw), fmt(net)])
    return rows


# Statements on one job's own path: its LWTs, its reads of k2_jobs, and its plain writes (index
# entries, archive index, run record...). Not on it: the index scans that find work, heartbeats,
# nodes and kill_requests reads (polling and coordination, shared by every job of a pass).
NOT_PATH_TABLES = ("nodes", "kill_requests")


def path_counts(pu: dict) -> dict:
    out = {"lwt": 0.0, "plain": 0.0}
    for (_o, kind, label), (_raw, net) in pu.items():
        verb, _, rest = label.partition(" ")
        table = rest.split(" ")[0]
        if kind == "lwt" and table == "k2_jobs":
            out["lwt"] += net
        elif kind == "write" and table not in NOT_PATH_TABLES:
            out["plain"] += net
        elif kind in ("read", "serial_read") and table == "k2_jobs":
            out["plain"] += net
    return {k: round(v, 2) for k, v in out.items()}


NOTE_REAL = ("Counted on a real Apache Cassandra {version} (1 node on this host, started by this run; keyspace "
             "SimpleStrategy:1, QUORUM / SERIAL, protocol v5, Paxos v2) by the stores themselves, client side: "
             "each CassandraStore's StoreStats (what _CountingSession sends) in the node process and in this "
             "process (the STARTJOB client), with a per-statement tally from the same calls.")


def real_phases(args) -> tuple[dict, dict, list[str], str]:
    """node_phases on a 1-node real Cassandra started (and stopped) here. Also returns the store
    counters per window and the WARN / ERROR lines Cassandra logged after its start-up."""
    from testkit.realcassandra import CassandraCluster, available

    why = available()
    if why is not None:
        raise SystemExit(f"--real: cannot start a real Cassandra: {why}")
    cdir = Path(tempfile.mkdtemp(prefix="bench_cassandra-real-"))
    print(f"starting a 1-node Cassandra in {cdir} ...", file=sys.stderr, flush=True)
    cluster = CassandraCluster(cdir, nodes=1, paxos_variant="v2", heap="768m")
    target = None
    offset = 0
    try:
        cluster.start()
        offset = cluster.log_path(0).stat().st_size
        target = RealTarget(cluster)
        res = node_phases(args, target)
    finally:
        if target is not None:
            target.close()
        cluster.stop()
        findings = []
        try:
            with open(cluster.log_path(0), errors="replace") as f:
                f.seek(offset)
                lines = f.read().splitlines()
            for i, line in enumerate(lines):  # each with an ERROR's exception (the line after it)
                if re.match(r"(WARN|ERROR)\b", line):
                    nxt = lines[i + 1] if i + 1 < len(lines) else ""
                    findings.append(line + (f" | {nxt.strip()}" if nxt.strip() and not re.match(
                        r"(TRACE|DEBUG|INFO|WARN|ERROR)\b", nxt) else ""))
        except OSError:
            pass
        if not args.keep:
            import shutil

            shutil.rmtree(cdir, ignore_errors=True)
    stats = {}
    for what in ("idle", "once", "recurring"):
        counts, st = split_stats(res[what]["counts"])
        res[what]["counts"] = counts
        stats[what] = st
    res["idle"]["rate"] = {k: v for k, v in res["idle"]["rate"].items() if k[1] != "stats"}
    stats["idle_rate"] = Counter({k: v / res["idle"]["seconds"] for k, v in stats["idle"].items()})
    return res, stats, findings, cluster.version


def print_store_stats(stats: dict, once: dict, recur: dict, idle: dict) -> None:
    """The store's own counters (StoreStats) per one-time job and per fire, raw and net, split by
    process; and whether the per-statement tally and the node's Prometheus metric agree with them."""
    from tabulate import tabulate

    rows = []
    for what, units, seconds in (("once", once["jobs"], once["seconds"]), ("recurring", max(recur["fires"], 1),
                                                                            recur["seconds"])):
        st = stats[what]
        for origin, who in (("bench", "client (STARTJOB)"), ("node", "node (claim, run, PROCESSED / fire)")):
            if what == "recurring" and origin == "bench":
                continue
            vals = []
            for f in ("lwt_attempts", "writes", "reads", "serial_reads"):
                raw = st[(origin, "stats", f)]
                net = raw - stats["idle_rate"][(origin, "stats", f)] * seconds
                if f == "reads":  # StoreStats.reads includes the SERIAL ones
                    raw -= st[(origin, "stats", "serial_reads")]
                    net -= st[(origin, "stats", "serial_reads")] - stats["idle_rate"][(origin, "stats", "serial_reads")] * seconds
                vals.append(f"{fmt(raw / units)} ({fmt(net / units)})")
            other = "/".join(f"{st[(origin, 'stats', f)]:.0f}" for f in ("contention_retries", "unknown_outcomes",
                                                                          "index_repairs"))
            rows.append(["per one-time job" if what == "once" else "per recurring fire", who, *vals, other])
    print()
    print("The store's own counters (StoreStats, client side), raw (net of the idle node's rate):")
    print(tabulate(rows, headers=["", "process", "LWTs", "plain writes", "reads (not SERIAL)", "SERIAL reads",
                                  "retries/unknown/repairs (total)"], tablefmt="psql", disable_numparse=True))
    checks = []
    for what in ("idle", "once", "recurring"):
        st, counts = stats[what], (once if what == "once" else recur if what == "recurring" else idle)["counts"]
        by = by_kind(counts)
        tally_lwt = by["lwt"]
        st_lwt = st[("bench", "stats", "lwt_attempts")] + st[("node", "stats", "lwt_attempts")]
        prom = st[("node", "stats", "prometheus_lwt_attempts")]
        node_lwt = st[("node", "stats", "lwt_attempts")]
        checks.append(f"{what}: tally LWTs {tally_lwt:.0f} vs StoreStats {st_lwt:.0f}; node LWTs StoreStats "
                      f"{node_lwt:.0f} vs Prometheus fabricjobs_store_lwt_attempts_total {prom:.0f}")
    print("cross-checks (window totals): " + "; ".join(checks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200, help="one-time jobs (default 200)")
    ap.add_argument("--recurring", type=int, default=20, help="recurring jobs, EXEC_INTERVAL '00:00:01' (default 20)")
    ap.add_argument("--window", type=float, default=10.0, help="seconds of recurring fires to count (default 10)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle node background to measure (default 10)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds between node start and the idle window")
    ap.add_argument("--rows", type=int, default=2000, help="WAITING rows per claims/s run (default 2000)")
    ap.add_argument("--batch", type=int, default=64, help="claims per cas_many call (default 64)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--real", action="store_true",
                    help="count on a real Apache Cassandra (a 1-node cluster this run starts and stops) with "
                         "the store's own client-side counters (StoreStats) instead of the CQL test server")
    ap.add_argument("--keep", action="store_true", help="--real: keep the Cassandra directory")
    ap.add_argument("--run-node", nargs=3, metavar=("CONFIG", "NAME", "PORT_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_node:
        sys.exit(run_node(*args.run_node))
    from tabulate import tabulate

    cassandra_findings: list[str] = []
    stats = None
    if args.real:
        res, stats, cassandra_findings, version = real_phases(args)
        claims = []
        note = NOTE_REAL.format(version=version)
    else:
        from testkit.cqlserver import CqlTestServer

        server = CqlTestServer().start()
        rec = Recorder(server)
        rec.install()
        try:
            res = node_phases(args, TestServerTarget(server, rec))
            claims = [claims_run(server, args.rows, procs, batch) for procs in (1, 4) for batch in (1, args.batch)]
        finally:
            server.stop()
        note = NOTE

    idle, once, recur = res["idle"], res["once"], res["recurring"]
    pu_once = per_unit(once["counts"], once["seconds"], idle["rate"], once["jobs"])
    pu_fire = per_unit(recur["counts"], recur["seconds"], idle["rate"], max(recur["fires"], 1))
    out: dict = {"note": note, "settings": vars(args)}

    print(note)
    print()
    print("Node: 1 process, `fabricjobs node --name n1`, defaults otherwise (RECONCILE_INTERVAL_MS 1000, "
          "heartbeat 5000 ms, pool 25, worker processes); job: USER_JOB Bench.noop (returns None).")
    print(f"Idle node background over {idle['seconds']:.1f} s, per second:")
    ik = {k: 0.0 for k in KINDS}
    for (o, kind, _l), r in idle["rate"].items():
        ik[kind] += r
    print(tabulate([[KIND_HEAD[k], fmt(ik[k])] for k in KIND_HEAD], headers=["statements", "per second"],
                   tablefmt="psql", disable_numparse=True))
    print(tabulate([[label, fmt(r)] for (o, kind, label), r in sorted(idle["rate"].items(), key=lambda kv: -kv[1]) if kind != "other"],
                   headers=["idle statement", "per second"], tablefmt="psql", disable_numparse=True))

    tot_once, tot_fire = kind_totals(pu_once), kind_totals(pu_fire)
    cli_once = kind_totals(pu_once, "bench")
    print()
    print(f"One-time job life cycle: {once['jobs']} STARTJOBs (one Client.fetch each, {once['submit_seconds']:.1f} s), "
          f"all PROCESSED and settled after {once['seconds']:.1f} s.")
    print(f"Recurring fire: {recur['jobs']} jobs every 1 s, {recur['fires']} fires in a {recur['seconds']:.1f} s window "
          "(between two quiet points).")
    print("raw = every statement in the window / jobs (or fires); net = minus the idle rate x window length.")
    table = []
    for k in ("lwt", "write", "read", "serial_read", "system"):
        table.append([KIND_HEAD[k], fmt(tot_once[k][0]), fmt(tot_once[k][1]), fmt(cli_once[k][0]),
                      fmt(tot_fire[k][0]), fmt(tot_fire[k][1])])
    print(tabulate(table, headers=["statements", "per one-time job (raw)", "(net)", "of which STARTJOB",
                                   "per recurring fire (raw)", "(net)"], tablefmt="psql", disable_numparse=True))
    print()
    print("Per statement, one-time job:")
    print(tabulate(breakdown_table(pu_once), headers=["kind", "sent by", "statement", "per job (raw)", "(net)"],
                   tablefmt="psql", disable_numparse=True))
    print()
    print("Per statement, recurring fire:")
    print(tabulate(breakdown_table(pu_fire), headers=["kind", "sent by", "statement", "per fire (raw)", "(net)"],
                   tablefmt="psql", disable_numparse=True))

    if stats is not None:
        print_store_stats(stats, once, recur, idle)
    if claims:
        print()
        print("Claims/s through the CQL test server (a test double in this process, 2-core machine: "
              "it measures the client code path and the test server, not Cassandra):")
        ctab = [[c["procs"], "store.cas" if c["batch"] <= 1 else f"store.cas_many, batches of {c['batch']}",
                 f"{c['rate']:,.0f}", fmt(c["per_claim"]["lwts"]), fmt(c["per_claim"]["writes"]),
                 fmt(c["per_claim"]["reads"]), fmt(c["per_claim"]["serial_reads"])] for c in claims]
        print(tabulate(ctab, headers=["processes", "how", "claims/s", "LWTs/claim", "writes/claim", "reads/claim",
                                      "SERIAL reads/claim"], tablefmt="psql", disable_numparse=True))

    # 5. arithmetic
    po, pf = path_counts(pu_once), path_counts(pu_fire)
    print()
    print("What the LWT count means on a real cluster -- ARITHMETIC, NOT MEASUREMENT:")
    print("an LWT write costs 4 round trips with Paxos v1 (Cassandra's default up to 5.0), 2 with Paxos v2;")
    print("a plain read or write costs 1. Critical path = LWTs x (4 or 2) RTT + plain statements x 1 RTT,")
    print("counting the statements on the job's own path (its LWTs, its reads of k2_jobs, its plain writes:")
    print("index entries, archive index, run record; net, from the tables above), which are sent one after")
    print("another. Not included: STARTJOB's read of `nodes` (to ring nodes on the same host), the reconcile")
    print("poll or doorbell wait before a claim, the index scan that finds the job (one read over the 8 shard partitions,")
    print("about 1 RTT per pass), the job's own run time.")
    arith = []
    for what, pc in (("one-time job", po), ("recurring fire", pf)):
        lw, pl = round(pc["lwt"]), round(pc["plain"])
        for rtt in (1, 10):
            arith.append([what, lw, pl, f"{rtt} ms", f"{lw} x 4 x {rtt} + {pl} x {rtt} = {(4 * lw + pl) * rtt} ms",
                          f"{lw} x 2 x {rtt} + {pl} x {rtt} = {(2 * lw + pl) * rtt} ms"])
    print(tabulate(arith, headers=["", "LWTs", "plain", "RTT", "Paxos v1", "Paxos v2"], tablefmt="psql",
                   disable_numparse=True))
    print("1 ms: client, coordinator and replicas in one DC (LOCAL_SERIAL). 10 ms: a Paxos round that "
          "must reach replicas in another DC (SERIAL on a multi-DC keyspace).")

    if res["node_log_lines"]:
        print()
        print("node log (warnings and above, last lines):")
        for line in res["node_log_lines"]:
            print("  " + line)
    if args.real:
        print()
        if cassandra_findings:
            print(f"Cassandra system.log: {len(cassandra_findings)} WARN / ERROR lines after start-up (first 15):")
            for line in cassandra_findings[:15]:
                print("  " + line[:500])
        else:
            print("Cassandra system.log: no WARN / ERROR lines after start-up")
        out["cassandra_log"] = cassandra_findings
        if stats is not None:
            out["store_stats"] = {w: {f"{o}.{f}": v for (o, _k, f), v in stats[w].items()} for w in stats}

    if args.json:
        def enc(c: dict) -> list:
            return [{"origin": o, "kind": k, "statement": l, "value": v} for (o, k, l), v in sorted(c.items())]

        out.update({
            "idle": {"seconds": idle["seconds"], "per_second": enc(idle["rate"]), "kinds_per_second": ik},
            "one_time_job": {"jobs": once["jobs"], "seconds": once["seconds"], "submit_seconds": once["submit_seconds"],
                             "counts": enc(once["counts"]),
                             "per_job": {k: {"raw": v[0], "net": v[1]} for k, v in tot_once.items()},
                             "per_job_startjob_client": {k: v[0] for k, v in cli_once.items()},
                             "path": po},
            "recurring_fire": {"jobs": recur["jobs"], "fires": recur["fires"], "seconds": recur["seconds"],
                               "counts": enc(recur["counts"]),
                               "per_fire": {k: {"raw": v[0], "net": v[1]} for k, v in tot_fire.items()}, "path": pf},
            "claims": claims,
            "arithmetic": [dict(zip(["what", "lwts", "plain", "rtt", "paxos_v1", "paxos_v2"], r)) for r in arith],
        })
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
