"""``bench.py web``: what the HTTP API's job list costs as history grows (docs/guides/http-api.md).

Three SQLite stores, bulk-loaded as ``bench.py scale`` loads them: empty; 1,000 live jobs;
1,000 live jobs and 100,000 archived ones (each with its run in the history). A real
``fabricjobs web`` process serves each; ``GET /api/v1/jobs?limit=100`` (the console's and a
program's first request) is timed from this process over HTTP, the three stores in turns (this
VM's speed changes from one second to the next: timing each store in a block of its own would
compare the machine's moods, not the stores). The goal: with 100,000 archived jobs, p99 at
most 1.2x that of the same live jobs without history (the list must not scan history); the
empty store is printed as the floor.

Then what the console's live view costs the store while browsers watch it: a ``fabricjobs web``
on the CQL test server (in this process, which counts every request the web process sends)
with 1,000 live jobs, watched by 1 and then 10 simulated browsers, each polling
``/console/data/jobs`` every console interval as console.js does (with the ETag it was given).
Printed: store requests per second for each, over the same length of time.
"""

from __future__ import annotations

import threading
import statistics
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from testkit.web import WebProcess

LIST = "/api/v1/jobs?limit=100"


class _WebCase:
    """One bulk-loaded store, a ``fabricjobs web`` process on it and an admin token."""

    def __init__(self, tmp: Path, label: str, archived: int, live: int, load_rows) -> None:
        self.label, self.archived, self.live = label, archived, live
        d = tmp / label
        d.mkdir()
        self.db = d / "jobs.db"
        load_rows(self.db, archived, live, "bench-node")
        self.config = d / "config.ini"
        self.config.write_text(f"[store]\nSQLITE_PATH = {self.db}\n")
        self.web = WebProcess(self.config, d / "web.log", role="admin")
        self.http = self.web.http
        self.rows = len(self._list())  # warm
        self.times: list[float] = []

    def _list(self) -> list:
        r = self.http.get(LIST)
        r.raise_for_status()
        return r.json()["jobs"]

    def time_list(self) -> None:
        t = time.perf_counter()
        self._list()
        self.times.append(time.perf_counter() - t)

    def close(self) -> dict:
        self.web.close()
        ms = sorted(t * 1000 for t in self.times)
        return {"case": self.label, "archived": self.archived, "live": self.live, "rows_listed": self.rows,
                "requests": len(ms), "p50_ms": statistics.median(ms), "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
                "db_mb": self.db.stat().st_size / 1e6}


def cmd_web(args, load_rows, print_goals, verdict, progress) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-web-"))
    cases: list[_WebCase] = []
    try:
        for label, archived, live in (("empty", 0, 0), ("live", 0, args.live), ("live+archived", args.archived, args.live)):
            progress(f"web: loading {label} ({live:,} live, {archived:,} archived jobs) and starting fabricjobs web ...")
            cases.append(_WebCase(tmp, label, archived, live, load_rows))
        progress(f"web: {args.requests} rounds of GET {LIST}, the stores in turns ...")
        for _ in range(args.requests):
            for c in cases:
                c.time_list()
    finally:
        results = [c.close() for c in cases]
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    by = {r["case"]: r for r in results}
    print(f"\n== web: GET {LIST} on a real `fabricjobs web` over HTTP (SQLite store, bulk-loaded), "
          f"{args.requests} requests per store, the stores in turns")
    print(tabulate([[r["case"], f"{r['live']:,}", f"{r['archived']:,}", f"{r['db_mb']:.0f}", r["rows_listed"],
                     f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}"] for r in results],
                   headers=["store", "live jobs", "archived jobs", "file MB", "rows listed", "p50 ms", "p99 ms"],
                   disable_numparse=True))
    ratio = by["live+archived"]["p99_ms"] / by["live"]["p99_ms"]
    goals = [[f"jobs list p99 with {args.archived:,} archived <= 1.2x without them ({args.live:,} live in both)",
              f"{ratio:.2f}x", verdict(ratio <= 1.2)]]
    live = live_cost(args, progress)
    one, ten = live["rows"][0]["store_reads_per_s"], live["rows"][1]["store_reads_per_s"]
    goals.append(["store reads/s with 10 browsers watching <= 1.2x with 1", f"{ten / one:.2f}x" if one else "-",
                  verdict(one > 0 and ten <= 1.2 * one)])
    print_goals(args, goals)
    return {"cases": results, "live": live, "goals": {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}}


def _poller(url: str, token: str, interval: float, stop: threading.Event, polls: list) -> None:
    import httpx

    etag = None
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        while not stop.is_set():
            r = http.get("/console/data/jobs", headers={"If-None-Match": etag} if etag else {})
            etag = r.headers.get("etag", etag)
            polls.append(r.status_code)
            stop.wait(interval)


def live_cost(args, progress) -> dict:
    """Store requests per second of the console's live view with 1 and 10 browsers watching."""
    root = Path(__file__).resolve().parent.parent
    from testkit.cqlserver import CqlTestServer

    from fabricjobs.client import Client

    server = CqlTestServer().start()
    tmp = Path(tempfile.mkdtemp(prefix="fabricjobs-bench-web-live-"))
    interval = 2.0
    config = tmp / "config.ini"
    config.write_text(f"[store]\nBACKEND = cassandra\n[cassandra]\nHOSTS = {server.host}\nPORT = {server.port}\n"
                      f"KEYSPACE = bench_web\nPROTOCOL_VERSION = 4\nTOKEN_AWARE = false\n"
                      f"[jobs]\nUSER_JOBS_DIR = {root / 'examples' / 'jobs'}\n"
                      f"[web]\nCONSOLE_INTERVAL_SEC = {interval}\n")
    web = None
    try:
        client = Client.from_config(str(config))
        for lo in range(0, args.live, 100):
            client.fetch("".join(f"startjob user_job name='Customer.userJob1' uid='l{i:05d}';"
                                 for i in range(lo, min(args.live, lo + 100))))
        client.close()
        web = WebProcess(config, tmp / "web.log", role="viewer")
        url, token = web.url, web.token
        rows = []
        for browsers in (1, 10):
            progress(f"web: {browsers} browser(s) polling the console every {interval:.0f} s for {args.watch:.0f} s ...")
            stop, polls = threading.Event(), []
            threads = [threading.Thread(target=_poller, args=(url, token, interval, stop, polls), daemon=True)
                       for _ in range(browsers)]
            for t in threads:
                t.start()
            time.sleep(interval * 2)  # every browser in its rhythm before counting
            before, t0 = server.stats.snapshot(), time.monotonic()
            time.sleep(args.watch)
            after, seconds = server.stats.snapshot(), time.monotonic() - t0
            stop.set()
            for t in threads:
                t.join(10)
            reads = (after["reads"] - before["reads"]) / seconds
            rows.append({"browsers": browsers, "polls_per_s": len(polls) / (seconds + interval * 2),
                         "not_modified": sum(1 for c in polls if c == 304), "store_reads_per_s": reads,
                         "store_writes_per_s": (after["writes"] - before["writes"]) / seconds})
    finally:
        if web is not None:
            web.close()
        server.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n== web: the console's live view on the CQL test server ({args.live:,} live jobs, console interval "
          f"{interval:.0f} s), store requests counted by the server over {args.watch:.0f} s")
    print(tabulate([[r["browsers"], f"{r['polls_per_s']:.1f}", r["not_modified"], f"{r['store_reads_per_s']:.2f}",
                     f"{r['store_writes_per_s']:.2f}"] for r in rows],
                   headers=["browsers", "polls/s", "answered 304", "store reads/s", "store writes/s"],
                   disable_numparse=True))
    return {"rows": rows}
