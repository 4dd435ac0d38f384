"""A job's runs (JOBHISTORY), each its own resource (``.../runs/{run}``, the run's number is
its epoch, as JOBHISTORY shows it) with what the store keeps of it, and its log (JOBLOG);
``DELETE .../runs`` deletes them all (DELETEHISTORY, admin only)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from ...commands import statements as st
from ...errors import JobNotFound, WaitTimeout
from ...service import HISTORY_COLUMNS, history_row, run_summary
from ...store.base import RunRecord
from ..auth import Need, requires
from ..schemas import DeletedRuns, Run, RunLog, RunWaitResult, record, records
from ..tokens import TokenInfo
from . import MAX_WAIT_SEC, api_of, capped, checked, execute, job_key

router = APIRouter(tags=["runs"])
RUNS = "/jobs/{type}/{name}/{uid}/runs"
Viewer = Depends(requires(Need.READ, "read runs"))
Admin = Depends(requires(Need.ADMIN, "delete run data"))
Waiter = Depends(requires(Need.OPERATE, "wait for runs"))


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
               summary="Delete a job's runs and their logs (DELETEHISTORY); 409 while a run is going")
def delete_runs(request: Request, type: str, name: str, uid: str, who: TokenInfo = Admin) -> dict[str, Any]:
    key = job_key(type, name, uid)
    return records(execute(request, who, st.DeleteHistory(key.type, key.name, key.uid)))[0]


@router.get(RUNS + "/{run}", response_model=Run, summary="One run of a job")
def get_run(request: Request, type: str, name: str, uid: str, run: int, who: TokenInfo = Viewer) -> dict[str, Any]:
    return record(HISTORY_COLUMNS, history_row(_find(request, type, name, uid, run)))


@router.get(RUNS + "/{run}/wait", response_model=RunWaitResult,
            summary="Long-poll until run n has ended, then that run (WAITJOB ... RUN n); 404 if it never will")
def wait_run(request: Request, type: str, name: str, uid: str, run: int,
             timeout: float = Query(30.0, ge=0, description=f"seconds, at most {MAX_WAIT_SEC:.0f}"),
             who: TokenInfo = Waiter) -> dict[str, Any]:
    key = job_key(type, name, uid)
    began = time.monotonic()
    try:
        result = execute(request, who, st.WaitJob(key.type, key.name, key.uid, timeout=capped(timeout), run=run))
    except WaitTimeout:
        return {"done": False, "waited_sec": round(time.monotonic() - began, 3), "run": None}
    return {"done": True, "waited_sec": round(time.monotonic() - began, 3), "run": records(result)[0]}


@router.get(RUNS + "/{run}/log", response_model=RunLog, summary="One run's log (JOBLOG ... RUN n)")
def get_run_log(request: Request, type: str, name: str, uid: str, run: int,
                who: TokenInfo = Viewer) -> dict[str, Any]:
    return _log(_find(request, type, name, uid, run))


@router.get("/jobs/{type}/{name}/{uid}/log", response_model=RunLog, summary="The last run's log (JOBLOG)")
def get_last_log(request: Request, type: str, name: str, uid: str, who: TokenInfo = Viewer) -> dict[str, Any]:
    return _log(_find(request, type, name, uid, None))


def _find(request: Request, type: str, name: str, uid: str, number: int | None) -> RunRecord:
    """The run JOBLOG would show (the service's choice and its "No recorded run" error)."""
    key = job_key(type, name, uid)
    command = checked(st.JobLog(key.type, key.name, key.uid, run=number))
    return api_of(request).service().find_run(command)


def _log(r: RunRecord) -> dict[str, Any]:
    return {"run": r.epoch, "summary": run_summary(r), "log": r.log}
