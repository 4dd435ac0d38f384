"""What this installation is, for ``fabricjobs --version``: the release, the Python running it,
and the store the configuration names with the schema version this code writes there.

It opens no store (a version query must not create a database or connect to a cluster); for a
SQLite file that exists, it reads the file's own schema version, read-only, so that an operator
sees at once whether the file is older or newer than this code (docs/guides/operations/upgrade.md).
"""

from __future__ import annotations

import platform
import sqlite3
import sys
from pathlib import Path

from . import __version__
from .config import Config


def schema_version(backend: str) -> int:
    """The schema version this code writes on ``backend``."""
    if backend == "cassandra":
        from .store.cassandra.schema import SCHEMA_VERSION as CASSANDRA

        return CASSANDRA
    from .store.sqlite.schema import SCHEMA_VERSION as SQLITE

    return SQLITE


def sqlite_file_version(path: str) -> int | str | None:
    """The user_version of an existing SQLite file, read-only; None if there is no file, why
    not if it cannot be read (not a database, or not this user's to read)."""
    if not Path(path).is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc)


def version_text(cfg: Config) -> str:
    backend = cfg.store_backend
    source = str(cfg.source) if cfg.source else "built-in defaults"
    lines = [f"fabricjobs {__version__}",
             f"Python {platform.python_version()} ({platform.python_implementation()}, {sys.executable})"]
    store = f"store: {backend}, schema version {schema_version(backend)} (config: {source}"
    if backend == "sqlite":
        path = cfg.get("store", "SQLITE_PATH")
        found = sqlite_file_version(path)
        store += f"; {path}: " + ("not created yet" if found is None else f"exists, cannot be read: {found}"
                                  if isinstance(found, str) else f"schema version {found}")
    else:
        hosts = ", ".join(cfg.get("cassandra", "HOSTS"))
        store += f"; keyspace {cfg.get('cassandra', 'KEYSPACE')} on {hosts}"
    return "\n".join([*lines, store + ")"])
