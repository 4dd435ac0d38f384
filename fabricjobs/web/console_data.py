"""What the console's script reads: the jobs table and the history search (a page each, read
per request: console_pages.py), the nodes and the plots (from the shared snapshot of live.py, so
a browser's poll costs the store nothing) and one job's page.

These routes are the console's, not the API's: they are left out of the OpenAPI document and
may change with the page. They take a session cookie or a bearer token like the API and need
the viewer role. A page (the jobs table with its filters and cursor, a job's page) is read from
the store once per interval however many browsers show it (PageCache). Changes are the API's
own routes (``POST /api/v1/jobs/.../stop``, ...), which the page calls with its CSRF token.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Hashable

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from ..cluster import read_cluster
from ..commands import statements as st
from ..dependencies import parents_of, parse_key
from ..errors import FabricJobsError, JobNotFound, ValidationError
from ..model import RUNNING_STATUSES, JobKey, JobType
from ..names import MAX_CHARS, MAX_NAME_CHARS
from ..service import HISTORY_COLUMNS, Session, history_row, run_summary
from ..store.base import RunRecord
from . import plots
from .auth import Need, requires
from .console_pages import PAGE_SIZES, HistoryFilters, LiveFilters, history_page, live_page, rows
from .cursors import archive_cursor, cursor_archive, cursor_key, key_cursor
from .errors import PARTLY_CHANGED
from .live import COUNT_CAP, LiveView, iso
from .schemas import record
from .tokens import TokenInfo

router = APIRouter(prefix="/console/data", include_in_schema=False)
Viewer = Depends(requires(Need.READ, "read the console"))
JOB_RUNS = 200
CHILDREN_READ = 1000  # blocked jobs read at a time for a job's page: its children still waiting for it
CHILDREN_EXAMINE = 10_000  # blocked jobs a job's page looks at, at most (then it says the list may go on)
_OUTPUT_CHARS = 1000
_MAX_TEXT = 1000  # characters of a filter
_MAX_CURSOR = 16_000  # characters of a page cursor: a key of 1,024-character UID in 4-byte characters, base64


def live_of(request: Request) -> LiveView:
    return request.app.state.live


def _json(request: Request, body: Any) -> Response:
    """JSON, not cached by the browser; a 304 when the browser has this very body already."""
    text = json.dumps(body, separators=(",", ":"))
    etag = '"' + hashlib.sha256(text.encode()).hexdigest()[:20] + '"'
    headers = {"Cache-Control": "no-cache", "ETag": etag}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(text, media_type="application/json", headers=headers)


def _page_size(limit: int) -> int:
    if limit not in PAGE_SIZES:
        raise ValidationError(f"limit must be one of {', '.join(map(str, PAGE_SIZES))}, got {limit}")
    return limit


def _text() -> Any:
    """A text parameter of a console request: '' when absent, _MAX_TEXT characters at most."""
    return Query("", max_length=_MAX_TEXT)


@router.get("/jobs")
def jobs(request: Request, status: str = _text(), type: str = _text(), name: str = _text(), node: str = _text(),
         q: str = _text(), cursor: str = Query("", max_length=_MAX_CURSOR), limit: int = 100,
         who: TokenInfo = Viewer) -> Response:
    """A page of the live jobs in key order, from ``cursor`` on (the table's Next), with the
    counts of the live jobs by status (the chips) from the shared snapshot."""
    snap = live_of(request).snapshot()
    filters = LiveFilters(status.upper(), type.upper(), name, node, q)
    after, size = cursor_key(cursor), _page_size(limit)

    def read() -> dict[str, Any]:
        api = request.app.state.api
        page = live_page(api.store, filters, after, size, snap.counts)
        return {"jobs": rows(api.service(), page.jobs, read_cluster(api.store) if page.jobs else []),
                "next_cursor": key_cursor(page.next) if page.next else None, "partial": page.partial}

    body = _pages(request).get(("jobs", filters, after, size), read)
    return _json(request, {**body, "version": snap.version, "taken": iso(snap.taken), "error": snap.error,
                           "counts": snap.counts, "cap": COUNT_CAP, "types": [t.value for t in JobType],
                           "nodes": [n["node"] for n in snap.nodes], "limit": size})


@router.get("/history")
def history(request: Request, type: str = _text(), name: str = _text(), uid: str = _text(), owner: str = _text(),
            status: str = _text(), since: datetime | None = None, until: datetime | None = None,
            cursor: str = Query("", max_length=_MAX_CURSOR), limit: int = 100, who: TokenInfo = Viewer) -> Response:
    """A page of the archived jobs the form looks for, newest end first (the store's search:
    each page looks at a bounded number of them and says where the next goes on)."""
    api = request.app.state.api
    kept = timedelta(hours=api.config.get("jobs", "K2JOB_ARCHIVING_TIME_HOUR"))
    filters = HistoryFilters(_utc(since), _utc(until), type.upper(), name, uid, owner, status.upper())
    after, size = cursor_archive(cursor), _page_size(limit)

    def read() -> dict[str, Any]:
        page = history_page(api.store, filters, after, size, api.clock.now() - kept)
        return {"jobs": rows(api.service(), page.jobs, read_cluster(api.store) if page.jobs else []),
                "next_cursor": archive_cursor(page.next) if page.next else None, "reached": iso(page.reached)}

    body = _pages(request).get(("history", filters, after, size), read)
    return _json(request, {**body, "types": [t.value for t in JobType], "limit": size})


def _utc(when: datetime | None) -> datetime | None:
    return when.replace(tzinfo=timezone.utc) if when is not None and when.tzinfo is None else when


def _pages(request: Request) -> "PageCache":
    return request.app.state.job_pages


@router.get("/nodes")
def nodes(request: Request, who: TokenInfo = Viewer) -> Response:
    snap = live_of(request).snapshot()
    body = {"version": snap.version, "taken": iso(snap.taken), "error": snap.error, "nodes": list(snap.nodes)}
    return _json(request, body)


@router.get("/plots")
def cluster_plots(request: Request, who: TokenInfo = Viewer) -> Response:
    live = live_of(request)
    snap = live.snapshot()
    points = live.feed.runs()
    drawn = [plots.runs_per_minute(points, snap.taken) if snap.taken else None, plots.queue_depth(snap.queue),
             plots.fire_lag(points)]
    body = {"version": snap.version, "taken": iso(snap.taken), "error": snap.error,
            "plots": [p for p in drawn if p is not None], "runs_known": len(points), "missed": live.feed.missed}
    return _json(request, body)


@router.get("/job")
def job(request: Request, type: str = _text(), name: str = Query("", max_length=MAX_NAME_CHARS),
        uid: str = Query("", max_length=MAX_CHARS), who: TokenInfo = Viewer) -> Response:
    """One job's page: its row and counters, parents and children, running task, runs, last
    log and plots; 404 (JobNotFound) for a job there is not."""
    key = JobKey(type.upper(), name, uid)
    body = _pages(request).get(("job", key), lambda: job_page(request, key))
    return _json(request, body)


def job_page(request: Request, key: JobKey) -> dict[str, Any]:
    api = request.app.state.api
    service = api.service()
    result = service.execute(st.JobStatus(key.type, key.name, key.uid, details=True), Session())
    if not result.rows:
        raise JobNotFound(f"No such job {key.describe()}")
    job = {k: iso(v) for k, v in record(result.columns, result.rows[0]).items()}
    runs = api.store.runs(key.type, key.name, key.uid, limit=JOB_RUNS)
    snap = live_of(request).snapshot()
    page_plots = plots.durations(runs) + ([plots.job_lag(runs)] if job["execution_interval"] else [])
    children, children_cut = _children(api.store, key)
    return {"job": job, "parents": _parents(api.store, job["depends_on"]), "children": children,
            "children_cut": children_cut,
            "task": _running_task(job, snap.tasks.get(str(key))), "runs": [_run(r) for r in runs],
            "last_log": _last_log(runs),
            "plots": page_plots}


def _running_task(job: dict[str, Any], task: dict[str, Any] | None) -> dict[str, Any] | None:
    """The task running the job's run now, or None. The nodes' published tasks are as old as
    their last beat: a run that has ended since (or an earlier run) would be offered to KILL,
    and refused as TaskNotFound."""
    if task is None or job["is_archived"] or job["status"] not in {s.value for s in RUNNING_STATUSES}:
        return None
    return task if task.get("epoch") in (None, job["epoch"]) else None


def _parents(store: Any, depends_on: str) -> list[dict[str, Any]]:
    try:
        keys = [parse_key(k) for k in (depends_on or "").split(",") if k.strip()]
    except FabricJobsError:
        return []
    rows = store.get_many(keys)
    return [{"key": str(k), "type": k.type, "name": k.name, "uid": k.uid,
             "status": row.status.value if row is not None else "(gone: counts as done)"}
            for k, row in zip(keys, rows)]


def _children(store: Any, key: JobKey) -> tuple[list[dict[str, Any]], bool]:
    """The children still waiting for this job: the blocked jobs that name it, read a page at a
    time (longest due first), CHILDREN_EXAMINE of them at most; and whether blocked jobs were
    left unread (then the page says the list may go on, rather than "None"). A child no longer
    blocked is not read: no index leads from a job to its children."""
    out: list[dict[str, Any]] = []
    seen: set[JobKey] = set()
    since: datetime | None = None
    while len(seen) < CHILDREN_EXAMINE:
        page = store.blocked_jobs(CHILDREN_READ, since=since)
        new = [j for j in page if j.key not in seen]
        for j in new:
            seen.add(j.key)
            try:
                parents = parents_of(j)
            except FabricJobsError:
                continue
            if key in parents:
                out.append({"key": str(j.key), "type": j.type, "name": j.name, "uid": j.uid,
                            "status": j.status.value, "blocked": j.blocked})
        if not new:  # the end; or, a whole page of one due time, as far as paging by due time goes
            return out, len(page) >= CHILDREN_READ
        if page[-1].next_run is None:
            return out, True
        since = page[-1].next_run  # (a short page is no end: a store may drop stale index entries from one)
    return out, True


def _run(r: RunRecord) -> dict[str, Any]:
    item = {k: iso(v) for k, v in record(HISTORY_COLUMNS, history_row(r)).items()}
    if item["output"] and len(item["output"]) > _OUTPUT_CHARS:
        item["output"] = item["output"][:_OUTPUT_CHARS] + " …"
    return item


def _last_log(runs: list[RunRecord]) -> dict[str, Any] | None:
    """JOBLOG's answer: the last run's summary and log."""
    if not runs:
        return None
    return {"run": runs[0].epoch, "summary": run_summary(runs[0]), "log": runs[0].log}


class PageCache:
    """Pages read within the last interval (a job's page, a page of a table with its filters
    and cursor), shared by every browser showing them. A page is read by one request at a time:
    the others asking for it meanwhile wait for that read (at most FOLLOW_WAIT_SEC) rather than
    read it too (10 browsers cost 2.8x the store reads of one while each miss read alone)."""

    FOLLOW_WAIT_SEC = 30.0

    def __init__(self, ttl: float, size: int = 256) -> None:
        self.ttl, self.size = ttl, size
        self._pages: dict[Hashable, tuple[float, dict[str, Any]]] = {}
        self._reading: dict[Hashable, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._changes = 0  # changes made through this process: a page read before one is not kept

    def forget(self) -> None:
        """A change went through this web process (a console button, the API): the page that
        shows it must be read again, not served as it was up to an interval ago."""
        with self._lock:
            self._pages.clear()
            self._reading.clear()  # a read under way began before the change: no one joins it now
            self._changes += 1

    def get(self, key: Hashable, read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            hit = self._pages.get(key)
            if hit is not None and time.monotonic() - hit[0] < self.ttl:
                return hit[1]
            reading = self._reading.get(key)
            if reading is None:
                mine = self._reading[key] = Future()
                changes = self._changes
        if reading is not None:
            try:
                return reading.result(self.FOLLOW_WAIT_SEC)  # the reader's error is raised here too
            except FutureTimeout:
                return read()
        try:
            page = read()
        except BaseException as exc:
            with self._lock:
                if self._reading.get(key) is mine:
                    del self._reading[key]
            mine.set_exception(exc)
            raise
        with self._lock:  # kept and no longer being read at once: no request in between reads again
            if self._reading.get(key) is mine:
                del self._reading[key]
            if changes == self._changes:
                self._pages[key] = (time.monotonic(), page)
            if len(self._pages) > self.size:
                oldest = min(self._pages, key=lambda k: self._pages[k][0])
                del self._pages[oldest]
        mine.set_result(page)
        return page


class ForgetPagesOnChange:
    """ASGI middleware: a request of the API that may have changed something (not a GET or
    HEAD) empties the page cache as its answer starts, so the console's read after a button
    shows the change. That is an answer below 400, one of 500 or more (a change whose outcome
    is not known), and a refusal that says part of it took effect (a script whose earlier
    statements ran, a wait that ran out after its command took effect: the error handler marks
    those in the request's state). Any other refusal does not: it changed nothing, and anyone
    may send one."""

    def __init__(self, app: Any, pages: PageCache) -> None:
        self.app, self.pages = app, pages

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS")
                or not scope.get("path", "").startswith("/api/")):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})  # shared with the handlers' request.state

        async def forgetting(message: Any) -> None:
            if message["type"] == "http.response.start":
                status = message.get("status", 500)
                if status < 400 or status >= 500 or state.get(PARTLY_CHANGED):
                    self.pages.forget()
            await send(message)

        await self.app(scope, receive, forgetting)
