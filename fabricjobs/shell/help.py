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
        return f"No statement {words[1]!r}{hint}: help lists them all."
    lines = [*info.usage, "", info.summary]
    if info.doc:
        lines.append(f"More: docs/{info.doc}")
    return "\n".join(lines)
