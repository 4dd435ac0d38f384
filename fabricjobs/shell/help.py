"""What ``help`` prints: at the prompt, and in a script (-e, -f, stdin) alike."""

from __future__ import annotations

import difflib

from ..commands import lex, table as statement_table

HELP = f"""Statements end with ';' and may span lines. Tab completes keywords, job types, parameters
and the names of existing jobs and nodes. Ctrl-C drops the input, Ctrl-D (or exit) leaves.
help <statement> shows one of them (help startjob).

{statement_table.usage()}
Each statement is described in the documentation's guide "Commands" and its statements reference
(docs/guides/commands.md and docs/reference/statements.md in the source)."""


#: The words that leave the shell (at the prompt) or end a script, ';' or not.
EXIT_WORDS = {"exit", "quit", "\\q"}
#: Words of the shell, not statements: the prompt runs them without a ';'.
SHELL_WORDS = EXIT_WORDS | {"help", "\\?"}
_NO_STATEMENT = "No statement"


def starts_with_exit(text: str) -> bool:
    """Whether ``text`` (a script's piece up to its ';') begins with a line that is only
    ``exit``, ``quit`` or ``\\q`` (its ';' optional, comments aside): where a prompt session
    saved as a script ended."""
    kept = list(text)
    for s, e, category in lex(text):
        if category == "comment":
            kept[s:e] = " " * (e - s)
    lines = [line.strip() for line in "".join(kept).splitlines() if line.strip()]
    return bool(lines) and lines[0].lower().rstrip(";").strip() in EXIT_WORDS


def unknown_statement(shown: str) -> bool:
    """Whether :func:`help_text` said it knows no such statement (a script's error)."""
    return shown.startswith(_NO_STATEMENT + " ")


def help_text(text: str) -> str | None:
    """What ``help``, ``\\?`` or ``help <statement>`` prints (with or without its ';', with any
    comments around it: a shell word, not a statement); None for anything else."""
    words = " ".join(text[s:e] for s, e, category in lex(text) if category != "comment").rstrip(";").split()
    if not words or words[0].lower() not in ("help", "\\?"):
        return None
    if len(words) == 1:
        return HELP
    if len(words) > 2:
        return None
    asked = words[1].upper()
    info = next((s for s in statement_table.STATEMENTS if s.keyword == asked), None)
    if info is None:
        close = difflib.get_close_matches(asked, [s.keyword for s in statement_table.STATEMENTS], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"{_NO_STATEMENT} {words[1]!r}{hint}: help lists them all."
    lines = [*info.usage, "", info.summary]
    if info.doc:
        lines.append(f"More: docs/{info.doc}")
    return "\n".join(lines)
