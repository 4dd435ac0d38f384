"""The prepared-statement cache: statements that differ only in their strings are parsed once.

A bulk script (5,000 STARTJOBs) repeats a few statement shapes; parsing each with Lark costs
about six times what reusing the first one's tree does. The cache reads Lark internals (the
lexer's terminals, the tree's token positions, how a Transformer dispatches), so it sits
behind a flag, :data:`enabled` (``FABRICJOBS_PREPARED_STATEMENTS=0`` turns it off): without
it every script takes the plain Lark parse (parser.parse_lark), which stays the reference for
every result and every error. tests/commands/test_lark_internals.py fails when a Lark upgrade
changes what is read here.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from typing import Any, Iterator

from lark import Token, Transformer, Tree

from .grammar import get_parser, token_end, token_start
from .statements import Statement
from .transform import ToCommand

#: Whether parse_script and parse_one try prepared statements first (False: plain Lark every
#: time). Read from the environment at import; a test or an embedding program may set it.
enabled = os.environ.get("FABRICJOBS_PREPARED_STATEMENTS", "1").strip().lower() not in ("0", "off", "false", "no")

# A bulk script repeats a few statement shapes with different strings in them. A statement's
# *shape* is its text with each quoted string (the grammar's STRING terminal) replaced by a
# lone quote, stripped of surrounding white space: all of
#     startjob user_job name='Bench.noop' uid='t000123'
# have the shape "startjob user_job name=' uid='". The first statement of a shape is parsed by
# Lark on its own; its tree, with the STRING tokens made slots, is kept (LRU, bounded). A later
# statement of that shape reuses the tree with its own strings in the slots and goes through
# the same ToCommand methods, without lexing, parsing or Lark's Transformer.
#
# Why a shape parses the same whatever its strings (T0 prepared, T1 of the same shape): outside
# its slots a shape holds no quote, single or double (a string is '...' or ""), and the STRING tokens of T0 are exactly its slots (checked
# when it is prepared). Besides STRING only comments can match a quote, and only comments can
# start with '--' or '/*' (tests/commands/test_prepared.py checks the grammar for both); the
# comments of T0 lie between its tokens, so they hold no quote. So no terminal tried outside a
# string looks past the quote that opens it, and a string is always lexed by the STRING regex
# from its opening quote: the lexer sees the same text, in the same parser states, outside the
# strings of T0 and T1, and the same tokens come out.
#
# A shape never holds a ';' outside its strings, and only SEMI, STRING and comments can match
# one (checked too): each ';' that is not in a string is a SEMI unless a comment swallows it,
# and then a statement around it does not parse alone (an unclosed /*) or ends in an open
# '--' comment, which is used only where a newline closes it before the ';'.
#
# Only scripts that parse are answered here: anything unexpected (a quote that opens no
# string, a statement that does not parse alone, a value that does not validate) sends the
# whole script to parser.parse_lark, which gives the result or the error exactly as before.

_PREPARED_LIMIT = 256  # shapes kept (LRU)
_PREPARED_SHAPE_LIMIT = 2000  # longer shapes are parsed alone but not kept
_PREPARE_MISSES = 32  # after this many new shapes, more than half of all: the plain path
_prepared: OrderedDict[str, "_Prepared"] = OrderedDict()
_prepared_lock = threading.Lock()
_STRING = "STRING"
_UNSET: Any = object()
_lexing: tuple[re.Pattern[str], re.Pattern[str]] | None = _UNSET


class _Prepared:
    """A statement shape: its tree as (rule, items) for _build, and where its tokens lie."""

    __slots__ = ("tree", "head", "tail", "open_tail")

    def __init__(self, tree: tuple, head: int, tail: int, open_tail: bool) -> None:
        self.tree = tree  # (rule, items); an item is a (rule, items), a slot number or a token
        self.head = head  # characters before the first token (comments and their white space)
        self.tail = tail  # characters after the last token (a comment)
        self.open_tail = open_tail  # the tail is a '--' comment that only a newline may close


def _lexing_patterns() -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """The grammar's STRING as one capturing group (for re.split) and its ignored terminals as
    a run of them; None: no prepared statements for this grammar."""
    global _lexing
    if _lexing is _UNSET:
        try:
            parser = get_parser()
            strings = re.compile(f"({parser.get_terminal(_STRING).pattern.to_regexp()})")
            # As the lexer takes them: by priority, the first that matches, each match final.
            ignored = sorted((parser.get_terminal(name) for name in parser.lexer_conf.ignore), key=lambda t: -t.priority)
            gaps = re.compile(f"(?>{'|'.join(f'(?:{t.pattern.to_regexp()})' for t in ignored)})*+")
        except (KeyError, AttributeError, re.error):
            _lexing = None
        else:  # a STRING with groups of its own would garble the split
            _lexing = (strings, gaps) if strings.groups == 1 and gaps.groups == 0 else None
    return _lexing


def parse_prepared(text: str) -> list[tuple[Statement, int]] | None:
    """The statements of a script through prepared statements; None: use the plain path."""
    lexing = _lexing_patterns()
    if lexing is None:
        return None
    parts = lexing[0].split(text)
    literals = parts[1::2]
    skeleton = "'".join(parts[0::2])
    if skeleton.count("'") != len(literals):  # a quote that opens no string: an error, or in a comment
        return None
    if '"' in skeleton:  # a double quote outside a string ("" is one): an error, a SET word or a comment
        return None
    reader = _Reader(text, lexing[1])
    segments = skeleton.split(";")
    last = len(segments) - 1
    used = 0
    for i, segment in enumerate(segments):
        n = segment.count("'")
        if not reader.segment(segment, literals[used : used + n], i == last):
            return None
        used += n
    return reader.parsed


class _Reader:
    """One script read segment by segment (the text between two ';' outside strings), with
    each string of the script cut down to a lone quote: where it is, what it has built."""

    def __init__(self, text: str, gaps: re.Pattern[str]) -> None:
        self.text = text
        self.gaps = gaps
        self.builder = ToCommand(text)
        self.parsed: list[tuple[Statement, int]] = []
        self.offset = 0  # in the text, where the segment starts
        self.line = 1
        self.line_at = 0  # the offset ``line`` was counted to
        self.misses = 0  # new shapes met

    def segment(self, segment: str, values: list[str], last: bool) -> bool:
        """Read one segment and the strings in its slots; False: the plain path must answer."""
        extra = sum(map(len, values)) - len(values)  # the strings are longer than their slots
        shape = segment.strip()
        if shape:
            prepared = _prepared.get(shape)
            if prepared is not None:
                try:
                    _prepared.move_to_end(shape)
                except KeyError:  # evicted meanwhile by another thread
                    pass
            elif not values and self.gaps.fullmatch(shape):  # comments only: no statement
                if _gap_end(self.gaps, shape + ";") != len(shape) and not _closed(segment, last):
                    return False
                self.offset += len(segment) + 1
                return True
            else:
                prepared = self._new_shape(shape, segment, values, extra)
                if prepared is None:
                    return False
            if not self._add(prepared, segment, values, extra, last):
                return False
        self.offset += len(segment) + extra + 1
        return True

    def _new_shape(self, shape: str, segment: str, values: list[str], extra: int) -> "_Prepared | None":
        self.misses += 1
        if self.misses > _PREPARE_MISSES and 2 * self.misses > len(self.parsed):
            return None  # few statements alike: preparing them costs more than it saves
        start = self.offset + len(segment) - len(segment.lstrip())
        return _prepare(shape, self.text[start : start + len(shape) + extra], values)

    def _add(self, prepared: "_Prepared", segment: str, values: list[str], extra: int, last: bool) -> bool:
        """The segment's statement, built from its shape's tree with its own strings."""
        if prepared.open_tail and not _closed(segment, last):
            return False
        try:
            command = _build(prepared.tree, self.builder, values)
        except Exception:  # a bad value: the plain path says it, with its position
            return False
        start = self.offset + len(segment) - len(segment.lstrip())
        end = start + len(segment.strip()) + extra - prepared.tail
        start += prepared.head
        self.line += self.text.count("\n", self.line_at, start)
        self.line_at = start
        self.parsed.append((Statement(command, self.text[start:end], self.line), start))
        return True


def _closed(segment: str, last: bool) -> bool:
    """Whether a '--' comment that ends a segment ends before its ';' (a newline closes it)."""
    return last or "\n" in segment[len(segment.rstrip()) :]


def _prepare(shape: str, source: str, values: list[str] | tuple[str, ...]) -> _Prepared | None:
    """Parse one statement alone and keep its tree under its shape; None if it cannot be."""
    lexing = _lexing_patterns()
    try:
        tree = get_parser().parse(source)
    except Exception:  # LarkError, RecursionError ...: the plain path reports it
        return None
    if lexing is None or len(tree.children) != 1 or not isinstance(tree.children[0], Tree):
        return None
    gaps = lexing[1]
    node = tree.children[0]
    meta = node.meta
    # The STRING tokens are exactly the strings found by the split, and only ignored text
    # (white space, comments) lies between tokens: no token is left out of the tree.
    slots = []
    at = 0
    for piece, value in zip(shape.split("'"), values):
        at += len(piece)
        slots.append((at, at + len(value)))
        at += len(value)
    tokens = list(node.scan_values(lambda v: isinstance(v, Token)))
    if not tokens or [(t.start_pos, t.end_pos) for t in tokens if t.type == _STRING] != slots:
        return None
    done = 0
    for tok in tokens:
        if token_start(tok) < done or not gaps.fullmatch(source, done, token_start(tok)):
            return None
        done = token_end(tok)
    if not gaps.fullmatch(source, done):
        return None
    head, tail = token_start(tokens[0]), len(source) - done
    if (meta.start_pos, meta.end_pos, meta.line) != (head, done, 1 + source.count("\n", 0, head)):
        return None
    if source[head:done] != source[head:done].strip():
        return None
    # A tail that would run on into a ';' put right after it is a '--' comment.
    open_tail = _gap_end(gaps, source[done:] + ";") != len(source) - done
    compiled = _compile(node, iter(range(len(slots))))
    if compiled is None:
        return None
    prepared = _Prepared(compiled, head, tail, open_tail)
    if len(shape) <= _PREPARED_SHAPE_LIMIT:
        with _prepared_lock:
            _prepared[shape] = prepared
            _prepared.move_to_end(shape)
            while len(_prepared) > _PREPARED_LIMIT:
                _prepared.popitem(last=False)
    return prepared


def _compile(node: Tree, slot_numbers: Iterator[int]) -> tuple | None:
    """(rule, items): an item is a nested (rule, items), a slot number for a STRING, or a
    token kept as is. None when ToCommand would not treat the tree as _build does."""
    method = getattr(ToCommand, node.data, None)
    if not callable(method) or hasattr(method, "visit_wrapper") or ToCommand.__default_token__ is not Transformer.__default_token__:
        return None
    items: list[Any] = []
    for child in node.children:
        if isinstance(child, Tree):
            sub = _compile(child, slot_numbers)
            if sub is None:
                return None
            items.append(sub)
        elif isinstance(child, Token):
            if hasattr(ToCommand, child.type):  # a token callback: not what _build does
                return None
            items.append(next(slot_numbers) if child.type == _STRING else child)
        elif child is None:
            items.append(None)
        else:
            return None
    return node.data, tuple(items)


def _build(tree: tuple, builder: ToCommand, values: list[str] | tuple[str, ...]) -> Any:
    """What ``builder.transform`` gives for the prepared tree with ``values`` in its slots."""
    rule, items = tree
    children = []
    for item in items:
        kind = type(item)
        if kind is tuple:
            children.append(_build(item, builder, values))
        elif kind is int:
            children.append(Token(_STRING, values[item]))
        else:
            children.append(item)
    return getattr(builder, rule)(children)


def _gap_end(gaps: re.Pattern, text: str) -> int:
    """Where the comments and blanks at the start of ``text`` end (``gaps`` matches "")."""
    m = gaps.match(text)
    assert m is not None
    return m.end()

