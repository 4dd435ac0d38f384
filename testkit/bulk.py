"""Archived jobs written the fastest way each store allows, for the tests and benchmarks that need
a big history (tests/test_history_search.py, ``scripts/bench.py console``): SQLite rows in one
transaction of ``executemany`` with the file's safety off for the load; on Cassandra, each job's
row (with the retention's TTL, as the store archives one) and its archive entry by day, sent
concurrently as plain writes. What they write is what the store's own archiving would leave:
the store's own reads find them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable, Sequence

from fabricjobs.model import Job


def archived_sqlite(path: str | Path, jobs: Iterable[Job], batch: int = 50_000) -> int:
    """``jobs`` (archived rows) into the SQLite store at ``path`` (made first if new)."""
    from fabricjobs.store.sqlite import SqliteStore
    from fabricjobs.store.sqlite.rows import _COLS, _JOB_COLUMNS, _job_params

    SqliteStore(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    sql = f"INSERT INTO k2_jobs ({_COLS}) VALUES ({', '.join('?' for _ in _JOB_COLUMNS)})"
    count, rows = 0, []
    conn.execute("BEGIN")
    for job in jobs:
        assert job.archived and job.end_time is not None, job.key
        rows.append(_job_params(job.replace(revision=max(job.revision, 1))))
        if len(rows) >= batch:
            conn.executemany(sql, rows)
            count, rows = count + len(rows), []
    conn.executemany(sql, rows)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # a store grown over months is checkpointed all along
    conn.close()
    return count + len(rows)


def archived_cassandra(store, jobs: Sequence[Job], concurrency: int = 128) -> int:
    """``jobs`` (archived rows) into a CassandraStore: the row with its cells under the TTL and the
    archive entry (store/cassandra/history.py), ``concurrency`` writes in flight."""
    from cassandra.concurrent import execute_concurrent_with_args

    from fabricjobs.store.cassandra.rows import _JOB_COLUMNS
    from fabricjobs.store.cassandra.session import _bound

    cols = ", ".join(("type", "name", "uid") + _JOB_COLUMNS)
    put = store._stmt(("bulkarchived",), f"INSERT INTO k2_jobs ({cols}) VALUES "
                                        f"({', '.join('?' for _ in range(len(_JOB_COLUMNS) + 3))}) USING TTL ?")
    rows, entries = [], []
    for job in jobs:
        assert job.archived and job.end_time is not None, job.key
        job = job.replace(revision=max(job.revision, 1))
        rows.append((job.type, job.name, job.uid, *(_bound(getattr(job, c)) for c in _JOB_COLUMNS), store.archive_ttl))
        write = store._archive_write(job)
        entries.append(write.params)
    entry = store._archive_write(jobs[0]).stmt if jobs else None
    for stmt, params in ((put, rows), (entry, entries)):
        if stmt is None:
            continue
        for ok, result in execute_concurrent_with_args(store._session, stmt, params, concurrency=concurrency,
                                                       raise_on_first_error=True):
            assert ok, result
    return len(rows)
