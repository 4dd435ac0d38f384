"""The web console's pages: the login form, the console itself (one page; its script draws
the views), logout, and the page's own script and style sheet.

Pages are files in ``static/`` with a few ``{{name}}`` slots filled here, HTML-escaped. Every
response carries a Content-Security-Policy that allows only this site's own scripts and styles
(no inline script, nothing from elsewhere: the console works offline), and may not be framed.
The script and style sheet need no login (the login page uses them; they hold no data); the
console page and every data request do.
"""

from __future__ import annotations

import html
import secrets
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from .session_auth import (
    SessionKeys, check_csrf, same_origin, session_of, token_info,
)

router = APIRouter(include_in_schema=False)
STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"console.js": "text/javascript", "jobs.js": "text/javascript", "job.js": "text/javascript",
          "history.js": "text/javascript", "cluster.js": "text/javascript",
          "plots.js": "text/javascript", "login.js": "text/javascript",
          "console.css": "text/css", "favicon.svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make a browser send "Origin: null" on our own forms
    "X-Frame-Options": "DENY",
}
_MAX_FORM = 4096


@lru_cache(maxsize=None)
def _file(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def page(file: str, status: int = 200, **slots: str) -> Response:
    text = _file(file)
    for slot, value in slots.items():
        text = text.replace("{{" + slot + "}}", html.escape(value, quote=True))
    headers = dict(HEADERS, **{"Cache-Control": "no-store"})
    return Response(text, status_code=status, media_type="text/html; charset=utf-8", headers=headers)


def _keys(request: Request) -> SessionKeys:
    return request.app.state.sessions


@router.get("/")
def console(request: Request) -> Response:
    api = request.app.state.api
    session = session_of(request, _keys(request), api.tokens)
    if session is None:
        return RedirectResponse("/login", status_code=303, headers=HEADERS)
    return page("index.html", csrf=session.csrf, role=session.who.role.value, name=session.who.name,
                interval=str(api.config.get("web", "CONSOLE_INTERVAL_SEC")))


@router.get("/login")
def login_form(request: Request) -> Response:
    return _login_page(request, "")


def _login_page(request: Request, message: str, status: int = 200) -> Response:
    nonce = secrets.token_urlsafe(16)
    response = page("login.html", status, nonce=nonce, message=message, hidden="" if message else "hidden")
    keys = _keys(request)
    response.set_cookie(keys.login_cookie(request), nonce, max_age=600, path="/login", httponly=True,
                        samesite="strict", secure=keys.secure(request))
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    """A token typed into the form: a session cookie and the console, or the form again."""
    form = await _form(request)
    nonce = request.cookies.get(_keys(request).login_cookie(request), "")
    if not same_origin(request) or not nonce or not secrets.compare_digest(nonce, form.get("nonce", "")):
        return _login_page(request, "The form had expired or came from another site: try again.", 403)
    who = token_info(form.get("token", ""), request.app.state.api.tokens)
    if who is None:
        return _login_page(request, "Unknown or revoked token.", 401)
    value, _ = _keys(request).issue(who)
    response = RedirectResponse("/", status_code=303, headers=HEADERS)
    _keys(request).set_cookie(response, request, value)
    response.delete_cookie(_keys(request).login_cookie(request), path="/login", secure=_keys(request).secure(request))
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Ends the session in this browser (the form sends the CSRF token as a field)."""
    session = session_of(request, _keys(request), request.app.state.api.tokens)
    if session is not None:
        check_csrf(request, session.csrf, (await _form(request)).get("csrf", ""))
    response = RedirectResponse("/login", status_code=303, headers=HEADERS)
    keys = _keys(request)
    response.delete_cookie(keys.session_cookie(request), path="/", secure=keys.secure(request), httponly=True,
                           samesite="strict")
    return response


@router.get("/static/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
    return Response(_file(name), media_type=ASSETS[name],
                    headers=dict(HEADERS, **{"Cache-Control": "no-cache"}))


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form (no multipart parser needed for a token and a nonce)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items() if v}
