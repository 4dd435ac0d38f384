"""Schema statements: CREATE/DROP KEYSPACE, CREATE/DROP/ALTER TABLE, TRUNCATE, with Cassandra's
validations and results (SchemaChange, or Void when IF [NOT] EXISTS made it a no-op)."""

from __future__ import annotations

import re

from . import cql_parser as P
from .errors import AlreadyExists, ConfigurationError, InvalidRequest, SyntaxError_
from .storage import Column, Keyspace, Table
from .system_tables import STRATEGY_PREFIX, make_table

MAX_TTL = 630720000  # 20 years, Cassandra's limit
TABLE_OPTIONS = {"additional_write_policy", "bloom_filter_fp_chance", "caching", "cdc", "comment", "compaction",
                 "compression", "crc_check_chance", "dclocal_read_repair_chance", "default_time_to_live",
                 "extensions", "gc_grace_seconds", "max_index_interval", "memtable_flush_period_in_ms",
                 "min_index_interval", "read_repair", "read_repair_chance", "speculative_retry", "memtable",
                 "incremental_backups", "id"}


def execute(engine, st, session_ks):
    """Runs a schema statement (under the engine lock)."""
    from .engine import SchemaChange, Void
    if isinstance(st, P.CreateKeyspace):
        return _create_keyspace(engine, st)
    if isinstance(st, P.Drop) and st.what == "keyspace":
        ks = engine.keyspaces.get(st.name)
        if ks is not None and ks.system:
            raise InvalidRequest(f"{st.name} keyspace is not user-modifiable.")
        if ks is None:
            if st.if_exists:
                return Void()
            raise InvalidRequest(f"Keyspace '{st.name}' doesn't exist")
        del engine.keyspaces[st.name]
        engine.schema_changed(st.name)
        return SchemaChange("DROPPED", "KEYSPACE", st.name)
    if isinstance(st, P.CreateTable):
        return _create_table(engine, st, session_ks)
    ref = st.name if isinstance(st, P.Drop) else st.table
    ks_name = engine.keyspace_of(ref.keyspace, session_ks)
    ks = engine.keyspaces.get(ks_name)
    if ks is not None and ks.system:
        raise InvalidRequest(f"{ks_name} keyspace is not user-modifiable.")
    if isinstance(st, P.Drop):
        if ks is None or ref.name not in ks.tables:
            if st.if_exists:
                return Void()
            raise InvalidRequest(f"Table '{ks_name}.{ref.name}' doesn't exist")
        del ks.tables[ref.name]
        engine.schema_changed(ks_name, ref.name)
        return SchemaChange("DROPPED", "TABLE", ks_name, ref.name)
    t = engine.table(ref, session_ks)
    if isinstance(st, P.Truncate):
        t.data.clear()
        return Void()
    return _alter_table(engine, t, st)


def _create_keyspace(engine, st: P.CreateKeyspace):
    from .engine import SchemaChange, Void
    if not re.fullmatch(r"\w{1,48}", st.name):
        raise InvalidRequest("Keyspace name must not be empty, more than 48 characters long, or contain "
                             f"non-alphanumeric-underscore characters (got \"{st.name}\")")
    if st.name in engine.keyspaces:
        if st.if_not_exists:
            return Void()
        raise AlreadyExists(st.name)
    for k in st.options:
        if k not in ("replication", "durable_writes"):
            raise SyntaxError_(f"Unknown property '{k}'")
    repl = st.options.get("replication")
    if not isinstance(repl, dict) or "class" not in repl:
        raise ConfigurationError("Missing mandatory replication strategy class")
    repl = {k: str(v) for k, v in repl.items()}
    short = repl["class"].rsplit(".", 1)[-1]
    if short not in ("SimpleStrategy", "NetworkTopologyStrategy"):
        raise ConfigurationError(f"Unable to find replication strategy class '{repl['class']}'")
    repl["class"] = STRATEGY_PREFIX + short
    if short == "SimpleStrategy" and "replication_factor" not in repl:
        raise ConfigurationError("SimpleStrategy requires a replication_factor strategy option.")
    for k, v in repl.items():
        if k != "class" and not v.isdigit():
            raise ConfigurationError(f"Replication factor must be non-negative integer; found {v}")
    durable = str(st.options.get("durable_writes", "true")).lower() == "true"
    engine.keyspaces[st.name] = Keyspace(st.name, repl, durable)
    engine.schema_changed(st.name)
    return SchemaChange("CREATED", "KEYSPACE", st.name)


def _table_options(opts: dict) -> dict:
    for k in opts:
        if k not in TABLE_OPTIONS:
            raise SyntaxError_(f"Unknown property '{k}'")
    if "default_time_to_live" in opts:
        ttl = opts["default_time_to_live"]
        if not isinstance(ttl, int) or ttl < 0:
            raise ConfigurationError(f"default_time_to_live must be greater than or equal to 0 (got {ttl})")
        if ttl > MAX_TTL:
            raise ConfigurationError(f"default_time_to_live must be less than or equal to {MAX_TTL} (got {ttl})")
    return opts


def _create_table(engine, st: P.CreateTable, session_ks):
    from .engine import SchemaChange, Void
    ks_name = engine.keyspace_of(st.table.keyspace, session_ks)
    ks = engine.keyspaces.get(ks_name)
    if ks is None:
        raise InvalidRequest(f"Keyspace '{ks_name}' doesn't exist")
    if ks.system:
        raise InvalidRequest(f"{ks_name} keyspace is not user-modifiable.")
    name, full = st.table.name, f"{ks_name}.{st.table.name}"
    if name in ks.tables:
        if st.if_not_exists:
            return Void()
        raise AlreadyExists(ks_name, name)
    if st.compact:
        raise InvalidRequest("Compact tables are not allowed in Cassandra starting with 4.0 version.")
    types = {}
    for cname, ctype, _ in st.columns:
        if cname in types:
            raise InvalidRequest(f"Duplicate column '{cname}' declaration for table '{full}'")
        types[cname] = ctype
    keys = st.partition_key + st.clustering
    for c in keys:
        if c not in types:
            raise InvalidRequest(f"Unknown column '{c}' referenced in PRIMARY KEY for table '{full}'")
        if keys.count(c) > 1:
            raise InvalidRequest(f"Duplicate column '{c}' in PRIMARY KEY clause for table '{full}'")
        if types[c].is_collection and not types[c].frozen:
            raise InvalidRequest(f"Invalid non-frozen collection type {types[c].cql()} for PRIMARY KEY column '{c}'")
    for i, (c, _) in enumerate(st.clustering_order):
        if c not in st.clustering:
            raise InvalidRequest("Only clustering key columns can be defined in CLUSTERING ORDER directive")
        if st.clustering.index(c) != i:
            raise InvalidRequest("The order of columns in the CLUSTERING ORDER directive must match that of the "
                                 f"clustering columns ({', '.join(st.clustering)})")
    t = make_table(ks_name, name, [(n, ty) for n, ty, _ in st.columns], st.partition_key, st.clustering,
                   _table_options(st.options), st.clustering_order)
    ks.tables[name] = t
    engine.schema_changed(ks_name, name)
    return SchemaChange("CREATED", "TABLE", ks_name, name)


def _alter_table(engine, t: Table, st: P.AlterTable):
    from .engine import SchemaChange
    if st.action == "add":
        for name, _ in st.columns:
            if name in t.columns:
                raise InvalidRequest(f"Column with name '{name}' already exists")
        for name, ctype in st.columns:
            t.columns[name] = Column(name, ctype, "regular")
    elif st.action == "drop":
        for name in st.columns:
            c = t.columns.get(name)
            if c is None:
                raise InvalidRequest(f"Column {name} was not found in table {t.name}")
            if c.kind != "regular":
                raise InvalidRequest(f"Cannot drop PRIMARY KEY column {name}")
        for name in st.columns:
            del t.columns[name]
            for p in t.data.values():
                for row in p.rows.values():
                    row.cells.pop(name, None)
    else:
        t.options.update(_table_options(st.options))
    engine.schema_changed(t.keyspace, t.name)
    return SchemaChange("UPDATED", "TABLE", t.keyspace, t.name)
