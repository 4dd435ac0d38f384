"""A job's runs (JOBHISTORY), each its own resource (``.../runs/{run}``, the run's number is
its epoch, as JOBHISTORY shows it) with what the store keeps of it, and its log (JOBLOG);
``DELETE .../runs`` deletes them all (DELETEHISTORY, admin only). ``/runs`` is the whole
cluster's last runs (JOBHISTORY RECENT n)."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterable, Iterator

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from ...commands import statements as st
from ...commands.values import MAX_RECENT
from ...errors import FabricJobsError, JobNotFound, WaitTimeout
from ...service import HISTORY_COLUMNS, history_row, run_summary
from ...store.base import RunRecord
from ..auth import Need, requires
from ..errors import body_of
from ..schemas import DeletedRuns, RecentRun, Run, RunLog, RunWaitResult, record, records
from ..tokens import TokenInfo
from . import LONG, MAX_WAIT_SEC, api_of, capped, checked, execute, job_key, long_request, take_long_request

router = APIRouter(tags=["runs"])
RUNS = "/jobs/{type}/{name}/{uid}/runs"
Viewer = Depends(requires(Need.READ, "read runs"))
Admin = Depends(requires(Need.ADMIN, "delete run data"))
Waiter = Depends(requires(Need.OPERATE, "wait for runs"))
#: A run's number in a path: an epoch, a 64-bit number in every store (RUN n's own bounds).
RunNumber = Path(ge=0, le=2**63 - 1, description="the run's number (its epoch, as JOBHISTORY shows it)")


@router.get("/runs", response_model=list[RecentRun],  # type: ignore[valid-type]
            summary="The whole cluster's last runs, newest first (JOBHISTORY RECENT n)")
def recent_runs(request: Request,
                recent: int = Query(20, description=f"how many runs: 1 to {MAX_RECENT} (RECENT's own bounds)"),
                who: TokenInfo = Viewer) -> list[dict[str, Any]]:
    return records(execute(request, who, st.JobHistory(recent=recent)))


@router.get(RUNS, response_model=list[Run],  # type: ignore[valid-type]
            summary="A job's runs, newest first (JOBHISTORY ... WITH UID)")
def list_runs(request: Request, type: str, name: str, uid: str,
              limit: int = Query(50, ge=1, le=10_000), who: TokenInfo = Viewer) -> list[dict[str, Any]]:
    key = job_key(type, name, uid)
    result = execute(request, who, st.JobHistory(key.type, key.name, key.uid, limit=limit))
    if not result.rows and not execute(request, who, st.JobStatus(key.type, key.name, key.uid)).rows:
        raise JobNotFound(f"No such job {key.describe()}")
    return records(result)


@router.delete(RUNS, response_model=DeletedRuns,
               summary="Delete a job's runs and their logs (DELETEHISTORY); 409 while a run is going; "
                       "idempotent: a job that does not exist (any more) has 0 runs deleted, no error")
def delete_runs(request: Request, type: str, name: str, uid: str, who: TokenInfo = Admin) -> dict[str, Any]:
    key = job_key(type, name, uid)
    try:
        return records(execute(request, who, st.DeleteHistory(key.type, key.name, key.uid)))[0]
    except JobNotFound:  # SMILA's DELETE of run data: what is not there is deleted already
        return {"type": key.type, "name": key.name, "uid": key.uid, "deleted_runs": 0}


@router.get(RUNS + "/{run}", response_model=Run, summary="One run of a job")
def get_run(request: Request, type: str, name: str, uid: str, run: int = RunNumber, who: TokenInfo = Viewer) -> dict[str, Any]:
    return record(HISTORY_COLUMNS, history_row(_find(request, type, name, uid, run)))


@router.get(RUNS + "/{run}/wait", response_model=RunWaitResult, responses=LONG,
            summary="Long-poll until run n has ended, then that run (WAITJOB ... RUN n); 404 if it never will")
def wait_run(request: Request, type: str, name: str, uid: str, run: int = RunNumber,
             timeout: float = Query(30.0, ge=0, description=f"seconds, at most {MAX_WAIT_SEC:.0f}"),
             who: TokenInfo = Waiter) -> dict[str, Any]:
    key = job_key(type, name, uid)
    began = time.monotonic()
    try:
        with long_request(request, who):
            result = execute(request, who, st.WaitJob(key.type, key.name, key.uid, timeout=capped(timeout), run=run))
    except WaitTimeout:
        return {"done": False, "waited_sec": round(time.monotonic() - began, 3), "run": None}
    return {"done": True, "waited_sec": round(time.monotonic() - began, 3), "run": records(result)[0]}


@router.get(RUNS + "/{run}/log", response_model=RunLog, summary="One run's log (JOBLOG ... RUN n)")
def get_run_log(request: Request, type: str, name: str, uid: str, run: int = RunNumber,
                who: TokenInfo = Viewer) -> dict[str, Any]:
    return _log(_find(request, type, name, uid, run))


_FOLLOWED: dict[int | str, dict[str, Any]] = {200: {"description": "With ``follow=true``: the lines as they come, as NDJSON (``application/x-ndjson``): "
                                   '``{"line": "..."}`` a line, the last one JOBLOG\'s first line saying how the run ended; '
                                   '``{"error": "WaitTimeout", "message": "..."}`` if the follow ends otherwise.',
                    "content": {"application/x-ndjson": {"schema": {"type": "object", "properties": {
                        "line": {"type": "string"}, "error": {"type": "string"}, "message": {"type": "string"}}}}}}}


@router.get("/jobs/{type}/{name}/{uid}/log", response_model=RunLog, responses={**_FOLLOWED, **LONG},
            summary="The last run's log (JOBLOG); follow=true: the running run's lines as they come (JOBLOG ... FOLLOW)")
def get_last_log(request: Request, type: str, name: str, uid: str,
                 follow: bool = Query(False, description="Stream the lines of the run going on (or of the next one) "
                                                         "until it ends, as NDJSON; a final job: its last run's log"),
                 timeout: float | None = Query(None, ge=0, allow_inf_nan=False,
                                               description="Seconds the whole follow may take (at most 60: ask again "
                                                           "to follow longer)"),
                 who: TokenInfo = Viewer) -> Any:
    if not follow:
        return _log(_find(request, type, name, uid, None))
    key = job_key(type, name, uid)
    # A follow holds a server thread: at most MAX_WAIT_SEC a request, as every wait of the API,
    # and no more of them at once than a token (and the process) may have (web/limits.py).
    give_back = take_long_request(request, who)
    try:
        result = execute(request, who, st.JobLog(key.type, key.name, key.uid, follow=True, timeout=capped(timeout)))
    except BaseException:
        give_back()
        raise
    return StreamingResponse(_ndjson(result.lines or (), give_back), media_type="application/x-ndjson",
                             background=BackgroundTask(give_back))


def _ndjson(lines: Iterable[str], done: Callable[[], None] = lambda: None) -> Iterator[bytes]:
    """One JSON object a line, each sent as it comes; an error ends the stream with its own.
    ``done``: called when the stream ends, however it ends."""
    try:
        for line in lines:
            yield (json.dumps({"line": line}, ensure_ascii=False) + "\n").encode()
    except FabricJobsError as exc:
        yield (json.dumps(body_of(exc), ensure_ascii=False) + "\n").encode()
    finally:
        done()


def _find(request: Request, type: str, name: str, uid: str, number: int | None) -> RunRecord:
    """The run JOBLOG would show (the service's choice and its "No recorded run" error)."""
    key = job_key(type, name, uid)
    command = checked(st.JobLog(key.type, key.name, key.uid, run=number))
    return api_of(request).service().find_run(command)


def _log(r: RunRecord) -> dict[str, Any]:
    return {"run": r.epoch, "summary": run_summary(r), "log": r.log}
