"""What the user reads when a command is wrong: Lark's errors and bad values, said in words.

Every problem leaves the parser as a :class:`CommandSyntaxError` or :class:`ValidationError`
positioned on the script text (line, column, what may come there); no Lark exception gets
out. The wording is kept apart from the parsing so that it can be read, and changed, as one
piece: the docs quote these messages.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable

from lark import Token
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ..errors import CommandSyntaxError, ValidationError
from . import table
from .grammar import grammar_order, is_param, param_name, terminal_words

_IGNORED = frozenset({"WS", "COMMENT"})
_STATEMENT_RULES = frozenset(table.BY_RULE)


def expected_words(names: Iterable[str]) -> tuple[str, ...]:
    """The acceptable terminals in words; end of input goes unsaid when ';' is acceptable."""
    names = set(names) - _IGNORED
    if "SEMI" in names:
        names.discard("$END")
    return tuple(terminal_words(n) for n in grammar_order(names))


def join_words(words: tuple[str, ...]) -> str:
    """("a", "b", "c") -> "a, b or c"."""
    if len(words) <= 1:
        return "".join(words) or "nothing more"
    return f"{', '.join(words[:-1])} or {words[-1]}"


def show(value: str, limit: int = 40) -> str:
    """A token for a one-line message: quoted, escaped, shortened."""
    if len(value) > limit:
        value = value[: limit - 3] + "..."
    return repr(value)


def line_col(text: str, pos: int) -> tuple[int, int]:
    """The 1-based line and column of offset ``pos``."""
    line_start = text.rfind("\n", 0, pos) + 1
    return text.count("\n", 0, pos) + 1, pos - line_start + 1


def invalid(text: str, tok: Token, message: str) -> ValidationError:
    """A bad value, pointed at its token."""
    return ValidationError(message, text=text, line=tok.line, column=tok.column)


def invalid_at(text: str, pos: int, message: str) -> ValidationError:
    """A bad value, pointed at an offset inside it (a JSON error inside ARGS)."""
    line, column = line_col(text, pos)
    return ValidationError(message, text=text, line=line, column=column)


def _accepted(err: UnexpectedInput) -> set[str]:
    ip = getattr(err, "interactive_parser", None)
    if ip is not None:
        try:
            return set(ip.accepts())
        except LarkError:
            pass
    return set(getattr(err, "expected", None) or getattr(err, "allowed", None) or ())


def _statement_keyword(err: UnexpectedInput) -> str | None:
    """The keyword of the statement being parsed when the error happened."""
    ip = getattr(err, "interactive_parser", None)
    if ip is None:
        return None
    for value in reversed(getattr(ip.parser_state, "value_stack", None) or ()):
        if isinstance(value, Token) and value.type == "SEMI":
            return None
        if isinstance(value, Token) and value.type.lower() in _STATEMENT_RULES:
            return value.type
    return None


def syntax_error(text: str, err: UnexpectedInput) -> CommandSyntaxError:
    """Lark's error, said in words: what was found, where, and what may come there."""
    accepted = _accepted(err)
    expected = expected_words(accepted)
    if isinstance(err, UnexpectedCharacters):
        return _bad_character(text, err, expected)
    assert isinstance(err, UnexpectedToken)
    tok = err.token
    if tok.type == "$END":
        line = tok.end_line if tok.end_line is not None else tok.line
        column = tok.end_column if tok.end_column is not None else tok.column
        reason = f"unexpected end of input; expected {join_words(expected)}"
        return CommandSyntaxError(reason, text=text, line=line, column=column, expected=expected)

    line, column = tok.line, tok.column
    keyword = _statement_keyword(err)
    takes = [param_name(t) for t in grammar_order(accepted) if is_param(t)]
    if is_param(tok.type) and takes and keyword is not None:
        message = f"{keyword} does not take {param_name(tok.type)}; it takes {', '.join(takes)}"
        return ValidationError(message, text=text, line=line, column=column, expected=expected)
    reason = f"unexpected {show(tok.value)}; expected {join_words(expected)}"
    start = tok.start_pos if tok.start_pos is not None else 0
    near = _near_miss(tok.value, expected)
    if near is not None:
        reason += f" (did you mean {near}?)"
    elif start > 0 and text[start - 1] == "'" and "STRING" not in accepted:
        reason += " (a quote inside a string is written '')"
    elif tok.value.startswith('"') and "STRING" in accepted:
        reason += " (strings take single quotes: '...'; \"\" alone is the empty string)"
    elif tok.type.lower() in _STATEMENT_RULES and keyword is not None and "SEMI" in accepted:
        reason += f" (a ';' missing at the end of the {keyword} before it?)"
    return CommandSyntaxError(reason, text=text, line=line, column=column, expected=expected)


def _near_miss(found: str, expected: tuple[str, ...]) -> str | None:
    """The keyword or job type a mistyped word was most likely meant to be (jobstaus, userjob)."""
    words = [w for w in expected if re.fullmatch(r"[A-Z][A-Z_]+=?", w)]
    bare = {w.rstrip("="): w for w in words}  # (a parameter NAME= matched as NAME)
    close = difflib.get_close_matches(found.upper(), list(bare), n=1, cutoff=0.75)
    return bare[close[0]] if close and close[0] != found.upper() else None


def _bad_character(text: str, err: UnexpectedCharacters, expected: tuple[str, ...]) -> CommandSyntaxError:
    """A character no terminal starts with: often an unclosed string or comment."""
    pos = err.pos_in_stream
    assert pos is not None  # lark sets it for characters it could not lex
    if text.startswith("'", pos):
        reason, expected = "unterminated string starting here", ("a closing quote",)
    elif text.startswith("/*", pos):
        reason, expected = "unterminated comment starting here", ("*/",)
    else:
        reason = f"unexpected character {show(text[pos])}; expected {join_words(expected)}"
    return CommandSyntaxError(reason, text=text, line=err.line, column=err.column, expected=expected)
