#!/usr/bin/env python3
"""Several node processes on one SQLite store: throughput and failover (issue #5).

Throughput  for each count in --nodes (1, 2, 4): a fresh store, that many `fabricjobs node`
            processes (pool --pool each, synchronous=FULL, log level warning), each ready and
            warmed up with one no-op per pool slot; then --jobs no-op one-time USER_JOBs are
            submitted at once (scripts of 200 STARTJOBs). Printed: jobs/s from the first submit
            until the last of them is PROCESSED (its end_time in the store), the submit rate
            alone, and how the jobs spread over the nodes.
Failover    3 nodes with FABRIC_HEARTBEAT_INTERVAL_MS=200 x FABRIC_HEARTBEAT_MISS=5 (dead after
            1 s) and RECONCILE_INTERVAL_MS=200; --failover-jobs jobs that each append a start
            record and then run 30 s. Once all have started, the node running the most of them
            is SIGKILLed (its whole process group: node, fork server, workers). Printed: seconds
            from the kill until each of its jobs has started again on another node (min,
            median, max), next to the configured dead threshold and reconcile interval.

Everything lives in temporary directories, removed at the end unless --keep; every process
started is killed on exit, Ctrl-C or error. Node logs are scanned for WARNING / ERROR /
Traceback lines, which are printed.

usage: .venv/bin/python scripts/bench_cluster.py [--jobs 5000] [--nodes 1,2,4] [--pool 25]
                                                 [--failover-jobs 20] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tabulate import tabulate  # noqa: E402

from bench_node import (  # noqa: E402
    SUBMIT_BATCH, BenchError, Rig, facts_line, install_signal_handlers, machine_facts, print_log_findings,
    throughput, wait_for,
)
from fabricjobs.model import Status  # noqa: E402

HEARTBEAT_MS = 200
HEARTBEAT_MISS = 5
RECONCILE_MS = 200
HOLD_SECONDS = 30


def cluster_throughput(n: int, jobs: int, pool: int, keep: bool, findings: list) -> dict:
    rig = Rig({"jobs": {"K2JOBS_POOL_SIZE": pool}}, label=f"bench-cluster-{n}", keep=keep)
    try:
        names = [f"node{i + 1}" for i in range(n)]
        for name in names:
            rig.start_node(name)
        rig.wait_ready(names)
        rig.warm_up(names, pool)
        out = throughput(rig, jobs)
        out["nodes"] = n
        return out
    finally:
        rig.close()
        findings.extend((f"{n} nodes/{name}", line) for name, line in rig.log_findings)


def read_starts(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a record cut by the kill
    return out


def failover(count: int, pool: int, keep: bool, findings: list) -> dict:
    settings = {
        "jobs": {"K2JOBS_POOL_SIZE": pool, "RECONCILE_INTERVAL_MS": RECONCILE_MS},
        "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": HEARTBEAT_MS, "FABRIC_HEARTBEAT_MISS": HEARTBEAT_MISS},
    }
    rig = Rig(settings, label="bench-failover", keep=keep)
    try:
        names = ["node1", "node2", "node3"]
        for name in names:
            rig.start_node(name)
        rig.wait_ready(names)
        log = rig.tmp / "starts.jsonl"
        args = json.dumps({"log": str(log), "seconds": HOLD_SECONDS})
        rig.submit([f"startjob user_job name='Bench.hold' uid='f{i:03d}' args='{args}';" for i in range(count)])
        store = rig.client.store

        def all_running():
            rows = store.live_jobs(type="USER_JOB", name="Bench.hold")
            started = {r["uid"] for r in read_starts(log)}
            running = [r for r in rows if r.status is Status.IN_PROCESS and r.key.uid in started]
            return rows if len(running) == count else None

        rows = wait_for(all_running, 30, f"all {count} long jobs to be IN_PROCESS and started",
                        interval=0.05, check=rig.check_nodes)
        holding: dict[str, list[str]] = {}
        for r in rows:
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
            for rec in read_starts(log):
                if rec["uid"] in victim_jobs and rec["node"] != victim_name and rec["start"] > t_kill:
                    restarted.setdefault(rec["uid"], rec)
            return len(restarted) == len(victim_jobs)

        dead_after = HEARTBEAT_MS * HEARTBEAT_MISS / 1000
        wait_for(all_restarted, dead_after + 30,
                 lambda: f"the {len(victim_jobs)} jobs of killed node {victim_name} to start again elsewhere "
                         f"({len(restarted)} did)",
                 interval=0.02, check=rig.check_nodes)
        delays = sorted(rec["start"] - t_kill for rec in restarted.values())
        taken_by: dict[str, int] = {}
        for rec in restarted.values():
            taken_by[rec["node"]] = taken_by.get(rec["node"], 0) + 1
        return {
            "jobs": count,
            "held_before_kill": {k: len(v) for k, v in sorted(holding.items())},
            "killed": victim_name,
            "killed_jobs": len(victim_jobs),
            "restarted_on": dict(sorted(taken_by.items())),
            "failover_min_s": delays[0],
            "failover_median_s": statistics.median(delays),
            "failover_max_s": delays[-1],
            "dead_threshold_s": dead_after,
            "heartbeat_interval_ms": HEARTBEAT_MS,
            "heartbeat_miss": HEARTBEAT_MISS,
            "reconcile_interval_ms": RECONCILE_MS,
        }
    finally:
        rig.close()
        findings.extend((f"failover/{name}", line) for name, line in rig.log_findings)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5000, help="no-op jobs per node count (5000)")
    ap.add_argument("--nodes", default="1,2,4", help="node counts, comma separated (1,2,4)")
    ap.add_argument("--pool", type=int, default=25, help="K2JOBS_POOL_SIZE of every node (25)")
    ap.add_argument("--failover-jobs", type=int, default=20, help="long jobs of the failover test (20; 0 skips it)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (stores, node logs)")
    args = ap.parse_args()
    try:
        counts = [int(x) for x in args.nodes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--nodes: expected comma-separated integers, got {args.nodes!r}")
    if not counts or min(counts) < 1:
        ap.error("--nodes: every count must be at least 1")
    install_signal_handlers()

    facts = machine_facts()
    findings: list[tuple[str, str]] = []
    result: dict = {"machine": facts, "settings": {"pool": args.pool, "sqlite_synchronous": "FULL (default)",
                                                    "log_level": "warning", "submit_batch": SUBMIT_BATCH}}
    runs: list[dict] = []
    fo = None
    try:
        for n in counts:
            runs.append(cluster_throughput(n, args.jobs, args.pool, args.keep, findings))
        if args.failover_jobs > 0:
            fo = failover(args.failover_jobs, args.pool, args.keep, findings)
    except KeyboardInterrupt:
        print("bench_cluster: interrupted; node processes killed", file=sys.stderr)
        return 130
    except BenchError as exc:
        print(f"bench_cluster: FAILED: {exc}", file=sys.stderr)
        print_log_findings(findings)
        return 1
    result["throughput"] = runs
    result["failover"] = fo
    result["node_log_findings"] = [f"[{n}] {l}" for n, l in findings]

    print(f"fabricjobs bench_cluster: nodes on one SQLite store (synchronous=FULL), pool {args.pool} each, "
          "log level warning")
    print(f"Throughput: {args.jobs} no-op one-time USER_JOBs submitted at once (scripts of {SUBMIT_BATCH}), "
          "after a warm-up of one job per pool slot per node")
    print(tabulate([
        [r["nodes"], f"{r['jobs_per_s']:,.0f}", f"{r['end_to_end_seconds']:.2f}", f"{r['submit_per_s']:,.0f}",
         f"{r['last_submit_to_all_processed_seconds']:.2f}",
         f"{r['node_main_cpu_seconds']:.1f} / {r['node_group_cpu_seconds']:.1f}",
         " ".join(str(v) for v in r["per_node"].values())]
        for r in runs
    ], headers=["nodes", "jobs/s", "submit->all PROCESSED s", "submit jobs/s", "last submit->done s",
                "node CPU s main/all", "jobs per node"], disable_numparse=True))
    if fo is not None:
        print(f"Failover: 3 nodes, {fo['jobs']} jobs of {HOLD_SECONDS} s; SIGKILL of {fo['killed']} (process group) "
              f"holding {fo['killed_jobs']} of them; held before: "
              + ", ".join(f"{k} {v}" for k, v in fo["held_before_kill"].items()))
        print(tabulate([[
            f"{fo['failover_min_s']:.2f}", f"{fo['failover_median_s']:.2f}", f"{fo['failover_max_s']:.2f}",
            f"{fo['dead_threshold_s']:.1f} ({fo['heartbeat_interval_ms']} ms x {fo['heartbeat_miss']})",
            f"{fo['reconcile_interval_ms']} ms",
            ", ".join(f"{k} {v}" for k, v in fo["restarted_on"].items()),
        ]], headers=["kill->re-run min s", "median s", "max s", "dead threshold s", "reconcile", "re-run on"],
            disable_numparse=True))
    print(facts_line(facts))
    print_log_findings(findings)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
