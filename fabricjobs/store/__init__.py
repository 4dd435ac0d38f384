"""Stores: the interface (:mod:`.base`) and its backends, chosen by ``[store] BACKEND``."""

from __future__ import annotations

from ..config import Config
from .base import CasResult, JobStore, KillRequest, NodeRow, Version

__all__ = ["CasResult", "JobStore", "KillRequest", "NodeRow", "Version", "open_store"]


def open_store(config: Config) -> JobStore:
    """Open the configured backend. Backend modules are imported only when chosen (the
    Cassandra driver costs start-up time that SQLite users should not pay)."""
    backend = config.store_backend
    if backend == "sqlite":
        from .sqlite import SqliteStore

        return SqliteStore(
            config.get("store", "SQLITE_PATH"),
            synchronous=config.get("store", "SQLITE_SYNCHRONOUS"),
            busy_timeout_ms=config.get("store", "SQLITE_BUSY_TIMEOUT_MS"),
        )
    if backend == "cassandra":
        from .cassandra import CassandraStore

        return CassandraStore.from_config(config)
    raise ValueError(f"unknown store backend {backend!r}")
