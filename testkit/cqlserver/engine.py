"""Statement analysis and execution with Cassandra's semantics and rejections.

A parsed statement is analysed against the schema into a plan (done once per prepared
statement, and cached for simple statements); a plan is executed with bound values. All
execution happens under one lock, so writes and LWTs are linearizable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from cassandra import ConsistencyLevel as CL
from cassandra.marshal import int32_pack, int32_unpack, int64_pack, int64_unpack, uint16_pack, uint16_unpack
from cassandra.util import uuid_from_time

from . import cql_parser as P
from .cql_parser import term_text
from . import ddl, tokens
from .ddl import MAX_TTL
from .errors import InvalidRequest, ProtocolError, Unprepared, unsupported
from .restrictions import (MULTI_FILTER_MSG, build_restrictions, check_clustering_prefix, clustering_predicate,
                           compare, filters_multi, range_bounds)
from .storage import (Table, delete_partition, delete_range, delete_row, get_partition, live_view,
                      partition_key_bytes, sorted_rows, write_row)
from .system_tables import build_system_keyspaces
from .values import (BIGINT, BOOLEAN, INT, TIMESTAMP, TIMEUUID, UNSET, UUID_T, CqlType, Desc,
                     canonical_collection, from_bytes, from_constant, make_type, sort_key, to_bytes)

FILTER_MSG = ("Cannot execute this query as it might involve data filtering and thus may have unpredictable "
              "performance. If you want to execute this query despite the performance unpredictability, "
              "use ALLOW FILTERING")
SERIAL_CLS = (CL.SERIAL, CL.LOCAL_SERIAL)
# function name -> (result type, argument type or None)
FUNCTIONS = {"now": (TIMEUUID, None), "currenttimeuuid": (TIMEUUID, None), "uuid": (UUID_T, None),
             "currenttimestamp": (TIMESTAMP, None), "totimestamp": (TIMESTAMP, TIMEUUID),
             "tounixtimestamp": (BIGINT, TIMEUUID)}
UUID_EPOCH = 0x01B21DD213814000


# ---- request options and results ----------------------------------------------------------

@dataclass
class QueryOptions:
    consistency: int = CL.ONE
    serial_consistency: Optional[int] = None
    page_size: Optional[int] = None
    paging_state: Optional[bytes] = None
    timestamp: Optional[int] = None  # client-side timestamp (microseconds)
    values: list = field(default_factory=list)
    skip_metadata: bool = False


@dataclass
class Void:
    pass


@dataclass
class Rows:
    specs: list  # (keyspace, table, name, CqlType)
    rows: list
    paging_state: Optional[bytes] = None
    no_metadata: bool = False


@dataclass
class SetKeyspace:
    keyspace: str


@dataclass
class SchemaChange:
    change: str
    target: str
    keyspace: str
    name: Optional[str] = None


@dataclass
class Mutation:
    table: Table
    op: str  # write / delete_row / delete_range / delete_partition
    key: tuple
    ck: Optional[tuple] = None
    values: dict = field(default_factory=dict)
    ttl: int = 0
    marker: bool = False
    pred: Any = None
    ts: Optional[int] = None  # USING TIMESTAMP
    bounds: Any = None  # a range deletion on the first clustering column only: storage.Bounds


# ---- evaluation of terms ------------------------------------------------------------------

class Ctx:
    """Evaluates terms against bound values (raw bytes / None / UNSET, by marker index)."""

    def __init__(self, engine: "Engine", values: list):
        self.engine, self.values = engine, values

    def ev(self, term, t: CqlType, col: str, row: Optional[dict] = None):
        if isinstance(term, P.Marker):
            return from_bytes(t, self.values[term.index], col)
        if isinstance(term, P.Const):
            return None if term.kind == "NULL" else from_constant(t, term.kind, term.text, col)
        if isinstance(term, P.Coll):
            kind = term.kind if term.kind != "empty_brace" else t.name
            if not t.is_collection or kind != t.name:
                raise InvalidRequest(f"Invalid {term.kind.replace('empty_brace', 'map')} literal for {col} of type {t.cql()}")
            if t.name == "map":
                items = [(self.ev(k, t.subtypes[0], col), self.ev(v, t.subtypes[1], col)) for k, v in term.items]
            else:
                items = [self.ev(x, t.subtypes[0], col) for x in term.items]
            return canonical_collection(t, items)
        if isinstance(term, P.Func):
            rtype, _ = function_type(term)
            if not (rtype == t or (rtype == TIMEUUID and t == UUID_T)):
                raise InvalidRequest(f"Type error: cannot assign result of function system.{term.name} "
                                     f"(type {rtype.cql()}) to {col} (type {t.cql()})")
            return self.call(term, row)
        if isinstance(term, P.ColRef):
            if row is None:
                raise InvalidRequest(f"Undefined name {term.name} in where clause ('{col} = {term.name}')")
            return row.get(term.name)
        raise InvalidRequest(f"Unsupported term {term_text(term)}")

    def call(self, f: P.Func, row=None):
        rtype, argtype = function_type(f)
        if argtype is not None:
            arg = self.ev(f.args[0], argtype, f"arg0(system.{f.name})", row)
            if arg is None:
                return None
            ms = (arg.time - UUID_EPOCH) // 10000 if isinstance(arg, uuid.UUID) else arg
            return ms
        now = self.engine.now()
        if f.name in ("now", "currenttimeuuid"):
            return uuid_from_time(now)
        if f.name == "uuid":
            return uuid.uuid4()
        return int(now * 1000)  # currenttimestamp

    def ttl_value(self, term, table: Table) -> int:
        if term is None:
            return table.default_ttl
        v = self.ev(term, INT, "[ttl]")
        if v is UNSET:
            return table.default_ttl
        if v is None:
            return 0
        if v < 0:
            raise InvalidRequest(f"A TTL must be greater or equal to 0, but was {v}")
        if v > MAX_TTL:
            raise InvalidRequest(f"ttl is too large. requested ({v}) maximum ({MAX_TTL})")
        return v

    def positive(self, term, name: str, what: str) -> Optional[int]:
        if term is None:
            return None
        v = self.ev(term, INT, name)
        if v is None or v is UNSET:
            raise InvalidRequest(f"Invalid null value of {what.lower()}")
        if v <= 0:
            raise InvalidRequest(f"{what} must be strictly positive")
        return v


def function_type(f: P.Func):
    if f.name not in FUNCTIONS:
        raise unsupported(f"Function {f.name}")
    rtype, argtype = FUNCTIONS[f.name]
    if len(f.args) != (1 if argtype else 0):
        raise InvalidRequest(f"Invalid number of arguments in call to function system.{f.name}")
    return rtype, argtype


# ---- bind markers ---------------------------------------------------------------------

class Binder:
    """Assigns a column specification to every bind marker during analysis."""

    def __init__(self, names: list):
        self.names = names
        self.specs: list = [None] * len(names)

    def bind(self, term, table: Table, name: str, t: CqlType):
        if isinstance(term, P.Marker):
            self.specs[term.index] = (table.keyspace, table.name, term.name or name, t)
        elif isinstance(term, P.Coll) and t.is_collection:
            for item in term.items:
                if t.name == "map":
                    self.bind(item[0], table, name, t.subtypes[0])
                    self.bind(item[1], table, name, t.subtypes[1])
                else:
                    self.bind(item, table, name, t.subtypes[0])
        elif isinstance(term, P.Func):
            _, argtype = function_type(term)
            for a in term.args:
                self.bind(a, table, f"arg0(system.{term.name})", argtype)

    def finish(self) -> list:
        for i, s in enumerate(self.specs):
            if s is None:
                raise InvalidRequest(f"Bind marker {i} is used in a position the CQL test server cannot type")
        return self.specs


# ---- plans --------------------------------------------------------------------------------

@dataclass
class Plan:
    kind: str  # read / write / lwt / batch / ddl / use
    keyspace: Optional[str] = None
    tables: set = field(default_factory=set)
    bind_specs: list = field(default_factory=list)
    pk_indexes: list = field(default_factory=list)
    result_specs: list = field(default_factory=list)
    statement: Any = None
    table: Optional[Table] = None
    session_keyspace: Optional[str] = None  # the keyspace in use when the statement was prepared
    token: Optional[tokens.TokenRestr] = None  # WHERE token(...) restrictions

    @property
    def is_system(self) -> bool:
        return self.keyspace is not None and self.keyspace.startswith("system")


@dataclass
class SelectItem:
    name: str
    type: CqlType
    get: Any  # (ctx, values, cells, now_s) -> value; None for count
    is_count: bool = False


@dataclass
class SelectPlan(Plan):
    items: list = field(default_factory=list)
    restr: dict = field(default_factory=dict)
    multis: list = field(default_factory=list)  # restrictions.MultiSlice: (c1, c2) > (?, ?)
    filters_multi: bool = False  # a multi-column slice would be a filter: refused at execution
    lookup: bool = False
    pk_filter: bool = False
    reverse: bool = False
    post_order: bool = False
    order_len: int = 0  # clustering columns named in ORDER BY (the rows of an IN are merged by those alone)
    distinct: bool = False
    aggregate: bool = False
    limit: Any = None
    ppl: Any = None


@dataclass
class ModPlan(Plan):
    stype: str = "UPDATE"
    sets: list = field(default_factory=list)  # (Column, term)
    restr: dict = field(default_factory=dict)
    delete_cols: list = field(default_factory=list)
    conditions: list = field(default_factory=list)  # (Column, op, value)
    if_exists: bool = False
    if_not_exists: bool = False
    ttl: Any = None
    ts: Any = None
    multis: list = field(default_factory=list)  # DELETE ... WHERE (c1, c2) > (?, ?): a range deletion

    @property
    def is_lwt(self) -> bool:
        return bool(self.conditions) or self.if_exists or self.if_not_exists

    @property
    def cond_columns(self):
        seen = []
        for c, _, _ in self.conditions:
            if c not in seen:
                seen.append(c)
        return seen

    def word(self) -> str:
        return "deletions" if self.stype == "DELETE" else "updates"


@dataclass
class BatchPlan(Plan):
    statements: list = field(default_factory=list)
    batch_kind: str = "LOGGED"
    ts: Any = None
    ttl: Any = None


# ---- the engine ---------------------------------------------------------------------------

class Engine:
    def __init__(self, *, clock=time.time, timestamp_clock=time.time, stats=None, host="127.0.0.1",
                 port=9042, cluster_name="Test Cluster", release_version="4.0.11"):
        self.lock = threading.RLock()
        self.clock, self.timestamp_clock, self.stats = clock, timestamp_clock, stats
        self.host, self.port, self.cluster_name, self.release_version = host, port, cluster_name, release_version
        self.time_offset = 0.0
        self.host_id = uuid.uuid4()
        self.schema_version = uuid.uuid4()
        self.keyspaces: dict = {}
        self.keyspaces.update(build_system_keyspaces(self))
        self.prepared: dict = {}  # id -> (query, keyspace, tables)
        self._plans: dict = {}
        self._last_ts = 0

    # clocks
    def now(self) -> float:
        return self.clock() + self.time_offset

    def now_s(self) -> int:
        return int(self.now())

    def next_ts(self) -> int:
        """Server-side write timestamp (microseconds, monotonic): LWT ballots and writes
        without a client timestamp."""
        with self.lock:
            self._last_ts = max(self._last_ts + 1, int(self.timestamp_clock() * 1_000_000))
            return self._last_ts

    def _count(self, name):
        if self.stats is not None:
            self.stats.incr(name)

    # preparation
    def plan(self, query: str, keyspace: Optional[str]) -> Plan:
        key = (keyspace, query)
        with self.lock:
            plan = self._plans.get(key)
            if plan is None:
                stmt, markers = P.parse(query)
                plan = self.analyze(stmt, markers, keyspace)
                if len(self._plans) > 10000:
                    self._plans.clear()
                self._plans[key] = plan
            return plan

    def prepare(self, query: str, keyspace: Optional[str]):
        plan = self.plan(query, keyspace)
        qid = hashlib.md5(((keyspace or "") + query).encode()).digest()
        with self.lock:
            self.prepared[qid] = (query, keyspace, plan.tables)
        return qid, plan

    def prepared_plan(self, qid: bytes):
        with self.lock:
            entry = self.prepared.get(qid)
        if entry is None:
            raise Unprepared(qid)
        return entry[0], self.plan(entry[0], entry[1])

    def schema_changed(self, keyspace: str, table: Optional[str] = None):
        self.schema_version = uuid.uuid4()
        self._plans.clear()
        for qid, (_, _, tables) in list(self.prepared.items()):
            if any(ks == keyspace and (table is None or t == table) for ks, t in tables):
                del self.prepared[qid]

    # schema lookups
    def keyspace_of(self, ref_ks: Optional[str], session_ks: Optional[str]) -> str:
        ks = ref_ks or session_ks
        if ks is None:
            raise InvalidRequest("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename")
        return ks

    def table(self, ref: P.TableRef, session_ks: Optional[str]) -> Table:
        ks_name = self.keyspace_of(ref.keyspace, session_ks)
        ks = self.keyspaces.get(ks_name)
        if ks is None:
            raise InvalidRequest(f"keyspace {ks_name} does not exist")
        t = ks.tables.get(ref.name)
        if t is None:
            raise InvalidRequest(f"table {ref.name} does not exist")
        return t

    # analysis
    def analyze(self, stmt, markers: list, ks: Optional[str]) -> Plan:
        binder = Binder(markers)
        if isinstance(stmt, P.Select):
            plan = self._analyze_select(stmt, binder, ks)
        elif isinstance(stmt, P.MODIFICATIONS):
            plan = self._analyze_mod(stmt, binder, ks)
        elif isinstance(stmt, P.Batch):
            subs = [self._analyze_mod(s, binder, ks) for s in stmt.statements]
            if not subs:
                raise InvalidRequest("Empty batch")
            plan = BatchPlan("batch", statements=subs, batch_kind=stmt.kind, ts=stmt.timestamp, ttl=stmt.ttl)
            plan.tables = {t for s in subs for t in s.tables}
            plan.keyspace = subs[0].keyspace
            if stmt.timestamp is not None:
                binder.bind(stmt.timestamp, subs[0].table, "[timestamp]", BIGINT)
            self._validate_batch(plan)
            if len(plan.tables) == 1:
                plan.pk_indexes = _pk_indexes(subs[0].table, subs[0].restr)
        elif isinstance(stmt, P.Use):
            plan = Plan("use", keyspace=stmt.keyspace)
        else:
            plan = Plan("ddl", keyspace=getattr(getattr(stmt, "table", None), "keyspace", None) or ks)
        plan.statement, plan.session_keyspace = stmt, ks
        plan.bind_specs = binder.finish()
        return plan

    def _analyze_select(self, st: P.Select, binder: Binder, ks) -> SelectPlan:
        t = self.table(st.table, ks)
        plan = SelectPlan("read", keyspace=t.keyspace, tables={(t.keyspace, t.name)}, table=t,
                          distinct=st.distinct)
        plan.items = self._selection(t, st, binder)
        plan.aggregate = any(i.is_count for i in plan.items)
        token_rels, where = tokens.split(st.where)
        plan.token = tokens.analyze(t, token_rels, binder)
        plan.restr, plan.multis = r, multis = build_restrictions(t, where, binder, st.allow_filtering)
        pk_r = [r.get(c.name) for c in t.partition_key]
        plan.lookup = all(x is not None and x.eq_or_in for x in pk_r)
        key_range = not plan.lookup
        if key_range and any(x is not None for x in pk_r):
            if not st.allow_filtering:
                raise InvalidRequest(FILTER_MSG)
            if any(x is not None and x.inn is not None for x in pk_r):
                raise InvalidRequest("IN restrictions are not supported when the query involves filtering")
            plan.pk_filter = True
        ck_restricted = bool(multis) or any(c.name in r for c in t.clustering)
        check_clustering_prefix(t, r, multis, st.allow_filtering)
        plan.filters_multi = filters_multi(t, r, multis)
        if key_range and ck_restricted and not st.allow_filtering:
            raise InvalidRequest(FILTER_MSG)
        if any(c.kind == "regular" for c in (x.col for x in r.values())) and not st.allow_filtering:
            raise InvalidRequest(FILTER_MSG)
        self._order_by(plan, st, t, key_range)
        if st.limit is not None:
            binder.bind(st.limit, t, "[limit]", INT)
        if st.per_partition_limit is not None:
            if st.distinct:
                raise InvalidRequest("PER PARTITION LIMIT is not allowed with SELECT DISTINCT queries")
            binder.bind(st.per_partition_limit, t, "[per_partition_limit]", INT)
        plan.limit, plan.ppl = st.limit, st.per_partition_limit
        plan.result_specs = [(t.keyspace, t.name, i.name, i.type) for i in plan.items]
        plan.pk_indexes = _pk_indexes(t, r)
        return plan

    def _order_by(self, plan: SelectPlan, st: P.Select, t: Table, key_range: bool):
        if not st.order_by:
            return
        if key_range:
            raise InvalidRequest("ORDER BY is only supported when the partition key is restricted by an EQ or an IN.")
        flags = set()
        for i, (name, direction) in enumerate(st.order_by):
            c = t.existing_column(name)
            if c.kind != "clustering":
                raise InvalidRequest(f"Order by is currently only supported on the clustered columns of the "
                                     f"PRIMARY KEY, got {name}")
            if c.position != i:
                raise InvalidRequest("Order by currently only supports the ordering of columns following "
                                     "their declared order in the PRIMARY KEY")
            flags.add((direction == "desc") != c.desc)
        if len(flags) > 1:
            raise InvalidRequest("Unsupported order by relation")
        plan.reverse = flags.pop()
        pk_in = any(plan.restr[c.name].inn is not None for c in t.partition_key)
        plan.post_order = pk_in
        plan.order_len = len(st.order_by)

    def _selection(self, t: Table, st: P.Select, binder: Binder) -> list:
        if st.selectors is None:
            cols = t.partition_key if st.distinct else t.select_order()
            return [SelectItem(c.name, c.type, _getter(c.name)) for c in cols]
        items, refs = [], []  # refs: the columns the selectors read
        for s in st.selectors:
            refs += [s.column] if s.column else [a.name for a in getattr(s.func, "args", ()) if isinstance(a, P.ColRef)]
            c = None
            if s.column is not None:
                c = t.existing_column(s.column)
            if s.kind == "column":
                items.append(SelectItem(s.alias or c.name, c.type, _getter(c.name)))
            elif s.kind == "count":
                items.append(SelectItem(s.alias or ("count" if c is None else f"system.count({c.name})"), BIGINT,
                                        None, True))
            elif s.kind in ("ttl", "writetime"):
                if c.kind != "regular":
                    raise InvalidRequest(f"Cannot use selection function {s.kind if s.kind == 'ttl' else 'writeTime'} "
                                         f"on PRIMARY KEY part {c.name}")
                if c.is_complex:
                    raise unsupported(f"{s.kind}() on non-frozen collections")
                items.append(SelectItem(s.alias or f"{s.kind}({c.name})", INT if s.kind == "ttl" else BIGINT,
                                        _ttl_getter(c.name) if s.kind == "ttl" else _wt_getter(c.name)))
            elif s.func.name == "token":
                items.append(SelectItem(s.alias or _func_name(s.func), BIGINT, tokens.selector(t, s.func, binder)))
            else:
                rtype, _ = function_type(s.func)
                for a in s.func.args:
                    if isinstance(a, P.ColRef):
                        t.existing_column(a.name)
                name = s.alias or _func_name(s.func)
                items.append(SelectItem(name, rtype, _func_getter(s.func)))
        if st.distinct:
            for name in refs:
                if t.columns[name].kind != "partition_key":
                    raise InvalidRequest(f"SELECT DISTINCT queries must only request partition key columns and/or "
                                         f"static columns (not {name})")
            missing = [c.name for c in t.partition_key if c.name not in refs]
            if missing:
                raise InvalidRequest(f"SELECT DISTINCT queries must request all the partition key columns "
                                     f"(missing {', '.join(missing)})")
        return items

    def _analyze_mod(self, st, binder: Binder, ks) -> ModPlan:
        t = self.table(st.table, ks)
        stype = type(st).__name__.upper()
        plan = ModPlan("write", keyspace=t.keyspace, tables={(t.keyspace, t.name)}, table=t, stype=stype,
                       ttl=getattr(st, "ttl", None), ts=st.timestamp)
        if t.provider is not None or self.keyspaces[t.keyspace].system:
            raise InvalidRequest(f"{t.keyspace} keyspace is not user-modifiable.")
        if isinstance(st, P.Insert):
            if len(st.columns) != len(st.values):
                raise InvalidRequest("Unmatched column names/values")
            if len(set(st.columns)) != len(st.columns):
                raise InvalidRequest("The column names contains duplicates")
            where = []
            for name, term in zip(st.columns, st.values):
                c = t.existing_column(name)
                if c.kind == "regular":
                    plan.sets.append((c, term))
                    binder.bind(term, t, c.name, c.type)
                else:
                    where.append(P.Relation(name, "=", term))
            plan.restr, _ = build_restrictions(t, where, binder)
            plan.if_not_exists = st.if_not_exists
        else:
            if isinstance(st, P.Update):
                seen = set()
                for name, term in st.assignments:
                    c = t.existing_column(name)
                    if c.kind != "regular":
                        raise InvalidRequest(f"PRIMARY KEY part {name} found in SET part")
                    if name in seen:
                        raise InvalidRequest(f"Multiple incompatible setting of column {name}")
                    seen.add(name)
                    plan.sets.append((c, term))
                    binder.bind(term, t, c.name, c.type)
            else:
                for name in st.columns:
                    c = t.existing_column(name)
                    if c.kind != "regular":
                        raise InvalidRequest(f"Invalid identifier {name} for deletion (should not be a PRIMARY KEY part)")
                    plan.delete_cols.append(c)
            token_rels, where = tokens.split(st.where)
            plan.token = tokens.analyze(t, token_rels, binder)
            plan.restr, plan.multis = build_restrictions(t, where, binder)
            plan.if_exists = st.if_exists
            for rel in st.conditions:
                c = t.existing_column(rel.column)
                if c.kind != "regular":
                    raise InvalidRequest(f"PRIMARY KEY column '{c.name}' cannot have IF conditions")
                if c.is_complex and rel.op not in ("=", "!=", "IN"):
                    raise unsupported("Slice conditions on non-frozen collections")
                plan.conditions.append((c, rel.op, rel.value))
                if rel.op == "IN" and isinstance(rel.value, P.Marker):
                    binder.bind(rel.value, t, f"in({c.name})", make_type("list", (c.type,)))
                elif rel.op == "IN":
                    for term in rel.value:
                        binder.bind(term, t, c.name, c.type)
                else:
                    binder.bind(rel.value, t, c.name, c.type)
        if plan.ttl is not None:
            binder.bind(plan.ttl, t, "[ttl]", INT)
        if plan.ts is not None:
            binder.bind(plan.ts, t, "[timestamp]", BIGINT)
        self._validate_mod_where(plan, t)
        if plan.is_lwt:
            plan.kind = "lwt"
            if plan.ts is not None:
                raise InvalidRequest("Cannot provide custom timestamp for conditional updates")
            if any(plan.restr[c.name].inn is not None for c in t.partition_key):
                raise InvalidRequest(f"IN on the partition key is not supported with conditional {plan.word()}")
            if any(plan.restr[c.name].inn is not None for c in t.clustering if c.name in plan.restr):
                raise InvalidRequest(f"IN on the clustering key columns is not supported with conditional {plan.word()}")
        plan.pk_indexes = _pk_indexes(t, plan.restr)
        return plan

    def _validate_mod_where(self, plan: ModPlan, t: Table):
        r, stype = plan.restr, plan.stype
        if plan.token is not None and not tokens.full_key(t, r):
            raise InvalidRequest(f"The token function cannot be used in WHERE clauses for {stype} statements")
        non_pk = [x.col.name for x in r.values() if x.col.kind == "regular"]
        if non_pk:
            raise InvalidRequest(f"Non PRIMARY KEY columns found in where clause: {', '.join(non_pk)} ")
        missing = [c.name for c in t.partition_key if c.name not in r]
        if missing:
            raise InvalidRequest(f"Some partition key parts are missing: {', '.join(missing)}")
        if any(not r[c.name].eq_or_in for c in t.partition_key):
            raise InvalidRequest("Only EQ and IN relation are supported on the partition key (unless you use the "
                                 f"token() function) for {stype} statements")
        if stype != "DELETE":
            if plan.multis or any(not r[c.name].eq_or_in for c in t.clustering if c.name in r):
                raise InvalidRequest(f"Slice restrictions are not supported on the clustering columns in {stype} statements")
            missing = [c.name for c in t.clustering if c.name not in r]
            if missing:
                raise InvalidRequest(f"Some clustering keys are missing: {', '.join(missing)}")
            return
        check_clustering_prefix(t, r, plan.multis, allow_filtering=False)
        full = not plan.multis and all(c.name in r and r[c.name].eq_or_in for c in t.clustering)
        if not full and plan.is_lwt:  # every DELETE applies to regular columns here: no static columns
            raise InvalidRequest("DELETE statements must restrict all PRIMARY KEY columns with equality relations "
                                 "in order to delete non static columns")
        if not full and plan.delete_cols:
            raise InvalidRequest("Range deletions are not supported for specific columns")

    def _validate_batch(self, plan: BatchPlan):
        if plan.ttl is not None:
            raise InvalidRequest("Global TTL on the BATCH statement is not supported.")
        conditional = any(s.is_lwt for s in plan.statements)
        if plan.ts is not None:
            if conditional:
                raise InvalidRequest("Cannot provide custom timestamp for conditional BATCH")
            if any(s.ts is not None for s in plan.statements):
                raise InvalidRequest("Timestamp must be set either on BATCH or individual statements")
        if plan.batch_kind == "COUNTER":
            raise unsupported("Counter batches")
        if conditional:
            plan.kind = "lwt"
            if len({(s.table.keyspace, s.table.name) for s in plan.statements}) > 1:
                raise InvalidRequest("Batch with conditions cannot span multiple tables")

    # execution
    def execute(self, plan: Plan, opts: QueryOptions):
        if len(opts.values) != len(plan.bind_specs):
            raise InvalidRequest("Invalid amount of bind variables: expected "
                                 f"{len(plan.bind_specs)} but got {len(opts.values)}")
        ctx = Ctx(self, opts.values)
        with self.lock:
            if isinstance(plan, SelectPlan):
                return self._select(plan, ctx, opts)
            if isinstance(plan, ModPlan):
                self._check_write_cl(opts, plan.is_lwt)
                if plan.is_lwt:
                    return self._cas([(plan, ctx)], opts, batch=False)
                self._apply(self._mutations(plan, ctx),
                            opts.timestamp if opts.timestamp is not None else self.next_ts())
                return Void()
            if isinstance(plan, BatchPlan):
                return self.execute_batch([(s, ctx) for s in plan.statements], opts, plan.ts, ctx)
            if plan.kind == "use":
                if plan.keyspace not in self.keyspaces:
                    raise InvalidRequest(f"Keyspace '{plan.keyspace}' does not exist")
                return SetKeyspace(plan.keyspace)
            return ddl.execute(self, plan.statement, plan.session_keyspace)

    def _check_write_cl(self, opts: QueryOptions, lwt: bool):
        if opts.consistency in SERIAL_CLS:
            if lwt:
                raise InvalidRequest('SERIAL is not supported as conditional update commit consistency. Use ANY '
                                     'if you mean "make sure it is accepted but I don\'t care how many replicas '
                                     'commit it for non-SERIAL reads"')
            raise InvalidRequest("You must use conditional updates for serializable writes")

    def execute_batch(self, items: list, opts: QueryOptions, ts_term=None, ts_ctx: Optional[Ctx] = None):
        """items: (ModPlan, Ctx). ts_term/ts_ctx: the USING TIMESTAMP of a CQL BEGIN BATCH string."""
        with self.lock:
            for plan, _ in items:
                if not isinstance(plan, ModPlan):
                    raise InvalidRequest("Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.")
            conditional = any(p.is_lwt for p, _ in items)
            if conditional and len({(p.table.keyspace, p.table.name) for p, _ in items}) > 1:
                raise InvalidRequest("Batch with conditions cannot span multiple tables")
            self._check_write_cl(opts, conditional)
            if conditional:
                return self._cas(items, opts, batch=True)
            batch_ts = None
            if ts_term is not None:
                batch_ts = ts_ctx.ev(ts_term, BIGINT, "[timestamp]")
                batch_ts = None if batch_ts is UNSET else batch_ts
            if batch_ts is None:
                batch_ts = opts.timestamp if opts.timestamp is not None else self.next_ts()
            muts = [m for p, c in items for m in self._mutations(p, c)]
            self._apply(muts, batch_ts)
            return Void()

    # mutations
    def _mutations(self, plan: ModPlan, ctx: Ctx) -> list:
        t, r = plan.table, plan.restr
        keys = list(itertools.product(*[r[c.name].values(ctx) for c in t.partition_key]))
        if plan.token is not None:
            keys = plan.token.keep_keys(ctx, keys, plan.is_lwt)
        for k in keys:
            if len(k) == 1 and to_bytes(t.partition_key[0].type, k[0]) == b"":
                raise InvalidRequest("Key may not be empty")
        full = not plan.multis and all(c.name in r and r[c.name].eq_or_in for c in t.clustering)
        ts = None
        if plan.ts is not None:
            ts = ctx.ev(plan.ts, BIGINT, "[timestamp]")
            if ts is None:
                raise InvalidRequest("Invalid null value of timestamp")
            ts = None if ts is UNSET else ts
        out = []
        if plan.stype in ("INSERT", "UPDATE"):
            ttl = ctx.ttl_value(plan.ttl, t)
            values = {}
            for c, term in plan.sets:
                v = ctx.ev(term, c.type, c.name)
                if v is not UNSET:
                    values[c.name] = v
            cks = list(itertools.product(*[r[c.name].values(ctx) for c in t.clustering]))
            for k in keys:
                for ck in cks:
                    out.append(Mutation(t, "write", k, ck, values, ttl, plan.stype == "INSERT", ts=ts))
            return out
        if full:
            cks = list(itertools.product(*[r[c.name].values(ctx) for c in t.clustering]))
            for k in keys:
                for ck in cks:
                    if plan.delete_cols:
                        out.append(Mutation(t, "write", k, ck, {c.name: None for c in plan.delete_cols}, ts=ts))
                    else:
                        out.append(Mutation(t, "delete_row", k, ck, ts=ts))
            return out
        if not plan.multis and not any(c.name in r for c in t.clustering):
            return [Mutation(t, "delete_partition", k, ts=ts) for k in keys]
        pred = clustering_predicate(t, r, plan.multis, ctx)
        bounds = range_bounds(t, r, plan.multis, ctx)
        return [Mutation(t, "delete_range", k, pred=pred, ts=ts, bounds=bounds) for k in keys]

    def _apply(self, muts: list, default_ts: int, force_ts: bool = False):
        now_s = self.now_s()
        for m in muts:
            ts = default_ts if force_ts or m.ts is None else m.ts
            if m.op == "write":
                write_row(m.table, m.key, m.ck, m.values, ts, m.ttl, now_s, m.marker)
            elif m.op == "delete_row":
                delete_row(m.table, m.key, m.ck, ts)
            elif m.op == "delete_range":
                delete_range(m.table, m.key, m.pred, ts, m.bounds)
            else:
                delete_partition(m.table, m.key, ts)

    # lightweight transactions
    def _current(self, t: Table, key: tuple, ck: tuple, now_s: int):
        p = get_partition(t, key)
        if p is None:
            return None
        row = p.rows.get(ck)
        if row is None:
            return None
        view = live_view(t, p, ck, row, now_s)
        return view[0] if view else None

    def _cond_holds(self, ctx: Ctx, col, op, value, current: Optional[dict]) -> bool:
        actual = current.get(col.name) if current else None
        if op == "IN":
            if isinstance(value, P.Marker):
                lst = ctx.ev(value, make_type("list", (col.type,)), f"in({col.name})")
                candidates = list(lst or [])
            else:
                candidates = [ctx.ev(v, col.type, col.name) for v in value]
            return any((c is None and actual is None) or (c is not None and actual is not None and
                       sort_key(col.type, c) == sort_key(col.type, actual)) for c in candidates if c is not UNSET)
        v = ctx.ev(value, col.type, col.name)
        if v is UNSET:
            raise InvalidRequest("Invalid 'unset' value in condition")
        if op in ("=", "!="):
            equal = (v is None and actual is None) or (
                v is not None and actual is not None and sort_key(col.type, v) == sort_key(col.type, actual))
            return equal if op == "=" else not equal
        if v is None:
            raise InvalidRequest(f'Invalid comparison with null for operator "{op}"')
        return actual is not None and compare(op, sort_key(col.type, actual), sort_key(col.type, v))

    def _cas(self, items: list, opts: QueryOptions, batch: bool) -> Rows:
        key, all_muts, conds, wildcard, cond_cols = None, [], {}, False, []
        table = items[0][0].table
        for plan, ctx in items:
            muts = self._mutations(plan, ctx)
            if len({m.key for m in muts}) > 1:
                raise InvalidRequest("Batch with conditions cannot span multiple partitions (you cannot use IN "
                                     "on the partition key)" if batch else
                                     f"IN on the partition key is not supported with conditional {plan.word()}")
            if key is None:
                key = muts[0].key
            elif muts[0].key != key:
                raise InvalidRequest("Batch with conditions cannot span multiple partitions")
            if any(plan.restr[c.name].inn is not None for c in plan.table.clustering if c.name in plan.restr):
                raise InvalidRequest(f"IN on the clustering key columns is not supported with conditional {plan.word()}")
            all_muts.extend(muts)
            if not plan.is_lwt:
                continue
            ck = muts[0].ck
            prev = conds.get(ck)
            if plan.conditions:
                if prev is not None and not isinstance(prev, list):
                    raise InvalidRequest("Cannot mix IF conditions and IF NOT EXISTS for the same row")
                conds.setdefault(ck, []).extend((ctx, c) for c in plan.conditions)
                cond_cols += [c for c in plan.cond_columns if c not in cond_cols]
            else:
                kind = "exists" if plan.if_exists else "not_exists"
                wildcard = True
                if isinstance(prev, list):
                    raise InvalidRequest(f"Cannot mix IF conditions and IF {'NOT ' if kind == 'not_exists' else ''}"
                                         "EXISTS for the same row")
                if prev is not None and prev != kind:
                    raise InvalidRequest("Cannot mix IF EXISTS and IF NOT EXISTS conditions for the same row")
                conds[ck] = kind
        now_s = self.now_s()
        current = {ck: self._current(table, key, ck, now_s) for ck in conds}
        applied = True
        for ck, cond in conds.items():
            if cond == "exists":
                ok = current[ck] is not None
            elif cond == "not_exists":
                ok = current[ck] is None
            else:
                ok = all(self._cond_holds(ctx, col, op, val, current[ck]) for ctx, (col, op, val) in cond)
            applied = applied and ok
        applied_spec = (table.keyspace, table.name, "[applied]", BOOLEAN)
        if applied:
            self._apply(all_muts, self.next_ts(), force_ts=True)
            self._count("lwts_applied")
            return Rows([applied_spec], [[True]])
        self._count("lwts_not_applied")
        if wildcard:
            cols = table.select_order()
        else:
            cols = (table.partition_key + table.clustering if batch else []) + cond_cols
        rows = [[False] + [current[ck].get(c.name) for c in cols]
                for ck in sorted(conds, key=table.ck_sort_key) if current[ck] is not None]
        if not rows:
            return Rows([applied_spec], [[False]])
        return Rows([applied_spec] + [(table.keyspace, table.name, c.name, c.type) for c in cols], rows)

    # reads
    def _materialize(self, t: Table, keys: list | None = None) -> Table:
        """A system table's rows, made now; with ``keys``, only those partitions. Otherwise a read
        of one keyspace's schema rows made every keyspace's, and a test run that creates
        hundreds of keyspaces on one server grew quadratic."""
        copy = dataclasses.replace(t, data={})
        wanted = set(keys) if keys is not None else None
        by_keyspace = wanted is not None and [c.name for c in t.partition_key] == ["keyspace_name"]
        for r in t.provider({k[0] for k in wanted} if by_keyspace else None):
            key = tuple(r[c.name] for c in t.partition_key)
            if wanted is not None and key not in wanted:
                continue
            ck = tuple(r[c.name] for c in t.clustering)
            vals = {c.name: r.get(c.name) for c in t.regular}
            write_row(copy, key, ck, vals, 1, 0, 0, True)
        return copy

    def _select(self, plan: SelectPlan, ctx: Ctx, opts: QueryOptions) -> Rows:
        t = plan.table
        keys = (list(dict.fromkeys(itertools.product(*[plan.restr[c.name].values(ctx) for c in t.partition_key])))
                if plan.lookup else None)
        data = self._materialize(t, keys) if t.provider else t
        now_s = self.now_s()
        limit = ctx.positive(plan.limit, "[limit]", "LIMIT")
        ppl = ctx.positive(plan.ppl, "[per_partition_limit]", "PER PARTITION LIMIT")
        page_size = opts.page_size if opts.page_size and opts.page_size > 0 else None
        if plan.post_order and page_size and not plan.aggregate:  # LIMIT or not: the rows are sorted after the read
            raise InvalidRequest("Cannot page queries with both ORDER BY and a IN restriction on the partition key; "
                                 "you must either remove the ORDER BY or the IN and sort client side, or disable "
                                 "paging for this query")
        if opts.consistency in SERIAL_CLS and (keys is None or len(keys) != 1):
            raise InvalidRequest("SERIAL/LOCAL_SERIAL consistency may only be requested for one partition at a time")
        rank = _partition_rank(t, keys)
        found = self._found(plan, ctx, data, keys, rank, now_s)
        if plan.post_order:
            # As Cassandra does: the partitions' rows sorted by the ORDER BY columns alone, ties
            # left in partition order (not by the clustering columns after them).
            found.sort(key=lambda f: _leading(f[0][-1], plan.order_len))
        returned, in_part, last_kb = 0, 0, None
        if opts.paging_state and not plan.aggregate:
            token, last_kb, ckey, returned, in_part = self._decode_paging(t, opts.paging_state, plan.reverse)
            last_rank = rank(token, last_kb)
            if last_rank is None:  # not a partition of this read
                raise ProtocolError("Invalid value for the paging state")
            found = [f for f in found if f[0] > last_rank + (ckey,)]
        if ppl is not None:
            counts, kept = {}, []
            for f in found:
                kb = f[1].key_bytes
                n = counts.get(kb, in_part if kb == last_kb else 0)
                if n < ppl:
                    kept.append(f)
                counts[kb] = n + 1
            found = kept
        if plan.aggregate:
            first = found[0] if found else None
            row = [len(found) if i.is_count else (i.get(ctx, first[2], first[3], now_s) if first else None)
                   for i in plan.items]
            return Rows(plan.result_specs, [row], None, opts.skip_metadata)
        if limit is not None:
            found = found[:max(0, limit - returned)]
        state = None
        if page_size and len(found) > page_size:
            found = found[:page_size]
            last = found[-1]
            same = sum(1 for f in found if f[1].key_bytes == last[1].key_bytes)
            state = self._encode_paging(t, last, returned + len(found),
                                        same + (in_part if last[1].key_bytes == last_kb else 0))
        rows = [[i.get(ctx, f[2], f[3], now_s) for i in plan.items] for f in found]
        return Rows(plan.result_specs, rows, state, opts.skip_metadata)

    def _found(self, plan: SelectPlan, ctx: Ctx, data: Table, keys: Optional[list], rank, now_s: int) -> list:
        """The rows the restrictions select, in the order a read returns them: each
        (position, partition, values, cells, clustering), position ordering them."""
        t = plan.table
        if keys is None:
            parts = sorted(data.data.values(), key=lambda p: (p.token, p.key_bytes))
        else:
            parts = [p for p in (data.data.get(k) for k in keys) if p is not None]
        if plan.token is not None:
            keep = plan.token.scan(ctx) if keys is None else plan.token.filter(ctx)
            parts = [p for p in parts if keep(p.token)]
        pk_preds = [(i, plan.restr[c.name].predicate(ctx)) for i, c in enumerate(t.partition_key)
                    if plan.pk_filter and c.name in plan.restr]
        if plan.filters_multi:
            raise InvalidRequest(MULTI_FILTER_MSG)
        ck_pred = clustering_predicate(t, plan.restr, plan.multis, ctx)
        reg_preds = [(x.col.name, x.predicate(ctx)) for x in plan.restr.values() if x.col.kind == "regular"]
        found = []
        for p in parts:
            if not all(pred(p.key[i]) for i, pred in pk_preds):
                continue
            for ck, row in sorted_rows(data, p, plan.reverse):
                if not ck_pred(ck):
                    continue
                view = live_view(data, p, ck, row, now_s)
                if view is None or not all(pred(view[0].get(n)) for n, pred in reg_preds):
                    continue
                if plan.distinct:
                    ck = ()
                ckey = t.ck_sort_key(ck)
                found.append((rank(p.token, p.key_bytes) + (Desc(ckey) if plan.reverse else ckey,),
                              p, view[0], view[1], ck))
                if plan.distinct:
                    break
        return found

    def _encode_paging(self, t: Table, last, returned: int, in_part: int) -> bytes:
        _, p, _, _, ck = last
        b = io.BytesIO()
        b.write(b"\x01" + int64_pack(p.token) + int32_pack(len(p.key_bytes)) + p.key_bytes + uint16_pack(len(ck)))
        for c, v in zip(t.clustering, ck):
            vb = to_bytes(c.type, v)
            b.write(int32_pack(len(vb)) + vb)
        b.write(int32_pack(returned) + int32_pack(in_part))
        return b.getvalue()

    def _decode_paging(self, t: Table, state: bytes, reverse: bool):
        """(token, key bytes, clustering sort key, rows returned, rows of the last partition)."""
        try:
            f = io.BytesIO(state)
            assert f.read(1) == b"\x01"
            token = int64_unpack(f.read(8))
            kb = f.read(int32_unpack(f.read(4)))
            ck = tuple(from_bytes(c.type, f.read(int32_unpack(f.read(4))), c.name)
                       for c, _ in zip(t.clustering, range(uint16_unpack(f.read(2)))))
            returned, in_part = int32_unpack(f.read(4)), int32_unpack(f.read(4))
        except Exception:
            raise ProtocolError("Invalid value for the paging state") from None
        ckey = t.ck_sort_key(ck)
        return token, kb, Desc(ckey) if reverse else ckey, returned, in_part


# ---- helpers --------------------------------------------------------------------------

def _getter(name):
    return lambda ctx, values, cells, now_s: values.get(name)


def _ttl_getter(name):
    def get(ctx, values, cells, now_s):
        cell = cells.get(name)
        return None if cell is None or cell.expires is None else cell.expires - now_s
    return get


def _wt_getter(name):
    def get(ctx, values, cells, now_s):
        cell = cells.get(name)
        return None if cell is None else cell.ts
    return get


def _func_name(f: P.Func) -> str:
    args = ", ".join(_func_name(a) if isinstance(a, P.Func) else term_text(a) for a in f.args)
    return f"system.{f.name}({args})"


def _func_getter(f: P.Func):
    return lambda ctx, values, cells, now_s: ctx.call(f, values)


def _partition_rank(t: Table, keys: Optional[list]):
    """rank(token, key bytes) -> the partition's place in a read, None if it is not read: a scan
    goes in token order; a read of named keys (EQ/IN) in the order of the key values, as
    Cassandra sorts the IN values of a partition key (by its type), not by token."""
    if keys is None:
        return lambda token, kb: (token, kb)
    order = {partition_key_bytes(t, k): i for i, k in enumerate(keys)}
    return lambda token, kb: None if kb not in order else (order[kb],)


def _pk_indexes(t: Table, r: dict) -> list:
    """Bind indexes of the partition key components, if all are given by plain '?' EQ markers."""
    out = []
    for c in t.partition_key:
        x = r.get(c.name)
        if x is None or not isinstance(x.eq, P.Marker):
            return []
        out.append(x.eq.index)
    return out


def _leading(ckey, n: int):
    """The first ``n`` components of a clustering sort key (kept reversed if it is)."""
    return Desc(ckey.k[:n]) if isinstance(ckey, Desc) else ckey[:n]
