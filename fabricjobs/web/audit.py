"""Who did what through the web process: one log line per state-changing request.

A job's Notes name the token behind its last change, but the next run overwrites them, and a
deleted history or a calendar has no Notes at all. So each request that changes something
(every statement whose role need is above READ, except WAITJOB, which only waits) also leaves
one INFO line on the web process's logger: the token's name (never the token), the
statements' verbs and what they named, and how it went::

    INFO audit: token 'ops-1' STOPJOB USER_JOB.Probe.record.u1 -> ok
    INFO audit: token 'ops-1' STARTJOB USER_JOB.a (a new UID); STOPJOB USER_JOB.b (every UID) -> JobNotFound
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterable, Iterator

from ..commands import statements as st
from ..commands.table import STATEMENTS
from ..errors import FabricJobsError
from .auth import STATEMENT_NEEDS, Need, actor
from .tokens import TokenInfo

log = logging.getLogger("fabricjobs.web")

_VERBS: dict[type, str] = {s.command: s.keyword for s in STATEMENTS}
_MOST = 20  # statements named in one line


def changes(command: object) -> bool:
    """Whether ``command`` may change the cluster (a statement missing from the table counts)."""
    return STATEMENT_NEEDS.get(type(command), Need.ADMIN) > Need.READ and not isinstance(command, st.WaitJob)


def describe(command: object) -> str:
    """The statement's verb and what it names, printable on one line."""
    verb = _VERBS.get(type(command), type(command).__name__.upper())
    if isinstance(command, st.Kill):
        target = f"task {command.task} on node {command.node}"
    elif isinstance(command, (st.CreateCalendar, st.DropCalendar)):
        target = f"calendar {command.name}"
    else:
        type_, name, uid = (getattr(command, k, None) for k in ("type", "name", "uid"))
        target = ".".join(str(p) for p in (type_, name, uid) if p is not None)
        if name is not None and uid is None:
            target += " (a new UID)" if isinstance(command, st.StartJob) else " (every UID)"
    return f"{verb} {_printable(target)}".rstrip()


@contextmanager
def recorded(who: TokenInfo, commands: Iterable[object]) -> Iterator[None]:
    """Run the body; then, if any of ``commands`` changes state, log who asked what and the
    outcome (the error's type when it was refused or failed)."""
    changing = [describe(c) for c in commands if changes(c)]
    if not changing:
        yield
        return
    if len(changing) > _MOST:  # a script of thousands of STARTJOBs: one line of readable length
        changing = changing[:_MOST] + [f"and {len(changing) - _MOST} more"]
    outcome = "ok"
    try:
        yield
    except FabricJobsError as exc:
        outcome = type(exc).__name__
        raise
    except Exception:
        outcome = "failed"
        raise
    finally:
        log.info("audit: %s %s -> %s", actor(who), "; ".join(changing), outcome)


def _printable(text: str) -> str:
    """A name as one log line may hold it: control characters escaped (no forged lines)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
