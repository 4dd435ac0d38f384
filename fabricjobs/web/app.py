"""The web process's application: one store, the tokens, and the routes on the service layer.

The process keeps no state of its own beyond what it reads (the store, the tokens file), so
any number of them may serve one cluster behind a load balancer. Each request gets a fresh
:class:`~fabricjobs.service.Session` (SET lasts one request; STARTJOB's LOG_ID is new per
request) naming its token as the actor. A :class:`~fabricjobs.service.CommandService` is made
per server thread, since it batches its doorbell rings in per-object state; they share the
store (thread-safe), the job catalog and the doorbell.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import unquote

from fastapi import Depends, FastAPI, Request

from .. import __version__
from ..clock import Clock, SystemClock, following
from ..config import Config
from ..jobs.registry import JobCatalog
from ..service import CommandService, Session
from ..store.base import JobStore
from ..wakeup import Doorbell
from . import errors
from .auth import actor, authenticate
from .tokens import TokenFile, TokenInfo

API = "/api/v1"


@dataclass
class Api:
    """What every request of one web process shares."""

    store: JobStore
    config: Config
    tokens: TokenFile
    clock: Clock = field(default_factory=SystemClock)
    _local: threading.local = field(default_factory=threading.local)

    def __post_init__(self) -> None:
        self.clock = following(self.clock, self.store.wall_time())  # the store's time on Cassandra
        self._catalog = JobCatalog.from_config(self.config)
        self._doorbell = Doorbell.for_store(self.store)

    def service(self) -> CommandService:
        service = getattr(self._local, "service", None)
        if service is None:
            service = CommandService(self.store, self.config, self.clock, catalog=self._catalog,
                                     doorbell=self._doorbell)
            self._local.service = service
        return service

    @staticmethod
    def session(who: TokenInfo) -> Session:
        return Session(actor=actor(who), owner=who.name)


def create_app(api: Api) -> FastAPI:
    """The application: the API under /api/v1, its OpenAPI document, /healthz and /readyz, and
    the web console at /.

    No interactive docs pages: FastAPI's load their scripts from a CDN, and nothing here may be
    fetched from outside at run time."""
    from .routes import calendars, cluster, commands, health, jobs, known_query, runs

    needs_token = api.config.get("web", "OPENAPI_NEEDS_TOKEN")
    app = FastAPI(
        title="fabricjobs", version=__version__, docs_url=None, redoc_url=None,
        openapi_url=None if needs_token else f"{API}/openapi.json",
        description="The command language of fabricjobs over HTTP: the same service, the same errors. "
                    "Send `Authorization: Bearer <token>` (`fabricjobs token create NAME --role ROLE`).",
    )
    app.state.api = api
    install_console(app, api)
    install_limits(app, api)
    app.add_middleware(NoSniff)
    errors.install(app)
    for module in (jobs, runs, calendars, cluster, commands):
        app.include_router(module.router, prefix=API, responses=errors_documented(),
                           dependencies=[Depends(known_query)])
    app.include_router(health.router)
    _without_422(app)
    if needs_token:
        @app.get(f"{API}/openapi.json", include_in_schema=False)
        def openapi(request: Request) -> dict[str, Any]:
            authenticate(request, api.tokens)
            return app.openapi()
    return app


def install_console(app: FastAPI, api: Api) -> None:
    """The web console at ``/`` (console.py, console_data.py): its session keys, the shared
    view of the cluster (started with the first look, or by the server), the job pages' cache."""
    from . import console, console_data
    from .live import LiveView
    from .session_auth import SessionKeys

    web = api.config.section("web")
    app.state.sessions = SessionKeys(web["SESSION_KEY_FILE"], web["SESSION_HOURS"], web["SECURE_COOKIE"])
    app.state.live = LiveView(api.store, api.service, web["CONSOLE_INTERVAL_SEC"])
    app.state.job_pages = console_data.PageCache(web["CONSOLE_INTERVAL_SEC"])
    app.add_middleware(console_data.ForgetPagesOnChange, pages=app.state.job_pages)
    app.include_router(console.router)
    app.include_router(console_data.router)


def install_limits(app: FastAPI, api: Api) -> None:
    """Bounded request bodies, a token before any body is read, and long requests capped per
    token and in all (limits.py)."""
    from .limits import BodyGate, WaitSlots, cookie
    from .session_auth import cookie_names

    web = api.config.section("web")
    app.state.waits = WaitSlots(web["MAX_WAITS_PER_TOKEN"], web["MAX_WAITS"])
    sessions = app.state.sessions

    def authenticated(scope: Scope, headers: dict[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return api.tokens.find(token.strip()) is not None
        secure = sessions.secure_always or scope.get("scheme") == "https"
        value = cookie(headers, cookie_names(scope, secure)[0])
        return bool(value) and sessions.read(value, api.tokens) is not None

    app.state.authenticated = authenticated  # also what error bodies may show (errors.public)
    app.add_middleware(BodyGate, max_bytes=web["MAX_BODY_BYTES"], authenticated=authenticated)


def _without_422(app: FastAPI) -> None:
    """The OpenAPI document as the API answers: FastAPI lists its own 422 validation shape for
    every operation with parameters, but bad input is answered 400 with the error body every
    other error has (errors.py); a client made from the document must decode what comes."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = made()
            for operations in doc.get("paths", {}).values():
                for op in operations.values():
                    op.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):  # (FastAPI's, used by 422 alone)
                doc.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def errors_documented() -> dict[int | str, dict[str, Any]]:
    from .schemas import ErrorBody

    words = {400: "bad input (ValidationError, CommandSyntaxError)", 401: "no token, or an unknown or revoked one",
             403: "the token's role does not allow this", 404: "no such job, run, node or task",
             409: "Job is running, or the job changed under the command",
             413: "the request body is too long ([web] MAX_BODY_BYTES)",
             410: "the job named has ended (JobEnded): a change of a running or waiting job came too late",
             502: "the store failed partway through a script's STARTJOBs (InsertInterrupted): part of it took effect",
             503: "the store cannot be reached", 504: "a wait ran out (WaitTimeout); the command took effect"}
    return {status: {"model": ErrorBody, "description": text} for status, text in words.items()}


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class NoSniff:
    """Every answer's Content-Type is to be taken as it says (``X-Content-Type-Options:
    nosniff``): a JSON answer quoting a job's name or log line is never read as a page or a
    script by a browser. (The console's pages carry it and the rest of their headers already.)"""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                    message = dict(message, headers=[*headers, (b"x-content-type-options", b"nosniff")])
            await send(message)

        await self.app(scope, receive, sending)


class KeepSegments:
    """Routes on the *encoded* path, so that a name or UID holding ``/`` (``sub%2Fjob.sh``)
    stays one path segment: each segment of ``path`` keeps ``/`` and ``%`` percent-encoded,
    and :func:`segment` decodes a path parameter. The server decodes the whole path before
    routing, which would split such a name in two."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and raw.startswith(API.encode()):
            parts = raw.decode("latin-1").split("?", 1)[0].split("/")
            kept = [unquote(p).replace("%", "%25").replace("/", "%2F") for p in parts]
            scope = dict(scope, path="/".join(kept))
        await self.app(scope, receive, send)


def segment(value: str) -> str:
    """A path parameter as the client meant it (see :class:`KeepSegments`)."""
    return unquote(value)
