"""What ``help`` prints: at the prompt, and in a script (-e, -f, stdin) alike."""

from __future__ import annotations

from ..commands import lex, table as statement_table

HELP = f"""Statements end with ';' and may span lines. Tab completes keywords, job types, parameters
and the names of existing jobs and nodes. Ctrl-C drops the input, Ctrl-D (or exit) leaves.

{statement_table.usage()}
Each statement is described in the documentation's guide "Commands" and its statements reference
(docs/guides/commands.md and docs/reference/statements.md in the source)."""


def is_help(text: str) -> bool:
    """``help`` or ``\\?``, with or without its ';' and with any comments around it (a shell
    word, not a statement)."""
    words = [text[s:e] for s, e, category in lex(text) if category != "comment"]
    return " ".join(words).rstrip(";").strip().lower() in ("help", "\\?")
