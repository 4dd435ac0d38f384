"""Who may do what: a bearer token's role against what a request needs.

Every route names what it needs (:class:`Need`); ``POST /api/v1/commands`` needs what its
statements need, each statement type by :data:`STATEMENT_NEEDS`, checked for the whole script
before any of it runs. A statement type missing from that table needs ADMIN, so a statement
added to the language is closed until someone decides who may use it (a test checks that
the table covers the language).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Callable, Iterable

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..commands import statements as st
from .errors import ApiError
from .session_auth import authenticate_cookie
from .tokens import Role, TokenFile, TokenInfo


class Need(IntEnum):
    """What a request needs, in increasing order: each role allows a level and those below."""

    READ = 1  # look: jobs, runs, logs, PS, NODES
    OPERATE = 2  # change jobs, KILL tasks, WAITJOB (a wait holds a server thread)
    ADMIN = 3  # everything, including deleting run data (DELETEHISTORY)


ALLOWED: dict[Role, Need] = {Role.VIEWER: Need.READ, Role.OPERATOR: Need.OPERATE, Role.ADMIN: Need.ADMIN}

STATEMENT_NEEDS: dict[type, Need] = {
    st.JobStatus: Need.READ, st.JobHistory: Need.READ, st.JobLog: Need.READ, st.Ps: Need.READ,
    st.Nodes: Need.READ, st.Set: Need.READ,  # SET changes only the request's own session
    st.StartJob: Need.OPERATE, st.StopJob: Need.OPERATE, st.FinishJob: Need.OPERATE, st.RunJob: Need.OPERATE, st.ReleaseJob: Need.OPERATE,
    st.RestartJob: Need.OPERATE,
    st.ResumeJob: Need.OPERATE, st.UpdateJob: Need.OPERATE, st.Kill: Need.OPERATE, st.WaitJob: Need.OPERATE,
    st.DeleteHistory: Need.ADMIN,  # run-data deletion (the admin role of docs/guides/http-api.md)
    st.Calendars: Need.READ,
    st.CreateCalendar: Need.ADMIN, st.DropCalendar: Need.ADMIN,  # a calendar changes every job that names it
}

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="fabricjobs"'}
#: Declares the scheme in the OpenAPI document; the checks below are ours (same answer shape).
_BEARER = HTTPBearer(auto_error=False, description="an API token: fabricjobs token create NAME --role ROLE")


def script_needs(commands: Iterable[object]) -> Need:
    return max((STATEMENT_NEEDS.get(type(c), Need.ADMIN) for c in commands), default=Need.READ)


def authenticate(request: Request, tokens: TokenFile) -> TokenInfo:
    """The token the request carries (``Authorization: Bearer <token>``), or without that
    header, the token a console session acts for (its cookie; a change needs its CSRF token:
    session_auth.py); 401 without either."""
    sessions = getattr(request.app.state, "sessions", None)
    if "authorization" not in request.headers and sessions is not None \
            and sessions.session_cookie(request) in request.cookies:
        return authenticate_cookie(request, sessions, tokens)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "Unauthorized", "send an API token: Authorization: Bearer <token>", _CHALLENGE)
    info = tokens.find(token.strip())
    if info is None:
        raise ApiError(401, "Unauthorized", "unknown or revoked API token", _CHALLENGE)
    return info


def authorize(who: TokenInfo, need: Need, what: str) -> None:
    if ALLOWED[who.role] < need:
        raise ApiError(403, "Forbidden", f"token {who.name!r} ({who.role.value}) may not {what}")


def requires(need: Need, what: str) -> Callable[[Request], TokenInfo]:
    """A FastAPI dependency: the request's token, if its role allows ``need``."""

    def dependency(request: Request, _: HTTPAuthorizationCredentials | None = Depends(_BEARER)) -> TokenInfo:
        who = authenticate(request, request.app.state.api.tokens)
        authorize(who, need, what)
        return who

    return dependency


def actor(who: TokenInfo) -> str:
    """How a change made with this token is recorded (a job's Notes, a KILL request)."""
    return f"token {who.name!r}"
