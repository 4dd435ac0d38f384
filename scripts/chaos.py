#!/usr/bin/env python3
"""Chaos soak: node processes on one store, jobs of every kind, random faults; then a checker
proves that no job was lost, none ran twice at once, and every re-run has a fault behind it.

Run
  --nodes (4) `fabricjobs node` processes share one store: a SQLite file, or (--backend
  cassandra) a CQL test server (testkit/cqlserver, a test double, not Cassandra) run as a
  separate process through scripts/cql-test-server, so that killing a node never takes the
  store down, or (--backend cassandra-real) Apache Cassandra 5.0: 3 nodes (testkit/realcassandra,
  started in the working directory and stopped at the end, on error and on Ctrl-C too; or
  --cassandra-hosts for a running cluster), keyspace RF 3, QUORUM / SERIAL, request timeout
  10 s, and 3 fabricjobs nodes by default. Settings: heartbeat 200 ms x 5 (dead after 1 s; a
  run's lease is 0.6 s; 500 ms x 6 on cassandra-real: dead after 3 s, lease 2 s),
  RECONCILE_INTERVAL_MS 200 (500 on Cassandra: --reconcile-ms), OWNER_PRECEDENCE_MS 300,
  pool 40, MAX_TRIES 100 (a job hit by many faults must not run out of tries: each takeover
  of a running job counts as one), RETRY_DELAY_SEC 1, SHUTDOWN_GRACE_SEC 1, log level warning.
  What differs with the store is one Backend class each (SqliteBackend, CqlTestServerBackend,
  RealCassandraBackend).

  --jobs (2000; 300 on cassandra-real) USER_JOBs of examples/jobs/Chaos.py:work: --recurring of
  them (default 200 on SQLite, 40 on the Cassandra test server, which runs ~10x fewer jobs/s,
  12 on cassandra-real, whose three JVMs share the host's cores) are recurring, half
  EXEC_INTERVAL='00:00:01' and half 6-field cron '* * * * * *', each run working 0.05 s; the
  rest are one-time jobs working 0.05-6 s (half under 0.5 s). The recurring jobs are submitted
  first, the one-time jobs spread over the first 75 % of the run (scripts of 25 STARTJOBs);
  every STARTJOB that returns a row is recorded as accepted.

  For --duration seconds (120) a fault every 1-3 s, on a node not already in a fault, at most
  nodes/2 at once (--seed, printed, fixes every random choice; which nodes are free when a
  fault is due still depends on timing):
    kill     SIGKILL of the node's process group (node, fork server, workers), restarted with
             the same name after 0-1.5 s;
    stop     SIGSTOP of the node process alone (its workers keep running, as docs/explanation/guarantees.md demands)
             for the dead threshold + 0.3-1.5 s, then SIGCONT;
    restart  SIGTERM (graceful shutdown) and a start with the same name.
  Each fault is recorded: kind, node, start, end (restart spawned / SIGCONT), ready (the node
  wrote a heartbeat row again as a new process, or SIGCONT).
  cassandra-real adds faults of Cassandra nodes, one at a time, the first after 4-8 s and each
  next 5-12 s after the previous one ended (a stream of their own, fixed by the seed too; the
  first two are one of each kind):
    cassandra-stop  SIGSTOP of one Cassandra node's JVM for 3-8 s, then SIGCONT;
    cassandra-kill  SIGKILL of it, down 1-5 s, then restarted on its data (ready: it answers CQL
                    and the other nodes see it again).
  They are recorded like the others (node "cassandra@<address>").
  --partitions (docs/explanation/guarantees.md; scripts/chaos_partitions.py, default --duration 300): the three
  Cassandra nodes and the fabricjobs nodes each run on a test host of their own (a network
  namespace, testkit/netns.py), and instead of the Cassandra process faults a
  network fault comes every 5-15 s, one at a time (each kind once first): a node's host cut
  off (net-isolate), a node with one replica of three (net-minority), a replica cut off
  (net-replica), 200 +- 100 ms delay or 5 % loss on every path (net-delay, net-loss), 400-900
  ms on what one node sends (net-slow-heartbeat). A fault of a node's host is a fault of that
  node; a replica cut off, delay and loss are faults of the store (node "cassandra@<address>"
  or "network").
  --dcs 2 (with --backend cassandra-real; scripts/chaos_dcs.py): --cassandra-nodes (2) Cassandra
  nodes in two data centres (node i in dc<i % 2 + 1>), keyspace NetworkTopologyStrategy with
  one replica per DC per node of it up to 3 (dc1=1, dc2=1), QUORUM / SERIAL; the fabricjobs
  nodes (4) dealt between the DCs the same way, each with LOCAL_DC (and [node] DC) of its own.
  Before the faults, a node with SERIAL_CONSISTENCY = LOCAL_SERIAL in dc2 must refuse to start
  beside them (the report prints its message). Instead of the Cassandra faults above, one DC's
  Cassandra node is SIGSTOPped for 10 s (cassandra-stop), the first after 4-8 s, the next 20-30 s
  after the previous one ended, alternating DCs, each only if it ends before the quiet tail
  (the first one always). With one replica per DC, QUORUM is every replica: each pause stops
  every store request for its 10 s, and the fabricjobs nodes self-fence and recover.
  Before the faults start, each node runs one 0.3 s job per pool slot (pinned to it by
  AFFINITY, not checked), so that the soak does not begin with a burst of worker forks.
  No fault begins in the last 3 s, so the last ones end near the end of --duration. Then the
  cluster settles (2 s), recurring jobs get STOPJOB, the one-time jobs are waited for (all
  final), the nodes are stopped.

Evidence
  Every run of Chaos.work appends a start record and, when it ends, an end record (it worked
  its time) or an abort record (it saw is_aborted()), with key, node, epoch, worker pid and
  times. A run killed before it could write its end has only a start record. This script
  also watches the worker pid of every run without an end record (polling /proc every 20 ms)
  and notes when it died.

  The end of a run without an end/abort record is bounded by the earliest of: the next start
  record from the same worker process (a worker runs one job at a time), the moment this
  script saw that worker process dead (a zombie counts as dead; a changed start time means
  the pid was reused), and the SIGKILL of its node's process group. These are observations
  of the process, not of the product's lease logic; a run with none of them is unbounded.

Checker (a failure prints the seed and the offending records, and exits 1)
  1. no accepted STARTJOB is missing from the store;
  2. every one-time job ended PROCESSED, with at least one run that wrote its end record;
  3. no two runs of one key overlapped in time (start of the later < bounded end of the
     earlier), and no two runs of one key had the same epoch;
  4. every re-run of a one-time job follows a fault of the node that ran the previous run:
     a fault on that node that began before the re-run started and ended after the previous
     run had started;
  5. every recurring fire ran, or a fault explains why not. Due times: creation + k s
     (interval), each whole second (cron), from the first due time to 1.5 s before STOPJOB.
     A due time is served by a run that started within [due, due + 1 s), or by a run that
     records it as its due time (current_job().due) and started at most LATE_LIMIT (5 s)
     after it. A fire with no run of its own is fine when it came due while a run of an
     earlier fire had not yet started (that run was late) or was still going: it collapsed
     into that run, as missed fires do (docs/guides/schedules.md). Any other unserved due time is explained
     by a fault whose window [start - 1 s, ready + dead threshold + 2 s] contains it, of a
     node that held the job then: one that ran it in the 10 s before or first after, or that
     a node log names as the dead owner the job was taken over from; before the job's first
     run, whose holder nothing names (the node that adopted the new row, or in whose claim
     lane it fell), any node. How late runs started (start - due) is printed as p50 / p99 /
     max.
  6. no write of a fenced run was accepted: a job's row never keeps an epoch older than that
     of a run that started (every claim raises it, and an outcome is written only under its
     run's epoch); one-time jobs PROCESSED under their newest claim's epoch by its node. The
     node logs' refusals of such writes ("is no longer ours ... (fenced)") are counted.
  In 4 and 5 more things count as faults, and are counted apart in the notes:
  * a store stall, a fault of every node. SQLite: a probe in this script runs BEGIN IMMEDIATE
    every 100 ms; a wait for the write lock over 0.3 s while a SIGSTOP was in progress (a
    node paused while it holds the write lock blocks every writer, heartbeats included, so
    every node can lose its 0.6 s lease). Cassandra: a probe reads one row every 100 ms; a
    read over 0.3 s while a fault was in progress or up to 3 s after its node was back (the
    takeovers and restarts saturate the single-threaded test server, and every node's
    writes wait as long). Long waits are printed with the faults in progress.
  * a node's own lease lapse ("could not renew its lease", or a heartbeat write that came back
    after its lease had run out: self-fencing either way) that no SIGSTOP of that
    node explains: its heartbeat stalled past its lease. These are listed by time, those
    during a Cassandra fault apart. A lapse is logged when the heartbeat thread sees it; on
    cassandra-real that thread may be waiting for a hung request, so the lapse itself may
    come up to 21 s (two request timeouts and a beat) before its log line: in 4 the lapse must
    come between the previous run's start and the re-run's start, i.e. its log line within
    [previous start - 1 s, re-run start + 21 s]; in 5 the window starts 21 s earlier too.
  * A Cassandra fault is no fault of any fabricjobs node, and the probe's slow reads are no
    store stall on cassandra-real (one coordinator's latency says nothing of the nodes'
    heartbeats): a re-run is explained by a Cassandra fault only through a lease lapse of
    the previous run's node, as above. (5 only) a fire is also explained by store latency:
    a Cassandra node in a fault, from its start - 1 s to its ready + 10 s (the request
    timeout: a request it coordinated, or waited for as a replica, may hang that long) + the
    dead threshold + 2 s, and the job's previous run already over 0.5 s late (the node
    holding it was slowed).
  * (5 only) overload of a surviving node: a fault of another node in progress (same window)
    and the job's previous run, on the node that held it, already over 0.5 s late.
  * (5 only) a fault of a node that held the job that struck while the fire was pending and
    not yet overdue (between its due time and due + LATE_LIMIT, before it was served).
  * (5 only) a network fault of the store (--partitions: a replica cut off, delay, loss), or a
    Cassandra node SIGSTOPped (cassandra-stop), from its start - 4 s to its ready + 10 s + the
    dead threshold + 2 s, when the fire was served, or collapsed into a run, at most
    LATE_LIMIT + 10 s (the request timeout) after its due time: such a fault slows every
    request that meets it up to the request timeout, from the first fire on (a claim's LWT sent
    to a frozen coordinator waits for it, up to the store's 4 s LWT timeout, even one sent
    before it froze: on a cluster slowed by an earlier fault a fire's claim may go out a
    second or two after its due time; only that job's fire waits with it).

usage: .venv/bin/python scripts/chaos.py [--duration 120] [--seed N] [--nodes 4] [--jobs 2000] [--partitions]
                                         [--recurring N] [--backend sqlite|cassandra|cassandra-real]
                                         [--dcs 2] [--cassandra-nodes N]
                                         [--cassandra-hosts HOST[:PORT],...] [--reconcile-ms MS]
                                         [--json FILE] [--keep] [--verbose]
Progress goes to stderr, the result to stdout; exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # fabricjobs and the test kit (testkit/: the rig, the test servers)

from tabulate import tabulate  # noqa: E402

from fabricjobs.client import Client  # noqa: E402
from fabricjobs.commands import parse_script  # noqa: E402
from fabricjobs.errors import StoreError  # noqa: E402
from fabricjobs.model import JobKey, Status  # noqa: E402
from fabricjobs.store.cassandra.session import LWT_TIMEOUT  # noqa: E402
from testkit.rig import (  # noqa: E402
    NodeProcess, Rig, RigTimeout, merged, process_cpu_seconds, pythonpath_with, signal_group, stat_fields, wait_for,
    write_config,
)

JOBS_DIR = ROOT / "examples" / "jobs"
JOB_NAME = "Chaos.work"
HEARTBEAT_MS = 200  # the backend may set other ones: see set_heartbeat()
HEARTBEAT_MISS = 5
DEAD_AFTER = HEARTBEAT_MS * HEARTBEAT_MISS / 1000.0
POOL = 40
SETTLE = 2.0
QUIET_TAIL = 3.0  # no fault begins in the last seconds of --duration: those in progress end near it
EXPLAIN_BEFORE = 1.0
EXPLAIN_AFTER = DEAD_AFTER + 2.0


def set_heartbeat(ms: int, miss: int) -> None:
    """The nodes' heartbeat, and the timings of the faults and of the checker that follow from it."""
    global HEARTBEAT_MS, HEARTBEAT_MISS, DEAD_AFTER, EXPLAIN_AFTER
    HEARTBEAT_MS, HEARTBEAT_MISS = ms, miss
    DEAD_AFTER = ms * miss / 1000.0
    EXPLAIN_AFTER = DEAD_AFTER + 2.0
HELD_BEFORE = 10.0
SPREAD = 0.75  # the one-time jobs are submitted over this part of --duration
LATE_LIMIT = 5.0  # a fire served later than this after its due time needs a fault to explain it
LATE = 0.5  # a run this late after its due time shows its node overloaded
DUE_EPS_MS = 2  # due times are kept in whole milliseconds


def fire_of(due: float, first: float) -> int:
    """The fire (second k after ``first``) a run due at ``due`` stands for, in whole
    milliseconds: a due time up to DUE_EPS_MS early counts for that second. (In floats,
    floor(due - first + 0.002) put a due exactly 2 ms early into the second before.)"""
    return (round(due * 1000) - round(first * 1000) + DUE_EPS_MS) // 1000
STALL = 0.3  # a wait for the SQLite write lock this long can cost a node its lease (0.6 s, renewed every 0.2 s)
RECURRING_SECONDS = 0.05
SUBMIT_BATCH = 25
LOG_PROBLEM = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback")
# A node ends its runs when its lease runs out: a heartbeat that keeps failing ("could not
# renew"), or one write that came back after the lease had run out ("renewed ... after").
SELF_FENCE = re.compile(
    r"^(?:ERROR|WARNING) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*? - (\S+) "
    r"(?:could not renew its lease|renewed its lease after it had run out)")
FENCED_WRITE = re.compile(r"^\w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*is no longer ours .*outcome not written \(fenced\)")
TAKEOVER = re.compile(
    r"^WARNING (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*? - (\S+) took over '([^']+)' from dead node (\S+) ")


class ChaosError(RuntimeError):
    pass


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


VERBOSE = False


def log_line(msg: str, always: bool = True) -> None:
    """Progress, on stderr (stdout carries the result)."""
    if always or VERBOSE:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ==================================================================================================
# processes
# ==================================================================================================


class Node:
    """One node name; ``current`` is its latest process (a new one after each restart), started
    by the cluster rig (testkit/rig.py)."""

    def __init__(self, name: str, cluster: "Cluster") -> None:
        self.name = name
        self.cluster = cluster
        self.current: NodeProcess | None = None
        self.logs: list[Path] = []

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.current.proc if self.current is not None else None

    @property
    def pid(self) -> int:
        assert self.current is not None
        return self.current.pid

    @property
    def stopped(self) -> bool:
        """SIGSTOPped right now."""
        return self.current is not None and self.current.stopped

    def alive(self) -> bool:
        return self.current is not None and self.current.alive()

    def spawn(self) -> float:
        with self.cluster.lock:  # no node starts once close() began (a restart fault under way)
            if self.cluster.closing:
                raise ChaosError(f"node {self.name} not started: the run is ending")
            self.current = self.cluster.rig.spawn(self.name, log_level="warning", env={"PYTHONPATH": pythonpath_with(ROOT)},
                                                  prefix=self.cluster.backend.node_prefix(self.name),
                                                  config=self.cluster.node_config(self.name))
        self.logs.append(self.current.log_path)
        return time.time()

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Until this process has written its heartbeat row (state running, its pid)."""
        deadline = time.monotonic() + timeout
        pid = self.pid
        while time.monotonic() < deadline:
            if not self.alive():
                raise ChaosError(f"node {self.name} (pid {pid}) exited with {self.proc.returncode}: "
                                 + self.logs[-1].read_text(errors="replace")[-1500:])
            try:
                rows = self.cluster.monitor_store.nodes()
            except Exception:
                rows = []
            if any(r.name == self.name and r.pid == pid and r.state == "running" for r in rows):
                return time.time()
            time.sleep(0.05)
        raise ChaosError(f"node {self.name} (pid {pid}) did not write its heartbeat within {timeout:.0f} s")

    def start(self, attempts: int = 3) -> tuple[float, float]:
        """Spawn and wait until ready; a start refused (e.g. the old pid was reused) is retried."""
        last = None
        for _ in range(attempts):
            spawned = self.spawn()
            try:
                return spawned, self.wait_ready()
            except ChaosError as exc:
                last = exc
                self.kill_group()
                time.sleep(0.5)
        raise last

    def kill_group(self) -> None:
        if self.current is not None:
            self.current.kill_group()

    def wait_group_gone(self, timeout: float = 10.0) -> bool:
        return self.current is None or self.current.wait_group_gone(timeout)


class CqlServerProcess:
    """scripts/cql-test-server in its own process (a node SIGKILL never takes it down)."""

    def __init__(self, tmp: Path) -> None:
        self.log_path = tmp / "cql-test-server.log"
        self._out = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "cql-test-server"), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=self._out, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"listening on (\S+):(\d+)", line)
        if not m:
            self.stop()
            raise ChaosError(f"the CQL test server did not start: {line!r} {self.log_path.read_text()[-1000:]}")
        self.host, self.port = m.group(1), int(m.group(2))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._out.close()


# ==================================================================================================
# watching worker processes
# ==================================================================================================


def _proc_identity(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc, None when there is no such process."""
    fields = stat_fields(pid)
    return (fields[0], fields[19]) if fields else None


class RunWatcher(threading.Thread):
    """Tails the side log; for every run without an end record yet, watches its worker pid and
    notes the first time it is seen dead (or a zombie, or a different process)."""

    def __init__(self, path: Path, period: float = 0.02) -> None:
        super().__init__(name="run-watcher", daemon=True)
        self.path = path
        self.period = period
        self.open_runs: dict[str, int] = {}  # run id -> pid
        self.identity: dict[int, tuple[str, str]] = {}
        self.deaths: dict[int, list[float]] = {}  # pid -> times it was seen dead (one per life)
        self._halt = threading.Event()
        self._offset = 0
        self._partial = b""
        self.lag_max = 0.0

    def stop(self) -> None:
        self._halt.set()

    def _read_new(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if rec.get("ev") == "start":
                pid = rec["pid"]
                self.open_runs[rec["run"]] = pid
                if pid not in self.identity:
                    ident = _proc_identity(pid)
                    if ident is not None and ident[0] != "Z":
                        self.identity[pid] = ident
                    else:
                        self.deaths.setdefault(pid, []).append(time.time())
            else:
                self.open_runs.pop(rec.get("run"), None)

    def sweep(self) -> None:
        self._read_new()
        now = time.time()
        for pid in set(self.open_runs.values()):
            known = self.identity.get(pid)
            if known is None:
                continue
            ident = _proc_identity(pid)
            if ident is None or ident[0] == "Z" or ident[1] != known[1]:
                self.deaths.setdefault(pid, []).append(now)
                del self.identity[pid]
        for run, pid in list(self.open_runs.items()):
            if pid not in self.identity:
                del self.open_runs[run]

    def run(self) -> None:
        while not self._halt.is_set():
            t = time.time()
            try:
                self.sweep()
            except Exception as exc:  # never let the watcher die silently
                print(f"run watcher: {exc!r}", file=sys.stderr)
            self.lag_max = max(self.lag_max, time.time() - t)
            self._halt.wait(self.period)
        self.sweep()


class _Probe(threading.Thread):
    """Every 100 ms, times one ``_once()``; keeps every wait, and (start time, seconds) of the
    waits over STALL. A ``_once()`` that fails is not counted."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.waits: list[float] = []
        self.long: list[tuple[float, float]] = []  # (time the wait began, seconds) of waits over STALL
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            while not self._halt.wait(0.1):
                t, wall = time.perf_counter(), time.time()
                try:
                    self._once()
                except Exception:
                    continue
                w = time.perf_counter() - t
                self.waits.append(w)
                if w > STALL:
                    self.long.append((wall, w))
        finally:
            self._close()

    def _once(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    def pct(self, p: float) -> float:
        if not self.waits:
            return 0.0
        w = sorted(self.waits)
        return w[min(len(w) - 1, max(0, math.ceil(p / 100 * len(w)) - 1))]

    def over(self, limit: float) -> int:
        return sum(1 for w in self.waits if w > limit)


class LockProbe(_Probe):
    """SQLite only: how long BEGIN IMMEDIATE waits for the store's write lock (what a node's
    heartbeat write waits too). Evidence for the cause of a self-fence."""

    def __init__(self, db: Path) -> None:
        super().__init__("lock-probe")
        self.db = db
        self._conn = None

    def _once(self) -> None:
        import sqlite3

        if self._conn is None:
            self._conn = sqlite3.connect(self.db, isolation_level=None, timeout=30)
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute("ROLLBACK")

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()


class ReadProbe(_Probe):
    """Cassandra: how long one read of one row takes through the store (its own driver
    session). The CQL test server is one Python process; when the takeovers and restarts that
    faults cause saturate it, every node's writes (outcomes, fires, claims) wait as long."""

    def __init__(self, config_path: Path, key: JobKey) -> None:
        super().__init__("read-probe")
        self.client = Client.from_config(config_path)
        self.key = key

    def _once(self) -> None:
        self.client.store.get(self.key)

    def _close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass


# ==================================================================================================
# the cluster and the faults
# ==================================================================================================


@dataclass
class Fault:
    kind: str
    node: str
    start: float
    end: float | None = None
    ready: float | None = None
    note: str = ""

    @property
    def of_store(self) -> bool:
        """A fault of the store (a Cassandra node), not of a fabricjobs node: it explains
        nothing by itself, only through a lease lapse of a node (see the checker)."""
        return self.kind in STORE_FAULTS


# ==================================================================================================
# the store: one Backend per --backend
# ==================================================================================================


class Backend:
    """The store the nodes share, and all that differs with it: its config sections, its
    defaults, its probe, what counts as a store stall, its own faults, its report lines."""

    name = ""
    nodes = 4
    jobs = 2000
    recurring = 200
    reconcile_ms = 200
    heartbeat = (200, 5)  # FABRIC_HEARTBEAT_INTERVAL_MS, FABRIC_HEARTBEAT_MISS
    # How long after a node's lease ran out its log may say so (parse_self_fences). 0 on the
    # stores where a heartbeat write never hangs for long (a fault of a node is what stalls it).
    lapse_lag = 0.0
    probe_what = ""

    def __init__(self, args) -> None:
        self.args = args

    def start(self, tmp: Path) -> dict[str, dict]:
        """Bring the store up; the config sections that name it ([store], [cassandra])."""
        raise NotImplementedError

    def probe(self, config_path: Path, key: JobKey) -> _Probe:
        return ReadProbe(config_path, key)

    def stalls(self, long_waits: list[tuple[float, float]], faults: list[Fault]) -> list[tuple[float, float]]:
        """The probe's long waits that count as a fault of every node (see the docstring)."""
        return []

    stall_rule = ""  # how a long wait becomes a store stall ("": it never does)

    def check(self) -> None:
        """Raise ChaosError when the store itself died."""

    def start_faults(self, cluster: "Cluster", rng: random.Random, t_last: float) -> None:
        """Faults of the store itself, up to ``t_last`` (none by default)."""

    def node_prefix(self, name: str) -> list[str]:
        """What a node's command runs under (--partitions: its test host's ``ip netns exec``)."""
        return []

    def node_sections(self, name: str) -> dict[str, dict]:
        """Config keys of node ``name`` over the shared ones (--dcs: its data centre)."""
        return {}

    def before_faults(self, cluster: "Cluster") -> None:
        """Once the nodes are up and warm, before the faults begin (--dcs: the refusal check)."""

    def mark(self) -> None:
        """The faults begin (for the report's figures)."""

    def report_lines(self) -> list[str]:
        return []

    def report(self) -> dict:
        return {}

    def close(self) -> None:
        pass


class SqliteBackend(Backend):
    name = "sqlite"
    probe_what = "SQLite write lock (a BEGIN IMMEDIATE every 100 ms): wait"
    stall_rule = "during a SIGSTOP"

    def start(self, tmp: Path) -> dict[str, dict]:
        self.db = tmp / "jobs.db"
        return {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(self.db)}}

    def probe(self, config_path: Path, key: JobKey) -> _Probe:
        return LockProbe(self.db)

    def stalls(self, long_waits, faults):
        # a node SIGSTOPped while it holds the write lock stalls every writer, so every node's
        # heartbeat: a stall seen while a SIGSTOP was in progress is a fault of every node
        return [(t, t + w) for t, w in long_waits
                if any(f.kind == "stop" and f.start <= t + w and (f.end or t) >= t for f in faults)]


class CqlTestServerBackend(Backend):
    name = "cassandra"
    recurring = 40
    reconcile_ms = 500
    probe_what = "store read (one row every 100 ms): latency"
    stall_rule = "during or just after a fault"

    def start(self, tmp: Path) -> dict[str, dict]:
        self.cql = CqlServerProcess(tmp)
        return {"store": {"BACKEND": "cassandra"},
                "cassandra": {"HOSTS": self.cql.host, "PORT": self.cql.port,
                              "KEYSPACE": "chaos_" + uuid.uuid4().hex[:10], "PROTOCOL_VERSION": 4,
                              "CONSISTENCY": "QUORUM", "TOKEN_AWARE": "false", "REQUEST_TIMEOUT_SEC": 10}}

    def stalls(self, long_waits, faults):
        # the takeovers and restarts a fault causes saturate the single-threaded server: a slow
        # read while a fault is in progress or just recovered is a fault of every node
        return [(t, t + w) for t, w in long_waits
                if any(f.start <= t + w and (f.ready or t) + EXPLAIN_AFTER >= t for f in faults)]

    def check(self) -> None:
        if not self.cql.alive():
            raise ChaosError(f"the CQL test server died (exit status {self.cql.proc.returncode}): "
                             + self.cql.log_path.read_text(errors="replace")[-1500:])

    def mark(self) -> None:
        self._cpu0, self._t0 = self.cql.cpu_seconds(), time.time()

    def _busy(self) -> float | None:
        if not hasattr(self, "_t0"):
            return None
        return (self.cql.cpu_seconds() - self._cpu0) / max(1e-9, time.time() - self._t0)

    def report_lines(self) -> list[str]:
        busy = self._busy()
        return [] if busy is None else [
            f"CQL test server process: {busy * 100:.0f} % of one core on average (its limit is ~100 %)"]

    def report(self) -> dict:
        return {"cql_server_cpu_fraction": self._busy()}

    def close(self) -> None:
        if hasattr(self, "cql"):
            self.cql.stop()


STORE_FAULTS = ("cassandra-stop", "cassandra-kill", "net-replica", "net-delay", "net-loss")
# network faults of one fabricjobs node's host (--partitions, chaos_partitions.py): faults of
# that node, as a SIGSTOP is
NODE_NET_FAULTS = ("net-isolate", "net-minority", "net-slow-heartbeat")
REAL_TIMEOUT = 10.0  # REQUEST_TIMEOUT_SEC on real Cassandra: the longest one store request waits


class RealCassandraBackend(Backend):
    """Apache Cassandra: a 3-node cluster (RF 3, QUORUM / SERIAL) this script starts in its
    working directory (testkit/realcassandra), or --cassandra-hosts (then no Cassandra faults:
    its processes are not ours). Cassandra faults, one Cassandra node at a time:
      cassandra-stop  SIGSTOP of the node's JVM for 3-8 s, then SIGCONT (requests it
                      coordinates hang until SIGCONT or the request timeout);
      cassandra-kill  SIGKILL, down 1-5 s, restarted on its data (start_node: ready when it
                      answers CQL and the others see it again).
    The first two are one of each (in an order the seed draws), then either; the first after
    4-8 s, each next 5-12 s after the previous one ended. A Cassandra fault is no fault of any
    fabricjobs node: it explains a re-run or a missed fire only through a fabricjobs node that
    lost its lease while it was going on (see the checker)."""

    name = "cassandra-real"
    nodes = 3
    # three Cassandra JVMs share the host's cores with the nodes, and every claim and every
    # recurring fire is a Paxos round: with the test server's 40 recurring jobs the fires are
    # seconds late on a 2-core host with no fault at all
    jobs = 300
    recurring = 12
    reconcile_ms = 500
    # three JVMs on the same cores: a QUORUM write now and then takes most of a second (GC,
    # compaction), which a 0.6 s lease (200 ms x 5) does not survive even with no fault
    heartbeat = (500, 6)
    # a heartbeat sent to a paused coordinator waits out the request timeout: the node's
    # displacement read and its row write, one after the other, and the tick between beats
    lapse_lag = 2 * REAL_TIMEOUT + 1.0
    probe_what = "store read (one row every 100 ms, QUORUM): latency"
    fault_thread = "cassandra-faults"  # the thread of _fault_loop, which a subclass may replace

    def __init__(self, args) -> None:
        super().__init__(args)
        self.cc = None  # the CassandraCluster, when this script started it
        self.external = args.cassandra_hosts
        self._busy: int | None = None  # the Cassandra node in a fault now
        self._lock = threading.Lock()
        self._faults: threading.Thread | None = None
        self._closed = False

    def start(self, tmp: Path) -> dict[str, dict]:
        self.keyspace = "chaos_" + uuid.uuid4().hex[:10]
        if self.external:
            hosts, port = [], 9042
            for part in self.external.split(","):
                host, _, p = part.strip().partition(":")
                hosts.append(host)
                port = int(p) if p else port
        else:
            from testkit.realcassandra import CassandraCluster, available

            why = available()
            if why is not None:
                raise ChaosError(f"no real Cassandra here: {why}")
            log_line("starting a 3-node Cassandra cluster (RF 3)")
            t = time.time()
            self.cc = CassandraCluster(tmp / "cassandra", nodes=3, paxos_variant="v2", heap="768m")
            self.cc.start()
            hosts, port = self.cc.hosts, self.cc.port
            log_line(f"Cassandra up in {time.time() - t:.0f} s: {','.join(hosts)} port {port}")
        self.hosts, self.port = hosts, port
        return {"store": {"BACKEND": "cassandra"},
                "cassandra": {"HOSTS": ",".join(hosts), "PORT": port, "KEYSPACE": self.keyspace,
                              "REPLICATION": "NetworkTopologyStrategy:datacenter1=3",
                              "CONSISTENCY": "QUORUM", "SERIAL_CONSISTENCY": "SERIAL", "PROTOCOL_VERSION": 5,
                              "LOCAL_DC": "datacenter1", "REQUEST_TIMEOUT_SEC": REAL_TIMEOUT}}

    def check(self) -> None:
        if self.cc is None:
            return
        with self._lock:
            busy = self._busy
        for i in range(len(self.cc.hosts)):
            if i != busy and self.cc.state(i) == "stopped":
                raise ChaosError(f"Cassandra node {i} ({self.cc.hosts[i]}) died with no fault injected:\n"
                                 + self.cc._tail(i))

    def start_faults(self, cluster: "Cluster", rng: random.Random, t_last: float) -> None:
        if self.cc is None:
            log_line("no Cassandra faults: --cassandra-hosts names a cluster this script does not own")
            return
        mine = random.Random(rng.randrange(2**31))  # a stream of its own: the seed fixes it
        t = self._faults = threading.Thread(target=self._fault_loop, args=(cluster, mine, t_last),
                                            name=self.fault_thread, daemon=True)
        cluster.fault_threads.append(t)
        t.start()

    def _fault_loop(self, cluster: "Cluster", rng: random.Random, t_last: float) -> None:
        first = ["cassandra-stop", "cassandra-kill"]
        rng.shuffle(first)
        next_at = time.time() + rng.uniform(4, 8)
        while True:
            time.sleep(max(0.0, next_at - time.time()))
            if time.time() >= t_last or self._closed:
                return
            kind = first.pop(0) if first else rng.choice(["cassandra-stop", "cassandra-kill"])
            i = rng.randrange(len(self.cc.hosts))
            pause, down = rng.uniform(3, 8), rng.uniform(1, 5)
            if not self._inject(cluster, kind, i, pause if kind == "cassandra-stop" else down):
                return
            next_at = time.time() + rng.uniform(5, 12)

    def _inject(self, cluster: "Cluster", kind: str, i: int, seconds: float, note: str = "") -> bool:
        """One fault of Cassandra node i, recorded: SIGSTOP for ``seconds`` then SIGCONT
        (cassandra-stop), or SIGKILL, down ``seconds``, restarted (cassandra-kill). False when
        it failed (recorded in fault_errors) or the run is ending: no more faults then."""
        fault = Fault(kind, f"cassandra@{self.cc.hosts[i]}", time.time(), note=note)
        with cluster.lock:
            cluster.faults.append(fault)
        with self._lock:
            self._busy = i
        log_line(f"fault: {kind} {self.cc.hosts[i]} {note}".rstrip(), always=False)
        try:
            if kind == "cassandra-stop":
                self.cc.kill_node(i, signal.SIGSTOP)
                time.sleep(seconds)
                self.cc.kill_node(i, signal.SIGCONT)
                fault.end = fault.ready = time.time()
                fault.note += f"paused {seconds:.2f} s; "
            else:
                self.cc.kill_node(i, signal.SIGKILL)
                time.sleep(seconds)
                fault.end = time.time()
                if self._closed:
                    return False
                self.cc.start_node(i)
                fault.ready = time.time()
                fault.note += f"down {seconds:.2f} s, restarted in {fault.ready - fault.end:.1f} s; "
        except Exception as exc:
            if not self._closed:
                cluster.fault_errors.append(f"{kind} of {self.cc.hosts[i]}: {exc}")
                fault.note += f"error: {exc}; "
            return False
        finally:
            with self._lock:
                self._busy = None
        return not self._closed

    def close(self) -> None:
        self._closed = True
        if self.cc is not None:
            log_line("stopping the Cassandra cluster")
            try:
                self.cc.stop(timeout=30)
                if self._faults is not None and self._faults.is_alive():
                    # a restart under way fails once its JVM is gone; one that began just as
                    # the cluster stopped is stopped now
                    self._faults.join(timeout=15)
                    self.cc.stop(timeout=30)
            except Exception as exc:
                print(f"chaos: stopping Cassandra: {exc}", file=sys.stderr)
        elif self.external and hasattr(self, "hosts"):
            try:
                from cassandra.cluster import Cluster as DriverCluster

                c = DriverCluster(self.hosts, port=self.port, protocol_version=5, schema_metadata_enabled=False,
                                  token_metadata_enabled=False)
                try:
                    c.connect().execute(f"DROP KEYSPACE IF EXISTS {self.keyspace}", timeout=60)
                finally:
                    c.shutdown()
            except Exception as exc:
                print(f"chaos: dropping keyspace {self.keyspace}: {exc}", file=sys.stderr)


BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (SqliteBackend, CqlTestServerBackend, RealCassandraBackend)}


class Cluster:
    def __init__(self, args, rng: random.Random, backend: Backend) -> None:
        self.args = args
        self.rng = rng
        self.backend = backend
        self.tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-chaos-"))
        self.side_log = self.tmp / "runs.jsonl"
        self.submit_client = self.monitor_client = None
        self.closing = False
        self.config_path = self.tmp / "config.ini"
        self.rig = Rig(self.tmp, self.config_path)
        self.nodes = {f"chaos{i + 1}": Node(f"chaos{i + 1}", self) for i in range(args.nodes)}
        self.faults: list[Fault] = []
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.fault_threads: list[threading.Thread] = []
        self.fault_errors: list[str] = []
        self.group_kills: dict[str, list[float]] = {n: [] for n in self.nodes}  # SIGKILLs of a node's group

    def open(self) -> None:
        """Start the store, write the nodes' config, connect the script's own clients."""
        args = self.args
        sections: dict[str, dict] = {
            "node": {"DC": "DC1"},
            "jobs": {"K2JOBS_POOL_SIZE": POOL, "USER_JOBS_DIR": str(JOBS_DIR), "RECONCILE_INTERVAL_MS": args.reconcile_ms,
                     "OWNER_PRECEDENCE_MS": 300, "RETRY_DELAY_SEC": 1, "MAX_TRIES": 100, "STOP_GRACE_SEC": 2,
                     "SHUTDOWN_GRACE_SEC": 1},
            "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": HEARTBEAT_MS, "FABRIC_HEARTBEAT_MISS": HEARTBEAT_MISS},
        }
        sections.update(self.backend.start(self.tmp))
        self.settings = sections
        write_config(self.config_path, sections)
        self._node_configs: dict[str, Path | None] = {}
        self.submit_client = Client.from_config(self.config_path)
        self.monitor_client = Client.from_config(self.config_path)
        self.monitor_store = self.monitor_client.store

    def node_config(self, name: str) -> Path | None:
        """Node ``name``'s own config.ini when the backend sets keys of its own, else None (the
        shared one); written once, so a restart comes back with the same settings."""
        if name not in self._node_configs:
            extra = self.backend.node_sections(name)
            self._node_configs[name] = write_config(self.tmp / f"config-{name}.ini", merged(self.settings, extra)) \
                if extra else None
        return self._node_configs[name]

    # -- faults ---------------------------------------------------------------------------------

    def _fault_kill(self, node: Node, fault: Fault, down: float) -> None:
        fault.start = time.time()
        node.kill_group()
        self.group_kills[node.name].append(time.time())  # when the SIGKILL was sent
        node.proc.wait(timeout=10)
        if not node.wait_group_gone():
            fault.note += "group still alive 10 s after SIGKILL; "
        time.sleep(down)
        fault.end, fault.ready = node.start()

    def _fault_stop(self, node: Node, fault: Fault, pause: float) -> None:
        fault.start = time.time()
        node.current.pause()
        time.sleep(pause)
        node.current.resume()
        fault.end = fault.ready = time.time()
        fault.note += f"paused {pause:.2f} s; "

    def _fault_restart(self, node: Node, fault: Fault) -> None:
        fault.start = time.time()
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fault.note += "did not stop within 20 s of SIGTERM: group SIGKILLed; "
            node.kill_group()
            self.group_kills[node.name].append(time.time())
            node.proc.wait(timeout=10)
        if not node.wait_group_gone(5.0):
            fault.note += "group alive 5 s after exit: SIGKILLed; "
            node.kill_group()
            self.group_kills[node.name].append(time.time())
            node.wait_group_gone()
        fault.note += f"exit status {node.proc.returncode}; "
        fault.end, fault.ready = node.start()

    def inject(self) -> Fault | None:
        with self.lock:
            limit = max(1, len(self.nodes) // 2)
            free = [n for n in self.nodes if n not in self.busy]
            if len(self.busy) >= limit or not free:
                return None
            name = self.rng.choice(sorted(free))
            kind = self.rng.choice(["kill", "stop", "restart"])
            pause = DEAD_AFTER + self.rng.uniform(0.3, 1.5)  # drawn here, in order: the seed fixes them
            down = self.rng.uniform(0.0, 1.5)
            self.busy.add(name)
            fault = Fault(kind, name, time.time())
            self.faults.append(fault)
        node = self.nodes[name]

        def run():
            try:
                if kind == "kill":
                    self._fault_kill(node, fault, down)
                elif kind == "stop":
                    self._fault_stop(node, fault, pause)
                else:
                    self._fault_restart(node, fault)
            except Exception as exc:
                self.fault_errors.append(f"{kind} of {name}: {exc}")
                fault.note += f"error: {exc}; "
            finally:
                with self.lock:
                    self.busy.discard(name)

        t = threading.Thread(target=run, name=f"fault-{kind}-{name}", daemon=True)
        self.fault_threads.append(t)
        t.start()
        return fault

    # -- the end ----------------------------------------------------------------------------------

    def stop_nodes(self) -> None:
        for node in self.nodes.values():
            if node.stopped and node.alive():
                node.current.resume()
            if node.alive():
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            node.kill_group()
            node.wait_group_gone(5.0)

    def close(self) -> None:
        with self.lock:
            self.closing = True
        for node in self.nodes.values():
            if node.proc is not None:
                if node.stopped:
                    node.current.resume()
                node.kill_group()
                try:
                    node.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for c in (self.submit_client, self.monitor_client):
            try:
                if c is not None:
                    c.close()
            except Exception:
                pass
        self.backend.close()

    def node_logs(self) -> list[tuple[str, Path]]:
        return [(n.name, p) for n in self.nodes.values() for p in n.logs]


# ==================================================================================================
# jobs
# ==================================================================================================


@dataclass
class Plan:
    uid: str
    kind: str  # once | interval | cron
    seconds: float
    statement: str


def plan_jobs(rng: random.Random, total: int, recurring: int, log: Path) -> list[Plan]:
    plans = []
    n_interval = recurring // 2
    n_cron = recurring - n_interval
    for i in range(n_interval):
        a = json.dumps({"log": str(log), "seconds": RECURRING_SECONDS})
        plans.append(Plan(f"i{i:05d}", "interval", RECURRING_SECONDS,
                          f"startjob user_job name='{JOB_NAME}' uid='i{i:05d}' exec_interval='00:00:01' args='{a}';"))
    for i in range(n_cron):
        a = json.dumps({"log": str(log), "seconds": RECURRING_SECONDS})
        plans.append(Plan(f"c{i:05d}", "cron", RECURRING_SECONDS,
                          f"startjob user_job name='{JOB_NAME}' uid='c{i:05d}' exec_interval='* * * * * *' args='{a}';"))
    for i in range(total - recurring):
        r = rng.random()
        seconds = rng.uniform(0.05, 0.5) if r < 0.5 else rng.uniform(0.5, 2.0) if r < 0.9 else rng.uniform(2.0, 6.0)
        seconds = round(seconds, 3)
        a = json.dumps({"log": str(log), "seconds": seconds})
        plans.append(Plan(f"o{i:05d}", "once", seconds,
                          f"startjob user_job name='{JOB_NAME}' uid='o{i:05d}' args='{a}';"))
    return plans


class Submitter(threading.Thread):
    """Submits the recurring jobs at once, then the one-time jobs spread over ``spread`` s.
    Every STARTJOB that returned a row is recorded with the time it returned."""

    def __init__(self, client: Client, plans: list[Plan], spread: float) -> None:
        super().__init__(name="submitter", daemon=True)
        self.client = client
        self.plans = plans
        self.spread = spread
        self.accepted: dict[str, float] = {}
        self.errors: list[tuple[str, str]] = []
        self.ring_errors: list[str] = []  # the wake-up after a batch failed (its STARTJOBs stand)
        self.done = threading.Event()

    def _submit(self, batch: list[Plan]) -> None:
        text = "".join(p.statement for p in batch)
        try:
            statements = parse_script(text)
        except Exception as exc:
            self.errors.extend((p.uid, f"parse: {exc}") for p in batch)
            return
        try:
            with self.client.service.batch():
                for st in statements:
                    uid = st.command.uid
                    try:
                        res = self.client.execute(st.command)
                        if res.rows:
                            self.accepted[uid] = time.time()
                        else:
                            self.errors.append((uid, "no row returned"))
                    except Exception as exc:  # not accepted: the checker does not expect it
                        self.errors.append((uid, f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            # The end of the batch rings the nodes' doorbells, which reads the nodes table: on
            # real Cassandra that read can time out after every STARTJOB of the batch was
            # accepted. They stand (the nodes find them at their next pass); go on.
            self.ring_errors.append(f"{fmt_t(time.time())} {type(exc).__name__}: {exc}")

    def run(self) -> None:
        try:
            recurring = [p for p in self.plans if p.kind != "once"]
            once = [p for p in self.plans if p.kind == "once"]
            for i in range(0, len(recurring), SUBMIT_BATCH):
                self._submit(recurring[i:i + SUBMIT_BATCH])
            t0 = time.monotonic()
            batches = [once[i:i + SUBMIT_BATCH] for i in range(0, len(once), SUBMIT_BATCH)]
            for k, batch in enumerate(batches):
                due = t0 + self.spread * k / max(1, len(batches))
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self._submit(batch)
        finally:
            self.done.set()


# ==================================================================================================
# the checker
# ==================================================================================================


@dataclass
class RunRec:
    run: str
    uid: str
    node: str
    epoch: int
    pid: int
    start: float
    due: float | None = None  # the due time the run stood for (current_job().due)
    end: float | None = None  # from an end or abort record
    ev: str | None = None  # end | abort | None
    bound: float = math.inf
    bound_by: str = "none"
    raw: list = field(default_factory=list)

    def show(self) -> str:
        end = f"{self.ev} {fmt_t(self.end)}" if self.end is not None else \
            f"no end record; bound {fmt_t(self.bound)} ({self.bound_by})"
        due = f"due {fmt_t(self.due)} " if self.due is not None else ""
        return f"{self.uid} run {self.run[:8]} node {self.node} epoch {self.epoch} pid {self.pid} " \
               f"{due}start {fmt_t(self.start)} {end}"


def longest_pauses(starts: list[float], faults: list[Fault], after: float = 10.0) -> dict[str, float]:
    """The longest gap between two run starts (anywhere in the cluster) that begins within a
    fault or the ``after`` s that follow its end, per fault kind: how long a fault stopped the
    cluster's work."""
    out: dict[str, float] = {}
    for f in faults:
        lo, hi = f.start, (f.ready or f.end or f.start) + after
        i = bisect.bisect_left(starts, lo)
        gaps = [b - a for a, b in zip(starts[max(0, i - 1):], starts[i:]) if a <= hi]
        if gaps:
            out[f.kind] = max(out.get(f.kind, 0.0), max(gaps))
    return out


def fmt_t(t: float | None) -> str:
    if t is None or t == math.inf:
        return "inf"
    return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]


def read_runs(path: Path) -> tuple[dict[str, list[RunRec]], int]:
    runs: dict[str, RunRec] = {}
    bad = 0
    ends = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if rec["ev"] == "start":
            runs[rec["run"]] = RunRec(rec["run"], rec["uid"], rec["node"], rec["epoch"], rec["pid"], rec["start"],
                                      rec.get("due"), raw=[rec])
        else:
            ends.append(rec)
    for rec in ends:
        r = runs.get(rec["run"])
        if r is None:
            r = runs[rec["run"]] = RunRec(rec["run"], rec["uid"], rec["node"], rec["epoch"], rec["pid"], rec["start"],
                                          rec.get("due"))
        r.end, r.ev = rec["end"], rec["ev"]
        r.raw.append(rec)
    by_uid: dict[str, list[RunRec]] = {}
    for r in runs.values():
        by_uid.setdefault(r.uid, []).append(r)
    for lst in by_uid.values():
        lst.sort(key=lambda r: r.start)
    return by_uid, bad


def bound_runs(by_uid: dict[str, list[RunRec]], deaths: dict[int, list[float]], group_kills: dict[str, list[float]]):
    """Upper bound of each run's end (see the module docstring)."""
    by_pid: dict[int, list[float]] = {}
    for lst in by_uid.values():
        for r in lst:
            by_pid.setdefault(r.pid, []).append(r.start)
    for starts in by_pid.values():
        starts.sort()
    for d in deaths.values():
        d.sort()
    for lst in by_uid.values():
        for r in lst:
            if r.end is not None:
                r.bound, r.bound_by = r.end, r.ev
                continue
            cands = []
            starts = by_pid.get(r.pid, [])
            i = bisect.bisect_right(starts, r.start)
            if i < len(starts):
                cands.append((starts[i], "next run of its worker"))
            d = deaths.get(r.pid, [])
            j = bisect.bisect_left(d, r.start)
            if j < len(d):
                cands.append((d[j], "worker seen dead"))
            k = group_kills.get(r.node, [])
            j = bisect.bisect_left(k, r.start)
            if j < len(k):
                cands.append((k[j], "node group SIGKILL"))
            if cands:
                r.bound, r.bound_by = min(cands)


def _log_matches(logs: list[tuple[str, Path]], pattern: re.Pattern) -> Iterator[re.Match]:
    """Every line of the node logs that ``pattern`` matches (a log that cannot be read: none)."""
    for _, path in logs:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = pattern.match(line)
            if m:
                yield m


def parse_takeovers(logs: list[tuple[str, Path]]) -> dict[str, list[tuple[float, str, str]]]:
    """uid -> [(time, taker, dead node)] from the 'took over' warnings of the node logs."""
    out: dict[str, list[tuple[float, str, str]]] = {}
    for m in _log_matches(logs, TAKEOVER):
        t = _log_time(m.group(1), m.group(2))
        uid = m.group(4).rsplit(".", 1)[-1]
        out.setdefault(uid, []).append((t, m.group(3), m.group(5)))
    return out


def _log_time(date: str, ms: str) -> float:
    return time.mktime(time.strptime(date, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def parse_self_fences(logs: list[tuple[str, Path]], faults: list["Fault"], lag: float) -> tuple[list, list, list]:
    """The nodes' own lease lapses ('could not renew its lease', 'renewed its lease after it had
    run out'): (time logged, node) each, split into those a SIGSTOP of that node explains
    (logged when it woke up), those during a fault of the store (a Cassandra node: the lapse,
    up to ``lag`` s before it was logged, fell in [fault start, fault ready + EXPLAIN_AFTER]),
    and the others (the node's heartbeat stalled for longer than its lease with no fault
    injected).

    A lapse is logged when the heartbeat thread sees it, and that thread may be waiting for the
    store: a lapse that comes while a write hangs is logged when the write returns or fails,
    i.e. up to ``lag`` s (Backend.lapse_lag) after the lease ran out."""
    provoked, by_store, unprovoked = [], [], []
    for m in _log_matches(logs, SELF_FENCE):
        t, node = _log_time(m.group(1), m.group(2)), m.group(3)
        stop = [f for f in faults if f.node == node and (
            (f.kind == "stop" and f.start <= t <= (f.end or t) + 1.0)
            or (f.kind in NODE_NET_FAULTS and f.start <= t and t - lag <= (f.ready or math.inf) + EXPLAIN_AFTER))]
        store = [f for f in faults if f.of_store and f.start <= t and t - lag <= (f.ready or math.inf) + EXPLAIN_AFTER]
        (provoked if stop else by_store if store else unprovoked).append((t, node))
    return sorted(provoked), sorted(by_store), sorted(unprovoked)


class Checker:
    def __init__(self, *, plans, accepted, final_rows, by_uid, faults, takeovers, t_stop_recurring, creation,
                 self_fences, listed, pre_stop, stalls, lapse_lag=0.0, refused_writes=0):
        self.refused_writes = refused_writes  # node log lines: an outcome not written, its run fenced
        self.stalls = stalls  # (start, end) of store stalls during a SIGSTOP: a fault of every node
        self.pre_stop = pre_stop  # (recurring rows before STOPJOB, uids live_jobs() listed then, when)
        # every lease lapse a node logged: (time, node, "fault" if a fault of that node explains it,
        # "store" if one of the store does, "" if none). Any lapse of a run's node between the run
        # and its re-run explains the re-run, whatever caused the lapse.
        self.self_fences = self_fences
        self.lapse_lag = lapse_lag  # a lapse may be logged up to this long after the lease ran out
        self.listed = listed  # uids the store's live_jobs() lists at the end
        self.plans = {p.uid: p for p in plans}
        self.accepted = accepted
        self.final = final_rows
        self.by_uid = by_uid
        self.faults = faults
        self.takeovers = takeovers
        self.t_stop = t_stop_recurring
        self.creation = creation
        self.results: list[dict] = []
        self.offences: dict[str, list[str]] = {}

    def add(self, name: str, checked: int, bad: list[str], note: str = "") -> None:
        self.results.append({"check": name, "checked": checked, "violations": len(bad), "note": note})
        if bad:
            self.offences[name] = bad

    def _holders(self, uid: str, lst: list[RunRec], i: int, due: float) -> set[str]:
        """The nodes that held a recurring job around ``due``: those that ran it in the
        HELD_BEFORE s before and the first run after, and dead owners a node log says it was
        taken over from. Before the job's first run nothing names its holder (the node that
        adopted the new row, or whose claim lane its row fell in, leaves no run behind): any
        node may have held it then."""
        if i == 0:
            return {f.node for f in self.faults if not f.of_store} | {r.node for r in lst}
        relevant = set()
        j = i - 1
        while j >= 0 and lst[j].start >= due - HELD_BEFORE:
            relevant.add(lst[j].node)
            j -= 1
        if i > 0:
            relevant.add(lst[i - 1].node)
        if i < len(lst):
            relevant.add(lst[i].node)
        for t, _taker, dead in self.takeovers.get(uid, []):
            if due - HELD_BEFORE <= t <= due + EXPLAIN_AFTER:
                relevant.add(dead)
        return relevant

    def faults_of(self, node: str) -> list[Fault]:
        return [f for f in self.faults if f.node == node]

    def run(self) -> bool:
        # 1. accepted STARTJOBs in the store
        missing = [f"{uid}: accepted at {fmt_t(t)}, not in the store" for uid, t in sorted(self.accepted.items())
                   if self.final.get(uid) is None]
        self.add("1. no accepted STARTJOB missing from the store", len(self.accepted), missing)

        # 2. one-time jobs PROCESSED, with a completed run
        once = [uid for uid in self.accepted if self.plans[uid].kind == "once"]
        bad = []
        for uid in sorted(once):
            row = self.final.get(uid)
            if row is None:
                continue  # reported by 1
            ended = [r for r in self.by_uid.get(uid, []) if r.ev == "end"]
            if row.status is not Status.PROCESSED:
                seen = "" if row.archived else (" listed by live_jobs()" if uid in self.listed else
                                                " NOT listed by live_jobs(): invisible to JOBSTATUS and to the nodes")
                bad.append(f"{uid}: {row.status.value}{seen} (owner {row.worker_id}, epoch {row.epoch}, revision "
                           f"{row.revision}, tries {row.tries}, error {row.error_msg!r}); runs: "
                           + ("; ".join(r.show() for r in self.by_uid.get(uid, [])) or "none"))
            elif not ended:
                bad.append(f"{uid}: PROCESSED without a run that wrote its end record; runs: "
                           + "; ".join(r.show() for r in self.by_uid.get(uid, [])))
        self.add("2. every one-time job ended PROCESSED", len(once), bad)

        # 3. no overlap, no repeated epoch
        bad, pairs, unbounded = [], 0, 0
        for uid, lst in sorted(self.by_uid.items()):
            for i, a in enumerate(lst):
                if a.bound == math.inf:
                    unbounded += 1
                for b in lst[i + 1:]:
                    pairs += 1
                    if b.start < a.bound:
                        bad.append(f"{uid}: runs overlap by {(min(a.bound, b.bound) - b.start) * 1000:.0f} ms:\n"
                                   f"      {a.show()}\n      {b.show()}")
                    else:
                        break
            epochs: dict[int, list[RunRec]] = {}
            for r in lst:
                epochs.setdefault(r.epoch, []).append(r)
            for e, rs in epochs.items():
                if len(rs) > 1:
                    bad.append(f"{uid}: {len(rs)} runs with epoch {e}:\n" + "\n".join(f"      {r.show()}" for r in rs))
        total_runs = sum(len(v) for v in self.by_uid.values())
        self.add("3. no two runs of one key overlapped (nor shared an epoch)", total_runs, bad,
                 f"{unbounded} runs unbounded" if unbounded else "")

        # 4. re-runs of one-time jobs follow a fault of the previous run's node
        bad, reruns, by_fence, by_store_fence, by_fault_fence, by_stall = [], 0, 0, 0, 0, 0
        for uid in sorted(once):
            lst = self.by_uid.get(uid, [])
            for prev, cur in zip(lst, lst[1:]):
                reruns += 1
                ok = [f for f in self.faults_of(prev.node)
                      if f.start <= cur.start and (f.ready or f.end or math.inf) >= prev.start]
                # a lease lapse of the previous run's node between its start and the re-run's
                # start (the lapse, not its log line, must come before the re-run)
                fence = [k for t, n, k in self.self_fences
                         if n == prev.node and prev.start - 1.0 <= t and t - self.lapse_lag <= cur.start]
                if not ok and fence:
                    if "fault" in fence:  # (logged up to lapse_lag after an earlier fault of the node)
                        by_fault_fence += 1
                    elif "store" in fence:
                        by_store_fence += 1
                    else:
                        by_fence += 1
                    continue
                if not ok and any(a <= cur.start and b + 0.2 >= prev.start for a, b in self.stalls):
                    by_stall += 1
                    continue
                if not ok:
                    near = [f"{f.kind} {f.node} {fmt_t(f.start)}-{fmt_t(f.ready)}" for f in self.faults
                            if f.start <= cur.start + 2 and (f.ready or math.inf) >= prev.start - 2]
                    row = self.final.get(uid)
                    bad.append(f"{uid}: re-run without a fault of {prev.node}:\n      {prev.show()}\n      {cur.show()}"
                               f"\n      faults nearby: {', '.join(near) or 'none'}; the row's last error: "
                               f"{row.error_msg if row is not None else None!r}")
        notes = ([f"{by_fault_fence} after a self-fence a fault of the node explains"] if by_fault_fence else []) + \
            ([f"{by_store_fence} after a self-fence during a Cassandra fault"] if by_store_fence else []) + \
            ([f"{by_fence} after a self-fence with no fault injected"] if by_fence else []) + \
            ([f"{by_stall} after a store stall"] if by_stall else [])
        self.add("4. every re-run of a one-time job follows a fault of its node", reruns, bad, "; ".join(notes))

        # 5. recurring jobs: every fire ran (or collapsed into a late run), or a fault explains it
        bad, dues, missed, explained, explained_fence, coalesced = [], 0, 0, 0, 0, 0
        late_served, explained_load, explained_store, lateness = 0, 0, 0, []
        for uid in sorted(u for u in self.accepted if self.plans[u].kind != "once"):
            created = self.creation.get(uid)
            if created is None:
                continue
            if self.plans[uid].kind == "interval":
                first = created
            else:
                first = math.floor(created) + 1.0
            last_k = math.floor(self.t_stop - 1.5 - first)
            lst = self.by_uid.get(uid, [])
            starts = [r.start for r in lst]
            by_k: dict[int, list[RunRec]] = {}  # the fire each run stands for (its due time)
            for r in lst:
                if r.due is None:
                    raise ChaosError(f"{uid}: a run without a due time in the side log: {r.show()}")
                lateness.append(r.start - r.due)
                by_k.setdefault(fire_of(r.due, first), []).append(r)
            in_second = {math.floor(s - first + 1e-9) for s in starts}
            for k in range(0, last_k + 1):
                dues += 1
                due = first + k
                mine = by_k.get(k, [])
                if k in in_second:
                    continue  # a run started within the second after this due time
                if mine:
                    late = min(r.start - r.due for r in mine)
                    if late <= LATE_LIMIT:
                        continue
                    late_served += 1
                    why = "served %.1f s late" % late
                else:
                    missed += 1
                    # A fire that came due while a run of an earlier fire had not started yet (a
                    # late run) or was still going collapses into that run (docs/guides/schedules.md).
                    if any(fire_of(r.due, first) < k and (r.start >= due or r.bound > due)
                           and r.start - r.due <= LATE_LIMIT for r in lst):
                        coalesced += 1
                        continue
                    why = "not served"
                i = bisect.bisect_left(starts, due)
                relevant = self._holders(uid, lst, i, due)
                if any(f.node in relevant and f.start - EXPLAIN_BEFORE <= due <= (f.ready or f.end or math.inf)
                       + EXPLAIN_AFTER for f in self.faults):
                    explained += 1
                    continue
                if any(n in relevant and t - self.lapse_lag - 2.0 <= due <= t + EXPLAIN_AFTER
                       for t, n, _ in self.self_fences) or \
                        any(a - EXPLAIN_BEFORE <= due <= b + EXPLAIN_AFTER for a, b in self.stalls):
                    explained_fence += 1
                    continue
                # overload of a surviving node: faults of other nodes in progress, and the run
                # before (on the node that held the job) already started over LATE s after its due
                # time (a fault of the store is no node's: it must show as a lease lapse)
                if i > 0 and lst[i - 1].start - lst[i - 1].due > LATE and any(
                        f.start - EXPLAIN_BEFORE <= due <= (f.ready or f.end or math.inf) + EXPLAIN_AFTER
                        for f in self.faults if not f.of_store):
                    explained_load += 1
                    continue
                # the same on a node slowed by the store: a Cassandra node in a fault (requests
                # it coordinates, or waits for as a replica, hang up to the request timeout after
                # the fault ends; a restarting JVM loads the host), and the run before already late
                if i > 0 and lst[i - 1].start - lst[i - 1].due > LATE and any(
                        f.start - EXPLAIN_BEFORE <= due <= (f.ready or math.inf) + REAL_TIMEOUT + EXPLAIN_AFTER
                        for f in self.faults if f.of_store):
                    explained_store += 1
                    continue
                # A fault of a node that held the job, struck while the fire was pending and not
                # yet overdue (before due + LATE_LIMIT): the fire lost its node before its deadline.
                served_at = min((r.start for r in mine), default=math.inf)
                if any(f.node in relevant and not f.of_store and due <= f.start <= min(due + LATE_LIMIT, served_at)
                       for f in self.faults):
                    explained += 1
                    continue
                # A network fault of the store (a replica cut off, delay, loss: --partitions), or a
                # Cassandra node SIGSTOPped, slows every request that meets it, up to the request
                # timeout, from the first one on (a claim's LWT sent to the frozen coordinator waits
                # for it: docs/explanation/nodes.md, "Writes that straggle"): a fire served (or
                # collapsed into a run) at most that much later than the usual limit is explained by
                # it, with no need for a run before it to be late already.
                waited = [r.start - r.due for r in mine] or [r.start - r.due for r in lst if fire_of(r.due, first) < k
                                                            and (r.start >= due or r.bound > due)]
                # From LWT_TIMEOUT before it: a claim sent to the node just before it froze waits that
                # long for its answer before it is settled through another host, and on a cluster slowed
                # by an earlier fault a fire's claim is sent a second or two after its due time (seen: a
                # fire due 1.5 s before a SIGSTOP, its claim sent to that node 0.08 s before it).
                if waited and min(waited) <= LATE_LIMIT + REAL_TIMEOUT and any(
                        (f.kind.startswith("net-") or f.kind == "cassandra-stop")
                        and f.start - max(EXPLAIN_BEFORE, LWT_TIMEOUT) <= due
                        <= (f.ready or math.inf) + REAL_TIMEOUT + EXPLAIN_AFTER for f in self.faults if f.of_store):
                    explained_store += 1
                    continue
                prev_s = lst[i - 1].show() if i > 0 else "none"
                next_s = lst[i].show() if i < len(lst) else "none"
                if i >= len(lst):
                    rows, listed, at = self.pre_stop
                    row = rows.get(uid)
                    next_s += (f" (no run up to STOPJOB; the row at {fmt_t(at)}: " + (
                        "missing" if row is None else
                        f"{row.status.value}, owner {row.worker_id}, epoch {row.epoch}, revision {row.revision}, "
                        f"next_run {fmt_t(row.next_run.timestamp()) if row.next_run else None}, "
                        + ("listed" if uid in listed else "NOT listed") + " by live_jobs()") + ")")
                bad.append(f"{uid}: due {fmt_t(due)} {why}, no fault of {sorted(relevant)} explains it:\n"
                           f"      previous run: {prev_s}\n      next run:     {next_s}")
        lateness.sort()

        def pct(p: float) -> float:
            return lateness[min(len(lateness) - 1, int(p * len(lateness)))] if lateness else 0.0

        self.add("5. every recurring fire ran, or a fault explains why not", dues, bad,
                 f"{missed} fires without a run of their own: {coalesced} collapsed into a late run, "
                 f"{explained} explained by faults"
                 + (f", {explained_fence} by a self-fence or store stall" if explained_fence else "")
                 + (f", {explained_load} by overload during faults elsewhere" if explained_load else "")
                 + (f", {explained_store} by store latency during a Cassandra or network fault" if explained_store else "")
                 + (f"; {late_served} served over {LATE_LIMIT:g} s late" if late_served else ""))
        self.stats = {"recurring_due_times": dues, "unserved_due_times": missed, "coalesced": coalesced,
                      "explained": explained, "explained_by_self_fence_or_stall": explained_fence,
                      "explained_by_overload_during_faults": explained_load,
                      "explained_by_store_latency_during_cassandra_faults": explained_store,
                      "served_too_late": late_served,
                      "start_lateness_s": {"p50": pct(0.5), "p99": pct(0.99), "max": lateness[-1] if lateness else 0.0}}
        self._check_fencing()
        return not self.offences

    def _check_fencing(self) -> None:
        """6. No write of a fenced run was accepted: every claim raises a job's epoch, and an
        outcome is written only if the row still carries its run's epoch. A write of an older
        claim that got through after a newer one (a partitioned node coming back with its
        outcome) would leave the row with an epoch below that of a run that started."""
        bad, checked = [], 0
        for uid in sorted(self.accepted):
            row, lst = self.final.get(uid), self.by_uid.get(uid, [])
            if row is None or not lst:
                continue
            checked += 1
            newest = max(lst, key=lambda r: r.epoch)
            if row.epoch < newest.epoch:
                bad.append(f"{uid}: the row's epoch {row.epoch} (owner {row.worker_id}, {row.status.value}) is older "
                           f"than the claim of a run that started:\n      {newest.show()}")
            elif (row.epoch == newest.epoch and self.plans[uid].kind == "once" and row.status is Status.PROCESSED
                  and row.worker_id not in (None, newest.node)):
                bad.append(f"{uid}: PROCESSED by {row.worker_id} under epoch {row.epoch}, which {newest.node} held:"
                           f"\n      {newest.show()}")
        self.add("6. no write of a fenced run accepted (the row keeps its newest claim's epoch)", checked, bad,
                 f"{self.refused_writes} outcome writes of fenced runs refused (node logs)")


# ==================================================================================================
# main
# ==================================================================================================


def warm_up(cluster: "Cluster") -> None:
    """POOL jobs pinned to each node (AFFINITY = its name), logging elsewhere: every node has
    its worker processes before the soak starts. They are not part of the checked jobs. A
    warm-up job that never finishes is reported with what the store and the node say."""
    log = cluster.tmp / "warm-up.jsonl"
    a = json.dumps({"log": str(log), "seconds": 0.3})
    store = cluster.monitor_store
    statements = [f"startjob user_job name='{JOB_NAME}' uid='w-{n}-{i:03d}' affinity='{n}' args='{a}';"
                  for n in cluster.nodes for i in range(POOL)]
    cluster.monitor_client.run_script("".join(statements))
    state = {"live": []}

    def done():
        for node in cluster.nodes.values():
            if not node.alive():
                raise ChaosError(f"node {node.name} exited during the warm-up")
        state["live"] = [j for j in store.live_jobs(type="USER_JOB", name=JOB_NAME) if j.key.uid.startswith("w-")]
        return not state["live"]

    try:
        wait_until(done, 60, "the warm-up jobs")
    except ChaosError:
        started = {json.loads(line)["uid"] for line in log.read_text().splitlines()} if log.exists() else set()
        tasks = {r.name: r.tasks for r in store.nodes()}
        stuck = ", ".join(f"{j.key.uid} {j.status.value} owner {j.worker_id} "
                          f"({'started' if j.key.uid in started else 'no start record'})" for j in state["live"])
        raise ChaosError(f"warm-up jobs still live after 60 s with no fault injected: {stuck}; "
                         f"tasks the nodes publish: {tasks}") from None


def wait_until(pred, timeout: float, what: str, interval: float = 0.2):
    """Until ``pred()`` is true; a store error (a timeout of a real Cassandra under faults)
    counts as not yet."""
    try:
        return wait_for(pred, timeout, what, interval, not_yet=(StoreError,))
    except RigTimeout as exc:
        raise ChaosError(str(exc)) from None


def retry_store(fn, what: str, timeout: float = 60.0):
    """``fn()``, tried again while it fails with a store error (for the script's own reads and
    STOPJOBs, not the checked STARTJOBs: a real Cassandra times out now and then)."""
    return wait_until(lambda: (fn(),), timeout, what, interval=0.5)[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=None, help="seconds of faults (120; 300 with --partitions)")
    ap.add_argument("--partitions", action="store_true",
                    help="Apache Cassandra (3 nodes) and the fabricjobs nodes each on a test host of its own (a "
                         "network namespace), and a network fault every 5-15 s besides the process faults: a node "
                         "cut off, a node with one replica of three, a replica cut off, delay, loss, a slow "
                         "heartbeat path (scripts/chaos_partitions.py; implies --backend cassandra-real)")
    ap.add_argument("--dcs", type=int, default=1,
                    help="cassandra-real: Cassandra nodes in this many data centres (e.g. 2), fabricjobs nodes dealt "
                         "between them, and one DC's Cassandra node SIGSTOPped for 10 s at a time instead of the "
                         "Cassandra faults (scripts/chaos_dcs.py)")
    ap.add_argument("--cassandra-nodes", type=int, default=None,
                    help="with --dcs: how many Cassandra nodes (default: one per DC)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed)")
    ap.add_argument("--nodes", type=int, default=None, help="node processes (4; 3 on cassandra-real)")
    ap.add_argument("--jobs", type=int, default=None, help="jobs in all (2000; 300 on cassandra-real)")
    ap.add_argument("--recurring", type=int, default=None,
                    help="how many of them recur, half interval, half cron (200 on sqlite, 40 on cassandra, "
                         "12 on cassandra-real)")
    ap.add_argument("--backend", choices=list(BACKENDS), default="sqlite",
                    help="sqlite; cassandra (the CQL test server); cassandra-real (Apache Cassandra, 3 nodes, "
                         "started here unless --cassandra-hosts)")
    ap.add_argument("--cassandra-hosts", metavar="HOST[:PORT][,HOST...]",
                    help="cassandra-real: use this running cluster (it needs DC datacenter1 and 3 nodes for RF 3); "
                         "no Cassandra faults then")
    ap.add_argument("--reconcile-ms", type=int, default=None,
                    help="RECONCILE_INTERVAL_MS (200 on sqlite; 500 on cassandra, where a full pass is dozens of "
                         "CQL reads and four nodes polling every 200 ms load the single-threaded test server, "
                         "and on cassandra-real)")
    ap.add_argument("--json", metavar="FILE", help="write the timeline, figures and verdict as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (store, logs, side log)")
    ap.add_argument("--verbose", action="store_true", help="log each fault as it is injected (stderr)")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    if args.cassandra_hosts and args.backend != "cassandra-real":
        ap.error("--cassandra-hosts goes with --backend cassandra-real")
    if args.partitions:
        if args.cassandra_hosts:
            ap.error("--partitions starts Cassandra on test hosts of its own: drop --cassandra-hosts")
        args.backend = "cassandra-real"
        sys.modules.setdefault("chaos", sys.modules[__name__])  # chaos_partitions builds on this module
        from chaos_partitions import PartitionBackend

        backend: Backend = PartitionBackend(args)
    elif args.dcs != 1 or args.cassandra_nodes is not None:
        if args.backend != "cassandra-real" or args.cassandra_hosts or args.dcs < 2:
            ap.error("--dcs N (2 or more) and --cassandra-nodes go with --backend cassandra-real, without "
                     "--cassandra-hosts or --partitions: the run starts (and pauses) Cassandra nodes of its own")
        sys.modules.setdefault("chaos", sys.modules[__name__])  # chaos_dcs builds on this module
        from chaos_dcs import DcBackend

        backend = DcBackend(args)
    else:
        backend = BACKENDS[args.backend](args)
    if args.duration is None:
        args.duration = 300.0 if args.partitions else 120.0
    set_heartbeat(*backend.heartbeat)
    for opt, default in (("nodes", backend.nodes), ("jobs", backend.jobs), ("reconcile_ms", backend.reconcile_ms)):
        if getattr(args, opt) is None:
            setattr(args, opt, default)
    if args.nodes < 2:
        ap.error("--nodes must be at least 2")
    recurring = args.recurring if args.recurring is not None else backend.recurring
    recurring = min(recurring, args.jobs)
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    signal.signal(signal.SIGTERM, _on_sigterm)
    rng = random.Random(seed)
    again = " --partitions" if args.partitions else "".join(  # what a rerun needs besides --seed
        (f" --backend {args.backend}" if args.backend != "sqlite" else "",
         f" --dcs {args.dcs}" if args.dcs != 1 else "",
         f" --cassandra-nodes {args.cassandra_nodes}" if args.cassandra_nodes is not None else ""))
    print(f"chaos: seed {seed} (rerun with --seed {seed}{again}); backend "
          f"{args.backend}{', network partitions' if args.partitions else ''}"
          f"{f', {args.dcs} data centres' if args.dcs != 1 else ''}; {args.nodes} nodes "
          f"(heartbeat {HEARTBEAT_MS} ms x {HEARTBEAT_MISS}, reconcile {args.reconcile_ms} ms, pool {POOL}); "
          f"{args.jobs} jobs ({args.jobs - recurring} one-time, {recurring // 2} interval, "
          f"{recurring - recurring // 2} cron); {args.duration:g} s of faults", flush=True)

    cluster = Cluster(args, rng, backend)
    watcher = RunWatcher(cluster.side_log)
    probe: LockProbe | ReadProbe | None = None
    ok = False
    report: dict = {"seed": seed, "backend": args.backend, "nodes": args.nodes, "jobs": args.jobs,
                    "recurring": recurring, "duration": args.duration}
    try:
        log_line(f"working directory {cluster.tmp}")
        t_begin = time.time()
        cluster.open()
        for node in cluster.nodes.values():
            node.spawn()
        for node in cluster.nodes.values():
            node.wait_ready()
        log_line("nodes ready; warming up (one 0.3 s job per pool slot on each node, so that the start of the "
                 "soak is not a burst of worker forks)")
        warm_up(cluster)
        log_line("warm")
        backend.before_faults(cluster)
        backend.mark()
        watcher.start()
        probe = backend.probe(cluster.config_path, JobKey("USER_JOB", JOB_NAME, f"w-{next(iter(cluster.nodes))}-000"))
        probe.start()
        plans = plan_jobs(rng, args.jobs, recurring, cluster.side_log)
        submitter = Submitter(cluster.submit_client, plans, spread=args.duration * SPREAD)
        submitter.start()

        t_faults = time.time()
        t_end = t_faults + args.duration
        next_fault = t_faults + rng.uniform(1, 3)
        backend.start_faults(cluster, rng, t_end - QUIET_TAIL)
        while time.time() < t_end:
            now = time.time()
            if now >= next_fault and now < t_end - QUIET_TAIL:
                f = cluster.inject()
                if f is not None:
                    log_line(f"fault: {f.kind} {f.node}", always=False)
                next_fault = now + rng.uniform(1, 3)
            backend.check()
            time.sleep(min(0.05, max(0.0, min(next_fault, t_end) - time.time())))
        log_line(f"faults stop ({len(cluster.faults)} injected); waiting for the ones in progress")
        deadline = time.monotonic() + 240  # a Cassandra node's restart can take minutes on a busy host
        for t in cluster.fault_threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in cluster.fault_threads):
            raise ChaosError("a fault did not finish within 240 s")
        submitter.join(timeout=300)
        for node in cluster.nodes.values():
            if not node.alive():
                raise ChaosError(f"node {node.name} is not running after the faults: "
                                 + node.logs[-1].read_text(errors="replace")[-1500:])
        time.sleep(SETTLE)
        store = cluster.monitor_store
        recurring_uids = [p.uid for p in plans if p.kind != "once" and p.uid in submitter.accepted]
        # the recurring rows as they are before STOPJOB (evidence for a job that stopped firing)
        pre_stop = {uid: retry_store(lambda: store.get(JobKey("USER_JOB", JOB_NAME, uid)), f"the row of {uid}")
                    for uid in recurring_uids}
        pre_listed = {j.key.uid for j in retry_store(lambda: store.live_jobs(type="USER_JOB", name=JOB_NAME),
                                                     "live_jobs()")}
        log_line(f"STOPJOB of the {len(recurring_uids)} recurring jobs")
        t_stop_recurring = time.time()
        for i in range(0, len(recurring_uids), 200):
            chunk = "".join(f"stopjob user_job name='{JOB_NAME}' uid='{u}';" for u in recurring_uids[i:i + 200])
            retry_store(lambda: cluster.monitor_client.run_script(chunk), "STOPJOB")
        log_line("waiting for every job to reach a final status")
        state = {"live": None}

        def all_final():
            live = store.live_jobs(type="USER_JOB", name=JOB_NAME)
            state["live"] = len(live)
            for node in cluster.nodes.values():
                if not node.alive():
                    raise ChaosError(f"node {node.name} exited during the drain")
            return not live

        try:
            wait_until(all_final, 180, "every job to be final")
        except ChaosError as exc:
            log_line(f"{exc} ({state['live']} still live); checking what there is")
        t_drained = time.time()
        final_rows = {uid: retry_store(lambda: store.get(JobKey("USER_JOB", JOB_NAME, uid)), f"the row of {uid}")
                      for uid in submitter.accepted}
        listed = {j.key.uid for j in retry_store(lambda: store.live_jobs(type="USER_JOB", name=JOB_NAME),
                                                 "live_jobs()")}
        log_line("all final; stopping the nodes")
        if probe is not None:
            probe.stop()
        backend_lines, backend_report = backend.report_lines(), backend.report()
        cluster.stop_nodes()
        time.sleep(0.2)
        watcher.stop()
        watcher.join(timeout=10)

        by_uid, bad_lines = read_runs(cluster.side_log)
        bound_runs(by_uid, watcher.deaths, cluster.group_kills)
        takeovers = parse_takeovers(cluster.node_logs())
        provoked, by_store, unprovoked = parse_self_fences(cluster.node_logs(), cluster.faults, backend.lapse_lag)
        stalls = backend.stalls(probe.long if probe is not None else [], cluster.faults)
        creation = {uid: row.creation_time.timestamp() for uid, row in final_rows.items() if row is not None}
        checker = Checker(plans=plans, accepted=submitter.accepted, final_rows=final_rows, by_uid=by_uid,
                          faults=cluster.faults, takeovers=takeovers, t_stop_recurring=t_stop_recurring,
                          creation=creation, listed=listed, lapse_lag=backend.lapse_lag,
                          self_fences=sorted([(t, n, "fault") for t, n in provoked] + [(t, n, "store") for t, n in by_store]
                                             + [(t, n, "") for t, n in unprovoked]),
                          pre_stop=(pre_stop, pre_listed, t_stop_recurring), stalls=stalls,
                          refused_writes=sum(1 for _ in _log_matches(cluster.node_logs(), FENCED_WRITE)))
        ok = checker.run()

        # -- the report ------------------------------------------------------------------------------
        kinds: dict[str, int] = {}
        for f in cluster.faults:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        all_runs = [r for lst in by_uid.values() for r in lst]
        ended = {"end": 0, "abort": 0, None: 0}
        for r in all_runs:
            ended[r.ev] = ended.get(r.ev, 0) + 1
        bound_kinds: dict[str, int] = {}
        for r in all_runs:
            if r.ev is None:
                bound_kinds[r.bound_by] = bound_kinds.get(r.bound_by, 0) + 1
        reruns_once = sum(max(0, len(by_uid.get(p.uid, [])) - 1) for p in plans if p.kind == "once")
        log_problems = []
        for name, path in cluster.node_logs():
            for line in path.read_text(errors="replace").splitlines():
                if LOG_PROBLEM.search(line) and not SELF_FENCE.match(line):
                    log_problems.append(f"[{path.name}] {line[:200]}")
        print(f"took {time.time() - t_begin:.0f} s; faults: {len(cluster.faults)} "
              f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}; {len(cluster.fault_errors)} errors); "
              f"STARTJOBs accepted: {len(submitter.accepted)} of {len(plans)}; drain after STOPJOB "
              f"{t_drained - t_stop_recurring:.1f} s")
        print(f"runs: {len(all_runs)} ({ended.get('end', 0)} ended, {ended.get('abort', 0)} aborted, "
              f"{ended.get(None, 0)} killed without an end record, bounded by "
              + (", ".join(f"{k} {v}" for k, v in sorted(bound_kinds.items())) or "-")
              + f"); one-time re-runs {reruns_once}; bad side-log lines {bad_lines}; "
              f"pid watcher sweep max {watcher.lag_max * 1000:.0f} ms")
        st = checker.stats
        lat = st["start_lateness_s"]
        print(f"recurring: {st['recurring_due_times']} due times, {st['unserved_due_times']} without a run of their "
              f"own: {st['coalesced']} collapsed into a late run, {st['explained']} explained by faults"
              + (f", {st['explained_by_self_fence_or_stall']} by a self-fence or store stall"
                 if st['explained_by_self_fence_or_stall'] else "")
              + (f", {st['explained_by_overload_during_faults']} by overload during faults elsewhere"
                 if st['explained_by_overload_during_faults'] else "")
              + (f", {st['explained_by_store_latency_during_cassandra_faults']} by store latency during a Cassandra "
                 "or network fault" if st['explained_by_store_latency_during_cassandra_faults'] else "")
              + f"; start after due time p50 {lat['p50'] * 1000:.0f} ms, p99 {lat['p99'] * 1000:.0f} ms, "
              f"max {lat['max']:.2f} s")
        pauses = longest_pauses(sorted(r.start for r in all_runs), cluster.faults)
        if pauses:
            print("longest pause in run starts during a fault or in the 10 s after it, by kind: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(pauses.items())))
        print(f"self-fencing (lease lapses): {len(provoked)} after a SIGSTOP or a network fault of the node (expected), "
              + (f"{len(by_store)} during a Cassandra or network fault of the store, "
                 if any(f.of_store for f in cluster.faults) else "")
              + f"{len(unprovoked)} with no fault injected"
              + (": " + ", ".join(f"{n} {fmt_t(t)}" for t, n in unprovoked[:12]) if unprovoked else ""))
        for line in backend_lines:
            print(line)
        if probe is not None:
            what, during = backend.probe_what, backend.stall_rule
            print(f"{what} p50 {probe.pct(50) * 1000:.0f} ms, p99 {probe.pct(99) * 1000:.0f} ms, "
                  f"max {probe.pct(100) * 1000:.0f} ms; {len(probe.long)} over {STALL} s"
                  + (f", {len(stalls)} of them {during}" if during else
                     " (not faults: a slow read through one coordinator says nothing of the nodes' heartbeats)"))
            for t, w in probe.long[:5]:
                in_progress = [f"{f.kind} {f.node}" for f in cluster.faults if f.start <= t + w and (f.end or t) >= t]
                print(f"  wait {w:.2f} s from {fmt_t(t)}; faults in progress: {', '.join(in_progress) or 'none'}")
        print(tabulate([[r["check"], r["checked"], r["violations"], r["note"]] for r in checker.results],
                       headers=["check", "checked", "violations", "note"], disable_numparse=True))
        if cluster.fault_errors:
            print("fault errors:\n  " + "\n  ".join(cluster.fault_errors))
        if log_problems:
            print(f"node logs: {len(log_problems)} ERROR / Traceback lines; first ones:")
            for line in log_problems[:10]:
                print("  " + line)
        else:
            print("node logs: no ERROR / Traceback lines")
        if submitter.errors:
            print("refused STARTJOBs (first 5): " + "; ".join(f"{u}: {e}" for u, e in submitter.errors[:5]))
        if submitter.ring_errors:
            print(f"doorbell rings after a batch of STARTJOBs that failed (the STARTJOBs were accepted): "
                  f"{len(submitter.ring_errors)}; first: {submitter.ring_errors[0]}")
        if not ok:
            print(f"\nCHAOS CHECK FAILED (seed {seed}); offending records:")
            for name, items in checker.offences.items():
                per_job: dict[str, int] = {}
                for item in items:
                    uid = item.split(":", 1)[0]
                    per_job[uid] = per_job.get(uid, 0) + 1
                print(f"  {name}: {len(items)} in {len(per_job)} jobs ("
                      + ", ".join(f"{u} {n}" for u, n in sorted(per_job.items(), key=lambda kv: -kv[1])[:20])
                      + (", ..." if len(per_job) > 20 else "") + ")")
                shown: dict[str, int] = {}
                printed = 0
                for item in items:  # at most 2 per job, 30 in all
                    uid = item.split(":", 1)[0]
                    shown[uid] = shown.get(uid, 0) + 1
                    if shown[uid] <= 2 and printed < 30:
                        print("    " + item)
                        printed += 1
            print(f"fault timeline: on stderr{' and in ' + args.json if args.json else ''}; "
                  f"rerun with --seed {seed}{again}")
            print("fault timeline (kind, node, start, end, ready):", file=sys.stderr)
            for f in cluster.faults:
                print(f"  {f.kind:8s} {f.node:8s} {fmt_t(f.start)} end {fmt_t(f.end)} ready {fmt_t(f.ready)} {f.note}",
                      file=sys.stderr)
        else:
            print(f"chaos check PASSED (seed {seed})")
        report.update({
            "passed": ok, "checks": checker.results, "offences": checker.offences,
            "faults": [f.__dict__ for f in cluster.faults], "fault_errors": cluster.fault_errors,
            "accepted": len(submitter.accepted), "refused": submitter.errors, "ring_errors": submitter.ring_errors, "runs": len(all_runs),
            "runs_ended": ended.get("end", 0), "runs_aborted": ended.get("abort", 0),
            "runs_without_end": ended.get(None, 0), "bounds": bound_kinds, "recurring_stats": checker.stats,
            "node_log_problems": log_problems, "longest_pause_after_fault_s": pauses,
            "self_fences_after_sigstop": [(fmt_t(t), n) for t, n in provoked],
            "self_fences_during_store_fault": [(fmt_t(t), n) for t, n in by_store],
            "self_fences_without_fault": [(fmt_t(t), n) for t, n in unprovoked],
            **backend_report,
            "store_probe": None if probe is None else {"p50": probe.pct(50), "p99": probe.pct(99),
                                                           "max": probe.pct(100), "stalls": probe.long},
        })
    except ChaosError as exc:
        print(f"\nCHAOS RUN FAILED (seed {seed}): {exc}", file=sys.stderr)
        report.update({"passed": False, "error": str(exc)})
        ok = False
    except KeyboardInterrupt:
        print(f"chaos: interrupted (seed {seed}); processes killed", file=sys.stderr)
        return 130
    finally:
        watcher.stop()
        if probe is not None:
            probe.stop()
        cluster.close()
        if args.keep or not ok:
            print(f"chaos: kept {cluster.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cluster.tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
