"""The console's sessions: a signed cookie after a login with a token, and a CSRF token per
session for every request that changes something.

A session is a cookie the browser cannot read (HttpOnly), sends only to this site
(SameSite=Strict) and, over TLS, only over TLS (Secure). It holds the token's name, the first
16 hex digits of its hash, an expiry and a random session id, signed with HMAC-SHA256 under a
key kept in a 0600 file (``[web] SESSION_KEY_FILE``). Nothing is stored on the server, so any
web process given the same key file accepts it; revoking the token ends its sessions at the
next request, as it does for the token itself.

The CSRF token is an HMAC of the session id: a page gets it in a ``<meta>`` tag and sends it in
the ``X-CSRF-Token`` header. A request authenticated by the cookie that is not GET, HEAD or
OPTIONS needs it, and a cross-site Origin is refused outright. Bearer-token clients send no
cookie and need neither.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request
from fastapi.responses import Response

from ..errors import ConfigError
from ..private import tighten_if_present
from .errors import ApiError
from .tokens import TokenFile, TokenInfo

COOKIE = "fj_session"  # the session cookie's name is this, the port and, over TLS, a prefix (cookie_names)
LOGIN_COOKIE = "fj_login"  # the login form's nonce (double submit: a login CSRF needs it too)
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_BINDING = 16  # hex digits of the token's hash a session carries: a re-created token starts anew


@dataclass(frozen=True)
class ConsoleSession:
    """A verified session: who it acts for and its CSRF token."""

    who: TokenInfo
    sid: str
    csrf: str
    expires: int


class SessionKeys:
    """The HMAC key of the sessions (created 0600 on first use) and what it signs."""

    def __init__(self, path: str | os.PathLike, hours: float, secure_always: bool = False) -> None:
        self.path = Path(path)
        self.hours = hours
        self.secure_always = secure_always
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def key(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = _load_or_create(self.path)
            return self._key

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self.key(), text.encode(), hashlib.sha256).digest())

    def csrf_of(self, sid: str) -> str:
        return self._mac("csrf:" + sid)

    # -- issuing and reading ----------------------------------------------------------------

    def issue(self, who: TokenInfo) -> tuple[str, ConsoleSession]:
        """A new session for ``who``: the cookie's value, and the session."""
        sid = secrets.token_urlsafe(16)
        expires = int(time.time() + self.hours * 3600)
        body = _b64(json.dumps({"n": who.name, "h": who.sha256[:_BINDING], "e": expires, "s": sid}).encode())
        return f"{body}.{self._mac(body)}", ConsoleSession(who, sid, self.csrf_of(sid), expires)

    def read(self, value: str, tokens: TokenFile) -> ConsoleSession | None:
        """The session a cookie holds, if its signature holds, it has not expired and its token
        still exists; else None."""
        body, _, mac = value.partition(".")
        if not body or not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            name, binding, expires, sid = str(data["n"]), str(data["h"]), int(data["e"]), str(data["s"])
        except (ValueError, KeyError, TypeError):
            return None
        who = tokens.named(name)
        if expires < time.time() or who is None or not hmac.compare_digest(who.sha256[:_BINDING], binding):
            return None
        return ConsoleSession(who, sid, self.csrf_of(sid), expires)

    def set_cookie(self, response: Response, request: Request, value: str) -> None:
        response.set_cookie(self.session_cookie(request), value, max_age=int(self.hours * 3600), path="/",
                            httponly=True, samesite="strict", secure=self.secure(request))

    def secure(self, request: Request) -> bool:
        return self.secure_always or request.url.scheme == "https"

    def session_cookie(self, request: Request) -> str:
        return cookie_names(request.scope, self.secure(request))[0]

    def login_cookie(self, request: Request) -> str:
        return cookie_names(request.scope, self.secure(request))[1]


def cookie_names(scope, secure: bool) -> tuple[str, str]:
    """The session's and the login form's cookie names for a request: with this web process's
    port in them, since a browser sends a host's cookies to every port of it (two consoles on
    one host must not see each other's sessions); where the cookie is Secure, the session's
    has the ``__Host-`` prefix (host-only, path /, set over TLS alone) and the login form's
    ``__Secure-``."""
    server = scope.get("server") or ("", 0)
    port = server[1] if len(server) > 1 and server[1] else 0
    if secure:
        return f"__Host-{COOKIE}_{port}", f"__Secure-{LOGIN_COOKIE}_{port}"
    return f"{COOKIE}_{port}", f"{LOGIN_COOKIE}_{port}"


def session_of(request: Request, keys: SessionKeys, tokens: TokenFile) -> ConsoleSession | None:
    """The request's console session, or None (no cookie, or one no longer good)."""
    value = request.cookies.get(keys.session_cookie(request))
    return keys.read(value, tokens) if value else None


def authenticate_cookie(request: Request, keys: SessionKeys, tokens: TokenFile) -> TokenInfo:
    """For the API's routes: the token a session acts for, with the CSRF check of a change."""
    session = session_of(request, keys, tokens)
    if session is None:
        raise ApiError(401, "Unauthorized", "the console session has expired or was ended; log in again")
    if request.method not in SAFE_METHODS:
        check_csrf(request, session.csrf, request.headers.get(CSRF_HEADER, ""))
    return session.who


def check_csrf(request: Request, expected: str, given: str) -> None:
    """403 unless ``given`` is the session's CSRF token and the request is not cross-site."""
    if not same_origin(request):
        raise ApiError(403, "Forbidden", "a cross-site request may not change anything")
    if not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(403, "Forbidden", "missing or wrong CSRF token (X-CSRF-Token); reload the page")


def same_origin(request: Request) -> bool:
    """Whether the browser's Origin header, when it sent one, names this site."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def token_info(token: str, tokens: TokenFile) -> TokenInfo | None:
    """The entry of a token typed into the login form (None: unknown or revoked)."""
    token = token.strip()
    return tokens.find(token) if token else None


def _load_or_create(path: Path) -> bytes:
    """The key file's 32 bytes (hex). A new key is written to a temporary file and linked into
    place, which fails if the file exists: two processes starting together agree on one key,
    and neither can read a half-written one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            fd, tmp = tempfile.mkstemp(prefix=".session-key-", dir=path.parent)  # mode 0600
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_hex(32) + "\n")
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        tighten_if_present(path)  # whoever reads the key can sign a session of any token's
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read or create the session key file {str(path)!r}: {exc.strerror}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise ConfigError(f"the session key file {str(path)!r} is damaged; remove it (sessions start anew)")
    return key


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
