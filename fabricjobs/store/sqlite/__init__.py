"""The embedded store: one SQLite file shared by any number of node processes on one host.

* WAL journal, ``synchronous=FULL`` by default: a commit (an accepted STARTJOB) survives a power
  cut. ``[store] SQLITE_SYNCHRONOUS = NORMAL`` trades that for speed.
* Every write transaction starts with ``BEGIN IMMEDIATE`` (takes the write lock up front, so
  two writers never deadlock on a lock upgrade) and waits up to the busy timeout for it.
* A CAS is one conditional ``UPDATE`` whose rowcount says whether it applied; :meth:`cas_many`
  puts many of them in one transaction (one fsync: group commit).
* Partial indexes cover exactly the live-row queries, so archived history never enters a
  reconcile pass or a plain JOBSTATUS.
* The schema is versioned with ``PRAGMA user_version``; a newer version than this code knows
  is refused with a clear message instead of being misread.

The modules: ``connection.py`` (connections, the write lock, transactions), ``schema.py`` (the
tables and indexes, and the migrations to them), ``rows.py`` (a Job or a run as a row's values
and back), ``statements.py`` (the insert and CAS statements, one per shape), ``store.py``
(SqliteStore: what each JobStore method reads and writes).
"""

from .schema import _MIGRATIONS, SCHEMA_VERSION
from .store import SqliteStore

__all__ = ["SCHEMA_VERSION", "SqliteStore", "_MIGRATIONS"]
