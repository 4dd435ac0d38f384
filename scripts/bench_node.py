#!/usr/bin/env python3
"""One node: throughput of no-op one-time jobs, and fire delay of interval jobs (docs/benchmarks.md).

Part A  one `fabricjobs node` process (K2JOBS_POOL_SIZE = --pool, SQLite synchronous=FULL, the
        default) on a fresh store. After the node is ready and has run one warm-up no-op per
        pool slot, --jobs no-op one-time USER_JOBs are submitted as fast as the client allows
        (scripts of 200 STARTJOBs). Measured: submit rate alone, and jobs/s from the first
        submit until the last of them is PROCESSED (its end_time in the store).
Part B  --interval-jobs jobs with EXEC_INTERVAL='00:00:01' run for --seconds; each run appends
        its start time (time.time() in the worker). Run k of a job is due at its creation_time
        + k s (fixed rate, first run due at creation). Printed: p50 / p99 / max delay from due
        time to start, and missed or doubled fires (run count per job against the elapsed time,
        allowing the last partial second; pairs of runs less than 0.5 s apart).

Everything lives in a temporary directory (store, config, jobs module, node logs), removed at
the end unless --keep. Every process started is killed on exit, Ctrl-C or error. Node logs are
scanned for WARNING / ERROR / Traceback lines, which are printed.

usage: .venv/bin/python scripts/bench_node.py [--jobs 2000] [--pool 25] [--interval-jobs 100]
                                              [--seconds 15] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tabulate import tabulate  # noqa: E402

from fabricjobs.client import Client  # noqa: E402
from testkit.rig import (  # noqa: E402, F401  (group_stats, wait_for: bench.py imports them from here)
    NodeProcess, Rig as NodeRig, RigError, group_cpu_seconds, group_stats, process_cpu_seconds, pythonpath_with, wait_for,
    write_config,
)
from fabricjobs.model import Status  # noqa: E402

#: The user jobs of the benchmarks, written into the temporary jobs directory as Bench.py.
JOBS_MODULE = '''\
"""Benchmark jobs (written by scripts/bench_node.py)."""
import json
import os
import time

from fabricjobs.jobs.context import current_job


def _append(path, record):
    line = (json.dumps(record) + "\\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def noop():
    return None


def stamp(log):
    """Appends the start time of this run."""
    start = time.time()
    job = current_job()
    _append(log, {"uid": job.key.uid, "node": job.node, "epoch": job.epoch, "start": start,
                  "due": job.due.timestamp() if job.due is not None else None})


def hold(log, seconds=30.0):
    """Appends a start record, then runs ``seconds`` while watching is_aborted()."""
    start = time.time()
    job = current_job()
    _append(log, {"uid": job.key.uid, "node": job.node, "epoch": job.epoch, "start": start, "pid": os.getpid()})
    while time.time() - start < seconds:
        if job.is_aborted():
            raise InterruptedError("aborted")
        time.sleep(0.05)
'''

SUBMIT_BATCH = 200
LOG_PATTERN = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback")
EXPECTED_LOG = re.compile(r"\bWARNING\b.* took over .* from dead node ")


class BenchError(RuntimeError):
    """Something the benchmark waited for did not happen."""


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """SIGTERM ends the benchmark like Ctrl-C does: through the finally blocks that clean up."""
    signal.signal(signal.SIGTERM, _on_sigterm)


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def machine_facts() -> dict:
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        nproc = os.cpu_count()
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
        if commit and subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no",
                                      "--", "fabricjobs"], capture_output=True, text=True, timeout=5).stdout.strip():
            commit += "+uncommitted changes in fabricjobs/"
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "nproc": nproc,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(terse=True),
        "tmp_filesystem": filesystem_of(tempfile.gettempdir()),
        "commit": commit,
    }


def filesystem_of(path: str) -> str:
    """Type of the file system holding ``path`` (the store's fsync cost depends on it)."""
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def facts_line(f: dict) -> str:
    line = (f"machine: nproc {f['nproc']}, Python {f['python']}, SQLite {f['sqlite']}, {f['platform']}, "
            f"temp dir on {f['tmp_filesystem']}")
    return line + (f", commit {f['commit']}" if f.get("commit") else "")


# -- nodes on a temporary store ---------------------------------------------------------------------


class Rig(NodeRig):
    """The cluster rig (testkit/rig.py) in a temporary directory with a config.ini,
    a SQLite store (or the backend ``settings`` name) and the Bench jobs module. ``close()``
    kills every process group it started and removes the directory."""

    def __init__(self, settings: dict[str, dict[str, object]], *, label: str = "bench", keep: bool = False) -> None:
        self.label = label
        self.keep = keep
        tmp = Path(tempfile.mkdtemp(prefix=f"fabricjobs-{label}-"))
        super().__init__(tmp, tmp / "config.ini")
        self._client: Client | None = None
        self._closed = False
        self.log_findings: list[tuple[str, str]] = []  # (node, line)
        jobs_dir = self.tmp / "jobs"
        jobs_dir.mkdir()
        (jobs_dir / "Bench.py").write_text(JOBS_MODULE)
        sections: dict[str, dict[str, object]] = {
            "store": {"BACKEND": "sqlite", "SQLITE_PATH": str(self.tmp / "jobs.db")},
            "jobs": {"USER_JOBS_DIR": str(jobs_dir)},
        }
        for section, keys in settings.items():
            sections.setdefault(section, {}).update(keys)
        self.settings = sections
        write_config(self.config_path, sections)

    # -- processes ----------------------------------------------------------------------------------

    def start_node(self, name: str, log_level: str = "warning", config: Path | None = None) -> NodeProcess:
        """A node process; FJ_BENCH_LOG=info (say) in the environment overrides its log level,
        to see what the nodes did during a benchmark run kept with --keep."""
        return self.spawn(name, config=config, log_level=os.environ.get("FJ_BENCH_LOG", log_level),
                          env={"TMPDIR": str(self.tmp), "PYTHONPATH": pythonpath_with(ROOT)})

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_config(self.config_path)
        return self._client

    def wait_ready(self, names: list[str], timeout: float = 30.0) -> None:
        """Each node has written its heartbeat row (state running, its own pid) and has run a
        probe job pinned to it by AFFINITY: it claims and runs jobs."""
        store = self.client.store

        def rows_up():
            rows = {r.name: r for r in store.nodes()}
            return all(n in rows and rows[n].state == "running" and rows[n].pid == self.nodes[n].pid for n in names)

        wait_for(rows_up, timeout, f"the heartbeat rows of nodes {', '.join(names)}", check=self.check_nodes)
        self.client.run_script("".join(
            f"startjob user_job name='Bench.noop' uid='ready-{n}' affinity='{n}';" for n in names))
        self.wait_processed(lambda uid: uid.startswith("ready-"), len(names), utc(time.time() - 3600), timeout,
                            f"the readiness probe jobs (AFFINITY = node) of nodes {', '.join(names)}")

    def warm_up(self, names: list[str], per_node: int, timeout: float = 60.0, job: str = "Bench.noop",
                args: str = "{}") -> None:
        """``per_node`` runs of ``job`` (a no-op by default) pinned to each node, so that its
        worker processes exist, and it has seen the job run, before a measurement starts."""
        text = "".join(f"startjob user_job name='{job}' uid='warm-{n}-{job}-{i}' affinity='{n}' args='{args}';"
                       for n in names for i in range(per_node))
        self.client.run_script(text)
        self.wait_processed(lambda uid: uid.startswith("warm-") and f"-{job}-" in uid, per_node * len(names),
                            utc(time.time() - 3600), timeout, f"the warm-up runs of {job}")

    def wait_processed(self, select: Callable[[str], bool], count: int, since: datetime, timeout: float,
                       what: str, interval: float = 0.05) -> list:
        """Wait until ``count`` archived rows whose uid ``select`` accepts are PROCESSED; return
        them. A selected row that ends FAILED or TERMINATED fails at once."""
        store = self.client.store
        state = {"done": 0}

        def done():
            rows = [j for j in store.archived_since(since) if select(j.key.uid)]
            bad = [j for j in rows if j.status is not Status.PROCESSED]
            if bad:
                j = bad[0]
                raise BenchError(f"{len(bad)} of the {what} ended {j.status.value} instead of PROCESSED "
                                 f"(first: {j.key}: {j.error_msg!r})")
            state["done"] = len(rows)
            return rows if len(rows) >= count else None

        return wait_for(done, timeout, lambda: f"{what}: {state['done']} of {count} PROCESSED",
                        interval=interval, check=self.check_nodes)

    def submit(self, statements: list[str], batch: int = SUBMIT_BATCH) -> tuple[float, float]:
        """Run the statements in scripts of ``batch``; return (wall time before, after)."""
        scripts = ["".join(statements[i:i + batch]) for i in range(0, len(statements), batch)]
        client = self.client
        t0 = time.time()
        for s in scripts:
            client.run_script(s)
        return t0, time.time()

    def run_then_stop(self, name: str, until: float, timeout: float,
                      on_stop: Callable[[], None] | None = None) -> float:
        """Let the recurring jobs called ``name`` run until ``until`` (wall time), watching the
        nodes; then (after ``on_stop``) STOPJOB them all and wait until none is live. Returns
        the STOPJOB time."""
        while time.time() < until:
            self.check_nodes()
            time.sleep(min(0.2, max(0.0, until - time.time())))
        if on_stop is not None:
            on_stop()
        t_stop = time.time()
        self.client.fetch(f"stopjob user_job name='{name}';")
        store = self.client.store
        wait_for(lambda: not store.live_jobs(type="USER_JOB", name=name), timeout,
                 f"the recurring jobs {name} to end after STOPJOB", interval=0.1, check=self.check_nodes)
        return t_stop

    # -- the end --------------------------------------------------------------------------------------

    def scan_logs(self) -> None:
        for node in self.nodes.values():
            for line in node.log().splitlines():
                if LOG_PATTERN.search(line):
                    self.log_findings.append((node.name, line))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._client is not None:
                self._client.close()
        except Exception:
            pass
        for node in self.kill_all():
            print(f"warning: processes of node {node.name}'s group {node.pid} still alive", file=sys.stderr)
        self.scan_logs()
        if self.keep:
            print(f"[{self.label}] kept {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "Rig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def print_log_findings(findings: list[tuple[str, str]], limit: int = 12) -> None:
    """Print the WARNING / ERROR / Traceback lines of the node logs; the takeover warnings that a
    failover test causes on purpose are only counted."""
    expected = [f for f in findings if EXPECTED_LOG.search(f[1])]
    other = [f for f in findings if not EXPECTED_LOG.search(f[1])]
    note = f" ({len(expected)} expected 'took over ... from dead node' warnings not shown)" if expected else ""
    if not other:
        print(f"node logs: no other WARNING / ERROR / Traceback lines{note}" if expected
              else "node logs: no WARNING / ERROR / Traceback lines")
        return
    kinds: dict[str, int] = {}
    for _, line in other:
        m = LOG_PATTERN.search(line)
        kinds[m.group(0)] = kinds.get(m.group(0), 0) + 1
    print("node logs: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f" lines{note}; first ones:")
    for name, line in other[:limit]:
        print(f"  [{name}] {line[:220]}")


# -- part A: throughput ------------------------------------------------------------------------------


def throughput(rig: Rig, jobs: int, prefix: str = "a") -> dict:
    """Submit ``jobs`` no-op STARTJOBs at once; wait until all are PROCESSED. Figures from the
    store: the last end_time of them, not the time the poll noticed."""
    pgids = [n.pid for n in rig.nodes.values()]
    cpu0 = {p: (process_cpu_seconds(p), group_cpu_seconds(p)) for p in pgids}
    statements = [f"startjob user_job name='Bench.noop' uid='{prefix}{i:06d}';" for i in range(jobs)]
    since = utc(time.time() - 1)
    t_first, t_submitted = rig.submit(statements)
    rows = rig.wait_processed(lambda uid: uid.startswith(prefix) and uid[len(prefix):].isdigit(), jobs, since,
                              timeout=60 + jobs * 0.1, what=f"the {jobs} no-op jobs", interval=0.25)
    t_last = max(j.end_time.timestamp() for j in rows)
    wall = t_last - t_first
    cpu1 = {p: (process_cpu_seconds(p), group_cpu_seconds(p)) for p in pgids}
    per_node: dict[str, int] = {}
    for j in rows:
        per_node[j.worker_id or "?"] = per_node.get(j.worker_id or "?", 0) + 1
    queue_wait = [(j.start_time - j.creation_time).total_seconds() for j in rows if j.start_time]
    return {
        "jobs": jobs,
        "submit_seconds": t_submitted - t_first,
        "submit_per_s": jobs / (t_submitted - t_first),
        "end_to_end_seconds": wall,
        "jobs_per_s": jobs / wall,
        "last_submit_to_all_processed_seconds": t_last - t_submitted,
        "per_node": dict(sorted(per_node.items())),
        "node_main_cpu_seconds": sum(cpu1[p][0] - cpu0[p][0] for p in pgids),
        "node_group_cpu_seconds": sum(cpu1[p][1] - cpu0[p][1] for p in pgids),
        "creation_to_start_p50_ms": percentile(queue_wait, 50) * 1000 if queue_wait else None,
        "creation_to_start_max_ms": max(queue_wait) * 1000 if queue_wait else None,
    }


# -- part B: fire delay of interval jobs ------------------------------------------------------------


def fire_delay(rig: Rig, count: int, seconds: float) -> dict:
    log = rig.tmp / "stamps.jsonl"
    statements = [
        f"startjob user_job name='Bench.stamp' uid='i{i:04d}' exec_interval='00:00:01' "
        f"args='{json.dumps({'log': str(log)})}';"
        for i in range(count)
    ]
    store = rig.client.store
    _, t_submitted = rig.submit(statements)
    created = {j.key.uid: j.creation_time.timestamp() for j in store.live_jobs(type="USER_JOB", name="Bench.stamp")}
    if len(created) != count:
        raise BenchError(f"expected {count} live interval jobs after STARTJOB, found {len(created)}")
    t_stop = rig.run_then_stop("Bench.stamp", t_submitted + seconds, 30)

    starts: dict[str, list[float]] = {uid: [] for uid in created}
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec["uid"] in starts and rec["start"] < t_stop:
            starts[rec["uid"]].append(rec["start"])

    delays: list[float] = []
    missed = doubled = early = close_pairs = 0
    jobs_missing, jobs_doubled = [], []
    for uid, c in created.items():
        ts = sorted(starts[uid])
        due_count = math.floor(t_stop - c) + 1  # fires due at c, c+1, ... <= t_stop
        # the fire due in the last partial second may not have started by t_stop
        if len(ts) < due_count - 1:
            missed += due_count - 1 - len(ts)
            jobs_missing.append(uid)
        if len(ts) > due_count:
            doubled += len(ts) - due_count
            jobs_doubled.append(uid)
        close_pairs += sum(1 for a, b in zip(ts, ts[1:]) if b - a < 0.5)
        for k, s in enumerate(ts):
            d = s - (c + k)
            early += d < -0.001
            delays.append(d)
    if not delays:
        raise BenchError("no interval run started (the stamps log is empty)")
    return {
        "interval_jobs": count,
        "observed_seconds": seconds,
        "runs": len(delays),
        "delay_p50_ms": percentile(delays, 50) * 1000,
        "delay_p99_ms": percentile(delays, 99) * 1000,
        "delay_max_ms": max(delays) * 1000,
        "delay_min_ms": min(delays) * 1000,
        "missed_fires": missed,
        "jobs_with_missed_fires": len(jobs_missing),
        "doubled_fires": doubled,
        "jobs_with_doubled_fires": len(jobs_doubled),
        "run_pairs_under_500ms_apart": close_pairs,
        "runs_before_due": early,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000, help="no-op one-time jobs of part A (2000)")
    ap.add_argument("--pool", type=int, default=25, help="K2JOBS_POOL_SIZE (25)")
    ap.add_argument("--interval-jobs", type=int, default=100, help="interval jobs of part B (100)")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long part B runs (15)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (store, node logs)")
    args = ap.parse_args()
    install_signal_handlers()

    facts = machine_facts()
    settings = {"jobs": {"K2JOBS_POOL_SIZE": args.pool}}
    result: dict = {"machine": facts, "settings": {"pool": args.pool, "sqlite_synchronous": "FULL (default)",
                                                    "log_level": "warning", "submit_batch": SUBMIT_BATCH}}
    rig = Rig(settings, label="bench-node", keep=args.keep)
    try:
        rig.start_node("bench1")
        rig.wait_ready(["bench1"])
        rig.warm_up(["bench1"], args.pool)
        a = throughput(rig, args.jobs)
        result["throughput"] = a
        b = fire_delay(rig, args.interval_jobs, args.seconds) if args.interval_jobs > 0 else None
        result["fire_delay"] = b
    except KeyboardInterrupt:
        print("bench_node: interrupted; node processes killed", file=sys.stderr)
        return 130
    except (BenchError, RigError) as exc:
        rig.close()
        print(f"bench_node: FAILED: {exc}", file=sys.stderr)
        print_log_findings(rig.log_findings)
        return 1
    finally:
        rig.close()
    result["node_log_findings"] = [f"[{n}] {l}" for n, l in rig.log_findings]

    print(f"fabricjobs bench_node: one node, pool {args.pool}, SQLite synchronous=FULL, log level warning")
    print(f"A. {args.jobs} no-op one-time USER_JOBs submitted at once (scripts of {SUBMIT_BATCH} STARTJOBs), "
          f"after {args.pool} warm-up jobs")
    print(tabulate([
        ["submit (client) jobs/s", f"{a['submit_per_s']:,.0f}", f"{a['submit_seconds']:.2f} s for all"],
        ["first submit -> all PROCESSED", f"{a['end_to_end_seconds']:.2f} s", "last end_time in the store"],
        ["throughput jobs/s", f"{a['jobs_per_s']:,.1f}", "jobs / end-to-end"],
        ["last submit -> all PROCESSED", f"{a['last_submit_to_all_processed_seconds']:.2f} s",
         "the node's backlog when submitting ended"],
        ["creation -> start p50 / max", f"{a['creation_to_start_p50_ms']:,.0f} / {a['creation_to_start_max_ms']:,.0f} ms",
         "queueing in the store"],
        ["node CPU (main / whole group)", f"{a['node_main_cpu_seconds']:.1f} / {a['node_group_cpu_seconds']:.1f} s",
         f"over {a['end_to_end_seconds']:.1f} s wall"],
    ], headers=["part A", "value", "note"], disable_numparse=True))
    if b is not None:
        print(f"B. {b['interval_jobs']} interval jobs, EXEC_INTERVAL='00:00:01', {b['observed_seconds']:g} s: "
              "delay from due time (creation + k s) to start")
        print(tabulate([[
            b["runs"], f"{b['delay_p50_ms']:.0f}", f"{b['delay_p99_ms']:.0f}", f"{b['delay_max_ms']:.0f}",
            f"{b['missed_fires']} ({b['jobs_with_missed_fires']} jobs)",
            f"{b['doubled_fires']} ({b['jobs_with_doubled_fires']} jobs)",
            b["run_pairs_under_500ms_apart"], b["runs_before_due"],
        ]], headers=["runs", "p50 ms", "p99 ms", "max ms", "missed", "doubled", "gaps<0.5s", "early"],
            disable_numparse=True))
    print(facts_line(facts))
    print_log_findings(rig.log_findings)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
