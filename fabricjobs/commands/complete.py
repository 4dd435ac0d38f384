"""What may come next at the cursor, and token spans for highlighting, for the shell.

Both are driven by the grammar through Lark's interactive parser: ``accepts()`` in the
parser state at the cursor says which terminals may follow, so completion can never offer
what the parser would refuse. Both work on partial or wrong text and never raise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lark import Token
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from .grammar import (get_parser, grammar_order, is_keyword, is_param, param_name, terminal_category, token_end,
                      token_start)
from .transform import unescape

Span = tuple[int, int, str]

_COMMENT = re.compile(r"--[^\n]*|/\*[\s\S]*?\*/")
_NUMERIC = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the parser accepts at the cursor (the completer fills in the candidates)."""

    keywords: tuple[str, ...] = ()  # keywords that may come: STARTJOB ..., ALL, DAYS, WITH, TRUE ...
    job_type: bool = False  # a job type may come (candidates: fabricjobs.model.JobType)
    params: tuple[str, ...] = ()  # parameter names the statement still takes (without '=')
    string_for: str | None = None  # a quoted value may come, for: NAME, UID, ..., JOB_NAME, NODE, VALUE
    in_string: bool = False  # the cursor is inside an open quoted string (prefix is its text)
    number: bool = False  # a number may come (JOBSTATUS n DAYS AGO, the task of KILL)
    statement: str | None = None  # keyword of the statement under the cursor, e.g. "STARTJOB"
    prefix: str = ""  # the partial word (or string text) before the cursor, to filter with
    typed: int = 0  # characters before the cursor a completion replaces: the word, or the open string as typed (its quote, '' escapes)


def expected_at(text_before_cursor: str) -> Expectation:
    """What may be typed at the end of ``text_before_cursor``; empty when unknown."""
    try:
        return _expected_at(text_before_cursor)
    except (LarkError, RecursionError):
        return Expectation()


def lex(text: str) -> list[Span]:
    """``(start, end, category)`` spans for highlighting; gaps are white space.

    Categories: keyword, param, type, string, number, punct, comment, word, error. A statement
    that does not parse is still coloured, token by token, up to its ``;``.
    """
    spans: list[Span] = []
    try:
        pos = 0
        while pos < len(text):
            pos = _lex_statements(text, pos, spans)
            if pos < len(text):
                pos = _lex_recover(text, pos, spans)
    except (LarkError, RecursionError):
        done = spans[-1][1] if spans else 0
        if done < len(text):
            spans.append((done, len(text), "error"))
    return spans


# -- completion ------------------------------------------------------------------------------


def _expected_at(text: str) -> Expectation:
    spans = lex(text)
    last = spans[-1] if spans else None
    if last and last[1] == len(text) and _open_comment(text[last[0] :], last[2]):
        return Expectation()
    start = max((end for s, end, cat in spans if cat == "punct" and text[s:end] == ";"), default=0)
    in_string = bool(last and last[2] == "error" and text.startswith("'", last[0]) and last[0] >= start)
    if in_string:
        assert last is not None
        head_end, prefix = last[0], unescape(text[last[0] + 1 :])
    else:
        head_end = _word_start(text, start)
        prefix = text[head_end:]
    head = text[start:head_end]

    tokens: list[Token] = []
    interactive = get_parser().parse_interactive(head)
    try:
        for tok in interactive.iter_parse():
            tokens.append(tok)
    except UnexpectedInput:
        return Expectation(statement=_statement(tokens), in_string=in_string, prefix=prefix, typed=len(text) - head_end)
    return _expectation(set(interactive.accepts()), tokens, in_string, prefix, len(text) - head_end)


def _expectation(accepted: set[str], tokens: list[Token], in_string: bool, prefix: str, typed: int) -> Expectation:
    statement = _statement(tokens)
    given = {t.type for t in tokens if is_param(t.type)}
    ordered = grammar_order(accepted)
    string_for = None
    if "STRING" in accepted:
        string_for = _string_role(tokens[-1] if tokens else None, statement)
    return Expectation(
        keywords=tuple(t for t in ordered if is_keyword(t)),
        job_type="JOB_TYPE" in accepted,
        params=tuple(param_name(t) for t in ordered if is_param(t) and t not in given),
        string_for=string_for,
        in_string=in_string,
        number="NUMBER" in accepted,
        statement=statement,
        prefix=prefix,
        typed=typed,
    )


def _string_role(previous: Token | None, statement: str | None) -> str | None:
    """Whose value a quoted string at this point is."""
    if previous is not None and is_param(previous.type):
        return param_name(previous.type)
    if statement == "JOBSTATUS":  # after BY or REQUESTOR: a user's or requestor's, not a job's
        if previous is not None and previous.type in ("EQ", "LPAR", "COMMA"):
            return "STATUS"  # WHERE STATUS = '...' / IN ('...', ...)
        return None if previous is not None and previous.type in ("BY", "REQUESTOR") else "JOB_NAME"
    if statement == "KILL":
        return "NODE"
    if statement == "SET":
        return "VALUE"
    return None


def _word_start(text: str, start: int) -> int:
    """Where the word under the cursor begins (a backwards scan: a regex search for a word
    at the end of the text is quadratic on long words)."""
    i = len(text)
    while i > start and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    return i


def _statement(tokens: list[Token]) -> str | None:
    return tokens[0].type if tokens and is_keyword(tokens[0].type) else None


def _open_comment(span: str, category: str) -> bool:
    """Whether a span that ends at the cursor leaves it inside a comment."""
    if category == "comment":
        return span.startswith("--") or len(span) < 4 or not span.endswith("*/")
    return category == "error" and span.startswith("/*")


# -- highlighting ----------------------------------------------------------------------------


def _lex_statements(text: str, pos: int, spans: list[Span]) -> int:
    """Lex with the parser's context from ``pos`` up to the first error; returns where it stopped."""
    interactive = get_parser().parse_interactive(text[pos:])
    pending: Token | None = None
    done = pos
    try:
        for tok in interactive.iter_parse():  # a token is fed to the parser after it is yielded
            if pending is not None:
                done = _add_token(text, pos, done, pending, spans, contextual=True)
            pending = tok
    except UnexpectedToken as err:
        if pending is not None and err.token is not pending:
            done = _add_token(text, pos, done, pending, spans, contextual=True)
        stop = pos + token_start(err.token)
    except UnexpectedCharacters as err:
        if pending is not None:
            done = _add_token(text, pos, done, pending, spans, contextual=True)
        stop = pos + (err.pos_in_stream or 0)
    else:
        if pending is not None:
            done = _add_token(text, pos, done, pending, spans, contextual=True)
        stop = len(text)
    _add_comments(text, done, stop, spans)
    return stop


def _lex_recover(text: str, pos: int, spans: list[Span]) -> int:
    """Lex without context from ``pos`` (where the parser gave up) to just after the next ';'."""
    parser = get_parser()
    while pos < len(text):
        try:
            for tok in parser.lex(text[pos:], dont_ignore=True):
                end = _add_token(text, pos, pos + token_start(tok), tok, spans, contextual=False)
                if tok.type == "SEMI":
                    return end
        except UnexpectedCharacters as err:
            bad = pos + (err.pos_in_stream or 0)
            if text.startswith(("'", "/*"), bad):  # unterminated string or comment: the rest is not code
                spans.append((bad, len(text), "error"))
                return len(text)
            spans.append((bad, bad + 1, "error"))
            pos = bad + 1
        else:
            return len(text)
    return pos


def _add_token(text: str, offset: int, done: int, tok: Token, spans: list[Span], *, contextual: bool) -> int:
    start, end = offset + token_start(tok), offset + token_end(tok)
    _add_comments(text, done, start, spans)
    category = terminal_category(tok.type)
    if tok.type == "SET_WORD" and _NUMERIC.fullmatch(tok.value):
        category = "number"
    elif tok.type == "JOB_TYPE" and not contextual:
        category = "word"
    if category != "space":
        spans.append((start, end, category))
    return end


def _add_comments(text: str, start: int, end: int, spans: list[Span]) -> None:
    """Comments in a stretch the parser skipped (it holds only white space and comments)."""
    for m in _COMMENT.finditer(text, start, end):
        spans.append((m.start(), m.end(), "comment"))
