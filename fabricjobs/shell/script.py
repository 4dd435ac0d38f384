"""Running command text without a terminal: ``-e``, ``-f`` and piped stdin.

Statements run one after another, as typed, but for consecutive STARTJOBs, which are held
back and written together (one store transaction, or concurrent LWTs: a bulk submit is not one
commit per job; docs/guides/scripts-and-code.md, "Bulk submits"); their results are printed in
order once written. The first error stops the script (exit status 1) unless
``continue_on_error``. Errors go to stderr as the one clear message of
:mod:`fabricjobs.errors`; anything else is a bug, logged with its traceback to the shell log
and reported in one line (never a traceback on the terminal).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Iterator, TextIO

from ..client import Client
from ..commands import lex, parse_script, statements
from ..commands.parser import MAX_COMMAND_BYTES
from ..logs import shell_log_path
from ..errors import CommandSyntaxError, FabricJobsError, InsertInterrupted, message_of
from ..private import private_file
from ..service import EXISTS_NOTE, STARTJOB_GROUP
from .output import print_result
from .help import help_text, starts_with_exit, unknown_statement

log = logging.getLogger("fabricjobs.shell")
# Bugs, with their tracebacks, to the shell log alone: the CLI's handler would print them.
_bugs = logging.getLogger("fabricjobs.shell.bugs")
_bugs.propagate = False


def _run_until_error(client, commands: list[statements.Command], grouped: bool):
    """Run ``commands`` until one fails: the results before it, and its error (None: all ran).
    ``grouped``: consecutive STARTJOBs written together (a client's run_until_error); else one
    statement at a time, each waking the nodes as it is done (a STOPJOB ... WAIT is not held)."""
    if grouped and hasattr(client, "run_until_error"):
        return client.run_until_error(commands)
    results = []
    for command in commands:
        try:
            results.append(client.execute(command))
        except Exception as exc:  # a bug too: the results before it are still printed
            return results, exc
    return results, None


@dataclass(frozen=True)
class Piece:
    """One statement of a script, with where it starts: an error in it points at the script's
    own line and column. Not padded with the lines before it, which made splitting a long file
    quadratic in time and memory (each statement carried every newline before it)."""

    text: str  # the statement as written, without its ';'
    line: int  # lines of the script before its first character
    column: int  # characters before it on that line

    def parse(self, script: str, max_bytes: int) -> list[statements.Statement]:
        """Its statements; a syntax error is positioned in, and quotes, the whole ``script``."""
        try:
            return parse_script(self.text, max_bytes)
        except CommandSyntaxError as exc:
            if exc.line is None:
                raise
            column = exc.column
            if column is not None and exc.line == 1:
                column += self.column
            raise type(exc)(exc.reason, text=script, line=exc.line + self.line, column=column,
                            expected=exc.expected) from None


def split_statements(text: str) -> Iterator[Piece]:
    """Split at the ``;`` tokens (never inside strings or comments); keep positions. A piece
    of only comments and blanks is no statement. One lexing pass over the whole text."""
    start = line = line_start = 0
    spoken = False  # the piece so far holds something besides comments and blanks

    def piece(cut: int) -> Iterator[Piece]:
        nonlocal start, line, line_start
        if spoken:
            yield Piece(text[start:cut], line, start - line_start)
        following = cut + 1
        newlines = text.count("\n", start, following)
        if newlines:
            line += newlines
            line_start = text.rfind("\n", start, following) + 1
        start = following

    for s, e, cat in lex(text):
        if cat == "punct" and text[s:e] == ";":
            yield from piece(s)
            spoken = False
        elif cat != "comment" and text[s:e].strip():
            spoken = True
    yield from piece(len(text))


def report_internal_error(exc: BaseException, err: TextIO, context: str = "") -> None:
    """Log a bug with its traceback; show the user one line."""
    path = shell_log_path()
    try:
        handler = logging.FileHandler(private_file(path))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _bugs.addHandler(handler)
        try:
            _bugs.error("internal error%s", f" in {context!r}" if context else "", exc_info=exc)
        finally:
            _bugs.removeHandler(handler)
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
    width: int | None = None,
) -> int:
    """Run every statement of ``text``; return the exit status (0 ok, 1 if any failed).
    ``started`` gets one JSON line (type, name, uid) per job a STARTJOB or RESUMEJOB started,
    so that a caller can wait for exactly those jobs."""
    failed = False
    limit = getattr(client, "max_command_bytes", MAX_COMMAND_BYTES)  # (a client of the config's limits)
    batch: list[statements.Statement] = []  # consecutive STARTJOBs, written together when the next kind comes

    def note_started(key) -> None:
        print(json.dumps(dict(zip(("type", "name", "uid"), key))), file=started, flush=True)

    def run(parsed: list[statements.Statement], grouped: bool = False) -> bool:
        """Run, print each result; whether all ran (an error is printed; with
        ``continue_on_error`` the statements after it run)."""
        ok = True
        while parsed:
            results, error = _run_until_error(client, [st.command for st in parsed], grouped)
            for statement, result in zip(parsed, results):
                try:
                    print_result(result, fmt, out, zone=zone, width=width, notes=err)  # a FOLLOW's lines come as printed
                except FabricJobsError as exc:
                    print(message_of(exc), file=err, flush=True)
                    ok = False
                    if not continue_on_error:
                        return False
                    continue
                if (started is not None and isinstance(statement.command, (statements.StartJob, statements.ResumeJob))
                        and EXISTS_NOTE not in result.notices):  # (IF NOT EXISTS found it: not started here)
                    for row in result.rows:
                        note_started(row[:3])
            if error is None:
                return ok
            if started is not None and isinstance(error, InsertInterrupted):
                for key in error.written_keys:  # after the failed one, written all the same: they run
                    note_started((key.type, key.name, key.uid))
            if isinstance(error, FabricJobsError):
                print(message_of(error), file=err, flush=True)
            else:  # a bug: never a traceback on the terminal
                report_internal_error(error, err, parsed[len(results)].text.strip())
            ok = False
            if not continue_on_error:
                return False
            # Past the failed one; after a bulk insert cut short, past the jobs sent with it
            # (the error names those written): running them again would write them twice.
            skip = error.rest_of_group if isinstance(error, InsertInterrupted) else 0
            parsed = parsed[len(results) + 1 + skip:]
        return ok

    def run_safely(parsed: list[statements.Statement], grouped: bool = False) -> bool:
        try:
            return run(parsed, grouped)
        except BrokenPipeError:
            raise  # the reader of the output has gone (| head): not a bug, the CLI ends quietly
        except Exception as exc:  # a bug in printing: never a traceback on the terminal
            report_internal_error(exc, err, "; ".join(st.text.strip() for st in parsed[:3]))
            return False

    for piece in split_statements(text):
        shown = help_text(piece.text)
        if shown is not None or starts_with_exit(piece.text):  # a shell word, as at the prompt: the statements held so far run first
            held, batch = batch, []
            failed = not run_safely(held, grouped=True) or failed
            if failed and not continue_on_error:
                return 1
            if shown is None:  # exit, quit, \q: the rest is not run (a prompt session saved as a script)
                return 1 if failed else 0
            if unknown_statement(shown):
                print(shown, file=err, flush=True)
                failed = True
                if not continue_on_error:
                    return 1
                continue
            print(json.dumps({"help": shown}, ensure_ascii=False) if fmt == "json" else shown, file=out)
            continue
        try:
            parsed = piece.parse(text, limit)
        except Exception as exc:  # what came before the statement runs first, then its error shows
            ran = run_safely(batch, grouped=True)
            batch = []
            if ran or continue_on_error:
                if isinstance(exc, FabricJobsError):
                    print(message_of(exc), file=err, flush=True)
                else:  # a bug
                    report_internal_error(exc, err, piece.text.strip())
            failed = True
            if not continue_on_error:
                return 1
            continue
        if all(isinstance(st.command, statements.StartJob) for st in parsed):
            if len(batch) >= STARTJOB_GROUP:  # a full group goes now
                failed = not run_safely(batch, grouped=True) or failed
                batch = []
                if failed and not continue_on_error:
                    return 1
            batch += parsed
            continue
        # The held STARTJOBs first, on their own (their results printed before this one runs),
        # then this statement by itself.
        held, batch = batch, []
        failed = not run_safely(held, grouped=True) or failed
        if failed and not continue_on_error:
            return 1
        failed = not run_safely(parsed) or failed
        if failed and not continue_on_error:
            return 1
    failed = not run_safely(batch, grouped=True) or failed
    return 1 if failed else 0
