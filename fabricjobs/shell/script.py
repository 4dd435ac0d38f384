"""Running command text without a terminal: ``-e``, ``-f`` and piped stdin.

Statements run one after another, as typed; the first error stops the script (exit status 1)
unless ``continue_on_error``. Errors go to stderr as the one clear message of
:mod:`fabricjobs.errors`; anything else is a bug, logged with its traceback to the shell log
and reported in one line (never a traceback on the terminal).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..client import Client
from ..commands import lex, parse_script, statements
from ..commands.parser import MAX_COMMAND_BYTES
from ..errors import FabricJobsError, message_of
from ..private import private_file
from .output import print_result

log = logging.getLogger("fabricjobs.shell")


@dataclass(frozen=True)
class Piece:
    text: str  # the statement, padded so that parse errors point at the script's line/column
    empty: bool


def split_statements(text: str) -> list[Piece]:
    """Split at the ``;`` tokens (never inside strings or comments); keep positions."""
    cuts = [s for s, e, cat in lex(text) if cat == "punct" and text[s:e] == ";"]
    pieces, start = [], 0
    for cut in cuts + [len(text)]:
        body = text[start:cut]
        prefix = text[:start]
        line_pad = "\n" * prefix.count("\n")
        col_pad = " " * (len(prefix) - (prefix.rfind("\n") + 1))
        stripped = _strip_comments(body)
        pieces.append(Piece(line_pad + col_pad + body, not stripped.strip()))
        start = cut + 1
    return [p for p in pieces if not p.empty]


def _strip_comments(body: str) -> str:
    spans = lex(body)
    return "".join(body[s:e] for s, e, cat in spans if cat != "comment")


def shell_log_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fabricjobs" / "shell.log"


def report_internal_error(exc: BaseException, err: TextIO, context: str = "") -> None:
    """Log a bug with its traceback; show the user one line."""
    path = shell_log_path()
    try:
        handler = logging.FileHandler(private_file(path))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        try:
            log.error("internal error%s", f" in {context!r}" if context else "", exc_info=exc)
        finally:
            log.removeHandler(handler)
            handler.close()
        where = f" (details in {path})"
    except OSError:
        where = ""
    print(f"internal error: {type(exc).__name__}: {message_of(exc)}{where}", file=err)


def run_text(
    client: Client,
    text: str,
    out: TextIO,
    err: TextIO,
    *,
    fmt: str = "table",
    continue_on_error: bool = False,
    zone=None,
    started: TextIO | None = None,
) -> int:
    """Run every statement of ``text``; return the exit status (0 ok, 1 if any failed).
    ``started`` gets one JSON line (type, name, uid) per job a STARTJOB or RESUMEJOB started,
    so that a caller can wait for exactly those jobs."""
    failed = False
    limit = getattr(client, "max_command_bytes", MAX_COMMAND_BYTES)  # (a client of the config's limits)
    for piece in split_statements(text):
        try:
            for statement in parse_script(piece.text, limit):
                result = client.execute(statement.command)
                print_result(result, fmt, out, zone=zone)
                if started is not None and isinstance(statement.command, (statements.StartJob, statements.ResumeJob)):
                    for row in result.rows:
                        print(json.dumps(dict(zip(("type", "name", "uid"), row[:3]))), file=started, flush=True)
        except FabricJobsError as exc:
            print(message_of(exc), file=err, flush=True)
            failed = True
        except Exception as exc:  # a bug: never a traceback on the terminal
            report_internal_error(exc, err, piece.text.strip())
            failed = True
        if failed and not continue_on_error:
            return 1
    return 1 if failed else 0
