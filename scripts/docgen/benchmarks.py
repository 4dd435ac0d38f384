"""docs/benchmarks.md from the result files under bench/results/.

``scripts/bench.py ... --json`` writes one file per benchmark run (its date, commit, machine,
Python, command, goals and figures); this page shows the latest file of each benchmark and
backend, and names the older ones, which stay in bench/results/ as the history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .reference import cell, header

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"

#: What each benchmark measures, in a sentence or two (scripts/bench.py's docstring says it all).
ABOUT = {
    "all": "Every sub-command of `scripts/bench.py` with its defaults: no-op jobs per second against huey and "
           "the engine's own limit (throughput), due time to start of 200 recurring jobs (firelag), re-runs "
           "after a SIGKILL (failover), a shell's cold start and an idle node's memory.",
    "throughput --preload": "5,000 no-op jobs written before any node starts; the drain timed from the first "
                            "run's start to the last run's end, for 1, 2 and 4 nodes on one SQLite file, against "
                            "huey's consumer draining the same queue. Each system is measured in interleaved "
                            "rounds and its median round is checked.",
    "throughput": "No-op jobs per second on a real Apache Cassandra 5.0, set against the cluster's own raw rate "
                  "of uncontended lightweight transactions from as many clients as nodes.",
    "firelag and failover": "Due time to start of recurring jobs, and re-runs after a SIGKILL, on a real "
                            "Apache Cassandra 5.0.",
    "scale": "A reconcile pass and `jobstatus;` with a million archived rows (and their runs) against an empty "
             "store: history must not make a node slower.",
    "store CAS (bench_store.py)": "Compare-and-set claims through the SQLite store, alone and batched, next to "
                                  "the same conditional UPDATE through bare sqlite3.",
    "cost per job (bench_cassandra.py --real)": "Statements a job costs on Apache Cassandra, counted by the "
                                                "store's own counters.",
    "shell": "Cold start to first result of `fabricjobs shell -e 'jobstatus;'` on an empty SQLite store.",
    "web": "The HTTP API's job list with a big history, and what the console's live view costs the store per "
           "watching browser.",
    "console": "The web console with 10,000 live and 100,000 archived jobs: the jobs table's first page (the data, "
               "and drawn in Chromium), paging through every live job, the history search for a job that ended two "
               "days ago, and the web process's CPU while a browser watches.",
    "Cassandra queue, before and after": "The Cassandra queue before and after it was made safe against clock skew, "
                                         "simultaneous starts and two data centres: throughput on 1 and 3 Cassandra "
                                         "nodes, fire lag of recurring jobs, and what the new index repair pass costs.",
    "LWT batches (bench_lwt_batch.py)": "Rows one lightweight transaction changes per second: one row per LWT (a job "
                                        "row is its own partition, as the queue claims today) against batches of "
                                        "conditional UPDATEs of one partition, each one Paxos round: the headroom of "
                                        "a queue that claims in batches.",
    "LWT batches under contention (bench_lwt_shards.py)": "What contention costs a queue that claims in batches "
                                                          "from shard partitions: writer processes (one per "
                                                          "node) claim rows by conditional batches of one shard, "
                                                          "each from its own shards, all racing for the same "
                                                          "rows, or beside a process inserting new rows into "
                                                          "the same shards; the table is read back to check "
                                                          "every row was claimed exactly once.",
    "What a job's statements cost (bench_statement_mix.py)": "Each kind of statement a job costs on Apache "
                                                              "Cassandra (one-row LWT, a conditional batch of 10 rows "
                                                              "of one partition, plain writes, reads) run alone at "
                                                              "the cluster's limit; added up over a job's statements "
                                                              "(the cost-per-job counts), a bound on the jobs per "
                                                              "second the store could serve today and with the LWTs "
                                                              "in batches of 10.",
    "bulk submit (bench_bulk_submit.py)": "A script of one-time STARTJOBs through the shell's script runner (what "
                                          "`shell -f`, -e and piped stdin run): consecutive STARTJOBs written "
                                          "together, against one at a time.",
    "chaos soak": "`scripts/chaos.py`: node processes under random SIGKILLs, SIGSTOPs and restarts while they run "
                  "recurring and one-time jobs; its checker proves from the runs' own records that nothing was "
                  "lost, run twice at once, or written by a fenced run.",
    "chaos soak --partitions": "The chaos soak with network faults between test hosts (network namespaces): "
                               "nodes and replicas cut off, minorities, delay, loss, a slow heartbeat path.",
    "user-space link (linkprobe)": "The relay behind the partition tests' delay and loss: round trips and its "
                                   "own lateness on two fresh test hosts.",
}


def load_results() -> list[dict[str, Any]]:
    out = []
    for path in sorted(RESULTS.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        record["_file"] = path.name
        out.append(record)
    return out


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows), ""]


def _section(latest: dict[str, Any], older: list[dict[str, Any]]) -> list[str]:
    title = f"{latest['benchmark']} ({latest['backend']})"
    machine = latest.get("machine") or {}
    where = ", ".join(f"{k} {v}" for k, v in machine.items() if k in ("nproc", "platform", "sqlite"))
    out = [f"## {title}", ""]
    if latest["benchmark"] in ABOUT:
        out += [ABOUT[latest["benchmark"]], ""]
    out += [f"{latest['date']}, commit {latest.get('commit') or 'not recorded'}, Python {latest.get('python', '?')}, "
            f"{where}: `{latest.get('command', '')}`", ""]
    if latest.get("goals"):
        out += _table(["goal", "measured", ""],
                      [[g["goal"], g["measured"], "met" if g["met"] else "**not met**"] for g in latest["goals"]])
    figures = latest.get("figures") or {}
    by_kind = figures.get("by_kind")
    if isinstance(by_kind, dict):  # firelag: delays per kind of job
        out += _table(["jobs", "runs", "p50 ms", "p99 ms", "max ms", "missed", "doubled"],
                      [[kind, v["runs_in_window"], f"{v['delay_p50_ms']:.1f}", f"{v['delay_p99_ms']:.1f}",
                        f"{v['delay_max_ms']:.1f}", "" if v.get("missed_fires") is None else v["missed_fires"],
                        "" if v.get("doubled_fires") is None else v["doubled_fires"]] for kind, v in by_kind.items()])
    if figures.get("warm_seconds"):
        out += [f"The store was first warmed with the same load for {figures['warm_seconds']:g} s (not measured).", ""]
    cpu = figures.get("cpu_cores")
    if isinstance(cpu, dict):  # where the host's cores went while the measured load ran
        out += [f"Host CPU while it ran: {cpu['host_busy']:.2f} of {cpu['cores']} cores busy: the store "
                f"{cpu['store']:.2f}, the fabricjobs nodes {cpu['nodes']:.2f}, the rest {cpu['rest']:.2f}.", ""]
    for table in latest.get("tables", []):
        out += [f"*{table['title']}*", "", *_table(table["headers"], table["rows"])]
    if latest.get("notes"):
        out += [latest["notes"], ""]
    out.append(f"Result file: `bench/results/{latest['_file']}`.")
    if older:
        out.append(" Earlier: " + ", ".join(f"`{r['_file']}`" for r in older) + ".")
    return [*out, ""]


def benchmarks_page() -> str:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in load_results():
        groups.setdefault((record["benchmark"], record["backend"]), []).append(record)
    out = header("Benchmarks", "bench/results/*.json")
    out += [
        "Speed goals are shown by benchmarks that print figures, never by timed tests. Each run of",
        "`scripts/bench.py SUBCOMMAND --json` (and of the other benchmark scripts with `--json`) is a",
        "result file under `bench/results/` with its date, commit, machine and Python; this page shows the",
        "latest one of each benchmark and backend, and names the earlier ones.",
        "",
        "```sh",
        ".venv/bin/python scripts/bench.py all --install-huey --json          # about 150 s; huey only for the comparison",
        ".venv/bin/python scripts/bench.py throughput --preload --rounds 5 --json",
        ".venv/bin/python scripts/bench.py throughput --backend cassandra-real --cassandra-nodes 3 --json",
        ".venv/bin/python scripts/gen_docs.py                                 # this page, from the result files",
        "```",
        "",
        "The figures come from a shared 2-core VM whose speed moves by a fifth from one minute to the next:",
        "ratios measured within one run say more than absolute figures, and a goal is checked on the",
        "median of interleaved rounds where the benchmark has them.",
        "",
    ]
    for key in sorted(groups, key=lambda k: (k[1] != "sqlite", k[0])):
        # By the time of the run where it was recorded: two runs of one day are named by their
        # commits, which do not sort in the order they were made.
        records = sorted(groups[key], key=lambda r: (r["date"], r.get("time") or "", r["_file"]))
        out += _section(records[-1], records[:-1])
    return "\n".join(out).rstrip() + "\n"
