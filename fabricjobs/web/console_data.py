"""What the console's script reads: the jobs table, the nodes, the plots (all from the shared
snapshot of live.py, so a browser's poll costs the store nothing) and one job's page.

These routes are the console's, not the API's: they are left out of the OpenAPI document and
may change with the page. They take a session cookie or a bearer token like the API and need
the viewer role. A job's page reads the store (through the service, as JOBSTATUS ... DETAILS
and JOBHISTORY would), once per interval per job however many browsers show it. Changes are
the API's own routes (``POST /api/v1/jobs/.../stop``, ...), which the page calls with its CSRF
token.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any, Callable

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from ..commands import statements as st
from ..dependencies import parse_key
from ..errors import FabricJobsError, JobNotFound
from ..model import JobKey
from ..service import HISTORY_COLUMNS, Session, history_row, run_summary
from ..store.base import RunRecord
from . import plots
from .auth import Need, requires
from .live import LiveView, Snapshot, iso
from .schemas import record
from .tokens import TokenInfo

router = APIRouter(prefix="/console/data", include_in_schema=False)
Viewer = Depends(requires(Need.READ, "read the console"))
MAX_ROWS = 500  # rows a table sends; the filters narrow the rest
JOB_RUNS = 200
_OUTPUT_CHARS = 1000
_FILTERS = ("status", "type", "name", "node", "q")


def live_of(request: Request) -> LiveView:
    return request.app.state.live


def _json(request: Request, body: Any, tag: str | None = None) -> Response:
    """JSON, not cached by the browser; with ``tag``, a 304 when the browser has it already."""
    headers = {"Cache-Control": "no-cache"}
    if tag is not None:
        etag = '"' + hashlib.sha256(tag.encode()).hexdigest()[:20] + '"'
        headers["ETag"] = etag
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json", headers=headers)


@router.get("/jobs")
def jobs(request: Request, status: str = "", type: str = "", name: str = "", node: str = "", q: str = "",
         limit: int = Query(MAX_ROWS, ge=1, le=MAX_ROWS), who: TokenInfo = Viewer) -> Response:
    """The jobs table: running, waiting, blocked, scheduled, then the last hour's finished."""
    snap = live_of(request).snapshot()
    wanted = {"status": status, "type": type, "name": name, "node": node, "q": q}
    match = matcher(**wanted)
    rows = [j for j in snap.jobs if match(j)]
    counts: dict[str, int] = {}
    for j in snap.jobs:
        label = "BLOCKED" if j["blocked"] and not j["is_archived"] else j["status"]
        counts[label] = counts.get(label, 0) + 1
    body = {"version": snap.version, "taken": iso(snap.taken), "error": snap.error, "total": len(snap.jobs),
            "matched": len(rows), "jobs": rows[:limit], "counts": counts,
            "types": sorted({j["type"] for j in snap.jobs}), "nodes": [n["node"] for n in snap.nodes]}
    return _json(request, body, f"{snap.version}|{limit}|{json.dumps(wanted)}")


def matcher(status: str = "", type: str = "", name: str = "", node: str = "", q: str = "") -> Callable[[dict], bool]:
    """The table's filters: status (BLOCKED: blocked live jobs; FINISHED: archived ones), type
    and node exactly, name and text as case-insensitive parts (text: in the name, UID, type,
    node, affinity or notes)."""
    status, type, name, q = status.upper(), type.upper(), name.lower(), q.lower()

    def match(j: dict) -> bool:
        if status == "BLOCKED" and not (j["blocked"] and not j["is_archived"]):
            return False
        if status == "FINISHED" and not j["is_archived"]:
            return False
        if status not in ("", "BLOCKED", "FINISHED") and j["status"] != status:
            return False
        if (type and j["type"] != type) or (node and j["node"] != node) or (name and name not in j["name"].lower()):
            return False
        if q:
            text = " ".join(str(j[k] or "") for k in ("type", "name", "uid", "node", "affinity", "notes"))
            return q in text.lower()
        return True

    return match


@router.get("/nodes")
def nodes(request: Request, who: TokenInfo = Viewer) -> Response:
    snap = live_of(request).snapshot()
    body = {"version": snap.version, "taken": iso(snap.taken), "error": snap.error, "nodes": list(snap.nodes)}
    return _json(request, body, f"nodes|{snap.version}")


@router.get("/plots")
def cluster_plots(request: Request, who: TokenInfo = Viewer) -> Response:
    live = live_of(request)
    snap = live.snapshot()
    points = live.feed.runs()
    drawn = [plots.runs_per_minute(points, snap.taken) if snap.taken else None, plots.queue_depth(snap.queue),
             plots.fire_lag(points)]
    body = {"version": snap.version, "taken": iso(snap.taken), "error": snap.error,
            "plots": [p for p in drawn if p is not None], "runs_known": len(points),
            "backlog": live.feed.backlog}
    return _json(request, body, f"plots|{snap.version}")


@router.get("/job")
def job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Viewer) -> Response:
    """One job's page: its row and counters, parents and children, running task, runs, last
    log and plots."""
    key = JobKey(type.upper(), name, uid)
    cache: PageCache = request.app.state.job_pages
    body = cache.get(key, lambda: job_page(request, key))
    return _json(request, body, f"job|{body['read_at']}|{key}")


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
    return {"job": job, "parents": _parents(api.store, job["depends_on"]), "children": _children(snap, key),
            "task": snap.tasks.get(str(key)), "runs": [_run(r) for r in runs], "last_log": _last_log(runs),
            "plots": page_plots, "read_at": time.time()}


def _parents(store: Any, depends_on: str) -> list[dict[str, Any]]:
    try:
        keys = [parse_key(k) for k in (depends_on or "").split(",") if k.strip()]
    except FabricJobsError:
        return []
    rows = store.get_many(keys)
    return [{"key": str(k), "type": k.type, "name": k.name, "uid": k.uid,
             "status": row.status.value if row is not None else "(gone: counts as done)"}
            for k, row in zip(keys, rows)]


def _children(snap: Snapshot, key: JobKey) -> list[dict[str, Any]]:
    me = str(key)
    return [{k: j[k] for k in ("key", "type", "name", "uid", "status", "blocked")} for j in snap.jobs
            if me in j["parents"]]


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
    """Job pages read within the last interval, shared by every browser showing them."""

    def __init__(self, ttl: float, size: int = 128) -> None:
        self.ttl, self.size = ttl, size
        self._pages: dict[JobKey, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def get(self, key: JobKey, read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            hit = self._pages.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        page = read()
        with self._lock:
            self._pages[key] = (time.monotonic(), page)
            if len(self._pages) > self.size:
                oldest = min(self._pages, key=lambda k: self._pages[k][0])
                del self._pages[oldest]
        return page
