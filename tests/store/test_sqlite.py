"""What only the SQLite backend has: explicit retention deletes, schema versioning."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.errors import SchemaVersionError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.sqlite import SCHEMA_VERSION, SqliteStore
from upgrades import assert_issue_22_columns_round_trip

T0 = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)


def job(uid, **kw):
    kw.setdefault("next_run", T0)
    return Job(JobKey("USER_JOB", "A.b", uid), Status.WAITING, T0, **kw)


def test_delete_archived_removes_only_old_archived_rows_in_bounded_batches(tmp_path):
    store = SqliteStore(tmp_path / "j.db")
    for i in range(5):
        row = store.insert(job(f"old{i}")).row
        store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 - timedelta(hours=10)))
    row = store.insert(job("recent")).row
    store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0))
    store.insert(job("live", next_run=T0 - timedelta(days=9)))
    assert store.delete_archived(T0 - timedelta(hours=1), limit=3) == 3
    assert store.delete_archived(T0 - timedelta(hours=1)) == 2
    assert store.delete_archived(T0 - timedelta(hours=1)) == 0
    left = {r.uid for r in store.archived_since(T0 - timedelta(days=30))} | {r.uid for r in store.live_jobs()}
    assert left == {"recent", "live"}


def test_a_newer_schema_is_refused_with_a_clear_message(tmp_path):
    path = tmp_path / "j.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this fabricjobs understands"):
        SqliteStore(path)


def test_a_version_1_database_is_upgraded_in_place(tmp_path):
    from fabricjobs.store.sqlite import _MIGRATIONS

    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    for stmt in _MIGRATIONS[1]:
        conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO k2_jobs (type, name, uid, status, creation_time) VALUES ('USER_JOB', 'A.b', 'old', 'WAITING', 0)")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    assert store.schema_version() == SCHEMA_VERSION == 12
    old = store.get(JobKey("USER_JOB", "A.b", "old"))
    assert old.status is Status.WAITING and old.runs == 0 and old.finishing is False
    assert store.cas(old, old.replace(finishing=True)).row.finishing is True  # version 3's column
    kept = datetime(2027, 1, 1, tzinfo=timezone.utc)
    assert store.get(old.key).resume_at is None
    assert store.cas(store.get(old.key), old.replace(finishing=True, resume_at=kept)).row.resume_at == kept  # version 4's
    assert (store.get(old.key).late_action, store.get(old.key).on_failure) == ("", "")  # versions 5 and 6's columns
    assert (store.get(old.key).owner, store.get(old.key).requestor) == ("", "")  # version 7's, empty for old rows
    owned = store.cas(store.get(old.key), store.get(old.key).replace(owner="alice", requestor="payments")).row
    assert (owned.owner, owned.requestor) == ("alice", "payments") and store.get(old.key) == owned
    assert_issue_22_columns_round_trip(store, owned)  # later versions' columns and table
    assert store.runs("USER_JOB", "A.b") == []


def test_durability_settings_are_applied(tmp_path):
    store = SqliteStore(tmp_path / "j.db")
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert SqliteStore(tmp_path / "k.db", synchronous="NORMAL")._conn().execute("PRAGMA synchronous").fetchone()[0] == 1


def test_reconcile_queries_use_the_live_indexes_never_a_scan(tmp_path):
    store = SqliteStore(tmp_path / "j.db")
    conn = store._conn()
    for sql, params in [
        ("SELECT * FROM k2_jobs INDEXED BY k2_jobs_waiting WHERE status = 'WAITING' AND blocked = 0 ORDER BY next_run LIMIT 5", ()),
        ("SELECT * FROM k2_jobs INDEXED BY k2_jobs_waiting_priority WHERE status = 'WAITING' AND blocked = 0 "
         "ORDER BY priority DESC, next_run LIMIT 5", ()),
        ("SELECT * FROM k2_jobs INDEXED BY k2_jobs_live_status WHERE archived = 0 AND status = 'SCHEDULED' "
         "AND worker_id = ? AND next_run < ? ORDER BY next_run LIMIT 5", ("n", 0.0)),
        ("SELECT * FROM k2_jobs INDEXED BY k2_jobs_live_key WHERE archived = 0 ORDER BY type, name, uid", ()),
    ]:
        plan = " ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan


@pytest.mark.parametrize("filters", [{}, {"type": "USER_JOB"}, {"type": "USER_JOB", "name": "A.b"}, {"name": "A.b"}, {"uid": "u1"}])
def test_a_page_of_live_jobs_is_a_range_of_the_live_key_index_in_key_order(tmp_path, monkeypatch, filters):
    """SQLite ranges over the index from the cursor on, in key order, and stops at the limit:
    no sort, which would read every live row of the filters before the first of the page."""
    store = SqliteStore(tmp_path / "j.db")
    for i in range(3):
        store.insert(job(f"u{i}"))
    asked: list[tuple[str, tuple]] = []
    read = store._read
    monkeypatch.setattr(store, "_read", lambda sql, params=(): asked.append((sql, tuple(params))) or read(sql, params))
    assert [j.uid for j in store.live_jobs(**filters, after=JobKey("USER_JOB", "A.b", "u0"), limit=1)] == ["u1"]
    sql, params = asked[-1]
    plan = " ".join(r[-1] for r in store._conn().execute("EXPLAIN QUERY PLAN " + sql, params))
    assert "k2_jobs_live_key" in plan and ">" in plan and "TEMP B-TREE" not in plan, plan  # ">": ranges from the cursor


def test_a_write_lock_held_past_the_busy_timeout_is_a_clear_error_that_changes_nothing(tmp_path):
    """Another process holding the file's write lock (a node paused mid-transaction, a sqlite3
    shell left in BEGIN): a write waits SQLITE_BUSY_TIMEOUT_MS, then fails with a message
    naming the file, not a raw 'database is locked' traceback; once the lock goes, writes work."""
    import time

    from fabricjobs.errors import StoreError

    path = tmp_path / "jobs.db"
    store = SqliteStore(path, busy_timeout_ms=300)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    began = time.monotonic()
    with pytest.raises(StoreError, match=r"SQLite store '.*jobs\.db' stayed locked"):
        store.insert(job("blocked"))
    assert 0.25 < time.monotonic() - began < 5
    holder.execute("ROLLBACK")
    holder.close()
    assert store.get(JobKey("USER_JOB", "A.b", "blocked")) is None  # nothing half-written
    assert store.insert(job("blocked")).applied
    store.close()


def test_a_store_this_process_may_not_write_is_a_store_error_that_says_so(tmp_path):
    """A database file (or directory) the process may not write (a web process under a
    read-only /etc, another user's file): a StoreError naming the file and what to do, which the
    shell shows as one line and the API as 503, not an internal error. SQLite's read-only
    answer is the same for PRAGMA query_only, which the test uses (root may write any file)."""
    from fabricjobs.errors import StoreError

    store = SqliteStore(tmp_path / "jobs.db")
    assert store.insert(job("before")).applied
    store._conn().execute("PRAGMA query_only = ON")  # (this thread's connection)
    with pytest.raises(StoreError, match=r"SQLite store '.*jobs\.db' cannot be written by this process .*"
                                         r"must be writable by every process that uses the store"):
        store.insert(job("refused"))
    with pytest.raises(StoreError, match="cannot be written"):
        with store.transaction():
            store.insert(job("refused"))
    assert store.get(JobKey("USER_JOB", "A.b", "before")) is not None  # reads still work
    store._conn().execute("PRAGMA query_only = OFF")
    assert store.insert(job("after")).applied
    store.close()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the kernel's lock table (Linux)")
def test_a_second_store_opened_in_the_process_keeps_the_first_ones_locks(tmp_path):
    """Opening a store once tightened the file's mode through a descriptor it then closed, and
    closing any descriptor of a file drops every POSIX lock the process holds on it: SQLite's
    locks of the first store went, and another process closing what it took for the last
    connection could reset the write-ahead log under it (a test's client read a stale row)."""
    import os

    def locks():
        """This process's locks on this store's files (the database, its WAL and shared
        memory), not on other stores a test before left open in the same process."""
        inodes = {str(p.stat().st_ino) for p in tmp_path.glob("j.db*")}
        return sorted(f[5:] for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
                      if f[4] == str(os.getpid()) and f[5].rsplit(":", 1)[1] in inodes)

    first = SqliteStore(tmp_path / "j.db")
    first.get(JobKey("USER_JOB", "A.b", "u"))
    held = locks()
    assert held, "SQLite holds no lock in WAL mode? (the test would prove nothing)"
    second = SqliteStore(tmp_path / "j.db")
    assert locks() == held
    second.get(JobKey("USER_JOB", "A.b", "u"))
    assert locks() == held
    first.close()
    second.close()


def test_a_cas_converts_each_changed_column_as_a_whole_row_is_converted():
    """A CAS converts only the columns it writes (rows.column_value, one at a time); an insert
    converts the whole row (rows._job_params, one expression). Both must give every column the
    same value, or a CAS would write a time, a flag or a status in another form than an insert."""
    from fabricjobs.store.sqlite.rows import _JOB_COLUMNS, _job_params
    from fabricjobs.store.sqlite.statements import _CAS_COLUMNS, _changes

    t = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    blank = job("u1")
    full = blank.replace(
        status=Status.IN_PROCESS, archived=True, affinity="DC1", arguments='{"a": 1}', execution_interval="* * * * *",
        start_time=t, end_time=t, next_run=t, hold_until=t, error_msg="e", output="1", tries=2, worker_id="n1",
        epoch=3, priority=9, runs=4, successes=1, failures=2, retries_error=1, retries_lost=1, kills=1,
        depends_on="USER_JOB.A.b.p", blocked=True, time_zone="Europe/Paris", late_threshold="00:01:00",
        overlap="QUEUE", finishing=True, resume_at=t, late_action="RUN", on_failure="USER_JOB.A.f", owner="o",
        requestor="r", calendar="c", delete_on_success="x.tmp", parallelism=2, task_of="USER_JOB.A.b.p",
        failed_after_retry=1, failed_without_retry=1, canceled=1, creation_time=t + timedelta(days=1))
    values, changed = _changes(blank, full)
    assert set(changed) == set(_CAS_COLUMNS)  # every column a CAS may write differs here
    whole = _job_params(full)
    assert {_JOB_COLUMNS[i]: v for i, v in zip(changed, values)} == {_JOB_COLUMNS[i]: whole[i] for i in changed}
