"""Errors as JSON: the command language's error types and messages, with HTTP statuses.

Every answer that is not a success is ``{"error": TYPE, "message": TEXT}`` (a syntax error adds
``line``, ``column`` and ``expected``). TYPE is the name of the exception a shell or
``Client.fetch`` would raise (``JobNotFound``, ``JobAlreadyRunning``, ...), so the three ways in
agree on what went wrong. Anything else is a bug: it is logged with its traceback and answered
500 with an id to find it in the log, never with the traceback.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import (
    CalendarNotFound, CommandError, CommandSyntaxError, ConfigError, FabricJobsError, JobAlreadyRunning, JobEnded, JobNotFound,
    NodeNotFound,
    InsertInterrupted, PriorityAboveCeiling, StoreError, TaskNotFound, WaitTimeout,
)

log = logging.getLogger("fabricjobs.web")

#: Set in a request's state when a refused request changed something before it failed (a
#: script's earlier statements, a command whose wait ran out): its answer is an error, yet the
#: console's cached pages are stale (console_data.ForgetPagesOnChange).
PARTLY_CHANGED = "fabricjobs_partly_changed"

#: An answer made by the server's outermost layer (a bug's 500) passes no middleware: it says
#: this itself (app.NoSniff says it for the rest).
NOSNIFF = {"X-Content-Type-Options": "nosniff"}

#: Most specific first: the first class an error is an instance of gives its status.
STATUSES: tuple[tuple[type[BaseException], int], ...] = (
    (CommandSyntaxError, 400),  # ValidationError too
    (JobEnded, 410),  # the job named has ended: Gone, as SMILA answers (a job that never was: 404)
    (JobNotFound, 404),
    (NodeNotFound, 404),
    (TaskNotFound, 404),
    (CalendarNotFound, 404),
    (PriorityAboveCeiling, 403),  # the caller may not give that priority ([jobs] MAX_JOB_PRIORITY)
    (JobAlreadyRunning, 409),  # "Job is running [...]"
    (WaitTimeout, 504),  # the command took effect; the wait for its end ran out
    (InsertInterrupted, 502),  # the store failed partway through a script's STARTJOBs: part of it took effect
    (CommandError, 409),  # understood, but cannot be carried out now ("kept changing", ...)
    (StoreError, 503),
    (ConfigError, 500),
)


class ApiError(Exception):
    """An answer the API itself gives (401, 403, 400 on a bad query), in the same shape."""

    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.error, self.message, self.headers = status, error, message, headers


#: A file system path in a message (two segments at least: /srv/jobs/x.py, /var/lib/fj.db).
_PATH = re.compile(r"(?<![\w:/.])/(?:[\w.@+~-]+/)+[\w.@+~-]*")


def public(request: Request, message: str) -> str:
    """``message`` as a client may see it: without file paths unless the request carries a
    valid token or console session (a path says how the host is laid out)."""
    check = getattr(request.app.state, "authenticated", None)
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        if check is not None and check(request.scope, headers):
            return message
    except FabricJobsError:  # (the tokens cannot be read: no one is known)
        pass
    return without_paths(message)


def without_paths(text: str) -> str:
    return _PATH.sub("<path>", text)


def status_of(exc: FabricJobsError) -> int:
    return next((status for cls, status in STATUSES if isinstance(exc, cls)), 500)


def body_of(exc: FabricJobsError) -> dict[str, Any]:
    body: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, CommandSyntaxError) and exc.line is not None:
        body.update(line=exc.line, column=exc.column, expected=list(exc.expected))
    if isinstance(exc, InsertInterrupted):
        body.update(failed=exc.failed, written=list(exc.written), also_failed=list(exc.also_failed))
    if getattr(exc, "lines", None) is not None:  # a FOLLOW's lines until its time ran out (schemas.py)
        body.update(lines=list(exc.lines))  # type: ignore[attr-defined]
    if getattr(exc, "statement", None) is not None:  # of a script (POST /commands)
        body.update(statement=exc.statement, ran=exc.ran)  # type: ignore[attr-defined]
    return body


def install(app: FastAPI) -> None:
    """The handlers that turn every failure into the JSON shape above."""

    @app.exception_handler(FabricJobsError)
    async def fabricjobs_error(request: Request, exc: FabricJobsError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, WaitTimeout):  # (a wait that ran out is a long poll's answer)
            log.error("%s %s: %s", request.method, request.url.path, exc)
        body = body_of(exc)
        if isinstance(exc, (WaitTimeout, InsertInterrupted)) or (body.get("ran") or 0) > 0:
            setattr(request.state, PARTLY_CHANGED, True)
        body["message"] = public(request, body["message"])
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"error": exc.error, "message": public(request, exc.message)}, status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "ValidationError", "message": _validation_message(exc)}, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        error = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return JSONResponse({"error": error, "message": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> JSONResponse:
        incident = uuid.uuid4().hex[:12]
        log.error("internal error %s in %s %s", incident, request.method, request.url.path, exc_info=exc)
        return JSONResponse({"error": "InternalError",
                             "message": f"internal error {incident}; the server's log has the details"},
                            status_code=500, headers=NOSNIFF)  # (answered outside app.NoSniff)


def _validation_message(exc: RequestValidationError) -> str:
    """Pydantic's complaints in one line: where (body.priority, query.limit) and what."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"
