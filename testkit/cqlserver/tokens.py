"""token(): a partition's Murmur3 token as a selector, as a term, and as a WHERE restriction,
with Cassandra 5.0's rules and messages (TokenRelation, TokenRestriction, TokenFilter, and
SelectStatement.getPartitionKeyBoundsForTokenRestrictions).

A token restriction does one of two things, as in Cassandra. Where the partition key columns
are not all given by EQ/IN, it bounds a scan of the ring (the partitions are kept in token
order): the minimum token as a bound means the ring's start or end, and a start past the end
selects nothing. Where they are all given, it filters those keys instead (TokenFilter), and
there a start past the end wraps around the ring. A repair pass that walks a table page by page
(``token(k) > ? AND token(k) <= ? LIMIT ?``) takes the first way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import cql_parser as P
from .errors import SERVER_ERROR, CqlError, InvalidRequest, SyntaxError_
from .storage import MIN_TOKEN, Table, key_token, partition_key_bytes
from .values import BIGINT, UNSET, from_constant

NAME = "system.token"
RECEIVER = "partition key token"  # how Cassandra names a bound token value (bind metadata, messages)
Bound = Optional[tuple]  # (token, inclusive), or None: unbounded


def split(where: list) -> tuple:
    """(token relations, the other relations) of a WHERE clause."""
    return ([w for w in where if isinstance(w, P.TokenRelation)],
            [w for w in where if not isinstance(w, P.TokenRelation)])


# ---- the function ----------------------------------------------------------------------

def check_call(t: Table, f: P.Func, binder, marker_name: Callable[[int], str]) -> None:
    """token(...)'s arguments are the partition key's values, by position and type: columns
    (in a selector), literals and bind markers."""
    pk = t.partition_key
    if len(f.args) != len(pk):
        raise InvalidRequest(f"Invalid number of arguments in call to function {NAME}: "
                             f"{len(pk)} required but {len(f.args)} provided")
    for i, (arg, c) in enumerate(zip(f.args, pk)):
        ok = True
        if isinstance(arg, P.ColRef):
            col = t.existing_column(arg.name)
            ok = col.type == c.type
        elif isinstance(arg, P.Const) and arg.kind != "NULL":
            try:
                from_constant(c.type, arg.kind, arg.text, c.name)
            except InvalidRequest:
                ok = False
        else:
            binder.bind(arg, t, marker_name(i), c.type)
        if not ok:
            raise InvalidRequest(f"Type error: {P.term_text(arg)} cannot be passed as argument {i} of function "
                                 f"{NAME} of type {c.type.cql()}")


def call(t: Table, f: P.Func, ctx, row: Optional[dict] = None) -> Optional[int]:
    """The token of the key made of the arguments' values; null if one of them is null."""
    key = []
    for i, (arg, c) in enumerate(zip(f.args, t.partition_key)):
        v = row.get(arg.name) if isinstance(arg, P.ColRef) else ctx.ev(arg, c.type, f"arg{i}({NAME})")
        if v is None or v is UNSET:
            return None
        key.append(v)
    return key_token(partition_key_bytes(t, tuple(key)))


def selector(t: Table, f: P.Func, binder):
    """The getter of a ``token(...)`` selector (a bigint column); its markers are '[selection]'."""
    check_call(t, f, binder, lambda i: "[selection]")
    return lambda ctx, values, cells, now_s: call(t, f, ctx, values)


# ---- restrictions ----------------------------------------------------------------------

def _check_columns(t: Table, names: list) -> None:
    for name in names:
        t.existing_column(name)
    pk = [c.name for c in t.partition_key]
    if names == pk:
        return
    if not set(pk) <= set(names):
        raise InvalidRequest("The token() function must be applied to all partition key components or none of them")
    if len(set(names)) != len(names):
        raise InvalidRequest("The token() function contains duplicate partition key components")
    if not set(names) <= set(pk):
        raise InvalidRequest("The token() function must contains only partition key components")
    raise InvalidRequest(f"The token function arguments must be in the partition key order: {', '.join(pk)}")


def _bind_value(t: Table, term, binder) -> None:
    if isinstance(term, P.Func) and term.name == "token":
        if any(isinstance(a, P.ColRef) for a in term.args):
            name = next(a.name for a in term.args if isinstance(a, P.ColRef))
            raise SyntaxError_(f"no viable alternative at input '{name}' (a column in a term)")
        check_call(t, term, binder, lambda i: f"arg{i}({NAME})")
    elif isinstance(term, P.Const) and term.kind != "NULL":
        from_constant(BIGINT, term.kind, term.text, RECEIVER)
    else:
        binder.bind(term, t, RECEIVER, BIGINT)


@dataclass
class TokenRestr:
    """The token restrictions of one statement: an EQ, or a start and/or an end bound."""
    table: Table
    eq: Any = None  # term
    lo: Any = None  # (op, term)
    hi: Any = None

    def add(self, op: str, term) -> None:
        names = ", ".join(c.name for c in self.table.partition_key)
        if self.eq is not None:
            raise InvalidRequest(f"{names} cannot be restricted by more than one relation if it includes an Equal")
        if op == "=":
            if self.lo is not None or self.hi is not None:
                raise InvalidRequest(f'Columns "{names}" cannot be restricted by both an equality and an '
                                     'inequality relation')
            self.eq = term
            return
        slot, which = ("lo", "start") if op in (">", ">=") else ("hi", "end")
        if getattr(self, slot) is not None:
            raise InvalidRequest(f"More than one restriction was found for the {which} bound on {names}")
        setattr(self, slot, (op, term))

    def _value(self, ctx, term) -> int:
        if isinstance(term, P.Func) and term.name == "token":
            v = call(self.table, term, ctx)
        else:
            v = ctx.ev(term, BIGINT, RECEIVER)
        if v is UNSET:  # Cassandra 5.0 fails this way too (an unset token bound is no bound to it)
            raise CqlError("java.lang.IndexOutOfBoundsException", SERVER_ERROR)
        if v is None:
            raise InvalidRequest("Invalid null token value")
        return v

    def _bounds(self, ctx) -> tuple:
        if self.eq is not None:
            v = self._value(ctx, self.eq)
            return (v, True), (v, True)
        return tuple(None if b is None else (self._value(ctx, b[1]), b[0] in (">=", "<="))
                     for b in (self.lo, self.hi))

    def scan(self, ctx) -> Callable[[int], bool]:
        """Which partitions a scan of the ring visits (a range that never wraps)."""
        lo, hi = (None if b is None or b[0] == MIN_TOKEN else b for b in self._bounds(ctx))
        if lo is not None and hi is not None and (lo[0] > hi[0] or (lo[0] == hi[0] and not (lo[1] and hi[1]))):
            return lambda token: False
        return lambda token: _above(token, lo) and _below(token, hi)

    def filter(self, ctx) -> Callable[[int], bool]:
        """Which of the partitions named by EQ/IN are kept (a range that may wrap)."""
        lo, hi = self._bounds(ctx)
        if self.eq is None and lo is not None and hi is not None:
            if lo[0] == hi[0] and not (lo[1] and hi[1]):
                return lambda token: False
            if lo[0] > hi[0]:
                return lambda token: _above(token, lo) or _below(token, hi)
        return lambda token: _above(token, lo) and _below(token, hi)

    def keep_keys(self, ctx, keys: list, lwt: bool) -> list:
        """The keys of a write that the token restriction keeps."""
        keep = self.filter(ctx)
        kept = [k for k in keys if keep(key_token(partition_key_bytes(self.table, k)))]
        if lwt and not kept:  # as Cassandra 5.0 answers a conditional write left with no partition
            raise CqlError("java.lang.IndexOutOfBoundsException: Index 0 out of bounds for length 0", SERVER_ERROR)
        return kept


def _above(token: int, lo: Bound) -> bool:
    return lo is None or token > lo[0] or (lo[1] and token == lo[0])


def _below(token: int, hi: Bound) -> bool:
    return hi is None or token < hi[0] or (hi[1] and token == hi[0])


def analyze(t: Table, rels: list, binder) -> Optional[TokenRestr]:
    """The token relations of a WHERE clause, validated, their markers typed; None if none."""
    if not rels:
        return None
    out = TokenRestr(t)
    for rel in rels:
        if rel.op == "!=":
            raise InvalidRequest(f'Unsupported "!=" relation: token({", ".join(rel.columns)}) != '
                                 f"{P.term_text(rel.value)}")
        _check_columns(t, rel.columns)
        _bind_value(t, rel.value, binder)
        out.add(rel.op, rel.value)
    return out


def full_key(t: Table, restr: dict) -> bool:
    """Whether every partition key column is given by EQ/IN (then tokens filter the keys)."""
    return all(c.name in restr and restr[c.name].eq_or_in for c in t.partition_key)
