"""Command text -> typed command objects (docs/reference/statements.md): the entry points.

The grammar (:mod:`.grammar`) decides what parses, :mod:`.transform` turns each statement into
its :mod:`.statements` object and checks its values, :mod:`.messages` says what is wrong in
words, and :mod:`.prepared` answers repetitive scripts without Lark when it may. Every problem
leaves as a :class:`CommandSyntaxError` or :class:`ValidationError` positioned on the script
text; no Lark exception gets out.
"""

from __future__ import annotations

from lark import Tree
from lark.exceptions import LarkError, UnexpectedInput, VisitError

from ..errors import CommandSyntaxError, ValidationError
from . import prepared
from .grammar import _cache_dir, _cache_file, get_parser, grammar_path
from .messages import line_col, syntax_error
from .prepared import _PREPARED_LIMIT, _PREPARED_SHAPE_LIMIT, _lexing_patterns, _prepared
from .statements import Command, Statement
from .transform import ToCommand

# Reached through this module by tests/commands (the grammar cache, the prepared-statement cache).
__all__ = [
    "_PREPARED_LIMIT", "_PREPARED_SHAPE_LIMIT", "_cache_dir", "_cache_file", "_lexing_patterns", "_parse",
    "_parse_lark", "_parse_prepared", "_prepared", "get_parser", "grammar_path", "parse_lark", "parse_one",
    "parse_script", "check_length", "MAX_COMMAND_BYTES",
]


#: The longest command text parsed when no config says otherwise ([jobs] MAX_COMMAND_BYTES).
MAX_COMMAND_BYTES = 8 * 1024 * 1024


def parse_script(text: str, max_bytes: int = MAX_COMMAND_BYTES) -> list[Statement]:
    """Parse a script of ``;``-separated statements; all or nothing. A text longer than
    ``max_bytes`` is refused before it is read."""
    check_length(text, max_bytes)
    return [statement for statement, _ in _parse(text)]


def parse_one(text: str, max_bytes: int = MAX_COMMAND_BYTES) -> Command:
    """Parse text that must hold exactly one statement."""
    check_length(text, max_bytes)
    parsed = _parse(text)
    if not parsed:
        raise ValidationError("expected a command, got none", text=text)
    if len(parsed) > 1:
        _, start = parsed[1]
        line, column = line_col(text, start)
        raise ValidationError(f"expected one command, got {len(parsed)}", text=text, line=line, column=column)
    return parsed[0][0].command


def check_length(text: str, max_bytes: int) -> None:
    """ValidationError if ``text`` is longer than ``max_bytes`` (UTF-8)."""
    if len(text) * 4 <= max_bytes:
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ValidationError(f"the command text is {size:,} bytes long; at most {max_bytes:,} are allowed "
                              "([jobs] MAX_COMMAND_BYTES): pass big data in a file and its name in ARGS")


def _parse(text: str) -> list[tuple[Statement, int]]:
    """The statements of a script, each with the offset of its first character.

    Prepared statements when the cache is on (``prepared.enabled``) and every statement has a
    known shape (or gets one), else the plain Lark parse; the two agree on every script
    (tests/commands/test_prepared.py, tests/commands/test_lark_internals.py).
    """
    parsed = prepared.parse_prepared(text) if prepared.enabled else None
    return parsed if parsed is not None else parse_lark(text)


def parse_lark(text: str) -> list[tuple[Statement, int]]:
    """The plain path: Lark parses the whole script, then each statement tree is transformed.
    Every error comes from here."""
    try:
        tree = get_parser().parse(text)
    except UnexpectedInput as err:
        raise syntax_error(text, err) from None
    except LarkError as err:  # not expected from an LALR parse; still never a raw Lark error
        raise CommandSyntaxError(f"cannot parse the command ({type(err).__name__})") from None
    builder = ToCommand(text)
    parsed = []
    for node in tree.children:
        if not isinstance(node, Tree):
            continue
        try:
            command = builder.transform(node)
        except VisitError as err:
            if isinstance(err.orig_exc, CommandSyntaxError):
                raise err.orig_exc from None
            raise
        meta = node.meta
        source = text[meta.start_pos : meta.end_pos].strip()
        parsed.append((Statement(command, source, meta.line), meta.start_pos))
    return parsed


_parse_lark = parse_lark
_parse_prepared = prepared.parse_prepared
