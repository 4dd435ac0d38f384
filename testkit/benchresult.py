"""One benchmark result file under bench/results/ (what docs/benchmarks.md is generated from by
scripts/gen_docs.py): the figures of a run with its date, commit, machine and command line."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_result(slug: str, benchmark: str, backend: str, goals: list[dict], tables: list[dict], **extra) -> Path:
    """Write ``bench/results/DATE-COMMIT-SLUG.json``; print and return its path. ``goals``:
    ``{"goal", "measured", "met"}`` each; ``tables``: ``{"title", "headers", "rows"}`` each."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "uncommitted"
    now = datetime.now(timezone.utc)
    record = {
        "benchmark": benchmark, "backend": backend, "date": now.strftime("%Y-%m-%d"),
        "time": now.isoformat(timespec="seconds"), "commit": commit, "python": sys.version.split()[0],
        "machine": {"nproc": os.cpu_count(), "platform": platform.platform()},
        "command": f"scripts/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
        "goals": goals, "tables": tables, **extra,
    }
    path = ROOT / "bench" / "results" / f"{record['date']}-{commit}-{slug}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"figures written to {path.relative_to(ROOT)}")
    return path
