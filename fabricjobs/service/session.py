"""A connection's session: its SET variables and LOG_ID, and how they reach a job's ARGS."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field

from ..errors import ValidationError


@dataclass
class Session:
    """Per-connection state: SET variables (in order of first SET) and the session's LOG_ID."""

    scope: dict[str, str] = field(default_factory=dict)
    log_id: str = field(default_factory=lambda: f"{random.randrange(10**15, 10**16)}")
    node: str | None = None  # PS without ALL shows this node (None: decided per PS)
    #: Who the session's changes are recorded as, in a job's Notes and a KILL's request (the
    #: HTTP API: the token's name). None: the shell's way, KILL names the user and host only.
    actor: str | None = None
    #: Who a STARTJOB of the session makes the job's owner (DolphinDB's userID), and whose
    #: PRIORITY ceiling applies: the HTTP API's token name. None: the local OS user.
    owner: str | None = None
    #: ARGS keys this session's STARTJOBs add that a job function need not take as parameters
    #: (a listener's, to the jobs of its files: file, name, listener, version).
    given_keys: tuple[str, ...] = ()

    def set(self, key: str, value: str) -> None:
        # The seed's rule: simple keys upper-cased, qualified keys (k2_ws.ALPINIST) as written.
        self.scope[key if "." in key else key.upper()] = value

    def session_scope(self) -> dict:
        scope = {"EXECUTION_ID": str(uuid.uuid4())}
        scope.update(self.scope)
        scope["LOG_ID"] = self.log_id
        return {"scope": scope}


def local_user() -> str:
    """The OS user this process runs as: by its effective uid, not $USER or $LOGNAME, which
    anyone may set (getpass's fallback, for a uid with no passwd entry)."""
    import getpass
    import os
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        try:
            return getpass.getuser()
        except Exception:
            return "?"


def owner_of(session: Session) -> str:
    """The owner a job started in ``session`` gets: the API token's name, else the OS user."""
    return session.owner if session.owner is not None else local_user()


def requester(session: Session) -> str:
    """Who asked, as a KILL request and a job's Notes record it: the session's actor (the HTTP
    API's token) or the local user, with the host and process it came from."""
    import os
    import socket

    from .. import __version__

    if session.actor is not None:
        who = session.actor
        sep = " on "
    else:
        who = local_user()
        sep = "@"
    return f"{who}{sep}{socket.gethostname()}:{os.getpid()} (fabricjobs {__version__})"


def with_session_scope(args_text: str | None, scope: dict) -> str:
    """Add ``"session_scope"`` to the caller's ARGS without re-serialising them, so the
    caller's text (formatting, number spelling, key order) is stored exactly as given."""
    text = (args_text or "").strip() or "{}"
    obj = json.loads(text)
    if "session_scope" in obj:  # given in ARGS (a copy of another job's)
        _check_given_scope(obj)
        return text
    extra = json.dumps({"session_scope": scope}, ensure_ascii=False, separators=(",", ":"))[1:-1]
    body = text[:-1].rstrip()
    return (body + ("," if obj else "") + extra + "}")


def keep_session_scope(new_args: str, old_args: str) -> str:
    """UPDATEJOB ARGS replace the caller's arguments; the job keeps its session scope."""
    try:
        old = json.loads(old_args)
    except json.JSONDecodeError:
        return new_args
    scope = old.get("session_scope") if isinstance(old, dict) else None
    if scope is None:
        _check_given_scope(json.loads(new_args or "{}"))
        return new_args
    return with_session_scope(new_args, scope)


def _check_given_scope(args: dict) -> None:
    """A session scope given in ARGS has the shape SET makes: the job reads it as such."""
    given = args.get("session_scope", {}) if isinstance(args, dict) else {}
    if not (isinstance(given, dict) and isinstance(given.get("scope", {}), dict)):
        raise ValidationError('ARGS key "session_scope" is the session\'s SET values: an object '
                              '{"scope": {"NAME": "value", ...}} (SET makes it), got '
                              f"{json.dumps(given, ensure_ascii=False)[:80]}")
