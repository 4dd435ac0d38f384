"""What one client may take of a web process (docs/guides/run-isolation.md).

* A request body is at most ``[web] MAX_BODY_BYTES``: a longer one is answered 413 before it
  is read (its Content-Length says so; a chunked one is read up to the limit, no further).
* An API request with a body and no valid token (or console session) is answered 401 before
  any of its body is read into memory, so an anonymous client cannot make the process hold or
  parse anything (a small body is read and dropped first: :func:`_drain`). Elsewhere (the console's login form) a request without one may send
  ``ANONYMOUS_BODY_BYTES`` at most, and its body (in chunks or of a Content-Length) must
  arrive within ``BODY_READ_SEC``: a client that stops sending does not hold what it sent.
* Long requests (WAITJOB, STOPJOB ... WAIT, JOBLOG ... FOLLOW) each hold a server thread while
  they wait: one token may have ``[web] MAX_WAITS_PER_TOKEN`` of them open, all tokens
  together ``[web] MAX_WAITS`` (fewer than the threads), and one more is answered 429. /healthz
  and /readyz need no server thread of that pool at all (routes/health.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from contextlib import contextmanager
from http.cookies import CookieError, SimpleCookie
from typing import Any, Awaitable, Callable, Iterator, MutableMapping

from ..errors import FabricJobsError
from .errors import ApiError, without_paths

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_CHALLENGE = (b"www-authenticate", b'Bearer realm="fabricjobs"')
ANONYMOUS_BODY_BYTES = 16 * 1024  # a login form's nonce and token, with room to spare
BODY_READ_SEC = 30.0
#: A refused request's body, read and dropped before the answer (a small one, soon: see _drain).
DRAIN_BYTES = 64 * 1024
DRAIN_SEC = 1.0


class BodyGate:
    """The ASGI layer that bounds request bodies and asks for a token before reading one."""

    def __init__(self, app: Callable, max_bytes: int, authenticated: Callable[[Scope, dict[str, str]], bool]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.authenticated = authenticated  # the request's headers carry a valid token or session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        length_text = headers.get("content-length", "").strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if length_text and not length_text.isdigit():
            await _answer(send, 400, "ValidationError", "Content-Length is not a number")
            return
        length = int(length_text or 0)
        limit, anonymous = self.max_bytes, False
        if length or chunked:
            try:
                known = self.authenticated(scope, headers)
            except FabricJobsError as exc:  # the tokens file cannot be read: no one is known
                await _answer(send, 500, type(exc).__name__, without_paths(str(exc)))
                return
            if not known and scope["path"].startswith("/api/"):
                await _drain(receive, length, chunked)
                await _answer(send, 401, "Unauthorized", "send an API token: Authorization: Bearer <token>",
                              [_CHALLENGE])
                return
            if not known:
                limit, anonymous = min(limit, ANONYMOUS_BODY_BYTES), True
        if length > limit:
            await _drain(receive, length, chunked)
            await _answer(send, 413, "PayloadTooLarge", self._too_large(f"{length:,} bytes long", limit, anonymous))
            return
        if chunked or (anonymous and length):
            try:  # (a client with a token may take its time: a big upload over a slow link)
                body = await asyncio.wait_for(self._read_bounded(receive, limit), BODY_READ_SEC if anonymous else None)
            except asyncio.TimeoutError:
                await _answer(send, 408, "RequestTimeout", f"the request body did not arrive within {BODY_READ_SEC:g} s")
                return
            if body is None:
                await _answer(send, 413, "PayloadTooLarge", self._too_large("longer than that", limit, anonymous))
                return
            receive = _replay(body)
        await self.app(scope, receive, send)

    def _too_large(self, what: str, limit: int, anonymous: bool) -> str:
        where = "without a token or session" if anonymous and limit < self.max_bytes else "[web] MAX_BODY_BYTES"
        return f"the request body is {what}; at most {limit:,} bytes are allowed ({where})"

    @staticmethod
    async def _read_bounded(receive: Receive, limit: int) -> bytes | None:
        """A chunked body, or None once it is past ``limit`` (the rest is not read)."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(parts)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)


async def _drain(receive: Receive, length: int, chunked: bool) -> None:
    """Read and drop a refused request's body when it is small (DRAIN_BYTES, within DRAIN_SEC).
    The connection is closed after the answer; body bytes arriving after the close would make
    the kernel reset it, and a reset drops the answer the client has not read yet (it saw
    "connection reset" instead of the 401). A longer body is not read: that client may see the
    reset."""
    if chunked or not 0 < length <= DRAIN_BYTES:
        return
    try:
        await asyncio.wait_for(BodyGate._read_bounded(receive, length), DRAIN_SEC)
    except asyncio.TimeoutError:
        pass


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _answer(send: Send, status: int, error: str, message: str, extra: list | None = None) -> None:
    body = json.dumps({"error": error, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def cookie(headers: dict[str, str], name: str) -> str | None:
    """The value of cookie ``name`` in a request's headers, or None."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


class WaitSlots:
    """How many long requests each token, and all of them, have open."""

    def __init__(self, per_token: int, total: int) -> None:
        self.per_token = per_token
        self.total = total
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, token: str) -> Callable[[], None]:
        """A slot for a long request of ``token`` (ApiError 429 if there is none); returns
        what gives it back (idempotent)."""
        with self._lock:
            if self._open[token] >= self.per_token:
                raise ApiError(429, "TooManyRequests",
                               f"token {token!r} already has {self._open[token]} long requests open (waits and follows), "
                               f"the most one token may have ([web] MAX_WAITS_PER_TOKEN); try again when one has ended",
                               {"Retry-After": "1"})
            if sum(self._open.values()) >= self.total:
                raise ApiError(429, "TooManyRequests",
                               f"this web process already has {self.total} long requests open (waits and follows), "
                               "the most it serves at once ([web] MAX_WAITS); try again shortly", {"Retry-After": "1"})
            self._open[token] += 1
        given_back = threading.Event()

        def give_back() -> None:
            with self._lock:
                if not given_back.is_set():
                    given_back.set()
                    self._open[token] -= 1
                    if self._open[token] <= 0:
                        del self._open[token]

        return give_back

    @contextmanager
    def held(self, token: str) -> Iterator[None]:
        give_back = self.take(token)
        try:
            yield
        finally:
            give_back()
