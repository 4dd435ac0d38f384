"""The read-only system tables the driver queries on connect and on schema refresh:
system.local, system.peers(_v2), system_schema.* (filled from the real schema) and
system_virtual_schema.* (empty). Rows are produced on demand by provider functions."""

from __future__ import annotations

from .cql_parser import Parser
from .storage import Column, Keyspace, Table

LOCAL_STRATEGY = "org.apache.cassandra.locator.LocalStrategy"
STRATEGY_PREFIX = "org.apache.cassandra.locator."

DEFAULT_TABLE_OPTIONS = {
    "additional_write_policy": "99p", "bloom_filter_fp_chance": 0.01,
    "caching": (("keys", "ALL"), ("rows_per_partition", "NONE")), "cdc": False, "comment": "",
    "compaction": (("class", "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy"),
                   ("max_threshold", "32"), ("min_threshold", "4")),
    "compression": (("chunk_length_in_kb", "16"), ("class", "org.apache.cassandra.io.compress.LZ4Compressor")),
    "crc_check_chance": 1.0, "dclocal_read_repair_chance": 0.0, "default_time_to_live": 0,
    "gc_grace_seconds": 864000, "max_index_interval": 2048, "memtable_flush_period_in_ms": 0,
    "min_index_interval": 128, "read_repair": "BLOCKING", "read_repair_chance": 0.0,
    "speculative_retry": "99p",
}

# name: (columns, partition key, clustering)
_DEFS = {
    "system": {
        "local": ("key text, bootstrapped text, broadcast_address inet, broadcast_port int, cluster_name text, "
                  "cql_version text, data_center text, gossip_generation int, host_id uuid, listen_address inet, "
                  "listen_port int, native_protocol_version text, partitioner text, rack text, "
                  "release_version text, rpc_address inet, rpc_port int, schema_version uuid, tokens set<text>",
                  ["key"], []),
        "peers_v2": ("peer inet, peer_port int, data_center text, host_id uuid, native_address inet, "
                     "native_port int, preferred_ip inet, preferred_port int, rack text, release_version text, "
                     "schema_version uuid, tokens set<text>", ["peer"], ["peer_port"]),
        "peers": ("peer inet, data_center text, host_id uuid, preferred_ip inet, rack text, release_version text, "
                  "rpc_address inet, schema_version uuid, tokens set<text>", ["peer"], []),
    },
    "system_schema": {
        "keyspaces": ("keyspace_name text, durable_writes boolean, replication frozen<map<text, text>>",
                      ["keyspace_name"], []),
        "tables": ("keyspace_name text, table_name text, additional_write_policy text, "
                   "bloom_filter_fp_chance double, caching frozen<map<text, text>>, cdc boolean, comment text, "
                   "compaction frozen<map<text, text>>, compression frozen<map<text, text>>, "
                   "crc_check_chance double, dclocal_read_repair_chance double, default_time_to_live int, "
                   "extensions frozen<map<text, blob>>, flags frozen<set<text>>, gc_grace_seconds int, id uuid, "
                   "max_index_interval int, memtable_flush_period_in_ms int, min_index_interval int, "
                   "read_repair text, read_repair_chance double, speculative_retry text",
                   ["keyspace_name"], ["table_name"]),
        "columns": ("keyspace_name text, table_name text, column_name text, clustering_order text, "
                    "column_name_bytes blob, kind text, position int, type text",
                    ["keyspace_name"], ["table_name", "column_name"]),
        "dropped_columns": ("keyspace_name text, table_name text, column_name text, dropped_time timestamp, "
                            "kind text, type text", ["keyspace_name"], ["table_name", "column_name"]),
        "types": ("keyspace_name text, type_name text, field_names frozen<list<text>>, "
                  "field_types frozen<list<text>>", ["keyspace_name"], ["type_name"]),
        "functions": ("keyspace_name text, function_name text, argument_types frozen<list<text>>, "
                      "argument_names frozen<list<text>>, body text, called_on_null_input boolean, "
                      "language text, return_type text", ["keyspace_name"], ["function_name", "argument_types"]),
        "aggregates": ("keyspace_name text, aggregate_name text, argument_types frozen<list<text>>, "
                       "final_func text, initcond text, return_type text, state_func text, state_type text",
                       ["keyspace_name"], ["aggregate_name", "argument_types"]),
        "triggers": ("keyspace_name text, table_name text, trigger_name text, options frozen<map<text, text>>",
                     ["keyspace_name"], ["table_name", "trigger_name"]),
        "indexes": ("keyspace_name text, table_name text, index_name text, kind text, "
                    "options frozen<map<text, text>>", ["keyspace_name"], ["table_name", "index_name"]),
        "views": ("keyspace_name text, view_name text, base_table_id uuid, base_table_name text, "
                  "include_all_columns boolean, where_clause text, comment text, default_time_to_live int, "
                  "gc_grace_seconds int, id uuid", ["keyspace_name"], ["view_name"]),
    },
    "system_virtual_schema": {
        "keyspaces": ("keyspace_name text", ["keyspace_name"], []),
        "tables": ("keyspace_name text, table_name text, comment text", ["keyspace_name"], ["table_name"]),
        "columns": ("keyspace_name text, table_name text, column_name text, clustering_order text, "
                    "column_name_bytes blob, kind text, position int, type text",
                    ["keyspace_name"], ["table_name", "column_name"]),
    },
}


def make_table(keyspace: str, name: str, column_defs: list, pk: list, ck: list, options=None,
               clustering_order=None) -> Table:
    """column_defs: (name, CqlType) in declaration order."""
    order = dict(clustering_order or {})
    cols = {}
    for cname, ctype in column_defs:
        if cname in pk:
            cols[cname] = Column(cname, ctype, "partition_key", pk.index(cname))
        elif cname in ck:
            cols[cname] = Column(cname, ctype, "clustering", ck.index(cname), order.get(cname) == "desc")
        else:
            cols[cname] = Column(cname, ctype, "regular")
    return Table(keyspace, name, cols, [cols[c] for c in pk], [cols[c] for c in ck], dict(options or {}))


def _parse_columns(spec: str) -> list:
    p = Parser(spec)
    cols = []
    while True:
        cols.append((p.ident(), p.cql_type()))
        if not p.accept_op(","):
            return cols


def _m(d: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in d.items()))


def build_system_keyspaces(engine) -> dict:
    """engine provides: keyspaces (dict), host, port, cluster_name, release_version, host_id,
    schema_version, tokens."""
    # A provider is given the keyspaces a read names (None: all); system_schema's tables are
    # partitioned by keyspace_name, and a read of one keyspace's rows must not cost all of them.
    providers = {
        ("system", "local"): lambda names=None: [_local_row(engine)],
        ("system_schema", "keyspaces"): lambda names=None: [
            {"keyspace_name": ks.name, "durable_writes": ks.durable_writes, "replication": _m(ks.replication)}
            for ks in _keyspaces(engine, names)],
        ("system_schema", "tables"): lambda names=None: [_table_row(t) for t in _all_tables(engine, names)],
        ("system_schema", "columns"): lambda names=None: [r for t in _all_tables(engine, names)
                                                          for r in _column_rows(t)],
    }
    out = {}
    for ks_name, tables in _DEFS.items():
        repl = {"class": LOCAL_STRATEGY} if ks_name != "system_virtual_schema" else {}
        ks = Keyspace(ks_name, repl, True, system=True)
        for tname, (spec, pk, ck) in tables.items():
            t = make_table(ks_name, tname, _parse_columns(spec), pk, ck)
            t.provider = providers.get((ks_name, tname), lambda names=None: [])
            ks.tables[tname] = t
        out[ks_name] = ks
    return out


def _keyspaces(engine, names=None):
    if names is None:
        return list(engine.keyspaces.values())
    return [engine.keyspaces[n] for n in names if n in engine.keyspaces]


def _all_tables(engine, names=None):
    for ks in _keyspaces(engine, names):
        if ks.name != "system_virtual_schema":
            yield from ks.tables.values()


def _local_row(engine) -> dict:
    return {
        "key": "local", "bootstrapped": "COMPLETED", "broadcast_address": engine.host,
        "broadcast_port": 7000, "cluster_name": engine.cluster_name, "cql_version": "3.4.5",
        "data_center": "datacenter1", "gossip_generation": 1, "host_id": engine.host_id,
        "listen_address": engine.host, "listen_port": 7000, "native_protocol_version": "4",
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner", "rack": "rack1",
        "release_version": engine.release_version, "rpc_address": engine.host, "rpc_port": engine.port,
        "schema_version": engine.schema_version, "tokens": ("-9223372036854775808",),
    }


def _table_row(t: Table) -> dict:
    row = dict(DEFAULT_TABLE_OPTIONS)
    for k, v in t.options.items():
        if k in row:
            row[k] = _m(v) if isinstance(v, dict) else v
    row.update(keyspace_name=t.keyspace, table_name=t.name, extensions=(), flags=("compound",), id=t.id)
    return row


def _column_rows(t: Table) -> list:
    rows = []
    for c in t.columns.values():
        order = ("desc" if c.desc else "asc") if c.kind == "clustering" else "none"
        rows.append({"keyspace_name": t.keyspace, "table_name": t.name, "column_name": c.name,
                     "clustering_order": order, "column_name_bytes": c.name.encode(), "kind": c.kind,
                     "position": c.position, "type": c.type.cql()})
    return rows
