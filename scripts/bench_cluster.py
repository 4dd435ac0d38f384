#!/usr/bin/env python3
"""The cluster benchmark of docs/benchmarks.md, kept under its old name: it is `bench.py throughput` for
1, 2 and 4 node processes on one SQLite store (5,000 no-op jobs, without the huey comparison)
followed by `bench.py failover` with 20 long jobs. See scripts/bench.py for what each measures.

usage: .venv/bin/python scripts/bench_cluster.py [--jobs 5000] [--failover-jobs 20] [--keep]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).with_name("bench.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000, help="no-op jobs for the throughput runs (5000)")
    ap.add_argument("--failover-jobs", type=int, default=20, help="long jobs for the failover run (20)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    keep = ["--keep"] if args.keep else []
    runs = [
        ["throughput", "--no-huey", "--nodes", "1,2,4", "--jobs", str(args.jobs), *keep],
        ["failover", "--jobs", str(args.failover_jobs), *keep],
    ]
    worst = 0
    for argv in runs:
        worst = max(worst, subprocess.call([sys.executable, str(BENCH), *argv]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
