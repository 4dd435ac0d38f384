"""The API's routes, one module per kind of resource. Each route builds the typed command the
statement would parse to and runs it on the service, so HTTP adds addresses and JSON shapes,
never a meaning of its own."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from fastapi import Request

from ...commands import statements, values
from ...errors import ValidationError
from ...model import JobKey
from ...result import Result
from ..app import Api, segment  # noqa: F401  (segment: for the route modules)
from ..audit import recorded
from ..tokens import TokenInfo

#: The longest a request waits (WAITJOB, STOPJOB ... WAIT): a wait holds a server thread, and
#: proxies drop requests idle for about a minute. Ask again to wait longer.
MAX_WAIT_SEC = 60.0
#: What a route that may hold a long request (a wait, a follow) answers besides its own.
LONG: dict[int | str, dict[str, Any]] = {429: {
    "description": "too many long requests (waits, follows) open: the token's [web] MAX_WAITS_PER_TOKEN, or "
                   "the process's MAX_WAITS; ask again later (Retry-After)"}}


def api_of(request: Request) -> Api:
    return request.app.state.api


def execute(request: Request, who: TokenInfo, command: statements.Command) -> Result:
    """``command`` on the service, in a session acting for ``who``; a change leaves its line
    in the web process's log (audit.py)."""
    api = api_of(request)
    with recorded(who, (command,)):
        return api.service().execute(command, api.session(who))


C = TypeVar("C", bound=statements.Command)


def checked(command: C) -> C:
    """A command for a service method other than ``execute`` (which checks its own)."""
    return values.checked(command)


def job_key(type: str, name: str, uid: str) -> JobKey:
    """The job a path names: its segments decoded (a NAME may hold ``/``)."""
    return JobKey(segment(type).upper(), segment(name), segment(uid))


def capped(timeout: float | None) -> float:
    return MAX_WAIT_SEC if timeout is None else min(timeout, MAX_WAIT_SEC)


@contextmanager
def long_request(request: Request, who: TokenInfo) -> Iterator[None]:
    """Hold one of the long requests ``who`` may have open (web/limits.py: else 429)."""
    with request.app.state.waits.held(who.name):
        yield


def take_long_request(request: Request, who: TokenInfo) -> Callable[[], None]:
    """As :func:`long_request`, for a response that goes on after its route returns (a
    stream): what gives the slot back."""
    return request.app.state.waits.take(who.name)


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not take: a misspelt one would be ignored, and
    a list come back unfiltered or a stop not wait (``?statuses=``, ``?wiat=``). Only for a
    caller with a token or session: anyone else is answered 401 by the route, told nothing of
    what it takes."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params:
        return
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not request.app.state.authenticated(request.scope, headers):
        return
    known = _query_names(dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise ValidationError(f"unknown query parameter {', '.join(repr(u[:64]) for u in unknown[:5])} "
                              f"(this route takes: {', '.join(sorted(known)) or 'none'})")


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
