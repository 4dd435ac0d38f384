"""Real node processes on a real store, for end-to-end tests.

A :class:`Cluster` writes a config.ini with short timings, starts ``fabricjobs node``
processes, gives a :class:`~fabricjobs.client.Client` on the same store, and waits on
conditions with deadlines (never sleep-and-hope). Nodes are killed on teardown.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections import defaultdict
from datetime import datetime
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from backends import make_backend_config
from testkit.rig import (  # noqa: F401  (re-exported: the tests import them from here)
    NodeProcess, Rig, free_port, process_alive, process_state, same_cpu_priority, scrape_metrics, wait_for,
)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: Short timings. The heartbeat here is the calm one; see FAST_HEARTBEAT.
FAST = {
    "jobs": {
        "RECONCILE_INTERVAL_MS": 200,
        "OWNER_PRECEDENCE_MS": 300,
        "RETRY_DELAY_SEC": 0.3,
        "MAX_TRIES": 3,
        "STOP_GRACE_SEC": 1.5,
        "SHUTDOWN_GRACE_SEC": 2,
        "USER_JOBS_DIR": str(TESTS / "jobs"),
        "PROCESS_JOBS_DIR": str(TESTS / "process"),
        "CLAIM_EXCEPTIONAL_INTERVAL_SEC": 60,
    },
    "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 8},
}
#: For tests marked ``liveness`` (about dead, paused or restarted nodes): a node is dead 1 s
#: after its last beat and its runs end themselves after 0.6 s. Every other test gets the calm
#: heartbeat above (dead after 4 s): ./scripts/test runs them at a low CPU priority next to the
#: "timing" tests, and a node starved for half a second would see its runs' leases lapse and
#: its jobs re-run, which is right for the product but not what those tests are about.
FAST_HEARTBEAT = {"FABRIC_HEARTBEAT_INTERVAL_MS": 200, "FABRIC_HEARTBEAT_MISS": 5}


class Cluster(Rig):
    """The rig (testkit/rig.py) with a test's store and short timings, a client on
    the same store, and the waits the tests share."""

    def __init__(self, tmp_path: Path, backend: str = "sqlite", settings: dict | None = None, request=None) -> None:
        self.backend = backend
        merged: dict[str, dict] = {s: dict(v) for s, v in FAST.items()}
        if request is None or request.node.get_closest_marker("liveness"):
            merged["heartbeat"] = dict(FAST_HEARTBEAT)
        for section, keys in (settings or {}).items():
            merged.setdefault(section, {}).update(keys)
        super().__init__(tmp_path, make_backend_config(request, backend, tmp_path, merged, nodes=True))
        self._clients: list = []

    # -- nodes ---------------------------------------------------------------------------------

    def start_node(self, name: str, *, node_id: str | None = None, clock_offset: float = 0.0, wait: bool = True,
                   extra_env: dict | None = None, extra_args: list[str] | None = None,
                   config: Path | None = None) -> NodeProcess:
        """``config``: a config.ini of its own for this node (same store), e.g. without the
        metrics port the others serve on."""
        args = []
        if node_id is not None:
            nid = self.tmp / f"node-{name}.id"
            nid.write_text(node_id)
            args += ["--node-id", str(nid)]
        if clock_offset:
            args += ["--clock-offset", str(clock_offset)]
        node = self.spawn(name, config=config, args=args + (extra_args or []), env=extra_env)
        if wait:
            self.wait_started(node)
        return node

    def start_helper_node(self, name: str, helper: str) -> NodeProcess:
        """Node ``name`` run by ``tests/helpers/HELPER`` (``fabricjobs node`` with one fault
        injected) rather than ``python -m fabricjobs``; watched, and killed at the end, like the
        others. Returns once it has started."""
        self._seq += 1
        log_path = self.tmp / f"node-{name}-{self._seq}.log"
        node = self.adopt(NodeProcess.spawn(name, self.config_path, log_path, cwd=self.tmp,
                                            main=[str(TESTS / "helpers" / helper)]))
        self.wait_started(node)
        return node

    def pause(self, node: NodeProcess, *, group: bool = False, timeout: float = 10.0) -> float:
        """SIGSTOP ``node`` (``group``: with its fork server and workers) between two of its
        store transactions. On SQLite a process frozen *inside* a write transaction keeps the
        file's one write lock and stalls every writer (docs/explanation/stores.md: a known limit of
        the embedded store), so the other nodes could not take over at all; these tests are about
        a node paused between transactions. Re-tried until the lock is seen free; returns the
        wall time of the pause that held."""
        send = node.signal_group if group else node.signal
        database = self._sqlite_path() if self.backend == "sqlite" else None
        deadline = time.monotonic() + timeout
        while True:
            paused_at = time.time()
            send(signal.SIGSTOP)
            # kill() returns before the process has stopped: until it has, it may still take the
            # lock after the check below found it free (seen once: the other node's claim then
            # waited out SQLite's busy timeout, 10 s, and the takeover came too late).
            wait_for(lambda: process_state(node.proc.pid) in ("T", "t", "Z", "X", None), 5, f"node {node.name} to stop")
            if database is None or _write_lock_free(database):
                return paused_at
            send(signal.SIGCONT)
            if time.monotonic() > deadline:
                raise AssertionError(f"node {node.name} held the SQLite write lock at every pause for {timeout} s")
            time.sleep(0.01)

    def _sqlite_path(self) -> str:
        from fabricjobs.config import load_config

        return load_config(self.config_path).get("store", "SQLITE_PATH")

    def stop_all(self) -> None:
        self.kill_all()
        for c in self._clients:
            c.close()

    # -- the store -----------------------------------------------------------------------------

    def client(self):
        from fabricjobs.client import Client

        c = Client.from_config(self.config_path)
        self._clients.append(c)
        return c

    def fetch(self, text: str):
        if not self._clients:
            self.client()
        return self._clients[0].fetch(text)

    def job(self, type: str, name: str, uid: str):
        from fabricjobs.model import JobKey

        if not self._clients:
            self.client()
        return self._clients[0].store.get(JobKey(type, name, uid))

    def wait_job(self, type: str, name: str, uid: str, predicate: Callable, timeout: float = 15.0, what: str = ""):
        return wait_for(
            lambda: (lambda j: j if j is not None and predicate(j) else None)(self.job(type, name, uid)),
            timeout, what or f"{type}.{name}.{uid}",
        )

    def shell(self, *args: str, input: str | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess:
        return self.cli("shell", *args, input=input, timeout=timeout)

    def shell_ok(self, text: str) -> str:
        """``fabricjobs shell -e text``, which must succeed; its stdout."""
        r = self.shell("-e", text)
        assert r.returncode == 0, r.stderr
        return r.stdout


    def start_pair(self, port: int) -> int:
        """Start nodes "a" (this cluster's config, metrics on ``port``) and "b" (the same, on a
        port of its own, returned) and wait until each counts the other alive: claim lanes go by
        the live nodes each has seen."""
        other = self.tmp / "b.ini"
        port_b = free_port()
        other.write_text(self.config_path.read_text().replace(f"PORT = {port}", f"PORT = {port_b}"))
        self.start_node("a")
        self.start_node("b", config=other)
        for me, at, peer in (("a", port, "b"), ("b", port_b, "a")):
            wait_for(lambda peer=peer, at=at: f'fabricjobs_peer_heartbeat_age_seconds{{node="{peer}"}}' in scrape_metrics(at), 10,
                     f"{me} to see {peer} alive")
        return port_b


def two_nodes(tmp_path: Path, settings: dict | None = None, backend: str = "sqlite", request=None) -> Cluster:
    """A cluster of local-1 and local-2, started side by side (for a module's fixture; the
    caller stops it). ``request``: the fixture's, for a Cassandra backend. The calm heartbeat,
    also without ``request``: a module's tests are about commands, not liveness, and with the
    fast one a node starved for 0.6 s on a loaded machine had a run end itself and run again
    (a fresh clone, stop 29: JOBHISTORY then showed run 2)."""
    settings = {"heartbeat": dict(FAST["heartbeat"]), **(settings or {})}
    c = Cluster(tmp_path, backend=backend, settings=settings, request=request)
    try:
        for name in ("local-1", "local-2"):
            c.start_node(name, wait=False)
        for node in c.nodes.values():
            c.wait_started(node)
    except BaseException:
        c.stop_all()
        raise
    return c


def two_nodes_on_each_backend(prefix: str, settings: Callable[[Path], dict] | None = None, backends: list | None = None):
    """A module's ``cluster`` fixture: two_nodes once per backend of ``backends`` (default:
    NODE_BACKENDS, tests/backends.py). ``settings``: the nodes' config sections, given the
    module's directory."""
    import pytest

    from backends import NODE_BACKENDS

    @pytest.fixture(scope="module", params=backends or NODE_BACKENDS)
    def cluster(request, tmp_path_factory):
        where = tmp_path_factory.mktemp(f"{prefix}-{request.param}")
        c = two_nodes(where, settings(where) if settings else None, backend=request.param, request=request)
        yield c
        c.stop_all()

    return cluster


def table_row(*cells: str) -> "re.Pattern[str]":
    """A row of the shell's table with these first cells, as it pads them."""
    return re.compile("| " + " +\\| ".join(re.escape(c) for c in cells) + " +\\|")


def read_records(path: Path) -> list[dict]:
    """The side log the test jobs append to (one JSON object per line)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a record cut by a kill
    return out


class RunWatch(threading.Thread):
    """Watches the worker process of each run a starts file names (Probe.record's ``starts``
    records carry its pid) and notes when it was first seen gone, every ``interval`` s: the
    latest moment a run that left no end record can have ended. A node that loses its lease
    kills the workers of runs that have not yet seen it themselves, and a killed run writes
    nothing; its worker's end is its end."""

    def __init__(self, starts: Path, interval: float = 0.05) -> None:
        super().__init__(name="run-watch", daemon=True)
        self.starts, self.interval = starts, interval
        self.gone: dict[int, float] = {}  # pid -> when first seen gone
        self._done = threading.Event()

    def run(self) -> None:
        watched: set[int] = set()
        while not self._done.is_set():
            watched.update(r["pid"] for r in read_records(self.starts))
            for pid in watched - set(self.gone):
                if not process_alive(pid):
                    self.gone[pid] = time.time()
            self._done.wait(self.interval)

    def finish(self) -> None:
        self._done.set()
        if self.is_alive():
            self.join(5)

    def __enter__(self) -> "RunWatch":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def merge_runs(started: list[dict], ended: list[dict], gone: dict[int, float] | None = None,
               died: dict[tuple[str, str], list[float]] | None = None) -> list[dict]:
    """Each run from its start record (Probe.record with ``starts``), with the end its end
    record gave; one without (killed before it could write one) ends when its worker was seen
    gone (``gone``: RunWatch.gone), marked killed; one with neither has no end (still going).
    RunWatch looks every 50 ms, so its time is late by up to that: where the node that ran it
    logged its worker's death (``died``: worker_deaths), the first such line after its start
    is the earlier bound. A run that ended but whose node lost its lease before the outcome was
    written is run again: at least once after a fault, never two at once."""
    ends = {(r["key"], r["epoch"]): r for r in ended}
    out = []
    for r in started:
        end = ends.get((r["key"], r["epoch"]))
        if end is not None:
            out.append(dict(r, end=end["end"], aborted=end["aborted"]))
        elif gone is not None and r["pid"] in gone:
            seen = [t for t in (died or {}).get((r["node"], r["key"]), []) if t >= r["start"] - 0.001]
            out.append(dict(r, end=min([gone[r["pid"]], *seen[:1]]), aborted=True, killed=True))
        else:
            out.append(dict(r))
    return out


def worker_deaths(nodes: dict) -> dict[tuple[str, str], list[float]]:
    """(node name, job key) -> when that node logged a run's worker dead, in order: the node
    sees a worker's death from the process itself, so its run had ended by then (the log time
    is cut to the millisecond: at most that early)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    pattern = re.compile(r"job (\S+) failed \(error\): worker process died")
    for name, node in nodes.items():
        for line in node.log().splitlines():
            m, found = LOG_TIME.match(line), pattern.search(line)
            if m and found:
                out[(name, found.group(1))].append(log_time(m) + 0.001)  # (the line's time, cut to the ms)
    return out


#: What a node logs when its lease ran out: the heartbeat noticed (self-fencing), or a beat
#: came back after the lease had lapsed (runs claimed before end then).
FENCES = ("could not renew its lease", "renewed its lease after it had run out")
LOG_TIME = re.compile(r"^[A-Z]+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(match: re.Match) -> float:
    """The epoch seconds of a node log line's time (LOG_TIME's match; local time, ms)."""
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def fence_times(node) -> list[float]:
    """When ``node`` (a NodeProcess) logged that its lease ran out, as epoch seconds."""
    out = []
    for line in node.log().splitlines():
        m = LOG_TIME.match(line)
        if m and any(f in line for f in FENCES):
            out.append(log_time(m))
    return out


def unexplained_reruns(runs: list[dict], fences: dict[str, list[float]]) -> list:
    """Each run (merge_runs) followed by another run of its key, unless the node that ran it
    fenced itself (``fences``: fence_times per node name) between the run's start and the next
    run's start (half a second of slack: the log line's time is taken after the verdict)."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        by_key[r["key"]].append(r)
    out = []
    for key, runs in by_key.items():
        runs.sort(key=lambda r: r["start"])
        for run, rerun in zip(runs, runs[1:]):
            if not any(run["start"] <= t <= rerun["start"] + 0.5 for t in fences.get(run["node"], [])):
                out.append((key, run, rerun))
    return out


def assert_no_overlap(records, until=None):
    """Runs of one key never overlap in time (a run without an end record lasted until ``until``)."""
    by_key = defaultdict(list)
    for r in records:
        by_key[r["key"]].append((r["start"], r.get("end", until), r["node"], r["epoch"]))
    for key, runs in by_key.items():
        runs.sort()
        for (s1, e1, n1, ep1), (s2, e2, n2, ep2) in zip(runs, runs[1:]):
            assert e1 is not None and e1 <= s2, f"{key}: run on {n1} (epoch {ep1}) overlaps run on {n2} (epoch {ep2})"
            assert ep2 > ep1, f"{key}: a later run has no newer epoch"


def assert_finished_by_newest_runs(store, keys, started) -> None:
    """Each job's row is PROCESSED under the epoch and node of its newest run (start records):
    no outcome of an older, fenced run of the job was accepted after a newer run began."""
    newest: dict[str, dict] = {}
    for r in started:
        if r["key"] not in newest or r["epoch"] > newest[r["key"]]["epoch"]:
            newest[r["key"]] = r
    for key in keys:
        row, run = store.get(key), newest[str(key)]
        assert row is not None and row.status.value == "PROCESSED", (key, row)
        assert (row.epoch, row.worker_id) == (run["epoch"], run["node"]), \
            f"{key}: row at epoch {row.epoch} by {row.worker_id}, newest run epoch {run['epoch']} on {run['node']}"


def fill_up(filler: Path) -> None:
    """Writes ``filler`` until its filesystem has no block left (ENOSPC): a disk that is full."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (b"\0" * 65536, b"\0" * 512):
            try:
                while os.write(fd, chunk):
                    pass
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)


def _write_lock_free(database: str) -> bool:
    """Whether a write transaction on the SQLite file can begin within 0.1 s."""
    conn = sqlite3.connect(database, timeout=0.1, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False  # locked past the timeout: the frozen node holds it
    finally:
        conn.close()


def start_inbox_listener(cluster, log: Path) -> None:
    """STARTJOB of a Probe.handle_file listener on LISTENER_ROOT/inbox (*.csv, quick to settle
    and to poll, each handled file recorded in ``log``); returns once it runs and has sorted
    out the files present when it started (its baseline mark): a file the test drops in after
    that is new to it. (Waiting a fixed half second for that failed on a loaded machine: the
    listener's worker took longer to start, took a file moved in with an old time for one that
    had been there all along, and never ran it.)"""
    from fabricjobs.model import JobKey, Status

    args = json.dumps({"path": "inbox", "pattern": "*.csv", "settle_sec": 0.1, "poll_sec": 0.2, "log": str(log)})
    cluster.fetch(f"startjob interface_listener name='Probe.handle_file' uid='inbox' args='{args}';")
    cluster.wait_job("INTERFACE_LISTENER", "Probe.handle_file", "inbox", lambda j: j.status is Status.IN_PROCESS)
    key = JobKey("INTERFACE_LISTENER", "Probe.handle_file", "inbox")
    store = cluster.client().store  # a second store in this process: it lost the first one's locks (private.py)
    wait_for(lambda: any(m.startswith("/present at") for m in store.marked_files(key)), 30,
             "the listener's first scan (its baseline mark)")


def module_two_nodes(prefix: str):
    """A module's ``cluster`` fixture: two_nodes on SQLite (local-1, local-2), started once for
    the module's tests, which are about commands and run one after another on it."""
    import pytest

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        c = two_nodes(tmp_path_factory.mktemp(prefix))
        yield c
        c.stop_all()

    return cluster


def wait_records(path: Path, count: int, timeout: float = 20.0) -> list[dict]:
    """Until the side log at ``path`` holds ``count`` records; those records."""
    return wait_for(lambda: (lambda r: r if len(r) >= count else None)(read_records(path)), timeout,
                    f"{count} record(s) in {path}")


def start_recurring_probe(cluster, tmp_path: Path, uid: str, seconds: float) -> tuple[Path, Path]:
    """Probe.record every second under ``uid``, each run ``seconds`` long; its (runs, starts)
    logs, once its first run started."""
    log, starts = tmp_path / "ran.log", tmp_path / "starts.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='{uid}' exec_interval='00:00:01' "
                            f"args='{{\"log\": \"{log}\", \"seconds\": {seconds}, \"starts\": \"{starts}\"}}';")
    assert r.returncode == 0, r.stderr
    wait_records(starts, 1)
    return log, starts
