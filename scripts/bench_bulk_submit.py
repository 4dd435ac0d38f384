"""A script of STARTJOBs through the shell's script runner (`fabricjobs shell -f`), written in
groups against one at a time (docs/guides/scripts-and-code.md, "Bulk submits").

    .venv/bin/python scripts/bench_bulk_submit.py [--backend sqlite|cassandra-real] [--jobs 1000] [--json]

In one process, on a fresh store each time (SQLite: a file in a temporary directory, FULL
sync; cassandra-real: an Apache Cassandra 5.0 this starts, one node, a new keyspace each run),
the same script of --jobs one-time STARTJOBs goes through ``shell.script.run_text``, the code
behind ``shell -f``, -e and piped stdin:

* grouped: as the shell runs it, consecutive STARTJOBs written together (up to 256 a group);
* one at a time: through a client that has only ``execute``, as the shell ran scripts before.

Printed: seconds and STARTJOBs/s of each, best of --rounds, and whether every job was written.
No node runs: this is the submit alone.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test kit (testkit/)


class OneAtATime:
    """The client as the shell used it before scripts were grouped: one statement, one write."""

    def __init__(self, client) -> None:
        self._client = client
        self.max_command_bytes = client.max_command_bytes

    def execute(self, command):
        return self._client.execute(command)


def _config(where: Path, backend: str, cassandra) -> Path:
    from testkit.rig import write_config

    sections: dict = {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}}
    if backend == "sqlite":
        sections["store"] = {"BACKEND": "sqlite", "SQLITE_PATH": where / "store.db"}
    else:
        sections["store"] = {"BACKEND": "cassandra"}
        sections["cassandra"] = {"HOSTS": ",".join(cassandra.hosts), "PORT": cassandra.port, "PROTOCOL_VERSION": 5,
                                 "KEYSPACE": "bulk_" + uuid.uuid4().hex[:10]}
    return write_config(where / "config.ini", sections)


def _submit(config: Path, jobs: int, grouped: bool) -> tuple[float, int]:
    """Seconds to run the script; how many of its jobs the store then holds."""
    from fabricjobs.client import Client
    from fabricjobs.shell.script import run_text

    text = "".join(f"startjob user_job name='Customer.userJob1' uid='b{i:06d}';\n" for i in range(jobs))
    with Client.from_config(config) as client:
        client.fetch("jobstatus user_job 'Customer.userJob1' with uid='none';")  # connected, statements prepared
        runner = client if grouped else OneAtATime(client)
        began = time.perf_counter()
        code = run_text(runner, text, io.StringIO(), err := io.StringIO())
        took = time.perf_counter() - began
        if code != 0:
            raise SystemExit(f"the script failed: {err.getvalue()[:500]}")
        written = sum(1 for _ in client.store.live_jobs(type="USER_JOB", name="Customer.userJob1"))
    return took, written


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sqlite", "cassandra-real"), default="sqlite")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="write a result file under bench/results/")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fj-bench-bulk-"))
    cassandra = None
    if args.backend == "cassandra-real":
        from testkit.realcassandra import CassandraCluster, available

        if (why := available()) is not None:
            print(f"no Apache Cassandra here: {why}")
            return 2
        cassandra = CassandraCluster(tmp / "cassandra", nodes=1, heap="768m").start()
    figures: dict[str, list[float]] = {"grouped": [], "one at a time": []}
    complete = True
    try:
        for r in range(args.rounds):
            for mode in ("one at a time", "grouped") if r % 2 else ("grouped", "one at a time"):
                where = tmp / f"{mode.replace(' ', '-')}-{r}"
                where.mkdir()
                took, written = _submit(_config(where, args.backend, cassandra), args.jobs, mode == "grouped")
                complete = complete and written == args.jobs
                figures[mode].append(took)
                print(f"round {r + 1}, {mode}: {took:.2f} s, {written} of {args.jobs} written", flush=True)
    finally:
        if cassandra is not None:
            cassandra.stop(wipe=True)
    best = {mode: min(times) for mode, times in figures.items()}
    headers = ["script run", "seconds (best)", "STARTJOBs/s", "vs one at a time"]
    table = [[mode, f"{best[mode]:.2f}", f"{args.jobs / best[mode]:,.0f}", f"{best['one at a time'] / best[mode]:.1f}x"]
             for mode in ("one at a time", "grouped")]
    from tabulate import tabulate

    where = ("SQLite, FULL sync, temporary directory" if args.backend == "sqlite"
             else "Apache Cassandra 5.0, 1 node on this host, QUORUM / SERIAL")
    title = f"{args.jobs:,} one-time STARTJOBs through the shell's script runner, best of {args.rounds} ({where})"
    print(f"== {title}")
    print(tabulate(table, headers=headers, disable_numparse=True))
    print(f"every job written in every run: {'yes' if complete else 'NO'}")
    if args.json:
        from testkit.benchresult import write_result

        write_result(f"bulk-submit-{args.backend}", "bulk submit (bench_bulk_submit.py)", args.backend,
                     [{"goal": "every job of the script written", "measured": "yes" if complete else "no", "met": complete}],
                     [{"title": title, "headers": headers, "rows": table}], raw_seconds=figures)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
