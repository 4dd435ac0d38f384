"""Tokenizer and recursive-descent parser for the CQL subset the test server understands.

The parser produces plain dataclasses; it knows nothing about the schema. Bind markers (``?``
and ``:name``) are numbered in order of appearance across the whole statement (a BATCH string
shares one numbering), as Cassandra does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import InvalidRequest, SyntaxError_, unsupported
from .values import CqlType, make_type

# ---- AST ---------------------------------------------------------------------------------


@dataclass
class Const:
    kind: str  # STRING INTEGER FLOAT BOOLEAN UUID HEX NULL
    text: str


@dataclass
class Marker:
    index: int
    name: Optional[str] = None


@dataclass
class Coll:
    kind: str  # list / set / map (map items are (k, v) pairs); "{}" is kind "empty_brace"
    items: list


@dataclass
class Func:
    name: str
    args: list


@dataclass
class ColRef:
    """A column used as a function argument in a selector, e.g. toTimestamp(created)."""
    name: str


@dataclass
class TableRef:
    keyspace: Optional[str]
    name: str


@dataclass
class Relation:
    column: str
    op: str  # = < <= > >= != IN
    value: Any  # term, or list of terms for IN (...), or Marker for IN ?


@dataclass
class MultiRelation:
    """``(c1, c2, ...) op (t1, t2, ...)``: a slice of clustering columns compared as a tuple."""
    columns: list
    op: str  # < <= > >=
    values: list  # terms, one per column


@dataclass
class TokenRelation:
    """``token(k1, ..., kn) op term``: a restriction on the partition key's token."""
    columns: list
    op: str  # = < <= > >= !=
    value: Any


@dataclass
class Selector:
    kind: str  # column / count / ttl / writetime / func
    column: Optional[str] = None
    func: Optional[Func] = None
    alias: Optional[str] = None


@dataclass
class Select:
    table: TableRef
    selectors: Optional[list]  # None means '*'
    where: list
    distinct: bool = False
    order_by: list = field(default_factory=list)
    limit: Any = None
    per_partition_limit: Any = None
    allow_filtering: bool = False


@dataclass
class Insert:
    table: TableRef
    columns: list
    values: list
    if_not_exists: bool = False
    ttl: Any = None
    timestamp: Any = None


@dataclass
class Update:
    table: TableRef
    assignments: list  # (column, term)
    where: list
    conditions: list  # Relation list
    if_exists: bool = False
    ttl: Any = None
    timestamp: Any = None


@dataclass
class Delete:
    table: TableRef
    columns: list
    where: list
    conditions: list
    if_exists: bool = False
    timestamp: Any = None


@dataclass
class Batch:
    kind: str  # LOGGED / UNLOGGED / COUNTER
    statements: list
    timestamp: Any = None
    ttl: Any = None


@dataclass
class CreateKeyspace:
    name: str
    if_not_exists: bool
    options: dict


@dataclass
class CreateTable:
    table: TableRef
    if_not_exists: bool
    columns: list  # (name, CqlType, is_static)
    partition_key: list
    clustering: list
    options: dict
    clustering_order: list  # (column, 'asc'|'desc')
    compact: bool = False


@dataclass
class AlterTable:
    table: TableRef
    action: str  # add / drop / with
    columns: list = field(default_factory=list)  # add: (name, type); drop: names
    options: dict = field(default_factory=dict)


@dataclass
class Drop:
    what: str  # keyspace / table
    name: Any  # str or TableRef
    if_exists: bool


@dataclass
class Truncate:
    table: TableRef


@dataclass
class Use:
    keyspace: str


MODIFICATIONS = (Insert, Update, Delete)


def term_text(t) -> str:
    """A term as Cassandra writes it back in messages and result column names."""
    if isinstance(t, Const):
        return {"STRING": f"'{t.text}'", "NULL": "NULL"}.get(t.kind, t.text)
    if isinstance(t, Marker):
        return f":{t.name}" if t.name else "?"
    if isinstance(t, ColRef):
        return t.name
    if isinstance(t, Func):
        return f"{t.name}({', '.join(term_text(a) for a in t.args)})"
    return "<collection>" if isinstance(t, Coll) else str(t)

# ---- tokenizer ---------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+|--[^\n]*|//[^\n]*|/\*.*?\*/)
  | (?P<str>'(?:[^']|'')*')
  | (?P<pgstr>\$\$.*?\$\$)
  | (?P<qid>"(?:[^"]|"")+")
  | (?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![\w-]))
  | (?P<hex>0[xX][0-9a-fA-F]*)
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>\d+)
  | (?P<id>[a-zA-Z][a-zA-Z0-9_]*)
  | (?P<op><=|>=|!=|<>|[=<>(),;.*\[\]{}:?+\-])
""", re.S | re.X)


@dataclass
class Tok:
    kind: str  # id qid str int float uuid hex op eof
    value: str
    pos: int


def tokenize(text: str) -> list:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise SyntaxError_(f"line 1:{pos} token recognition error at: '{text[pos]}'")
        kind = m.lastgroup
        val = m.group()
        if kind == "str":
            toks.append(Tok("str", val[1:-1].replace("''", "'"), pos))
        elif kind == "pgstr":
            toks.append(Tok("str", val[2:-2], pos))
        elif kind == "qid":
            toks.append(Tok("qid", val[1:-1].replace('""', '"'), pos))
        elif kind != "ws":
            toks.append(Tok(kind, val, pos))
        pos = m.end()
    toks.append(Tok("eof", "", len(text)))
    return toks


# ---- parser ------------------------------------------------------------------------------

class Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.markers: list = []  # names (None for '?') by index

    # token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, n=1) -> Tok:
        return self.toks[min(self.i + n, len(self.toks) - 1)]

    def error(self, expecting: str = ""):
        t = self.tok
        shown = t.value if t.kind != "eof" else "<EOF>"
        extra = f" expecting {expecting}" if expecting else ""
        raise SyntaxError_(f"line 1:{t.pos} mismatched input '{shown}'{extra} (in: {self.text[:200]!r})")

    def is_kw(self, *words, tok=None) -> bool:
        t = tok or self.tok
        return t.kind == "id" and t.value.lower() in words

    def accept_kw(self, *words) -> bool:
        if self.is_kw(*words):
            self.i += 1
            return True
        return False

    def expect_kw(self, *words) -> str:
        if not self.is_kw(*words):
            self.error(" or ".join(w.upper() for w in words))
        v = self.tok.value.lower()
        self.i += 1
        return v

    def accept_op(self, *ops) -> Optional[str]:
        if self.tok.kind == "op" and self.tok.value in ops:
            self.i += 1
            return self.toks[self.i - 1].value
        return None

    def expect_op(self, op: str):
        if not self.accept_op(op):
            self.error(repr(op))

    def ident(self) -> str:
        t = self.tok
        if t.kind == "id":
            self.i += 1
            return t.value.lower()
        if t.kind == "qid":
            self.i += 1
            return t.value
        self.error("identifier")

    def table_ref(self) -> TableRef:
        first = self.ident()
        if self.accept_op("."):
            return TableRef(first, self.ident())
        return TableRef(None, first)

    def end(self):
        self.accept_op(";")
        if self.tok.kind != "eof":
            self.error("<EOF>")

    # statements
    def statement(self):
        t = self.tok
        if t.kind != "id":
            self.error("a statement")
        kw = t.value.lower()
        handler = {"select": self.select, "insert": self.insert, "update": self.update,
                   "delete": self.delete, "begin": self.batch, "create": self.create,
                   "drop": self.drop, "alter": self.alter, "truncate": self.truncate, "use": self.use}.get(kw)
        if handler is None:
            if kw in ("grant", "revoke", "list", "describe", "desc"):
                raise unsupported(f"Statement {kw.upper()}")
            raise SyntaxError_(f"line 1:{t.pos} no viable alternative at input '{t.value}'")
        return handler()

    def use(self):
        self.expect_kw("use")
        return Use(self.ident())

    def truncate(self):
        self.expect_kw("truncate")
        self.accept_kw("table", "columnfamily")
        return Truncate(self.table_ref())

    def select(self):
        self.expect_kw("select")
        if self.is_kw("json"):
            raise unsupported("SELECT JSON")
        distinct = self.accept_kw("distinct")
        selectors = None
        if not self.accept_op("*"):
            selectors = [self.selector()]
            while self.accept_op(","):
                selectors.append(self.selector())
        self.expect_kw("from")
        st = Select(self.table_ref(), selectors, [], distinct)
        if self.accept_kw("where"):
            st.where = self.relations()
        if self.is_kw("group"):
            raise unsupported("GROUP BY")
        if self.accept_kw("order"):
            self.expect_kw("by")
            while True:
                col = self.ident()
                direction = "asc"
                if self.is_kw("asc", "desc"):
                    direction = self.expect_kw("asc", "desc")
                st.order_by.append((col, direction))
                if not self.accept_op(","):
                    break
        if self.accept_kw("per"):
            self.expect_kw("partition")
            self.expect_kw("limit")
            st.per_partition_limit = self.term()
        if self.accept_kw("limit"):
            st.limit = self.term()
        if self.accept_kw("allow"):
            self.expect_kw("filtering")
            st.allow_filtering = True
        return st

    def selector(self) -> Selector:
        t = self.tok
        if self.is_kw("system") and self.peek().value == "." and self.peek(3).value == "(":
            sel = Selector("func", func=self.function())  # system.token(k)
        elif t.kind == "id" and self.peek().kind == "op" and self.peek().value == "(":
            name = t.value.lower()
            if name == "count":
                self.i += 2
                if self.accept_op("*") or (self.tok.kind == "int" and self.tok.value == "1" and self._skip()):
                    sel = Selector("count")
                else:
                    sel = Selector("count", column=self.ident())
                self.expect_op(")")
            elif name in ("ttl", "writetime"):
                self.i += 2
                sel = Selector(name, column=self.ident())
                self.expect_op(")")
            else:
                sel = Selector("func", func=self.function())
        else:
            sel = Selector("column", column=self.ident())
        if self.accept_kw("as"):
            sel.alias = self.ident()
        return sel

    def _skip(self):
        self.i += 1
        return True

    def relations(self) -> list:
        rels = [self.relation()]
        while self.accept_kw("and"):
            rels.append(self.relation())
        return rels

    def relation(self, condition=False) -> Relation:
        if self.is_kw("token") and self.peek().kind == "op" and self.peek().value == "(":
            if condition:
                raise SyntaxError_(f"line 1:{self.tok.pos} no viable alternative at input '{self.tok.value}'")
            return self.token_relation()
        if self.tok.kind == "op" and self.tok.value == "(":
            if condition:
                raise unsupported("Multi-column conditions")
            return self.multi_relation()
        col = self.ident()
        if self.tok.kind == "op" and self.tok.value == "[":
            raise unsupported("Conditions on collection elements" if condition else "Collection element relations")
        if self.accept_kw("in"):
            if self.tok.kind == "op" and self.tok.value in ("?", ":"):
                return Relation(col, "IN", self.term())
            self.expect_op("(")
            vals = []
            if not self.accept_op(")"):
                vals.append(self.term())
                while self.accept_op(","):
                    vals.append(self.term())
                self.expect_op(")")
            return Relation(col, "IN", vals)
        if self.is_kw("contains", "like", "is"):
            raise unsupported(f"{self.tok.value.upper()} relations")
        op = self.accept_op("=", "<", "<=", ">", ">=", "!=", "<>")
        if op is None:
            self.error("an operator")
        return Relation(col, "!=" if op == "<>" else op, self.term())

    def token_relation(self) -> TokenRelation:
        self.i += 2
        cols = [self.ident()]
        while self.accept_op(","):
            cols.append(self.ident())
        self.expect_op(")")
        op = self.accept_op("=", "<", "<=", ">", ">=", "!=", "<>")
        if op is None:
            raise SyntaxError_(f"line 1:{self.tok.pos} no viable alternative at input '{self.tok.value}'")
        return TokenRelation(cols, "!=" if op == "<>" else op, self.term())

    def multi_relation(self) -> MultiRelation:
        self.expect_op("(")
        cols = [self.ident()]
        while self.accept_op(","):
            cols.append(self.ident())
        self.expect_op(")")
        op = self.accept_op("<", "<=", ">", ">=", "!=", "<>")
        if op is None:
            raise unsupported("Multi-column relations other than slices (<, <=, >, >=)")
        if self.tok.kind == "op" and self.tok.value in ("?", ":"):
            raise unsupported("A bind marker for a whole tuple in multi-column relations")
        self.expect_op("(")
        vals = [self.term()]
        while self.accept_op(","):
            vals.append(self.term())
        self.expect_op(")")
        shown = f"({', '.join(term_text(v) for v in vals)})"
        if op in ("!=", "<>"):
            raise InvalidRequest(f'Unsupported "!=" relation: ({", ".join(cols)}) != {shown}')
        if len(vals) != len(cols):
            raise InvalidRequest(f"Expected {len(cols)} elements in value tuple, but got {len(vals)}: {shown}")
        return MultiRelation(cols, op, vals)

    def using(self, allow_ttl=True):
        ttl = ts = None
        while True:
            if self.accept_kw("ttl"):
                if not allow_ttl:
                    self.error("TIMESTAMP")
                ttl = self.term()
            elif self.accept_kw("timestamp"):
                ts = self.term()
            elif self.is_kw("timeout"):
                raise unsupported("USING TIMEOUT")
            else:
                self.error("TTL or TIMESTAMP")
            if not self.accept_kw("and"):
                return ttl, ts

    def insert(self):
        self.expect_kw("insert")
        self.expect_kw("into")
        table = self.table_ref()
        if self.is_kw("json"):
            raise unsupported("INSERT JSON")
        self.expect_op("(")
        cols = [self.ident()]
        while self.accept_op(","):
            cols.append(self.ident())
        self.expect_op(")")
        self.expect_kw("values")
        self.expect_op("(")
        vals = [self.term()]
        while self.accept_op(","):
            vals.append(self.term())
        self.expect_op(")")
        st = Insert(table, cols, vals)
        if self.accept_kw("if"):
            self.expect_kw("not")
            self.expect_kw("exists")
            st.if_not_exists = True
        if self.accept_kw("using"):
            st.ttl, st.timestamp = self.using()
        return st

    def conditions(self):
        """After IF: returns (if_exists, conditions)."""
        if self.accept_kw("exists"):
            return True, []
        conds = [self.relation(condition=True)]
        while self.accept_kw("and"):
            conds.append(self.relation(condition=True))
        return False, conds

    def update(self):
        self.expect_kw("update")
        table = self.table_ref()
        ttl = ts = None
        if self.accept_kw("using"):
            ttl, ts = self.using()
        self.expect_kw("set")
        assigns = [self.assignment()]
        while self.accept_op(","):
            assigns.append(self.assignment())
        self.expect_kw("where")
        st = Update(table, assigns, self.relations(), [], ttl=ttl, timestamp=ts)
        if self.accept_kw("if"):
            st.if_exists, st.conditions = self.conditions()
        return st

    def assignment(self):
        col = self.ident()
        if self.tok.kind == "op" and self.tok.value == "[":
            raise unsupported("Setting collection elements")
        self.expect_op("=")
        if self.tok.kind in ("id", "qid") and self.peek().kind == "op" and self.peek().value in ("+", "-"):
            raise unsupported("Counter and collection increments (col = col + x)")
        value = self.term()
        if self.tok.kind == "op" and self.tok.value in ("+", "-"):
            raise unsupported("Collection prepends (col = x + col)")
        return col, value

    def delete(self):
        self.expect_kw("delete")
        cols = []
        if not self.is_kw("from"):
            cols.append(self.ident())
            if self.tok.kind == "op" and self.tok.value == "[":
                raise unsupported("Deleting collection elements")
            while self.accept_op(","):
                cols.append(self.ident())
        self.expect_kw("from")
        table = self.table_ref()
        ts = None
        if self.accept_kw("using"):
            _, ts = self.using(allow_ttl=False)
        self.expect_kw("where")
        st = Delete(table, cols, self.relations(), [], timestamp=ts)
        if self.accept_kw("if"):
            st.if_exists, st.conditions = self.conditions()
        return st

    def batch(self):
        self.expect_kw("begin")
        kind = "LOGGED"
        if self.is_kw("unlogged", "counter"):
            kind = self.expect_kw("unlogged", "counter").upper()
        self.expect_kw("batch")
        st = Batch(kind, [])
        if self.accept_kw("using"):
            st.ttl, st.timestamp = self.using()
        while not self.is_kw("apply"):
            if not self.is_kw("insert", "update", "delete"):
                raise SyntaxError_("Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.")
            st.statements.append(self.statement())
            self.accept_op(";")
        self.expect_kw("apply")
        self.expect_kw("batch")
        return st

    def properties(self, table=False):
        """name = value [AND ...]; for tables also CLUSTERING ORDER BY (...) and COMPACT STORAGE."""
        opts, order, compact = {}, [], False
        while True:
            if table and self.accept_kw("clustering"):
                self.expect_kw("order")
                self.expect_kw("by")
                self.expect_op("(")
                while True:
                    col = self.ident()
                    order.append((col, self.expect_kw("asc", "desc")))
                    if not self.accept_op(","):
                        break
                self.expect_op(")")
            elif table and self.accept_kw("compact"):
                self.expect_kw("storage")
                compact = True
            else:
                name = self.ident()
                self.expect_op("=")
                opts[name] = self.prop_value()
            if not self.accept_kw("and"):
                return opts, order, compact

    def prop_value(self):
        t = self.tok
        if t.kind == "op" and t.value == "{":
            self.i += 1
            m = {}
            if not self.accept_op("}"):
                while True:
                    k = self.prop_value()
                    self.expect_op(":")
                    m[str(k)] = self.prop_value()
                    if not self.accept_op(","):
                        break
                self.expect_op("}")
            return m
        neg = self.accept_op("-")
        t = self.tok
        self.i += 1
        if t.kind == "int":
            return -int(t.value) if neg else int(t.value)
        if t.kind == "float":
            return -float(t.value) if neg else float(t.value)
        if t.kind in ("str", "id", "qid"):
            return t.value
        self.i -= 1
        self.error("a property value")

    def create(self):
        self.expect_kw("create")
        if self.accept_kw("keyspace", "schema"):
            ine = self._if_not_exists()
            name = self.ident()
            self.expect_kw("with")
            opts, _, _ = self.properties()
            return CreateKeyspace(name, ine, opts)
        if self.accept_kw("table", "columnfamily"):
            return self.create_table()
        what = " ".join(t.value.upper() for t in self.toks[self.i:self.i + 2] if t.kind == "id")
        raise unsupported(f"CREATE {what}".strip())

    def _if_not_exists(self) -> bool:
        if self.accept_kw("if"):
            self.expect_kw("not")
            self.expect_kw("exists")
            return True
        return False

    def _if_exists(self) -> bool:
        if self.accept_kw("if"):
            self.expect_kw("exists")
            return True
        return False

    def cql_type(self) -> CqlType:
        name = self.ident()
        if name == "frozen":
            self.expect_op("<")
            inner = self.cql_type()
            self.expect_op(">")
            return CqlType(inner.name, inner.subtypes, True) if inner.subtypes else inner
        subs = []
        if self.accept_op("<"):
            subs.append(self.cql_type())
            while self.accept_op(","):
                subs.append(self.cql_type())
            self.expect_op(">")
        return make_type(name, tuple(subs))

    def create_table(self):
        ine = self._if_not_exists()
        table = self.table_ref()
        self.expect_op("(")
        cols, pk_defs = [], []
        while True:
            if self.accept_kw("primary"):
                self.expect_kw("key")
                self.expect_op("(")
                if self.accept_op("("):
                    part = [self.ident()]
                    while self.accept_op(","):
                        part.append(self.ident())
                    self.expect_op(")")
                else:
                    part = [self.ident()]
                clustering = []
                while self.accept_op(","):
                    clustering.append(self.ident())
                self.expect_op(")")
                pk_defs.append((part, clustering))
            else:
                name = self.ident()
                ctype = self.cql_type()
                static = self.accept_kw("static")
                if static:
                    raise unsupported("Static columns")
                cols.append((name, ctype, static))
                if self.accept_kw("primary"):
                    self.expect_kw("key")
                    pk_defs.append(([name], []))
            if not self.accept_op(","):
                break
            if self.tok.kind == "op" and self.tok.value == ")":
                break
        self.expect_op(")")
        opts, order, compact = {}, [], False
        if self.accept_kw("with"):
            opts, order, compact = self.properties(table=True)
        if len(pk_defs) != 1:
            word = "No" if not pk_defs else "Multiple"
            raise SyntaxError_(f"{word} PRIMARY KEY specifed for table '{table.name}' (exactly one required)")
        return CreateTable(table, ine, cols, pk_defs[0][0], pk_defs[0][1], opts, order, compact)

    def drop(self):
        self.expect_kw("drop")
        if self.accept_kw("keyspace", "schema"):
            ie = self._if_exists()
            return Drop("keyspace", self.ident(), ie)
        if self.accept_kw("table", "columnfamily"):
            ie = self._if_exists()
            return Drop("table", self.table_ref(), ie)
        raise unsupported(f"DROP {self.tok.value.upper()}")

    def alter(self):
        self.expect_kw("alter")
        if not self.accept_kw("table", "columnfamily"):
            raise unsupported(f"ALTER {self.tok.value.upper()}")
        table = self.table_ref()
        if self.accept_kw("add"):
            cols = []
            if self.accept_op("("):
                while True:
                    cols.append((self.ident(), self.cql_type()))
                    if not self.accept_op(","):
                        break
                self.expect_op(")")
            else:
                cols.append((self.ident(), self.cql_type()))
            if self.is_kw("static"):
                raise unsupported("Static columns")
            return AlterTable(table, "add", cols)
        if self.accept_kw("drop"):
            cols = []
            if self.accept_op("("):
                cols.append(self.ident())
                while self.accept_op(","):
                    cols.append(self.ident())
                self.expect_op(")")
            else:
                cols.append(self.ident())
            return AlterTable(table, "drop", cols)
        if self.accept_kw("with"):
            opts, order, compact = self.properties(table=True)
            if order or compact:
                raise SyntaxError_("Cannot change CLUSTERING ORDER or COMPACT STORAGE with ALTER TABLE")
            return AlterTable(table, "with", options=opts)
        raise unsupported(f"ALTER TABLE ... {self.tok.value.upper()}")

    # terms
    def new_marker(self, name=None) -> Marker:
        self.markers.append(name)
        return Marker(len(self.markers) - 1, name)

    def term(self):
        t = self.tok
        if t.kind == "op":
            if t.value == "?":
                self.i += 1
                return self.new_marker()
            if t.value == ":":
                self.i += 1
                return self.new_marker(self.ident())
            nxt = self.peek()
            if t.value == "-" and (nxt.kind in ("int", "float") or self.is_kw("nan", "infinity", tok=nxt)):
                self.i += 2
                return Const("INTEGER" if nxt.kind == "int" else "FLOAT", "-" + nxt.value)
            if t.value == "[":
                self.i += 1
                items = []
                if not self.accept_op("]"):
                    items.append(self.term())
                    while self.accept_op(","):
                        items.append(self.term())
                    self.expect_op("]")
                return Coll("list", items)
            if t.value == "{":
                self.i += 1
                if self.accept_op("}"):
                    return Coll("empty_brace", [])
                first = self.term()
                if self.accept_op(":"):
                    items = [(first, self.term())]
                    while self.accept_op(","):
                        k = self.term()
                        self.expect_op(":")
                        items.append((k, self.term()))
                    self.expect_op("}")
                    return Coll("map", items)
                items = [first]
                while self.accept_op(","):
                    items.append(self.term())
                self.expect_op("}")
                return Coll("set", items)
            if t.value == "(":
                raise unsupported("Tuple literals and type casts")
            self.error("a term")
        self.i += 1
        if t.kind == "str":
            return Const("STRING", t.value)
        if t.kind == "int":
            return Const("INTEGER", t.value)
        if t.kind == "float":
            return Const("FLOAT", t.value)
        if t.kind == "uuid":
            return Const("UUID", t.value)
        if t.kind == "hex":
            return Const("HEX", t.value)
        if t.kind == "id":
            low = t.value.lower()
            if low in ("true", "false"):
                return Const("BOOLEAN", low)
            if low == "null":
                return Const("NULL", "null")
            if low in ("nan", "infinity"):
                return Const("FLOAT", low)
            if self.tok.kind == "op" and self.tok.value == "(":
                self.i -= 1
                return self.function()
        self.i -= 1
        self.error("a term")

    def function(self) -> Func:
        name = self.ident()
        if self.accept_op("."):  # system.now()
            name = self.ident()
        self.expect_op("(")
        args = []
        if not self.accept_op(")"):
            args.append(self.func_arg())
            while self.accept_op(","):
                args.append(self.func_arg())
            self.expect_op(")")
        return Func(name, args)

    def func_arg(self):
        t = self.tok
        if (t.kind == "qid" or (t.kind == "id" and t.value.lower() not in ("true", "false", "null", "nan", "infinity")
                                and not (self.peek().kind == "op" and self.peek().value in "(."))):
            return ColRef(self.ident())
        return self.term()


def parse(text: str):
    """Parse one statement. Returns (statement, marker_names)."""
    p = Parser(text)
    st = p.statement()
    p.end()
    return st, p.markers
