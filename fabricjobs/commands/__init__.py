"""The command language (docs/reference/statements.md): text in, typed command objects out.

``parse_script`` / ``parse_one`` for running commands, ``expected_at`` / ``lex`` for the
shell's completion and highlighting. All four are driven by ``grammar/fabricjobs.lark``.
"""

from __future__ import annotations

from .statements import (
    Calendars,
    Command,
    CreateCalendar,
    DeleteHistory,
    DropCalendar,
    JobStatus,
    JobHistory,
    JobLog,
    Kill,
    Nodes,
    WaitJob,
    Ps,
    RestartJob,
    ResumeJob,
    Set,
    StartJob,
    Statement,
    StopJob,
    FinishJob,
    RunJob,
    ReleaseJob,
    UpdateJob,
)
from .complete import Expectation, expected_at, lex
from .parser import parse_one, parse_script

__all__ = [
    "Calendars",
    "Command",
    "CreateCalendar",
    "DeleteHistory",
    "DropCalendar",
    "Expectation",
    "JobStatus",
    "JobHistory",
    "JobLog",
    "Kill",
    "Nodes",
    "WaitJob",
    "Ps",
    "RestartJob",
    "ResumeJob",
    "Set",
    "StartJob",
    "Statement",
    "StopJob",
    "FinishJob",
    "RunJob",
    "ReleaseJob",
    "UpdateJob",
    "expected_at",
    "lex",
    "parse_one",
    "parse_script",
]
