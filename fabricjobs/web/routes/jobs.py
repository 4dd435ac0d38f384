"""Jobs: the list, one job, and STARTJOB, STOPJOB, FINISHJOB, RUNJOB, RELEASEJOB, RESTARTJOB,
RESUMEJOB, UPDATEJOB, WAITJOB.

A job's address is ``/jobs/{type}/{name}/{uid}``: the statements' forms that name every job of
a NAME (STOPJOB without UID, ...) are ``POST /commands``'s, but for RESTARTJOB ... RUNNING (a
deploy restarts what runs of a type or name: ``/jobs/{type}/restart-running``).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response

from ...commands import statements as st
from ...errors import JobNotFound, ValidationError, WaitTimeout
from ...model import JobKey, Status
from ...names import complaint
from ...result import Result
from ...service import EXISTS_NOTE, JobQuery
from ..app import API
from ..auth import Need, requires
from ..cursors import list_cursor, next_cursor
from ..schemas import Change, JobDetail, JobList, StartBody, UpdateBody, WaitResult, record, records
from ..tokens import TokenInfo
from . import LONG, MAX_WAIT_SEC, api_of, capped, execute, job_key, long_request, segment

router = APIRouter(tags=["jobs"])
JOB = "/jobs/{type}/{name}/{uid}"

Viewer = Depends(requires(Need.READ, "read jobs"))
Operator = Depends(requires(Need.OPERATE, "change jobs"))
Waiter = Depends(requires(Need.OPERATE, "wait for jobs"))
#: The body's fields that are the statement's parameters as they are (ARGS and DEPENDS_ON are
#: JSON there: an object, a list); the service checks them as it checks the parser's.
_SAME_AS_THE_LANGUAGE = {"affinity", "exec_interval", "priority", "tz", "late_threshold", "overlap", "late_action",
                         "on_failure", "requestor", "calendar", "delete_on_success", "hold"}


@router.get("/jobs", response_model=JobList, summary="List jobs (JOBSTATUS), filtered, a page at a time")
def list_jobs(
    request: Request,
    status: list[Status] = Query(default=[], description="any of these statuses (repeat the parameter)"),
    type: str | None = None,
    name: str | None = None,
    owner: str | None = Query(None, description="only the jobs this user started: the token's name for jobs started "
                              "through the API, the OS user for the shell's (JOBSTATUS ... BY '<owner>')"),
    requestor: str | None = Query(None, description="only the jobs for this requestor, as STARTJOB's REQUESTOR gave it "
                                  "(JOBSTATUS ... REQUESTOR '<requestor>')"),
    scope: Literal["live", "archived", "all"] = Query(
        "live", description="archived rows are read only when asked; live jobs come by key, archived ones newest end "
                            "first, after the live ones (all)"),
    since: datetime | None = Query(None, description="live: created at or after; archived: ended at or after"),
    until: datetime | None = Query(None, description="... before (ISO 8601; no zone: UTC)"),
    cursor: str | None = Query(None, description="next_cursor of the previous page (a page of archived jobs may "
                               "hold fewer than limit, or none, when more follow: go on while next_cursor is given)"),
    limit: int = Query(100, ge=1, le=1000),
    who: TokenInfo = Viewer,
) -> dict[str, Any]:
    for what, value in (("TYPE", type), ("NAME", name), ("BY", owner), ("REQUESTOR", requestor)):
        if value is not None and (why := complaint(what, value)) is not None:  # (as the statement's words)
            raise ValidationError(why)
    live, archived = scope != "archived", scope != "live"
    query = JobQuery(type=type, name=name, owner=owner, requestor=requestor, statuses=frozenset(status), live=live,
                     archived=archived, since=_utc(since), until=_utc(until),
                     after=list_cursor(cursor, live, archived), limit=limit)
    page = api_of(request).service().list_jobs(query)
    return {"jobs": records(page.result), "next_cursor": next_cursor(page.next)}


@router.get(JOB, response_model=JobDetail, summary="One job (JOBSTATUS ... WITH UID ... DETAILS)")
def get_job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Viewer) -> dict[str, Any]:
    return _detail(request, who, job_key(type, name, uid))


@router.post("/jobs", response_model=Change, status_code=201,
             responses={200: {"model": Change, "description": "if_not_exists met the job: the job as it is"}},
             summary="Start a job (STARTJOB): 201 when it was created, 200 when if_not_exists met the job")
def start_job(request: Request, response: Response, body: StartBody, who: TokenInfo = Operator) -> dict[str, Any]:
    command = st.StartJob(
        type=body.type, name=body.name, uid=body.uid, args=_args(body.args), depends_on=_parents(body.depends_on),
        **body.model_dump(include=_SAME_AS_THE_LANGUAGE | {"parallelism", "if_not_exists"}),
    )
    result = execute(request, who, command)
    if EXISTS_NOTE in result.notices:
        response.status_code = 200  # nothing was created: the job as it is
    job = _one(result, None)
    response.headers["Location"] = API + "/jobs/" + "/".join(quote(job[k], safe="") for k in ("type", "name", "uid"))
    return job


#: STOPJOB's and FINISHJOB's WAIT [TIMEOUT n]: how long the request may wait for the job to end.
WaitTimeoutQuery = Query(None, ge=0, description=f"seconds, at most {MAX_WAIT_SEC:.0f}")


@router.post(f"{JOB}/stop", response_model=Change, responses=LONG, summary="Stop a job (STOPJOB; wait=true: STOPJOB ... WAIT)")
def stop_job(request: Request, type: str, name: str, uid: str, wait: bool = False,
             timeout: float | None = WaitTimeoutQuery, who: TokenInfo = Operator) -> dict[str, Any]:
    return _end(request, who, st.StopJob, job_key(type, name, uid), wait, timeout)


@router.post(f"{JOB}/finish", response_model=Change, responses=LONG,
             summary="Finish a recurring job: its run going on completes, then no more fires (FINISHJOB; "
                     "wait=true: FINISHJOB ... WAIT)")
def finish_job(request: Request, type: str, name: str, uid: str, wait: bool = False,
               timeout: float | None = WaitTimeoutQuery, who: TokenInfo = Operator) -> dict[str, Any]:
    return _end(request, who, st.FinishJob, job_key(type, name, uid), wait, timeout)


def _end(request: Request, who: TokenInfo, statement: type[st.StopJob] | type[st.FinishJob], key: JobKey,
         wait: bool, timeout: float | None) -> dict[str, Any]:
    """STOPJOB or FINISHJOB of one job, with WAIT as long as one request may wait."""
    command = statement(key.type, key.name, key.uid, wait=wait, timeout=capped(timeout) if wait else None)
    if not wait:
        return _one(execute(request, who, command), key)
    with long_request(request, who):
        return _one(execute(request, who, command), key)


@router.post(f"{JOB}/run", response_model=Change,
             summary="Run a job once now, between its fires; its schedule is unchanged (RUNJOB)")
def run_job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Operator) -> dict[str, Any]:
    key = job_key(type, name, uid)
    return _one(execute(request, who, st.RunJob(key.type, key.name, key.uid)), key)


@router.post(f"{JOB}/release", response_model=list[Change],  # type: ignore[valid-type]
             summary="Release a HELD job and, below it, its held children (RELEASEJOB); the job first")
def release_job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Operator) -> list[dict[str, Any]]:
    key = job_key(type, name, uid)
    return records(execute(request, who, st.ReleaseJob(key.type, key.name, key.uid)))


@router.post("/jobs/{type}/restart-running", response_model=list[Change],  # type: ignore[valid-type]
             summary="Restart the jobs of a type (or of one name) with a run going on; idle ones are left "
                     "(RESTARTJOB <TYPE> [NAME=...] RUNNING); none running is no error")
def restart_running(request: Request, type: str,
                    name: str | None = Query(None, description="only the jobs of this name"),
                    who: TokenInfo = Operator) -> list[dict[str, Any]]:
    command = st.RestartJob(segment(type), name, running=True)
    return records(execute(request, who, command))


@router.post(f"{JOB}/restart", response_model=Change, summary="Restart a job (RESTARTJOB)")
def restart_job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Operator) -> dict[str, Any]:
    key = job_key(type, name, uid)
    return _one(execute(request, who, st.RestartJob(key.type, key.name, key.uid)), key)


@router.post(f"{JOB}/resume", response_model=Change, summary="Resume an archived job (RESUMEJOB)")
def resume_job(request: Request, type: str, name: str, uid: str, who: TokenInfo = Operator) -> dict[str, Any]:
    key = job_key(type, name, uid)
    return _one(execute(request, who, st.ResumeJob(key.type, key.name, key.uid)), key)


@router.patch(JOB, response_model=Change, summary="Change a job (UPDATEJOB)")
def update_job(request: Request, type: str, name: str, uid: str, body: UpdateBody,
               who: TokenInfo = Operator) -> dict[str, Any]:
    key = job_key(type, name, uid)
    command = st.UpdateJob(
        key.type, key.name, key.uid, args=_args(body.args), depends_on=_parents(body.depends_on),
        **body.model_dump(include=_SAME_AS_THE_LANGUAGE | {"reset_end_time"}),
    )
    result = execute(request, who, command)
    return _one(result, key) if result.rows else _detail_as_change(request, who, key)


@router.get(f"{JOB}/wait", response_model=WaitResult, responses=LONG,
            summary="Long-poll until the job is final, or its current or next run ended (WAITJOB)")
def wait_job(request: Request, type: str, name: str, uid: str,
             timeout: float = Query(30.0, ge=0, description=f"seconds, at most {MAX_WAIT_SEC:.0f}"),
             who: TokenInfo = Waiter) -> dict[str, Any]:
    key = job_key(type, name, uid)
    began = time.monotonic()
    try:
        with long_request(request, who):
            execute(request, who, st.WaitJob(key.type, key.name, key.uid, timeout=capped(timeout)))
        done = True
    except WaitTimeout:
        done = False
    return {"done": done, "waited_sec": round(time.monotonic() - began, 3), "job": _detail(request, who, key)}


# -- helpers -----------------------------------------------------------------------------------

def _detail(request: Request, who: TokenInfo, key: JobKey) -> dict[str, Any]:
    result = execute(request, who, st.JobStatus(key.type, key.name, key.uid, details=True))
    if not result.rows:
        raise JobNotFound(f"No such job {key.describe()}")
    return record(result.columns, result.rows[0])


def _detail_as_change(request: Request, who: TokenInfo, key: JobKey) -> dict[str, Any]:
    """UPDATEJOB that changed nothing answers no row; the job as it stands, then."""
    job = _detail(request, who, key)
    return {k: job[k] for k in ("type", "name", "uid", "status", "notes")}


def _one(result: Result, key: JobKey | None) -> dict[str, Any]:
    """The one row a command on one job answers (none: the row vanished meanwhile)."""
    if not result.rows:
        raise JobNotFound(f"No such job {key.describe() if key else ''}".rstrip())
    return record(result.columns, result.rows[0])


def _args(args: dict[str, Any] | None) -> str | None:
    return None if args is None else json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _parents(parents: list[str] | None) -> tuple[Any, ...] | None:
    return None if parents is None else tuple(parents)  # TYPE.NAME.UID text, read by the service


def _utc(when: datetime | None) -> datetime | None:
    return when.replace(tzinfo=timezone.utc) if when is not None and when.tzinfo is None else when
