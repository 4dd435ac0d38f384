"""``bench.py console``: the web console with a big cluster (docs/guides/web-console.md).

A store with ``--live`` live jobs (waiting for an AFFINITY no node serves, and scheduled far
ahead) and ``--archived`` archived ones that ended over the last three days, among them one
that ended two days ago, written the fastest way the store allows (testkit/bulk.py; live jobs
by the store's own insert). A real ``fabricjobs web`` serves it, no node running. Timed from
this process over HTTP, each request a fresh read (the console's page cache is let run out):

* the jobs table's first page (100 rows) as the console asks it, the first request of a new web
  process and then ``--requests`` more; paging through every live job, 1,000 a page;
* in a real Chromium (Debian's chromium and chromium-driver, when there), from opening the
  console to the first rows drawn;
* the history search for the job that ended two days ago, by part of its UID, by name and
  owner, by the window it ended in, and by owner and status;
* the web process's CPU while one browser watches the jobs table (a poll per console interval)
  for ``--watch`` seconds.

Goals: first rows within 1 s (data and browser), the job of two days ago found within 1 s on
the first page, the watched web process under 10 % of a core.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tabulate import tabulate

from testkit import bulk
from testkit.rig import process_cpu_seconds, wait_for
from testkit.web import WebProcess

UTC = timezone.utc
INTERVAL = 2.0  # the console interval: the default
TARGET_UID = "invoice-2-days-ago"


def _archived(count: int, now: datetime) -> list:
    from fabricjobs.model import Job, JobKey, Status

    jobs = []
    for i in range(count - 1):
        end = now - timedelta(seconds=1 + i * 259_200 // max(count, 1))
        jobs.append(Job(key=JobKey("USER_JOB", ("Nightly.load", "Hourly.sync", "Report.monthly")[i % 3], f"a{i:07d}"),
                        status=(Status.PROCESSED, Status.FAILED)[i % 7 == 0], creation_time=end - timedelta(minutes=2),
                        start_time=end - timedelta(minutes=1), end_time=end, archived=True, owner=("ann", "bob")[i % 2],
                        worker_id="old-node", epoch=1, runs=1))
    end = now - timedelta(days=2)
    jobs.append(Job(key=JobKey("USER_JOB", "Report.monthly", TARGET_UID), status=Status.FAILED, creation_time=end,
                    start_time=end, end_time=end, archived=True, owner="carol", worker_id="old-node", epoch=1, runs=1))
    return jobs


def _live(count: int, now: datetime) -> list:
    from fabricjobs.model import Job, JobKey, Status

    far = now + timedelta(days=365)
    return [Job(key=JobKey("USER_JOB", "Live.job", f"l{i:06d}"), status=Status.WAITING if i % 10 else Status.SCHEDULED,
                creation_time=now, next_run=now if i % 10 else far, affinity="nowhere" if i % 10 else "",
                execution_interval="" if i % 10 else f"{far:%Y-%m-%d %H:%M:%S}", worker_id=None if i % 10 else "bench-node")
            for i in range(count)]


def _load(rig, backend, args, progress) -> None:
    from fabricjobs.config import load_config

    now = datetime.now(UTC).replace(microsecond=0)
    t = time.monotonic()
    archived = _archived(args.archived, now)
    if backend.name == "sqlite":
        bulk.archived_sqlite(load_config(rig.config_path).get("store", "SQLITE_PATH"), archived)
    else:
        bulk.archived_cassandra(rig.client.store, archived)
    store = rig.client.store
    live = _live(args.live, now)
    for i in range(0, len(live), 1000):
        with store.transaction():
            store.insert_many(live[i:i + 1000])
    progress(f"console: {args.live:,} live and {args.archived:,} archived jobs written in {time.monotonic() - t:.0f} s")


class _Web(WebProcess):
    """A viewer's ``fabricjobs web`` on the rig's store, with its requests timed."""

    def __init__(self, rig) -> None:
        super().__init__(rig.config_path, rig.tmp / "web.log", role="viewer", timeout=60, cwd=rig.tmp)

    def timed(self, path: str, **params) -> tuple[float, dict]:
        t = time.perf_counter()
        r = self.http.get(path, params=params)
        r.raise_for_status()
        return time.perf_counter() - t, r.json()



def _fresh() -> None:
    time.sleep(INTERVAL + 0.1)  # the page cache keeps a page one console interval


def _jobs_table(web: _Web, args, progress) -> dict:
    first, body = web.timed("/console/data/jobs", limit=100)
    times = []
    progress(f"console: {args.requests} first pages of the jobs table, each a fresh read ...")
    for _ in range(args.requests):
        _fresh()
        times.append(web.timed("/console/data/jobs", limit=100)[0])
    t, seen, cursor, pages = time.perf_counter(), 0, "", 0
    while True:
        _, page = web.timed("/console/data/jobs", limit=1000, cursor=cursor)
        seen, pages = seen + len(page["jobs"]), pages + 1
        cursor = page["next_cursor"]
        if not cursor:
            break
    return {"first_request_s": first, "rows": len(body["jobs"]), "counts": body["counts"],
            "p50_s": statistics.median(times), "max_s": max(times), "paged_rows": seen, "pages": pages,
            "paging_s": time.perf_counter() - t}


def _browser_first_rows(web: _Web) -> float | None:
    """Seconds from opening the console (logged in) to its first row drawn; None without Chromium."""
    chromium, driver_path = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if not (chromium.exists() and driver_path.exists()):
        return None
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(driver_path)), options=options)
    try:
        driver.get(web.url + "/login")
        driver.find_element("id", "token").send_keys(web.token)
        driver.find_element("id", "login").click()
        wait_for(lambda: driver.find_elements("css selector", "#jobs tbody tr"), 30, "the first login's rows")
        _fresh()
        t = time.perf_counter()
        driver.get(web.url + "/#/jobs")
        wait_for(lambda: driver.find_elements("css selector", "#jobs tbody tr"), 30, "the jobs table's rows", interval=0.005)
        return time.perf_counter() - t
    finally:
        driver.quit()


def _history(web: _Web, now: datetime) -> list[dict]:
    window = {"since": (now - timedelta(days=2, minutes=10)).isoformat(),  # "it failed two days ago, at about this time"
              "until": (now - timedelta(days=2) + timedelta(minutes=10)).isoformat()}
    out = []
    for label, query in (("part of the UID", {"uid": "2-days"}), ("name and owner", {"name": "Report.monthly", "owner": "carol"}),
                         ("the window it ended in", {**window, "status": "FAILED"}),
                         ("owner and status", {"owner": "carol", "status": "FAILED"})):
        _fresh()
        took, pages, cursor, found = 0.0, 0, "", False
        while not found and pages < 20:
            t, page = web.timed("/console/data/history", limit=100, cursor=cursor, **query)
            took, pages = took + t, pages + 1
            found = any(j["uid"] == TARGET_UID for j in page["jobs"])
            cursor = page["next_cursor"]
            if not cursor:
                break
        out.append({"search": label, "found": found, "pages": pages, "seconds": took})
    return out


def _watched_cpu(web: _Web, seconds: float) -> float:
    """The web process's CPU (share of one core) while a browser polls the jobs table and the
    nodes every console interval, as console.js does."""
    etag = None
    before, t0 = process_cpu_seconds(web.proc.pid), time.monotonic()
    while time.monotonic() - t0 < seconds:
        r = web.http.get("/console/data/jobs", params={"limit": 100}, headers={"If-None-Match": etag} if etag else {})
        etag = r.headers.get("etag", etag)
        time.sleep(INTERVAL)
    return (process_cpu_seconds(web.proc.pid) - before) / (time.monotonic() - t0)


def cmd_console(args, backend, print_goals, verdict, progress) -> dict:
    rig = backend.rig({"web": {"CONSOLE_INTERVAL_SEC": INTERVAL}}, label="bench-console", keep=args.keep)
    web = None
    try:
        progress(f"console: writing {args.live:,} live and {args.archived:,} archived jobs ({backend.name}) ...")
        _load(rig, backend, args, progress)
        now = datetime.now(UTC)
        web = _Web(rig)
        table = _jobs_table(web, args, progress)
        progress("console: the first rows in Chromium ...")
        drawn = _browser_first_rows(web)
        progress("console: the history search ...")
        history = _history(web, now)
        progress(f"console: the web process's CPU while a browser watches for {args.watch:.0f} s ...")
        cpu = _watched_cpu(web, args.watch)
    finally:
        if web is not None:
            web.close()
        rig.close()
    print(f"\n== console: a real `fabricjobs web` ({backend.label()}), {args.live:,} live jobs, {args.archived:,} archived")
    print(tabulate([["jobs table, first page, a new web process", f"{table['first_request_s'] * 1000:.0f} ms"],
                    [f"jobs table, first page, fresh read (p50 / max of {args.requests})",
                     f"{table['p50_s'] * 1000:.0f} / {table['max_s'] * 1000:.0f} ms"],
                    ["all live jobs, 1,000 a page", f"{table['paged_rows']:,} rows in {table['pages']} pages, "
                                                    f"{table['paging_s']:.2f} s"],
                    ["first rows drawn in Chromium", "-" if drawn is None else f"{drawn * 1000:.0f} ms"],
                    *[[f"history: the job of two days ago by {h['search']}",
                       f"{'found' if h['found'] else 'NOT found'} on page {h['pages']}, {h['seconds'] * 1000:.0f} ms"]
                      for h in history],
                    [f"web process CPU, one browser watching ({INTERVAL:.0f} s interval)", f"{cpu * 100:.1f} % of a core"]],
                   headers=["measure", "figure"], disable_numparse=True))
    first_rows = max(table["first_request_s"], table["p50_s"], drawn or 0.0)
    goals = [["jobs table's first rows < 1 s", f"{first_rows:.2f} s", verdict(first_rows < 1.0)],
             ["every live job paged through", f"{table['paged_rows']:,}", verdict(table["paged_rows"] == args.live)],
             ["job ended two days ago found on the first page < 1 s (each of the four searches)",
              f"{max(h['seconds'] for h in history):.2f} s",
              verdict(all(h["found"] and h["pages"] == 1 and h["seconds"] < 1.0 for h in history))],
             ["web process < 10 % of a core while watched", f"{cpu * 100:.1f} %", verdict(cpu < 0.10)]]
    print_goals(args, goals)
    return {"table": table, "browser_first_rows_s": drawn, "history": history, "watched_cpu": cpu,
            "goals": {g[0]: {"measured": g[1], "met": g[2] == "met"} for g in goals}}
