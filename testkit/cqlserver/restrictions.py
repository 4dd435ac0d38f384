"""WHERE restrictions on columns, merged and checked with Apache Cassandra 5.0's rules and
messages (cql3/restrictions: RestrictionSet, SingleColumnRestriction, MultiColumnRestriction,
ClusteringColumnRestrictions, StatementRestrictions.processClusteringColumnsRestrictions).

A relation on one column (``c = ?``, ``c IN ?``, ``c > ?``) is a :class:`ColRestr`. A
multi-column slice ``(c1, ..., ck) > (...)`` is a :class:`MultiSlice`: the clustering columns
it names, compared as a tuple of *values* (whatever their clustering order, as Cassandra
does), starting anywhere after an EQ/IN prefix. Relations are merged in the order they are
written, like Cassandra, because which one comes first decides the message: a slice on one
column merges into a multi-column slice that starts with it (``(b, c) > (?, ?) AND b < ?``),
everything else on the same column is refused.

Terms are only evaluated at execution (``Ctx`` from engine.py, passed in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from . import cql_parser as P
from .cql_parser import term_text
from .errors import InvalidRequest
from .storage import Bounds, Column, Table
from .values import UNSET, make_type, sort_key

MULTI_FILTER_MSG = "Multi-column slice restrictions cannot be used for filtering."


def compare(op, a, b) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "=": a == b, "!=": a != b}[op]


# ---- one column ---------------------------------------------------------------------------

@dataclass
class ColRestr:
    col: Any
    eq: Any = None
    inn: Any = None  # list of terms, or a Marker bound to a list
    lo: Any = None  # (op, term)
    hi: Any = None

    @property
    def eq_or_in(self):
        return self.eq is not None or self.inn is not None

    @property
    def is_slice(self) -> bool:
        return not self.eq_or_in

    @property
    def columns(self) -> list:
        return [self.col]

    def values(self, ctx) -> list:
        """EQ/IN values, validated non-null; IN values sorted and de-duplicated like Cassandra."""
        c = self.col
        if self.eq is not None:
            raw = [self.eq]
        elif isinstance(self.inn, P.Marker):
            lst = ctx.ev(self.inn, make_type("list", (c.type,)), f"in({c.name})")
            if lst is None or lst is UNSET:
                raise InvalidRequest(f"Invalid {'null' if lst is None else 'unset'} value for IN restriction")
            return sorted(set(lst), key=lambda v: sort_key(c.type, v))
        else:
            raw = self.inn
        vals = []
        for term in raw:
            v = ctx.ev(term, c.type, c.name)
            if v is None:
                raise InvalidRequest(f"Invalid null value in condition for column {c.name}")
            if v is UNSET:
                raise InvalidRequest(f"Invalid unset value for column {c.name}")
            vals.append(v)
        if self.inn is not None:
            uniq = {sort_key(c.type, v): v for v in vals}
            vals = [uniq[k] for k in sorted(uniq)]
        return vals

    def predicate(self, ctx):
        c = self.col
        if self.eq_or_in:
            keys = {sort_key(c.type, v) for v in self.values(ctx)}
            return lambda v: v is not None and sort_key(c.type, v) in keys
        tests = []
        for bound in (self.lo, self.hi):
            if bound is None:
                continue
            op, term = bound
            b = ctx.ev(term, c.type, c.name)
            if b is UNSET:
                raise InvalidRequest(f"Invalid unset value for column {c.name}")
            if b is None:
                raise InvalidRequest(f"Invalid null value in condition for column {c.name}")
            tests.append((op, sort_key(c.type, b)))

        def pred(v):
            if v is None:
                return False
            k = sort_key(c.type, v)
            return all(compare(op, k, b) for op, b in tests)
        return pred

    def merged(self, new: "ColRestr") -> "ColRestr":
        """SingleColumnRestriction.mergeWith: only a start and an end slice go together."""
        name = self.col.name
        if self.eq is not None:
            raise InvalidRequest(f"{name} cannot be restricted by more than one relation if it includes an Equal")
        if self.inn is not None:
            raise InvalidRequest(f"{name} cannot be restricted by more than one relation if it includes a IN")
        if new.eq_or_in:
            raise InvalidRequest(f'Column "{name}" cannot be restricted by both an equality and an inequality relation')
        _check_bounds(self, new, name)
        return ColRestr(self.col, lo=self.lo or new.lo, hi=self.hi or new.hi)


def _check_bounds(a, b, names: str) -> None:
    for slot, which in (("lo", "start"), ("hi", "end")):
        if getattr(a, slot) is not None and getattr(b, slot) is not None:
            raise InvalidRequest(f"More than one restriction was found for the {which} bound on {names}")


def _single(table: Table, rel: P.Relation, binder) -> ColRestr:
    c = table.existing_column(rel.column)
    if rel.op == "!=":
        raise InvalidRequest(f'Unsupported "!=" relation: {c.name} != {term_text(rel.value)}')
    if c.is_complex:
        raise InvalidRequest(f"Collection column '{c.name}' ({c.type.cql()}) cannot be restricted by a "
                             f"'{rel.op}' relation")
    r = ColRestr(c)
    if rel.op == "=" or (rel.op == "IN" and isinstance(rel.value, list) and len(rel.value) == 1):
        r.eq = rel.value if rel.op == "=" else rel.value[0]  # IN with one value is an EQ
        binder.bind(r.eq, table, c.name, c.type)
    elif rel.op == "IN":
        r.inn = rel.value
        if isinstance(rel.value, P.Marker):
            binder.bind(rel.value, table, f"in({c.name})", make_type("list", (c.type,)))
        else:
            for term in rel.value:
                binder.bind(term, table, c.name, c.type)
    else:
        setattr(r, "lo" if rel.op in (">", ">=") else "hi", (rel.op, rel.value))
        binder.bind(rel.value, table, c.name, c.type)
    return r


# ---- several clustering columns -------------------------------------------------------------

@dataclass
class MultiSlice:
    """``(c1, ..., ck) > (...)`` and/or ``< (...)`` on consecutive clustering columns, compared
    as tuples of values. A bound may name fewer columns than the slice (``(a, b) > (1, 2) AND
    a < 5``): it compares that many."""
    columns: list  # Column: the longest of the two bounds' (Cassandra keeps the longer)
    lo: Any = None  # (op, [Column], [term])
    hi: Any = None
    is_slice = True

    @property
    def first(self) -> Column:
        return self.columns[0]

    def ends(self, ctx) -> list:
        """[(op, tuple of sort keys) or None] for the start and the end, checked as Cassandra
        binds them: the unset values of both bounds first (a tuple's fields), then the nulls."""
        values = [None if b is None else [ctx.ev(term, c.type, c.name) for c, term in zip(b[1], b[2])]
                  for b in (self.lo, self.hi)]
        for vals in values:
            for i, v in enumerate(vals or ()):
                if v is UNSET:
                    raise InvalidRequest(f"Invalid unset value for tuple field number {i}")
        ends = []
        for bound, vals in zip((self.lo, self.hi), values):
            if bound is None:
                ends.append(None)
                continue
            op, cols, _ = bound
            for c, v in zip(cols, vals):
                if v is None:
                    raise InvalidRequest(f"Invalid null value in condition for column {c.name}")
            ends.append((op, tuple(sort_key(c.type, v) for c, v in zip(cols, vals))))
        return ends

    def predicate(self, ctx):
        """pred(clustering tuple) -> bool."""
        ends = [e for e in self.ends(ctx) if e is not None]
        start, cols = self.first.position, self.columns

        def pred(ck):
            for op, key in ends:
                here = tuple(sort_key(c.type, v) for c, v in zip(cols, ck[start:start + len(key)]))
                if not compare(op, here, key):
                    return False
            return True
        return pred

    def bounds(self, ctx, prefix: tuple) -> Optional[Bounds]:
        """The slice as storage.Bounds behind ``prefix`` (the sort keys of the EQ columns before
        it), when clustering order is value order there (no DESC column)."""
        if any(c.desc for c in self.columns):
            return None
        points = []
        for low, end in zip((True, False), self.ends(ctx)):
            if end is None and not prefix:
                points.append(None)  # open
            else:
                key, inclusive = (prefix, True) if end is None else (prefix + end[1], end[0] in (">=", "<="))
                points.append(Bounds.point(key, low=low, inclusive=inclusive))
        return Bounds(*points)


def _relation_text(rel: P.MultiRelation) -> str:
    return f"({', '.join(rel.columns)}) {rel.op} ({', '.join(term_text(v) for v in rel.values)})"


def _multi(table: Table, rel: P.MultiRelation, binder) -> MultiSlice:
    """MultiColumnRelation.receivers: clustering columns, each once, consecutive."""
    cols: list = []
    for name in rel.columns:
        c = table.existing_column(name)
        if c.kind != "clustering":
            raise InvalidRequest(f"Multi-column relations can only be applied to clustering columns but was applied to: {name}")
        if c in cols:
            raise InvalidRequest(f'Column "{name}" appeared twice in a relation: {_relation_text(rel)}')
        if cols and c.position != cols[-1].position + 1:
            raise InvalidRequest("Clustering columns must appear in the PRIMARY KEY order in multi-column relations: "
                                 f"{_relation_text(rel)}")
        cols.append(c)
    for c, term in zip(cols, rel.values):
        binder.bind(term, table, c.name, c.type)
    bound = (rel.op, cols, rel.values)
    return MultiSlice(cols, lo=bound if rel.op in (">", ">=") else None, hi=bound if rel.op in ("<", "<=") else None)


Restriction = Union[ColRestr, MultiSlice]


def _as_slice(r: Restriction) -> MultiSlice:
    if isinstance(r, MultiSlice):
        return r
    lo = None if r.lo is None else (r.lo[0], [r.col], [r.lo[1]])
    hi = None if r.hi is None else (r.hi[0], [r.col], [r.hi[1]])
    return MultiSlice([r.col], lo, hi)


def _merge(old: Restriction, new: Restriction) -> Restriction:
    """RestrictionSet.mergeRestrictions: ``old.mergeWith(new)``, a single-column restriction
    taken as a multi-column one beside a multi-column one."""
    if isinstance(old, ColRestr) and isinstance(new, ColRestr):
        return old.merged(new)
    common = " ,".join(c.name for c in old.columns if c in new.columns)
    if isinstance(old, ColRestr) and old.eq is not None:
        raise InvalidRequest(f"{common} cannot be restricted by more than one relation if it includes an Equal")
    if isinstance(old, ColRestr) and old.inn is not None:
        raise InvalidRequest(f"{common} cannot be restricted by more than one relation if it includes a IN")
    if isinstance(new, ColRestr) and new.eq_or_in:
        raise InvalidRequest(f'Column "{common}" cannot be restricted by both an equality and an inequality relation')
    a, b = _as_slice(old), _as_slice(new)
    if a.first != b.first:
        later = a.first if a.first.position > b.first.position else b.first
        raise InvalidRequest(f'Column "{later.name}" cannot be restricted by two inequalities not starting with the same column')
    _check_bounds(a, b, common)
    return MultiSlice(a.columns if len(a.columns) >= len(b.columns) else b.columns, a.lo or b.lo, a.hi or b.hi)


class _Clustering:
    """ClusteringColumnRestrictions.mergeWith: the restrictions by clustering position; without
    ALLOW FILTERING, a relation after a slice, or a slice before a relation, is refused as it
    comes (after merging, whose errors come first)."""

    def __init__(self, table: Table, allow_filtering: bool):
        self.table, self.allow_filtering = table, allow_filtering
        self.at: dict = {}  # position -> Restriction

    def add(self, new: Restriction) -> None:
        old_last = self.at[max(self.at)] if self.at else None
        old_positions = sorted(self.at)
        merged = new
        for old in _distinct(self.at.get(c.position) for c in new.columns):
            merged = _merge(old, merged)
        for c in new.columns + merged.columns:
            self.at[c.position] = merged
        if old_last is None or self.allow_filtering:
            return
        last_start, new_start = old_last.columns[0], new.columns[0]
        if old_last.is_slice and new_start.position > last_start.position:
            raise InvalidRequest(f'Clustering column "{new_start.name}" cannot be restricted (preceding column '
                                 f'"{last_start.name}" is restricted by a non-EQ relation)')
        if new_start.position < last_start.position and new.is_slice:
            after = self.table.clustering[next(p for p in old_positions if p > new_start.position)]
            raise InvalidRequest(f'PRIMARY KEY column "{after.name}" cannot be restricted (preceding column '
                                 f'"{new_start.name}" is restricted by a non-EQ relation)')


def _distinct(items) -> list:
    out: list = []
    for x in items:
        if x is not None and not any(x is y for y in out):
            out.append(x)
    return out


# ---- the WHERE clause -------------------------------------------------------------------------

def build_restrictions(table: Table, where: list, binder, allow_filtering: bool = False) -> tuple:
    """(single-column restrictions by column name, multi-column slices in clustering order)."""
    out: dict = {}
    clustering = _Clustering(table, allow_filtering)
    for rel in where:
        if isinstance(rel, P.MultiRelation):
            clustering.add(_multi(table, rel, binder))
            continue
        r = _single(table, rel, binder)
        if r.col.kind == "clustering":
            clustering.add(r)
        elif r.col.name in out:
            out[r.col.name] = out[r.col.name].merged(r)
        else:
            out[r.col.name] = r
    chain = _distinct(clustering.at[p] for p in sorted(clustering.at))
    out.update({x.col.name: x for x in chain if isinstance(x, ColRestr)})
    return out, [x for x in chain if isinstance(x, MultiSlice)]


def clustering_chain(table: Table, restr: dict, multis: list) -> list:
    """The clustering restrictions, each once, in clustering order."""
    by_col = {c.position: m for m in multis for c in m.columns}
    return _distinct(restr.get(c.name) or by_col.get(c.position) for c in table.clustering)


def check_clustering_prefix(table: Table, restr: dict, multis: list, allow_filtering: bool) -> None:
    """StatementRestrictions.processClusteringColumnsRestrictions: restrictions that do not
    make a prefix (EQ/IN, then at most one slice) are filters, refused without ALLOW FILTERING."""
    chain = clustering_chain(table, restr, multis)
    if allow_filtering or not _needs_filtering(chain):
        return
    restricted = [c for r in chain for c in r.columns]
    for want, got in zip(table.clustering, restricted):
        if want != got:
            raise InvalidRequest(f'PRIMARY KEY column "{got.name}" cannot be restricted as preceding column '
                                 f'"{want.name}" is not restricted')


def _needs_filtering(chain: list) -> bool:
    position = 0
    for r in chain:
        if r.columns[0].position != position:
            return True
        if not r.is_slice:
            position = r.columns[-1].position + 1
    return False


def filters_multi(table: Table, restr: dict, multis: list) -> bool:
    """Whether a multi-column slice would be a row filter (ClusteringColumnRestrictions.
    addToRowFilter), which Cassandra refuses when it executes the query."""
    position = 0
    for r in clustering_chain(table, restr, multis):
        if r.columns[0].position != position:
            if isinstance(r, MultiSlice):
                return True
            continue
        if not r.is_slice:
            position = r.columns[-1].position + 1
    return False


def clustering_predicate(table: Table, restr: dict, multis: list, ctx):
    """pred(clustering tuple) -> bool for every clustering restriction."""
    preds = [(i, restr[c.name].predicate(ctx)) for i, c in enumerate(table.clustering) if c.name in restr]
    tuples = [m.predicate(ctx) for m in multis]
    return lambda ck: all(p(ck[i]) for i, p in preds) and all(p(ck) for p in tuples)


def range_bounds(table: Table, restr: dict, multis: list, ctx) -> Optional[Bounds]:
    """The bounds of a range deletion, when they are one range in clustering order: a slice
    (of one column or several) behind single EQ values on ascending columns; else None (what
    lets storage drop the range tombstones a newer, wider one covers)."""
    chain = clustering_chain(table, restr, multis)
    if not chain or not chain[-1].is_slice:
        return None
    prefix = []
    for r in chain[:-1]:
        if not isinstance(r, ColRestr) or r.eq is None or r.col.desc:
            return None
        prefix.append(sort_key(r.col.type, r.values(ctx)[0]))
    return _as_slice(chain[-1]).bounds(ctx, tuple(prefix))
