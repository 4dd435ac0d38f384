"""The Cassandra store, for a cluster of nodes that spans hosts (see :mod:`.store`)."""

from .schema import SCHEMA, SCHEMA_VERSION, parse_replication, schema_cql
from .store import CassandraStore, _CountingSession

__all__ = ["SCHEMA", "SCHEMA_VERSION", "CassandraStore", "_CountingSession", "parse_replication", "schema_cql"]
