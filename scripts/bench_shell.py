#!/usr/bin/env python3
"""Shell cold start: wall time of `fabricjobs shell -e 'jobstatus;'` on an empty SQLite store,
from process start to exit (the first and only result printed), median of --runs.

usage: python scripts/bench_shell.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    exe = Path(sys.executable).with_name("fabricjobs")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fabricjobs"]
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "config.ini"
        cfg.write_text(f"[store]\nSQLITE_PATH = {Path(d) / 'empty.db'}\n")
        run = cmd + ["--config", str(cfg), "shell", "-e", "jobstatus;"]
        subprocess.run(run, check=True, capture_output=True)  # creates the schema and the grammar cache
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            out = subprocess.run(run, check=True, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            assert "(0 rows)" in out.stdout, out.stdout
    print(f"fabricjobs shell -e 'jobstatus;' on an empty SQLite store, {args.runs} runs:")
    print(f"  median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
