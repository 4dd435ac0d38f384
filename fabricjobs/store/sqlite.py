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
"""

from __future__ import annotations

import os
import sqlite3
import threading
import dataclasses
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Collection, Iterator, Sequence, TypeVar

from contextlib import contextmanager

from ..private import private_file
from ..errors import SchemaVersionError, StoreError
from ..model import Job, JobKey, JobType, Status, job_from_values
from .base import CasResult, JobStore, KillRequest, NodeRow, RunRecord, Version, chunked

T = TypeVar("T")

UTC = timezone.utc
SCHEMA_VERSION = 2

_JOB_COLUMNS = (
    "type", "name", "uid", "status", "archived", "affinity", "arguments", "execution_interval",
    "creation_time", "start_time", "end_time", "next_run", "hold_until", "error_msg", "output",
    "tries", "worker_id", "epoch", "revision", "priority",
    "runs", "successes", "failures", "retries_error", "retries_lost", "kills",
    "depends_on", "blocked", "time_zone", "late_threshold", "overlap",
)
_RUN_COLUMNS = (
    "type", "name", "uid", "epoch", "node", "due", "start", "end", "result", "status", "tries",
    "error", "output", "exit_code", "log", "note",
)
_COLS = ", ".join(_JOB_COLUMNS)
_RETURNING = f" RETURNING {_COLS}" if sqlite3.sqlite_version_info >= (3, 35, 4) else ""  # RETURNING fixes in 3.35.4
_PLACEHOLDERS = ", ".join("?" for _ in _JOB_COLUMNS)
# STARTJOB: a new key, or a key whose row is archived (the job is started again).
_UPSERT = (
    " ON CONFLICT (type, name, uid) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _JOB_COLUMNS[3:] if c not in ("epoch", "revision"))
    + ", epoch = k2_jobs.epoch + 1, revision = k2_jobs.revision + 1 WHERE k2_jobs.archived = 1"
    + _RETURNING
)
_INSERT_SQL: dict[int, str] = {}


def _insert_sql(rows: int) -> str:
    """The upsert of ``rows`` rows in one statement (applied in order)."""
    sql = _INSERT_SQL.get(rows)
    if sql is None:
        sql = _INSERT_SQL[rows] = f"INSERT INTO k2_jobs ({_COLS}) VALUES {', '.join([f'({_PLACEHOLDERS})'] * rows)}{_UPSERT}"
    return sql


def _insert_params(job: Job) -> tuple:
    """A STARTJOB's row as inserted: a new row starts at revision 1."""
    return _job_params(job.replace(revision=1))


# What a CAS may write (not the key, and revision is written by the CAS itself), and its
# UPDATE statement per set of changed columns (a handful of shapes: claim, outcome, ...).
_CAS_COLUMNS = tuple(i for i, c in enumerate(_JOB_COLUMNS) if i >= 3 and c != "revision")
_CAS_SQL: dict[tuple[tuple[int, ...], int], str] = {}
# UPDATE ... FROM (VALUES ...) RETURNING: SQLite 3.35.4 (before it, one row per statement).
_BATCHED = bool(_RETURNING)
_BATCH_SIZES = (64, 16, 4, 1) if _BATCHED else (1,)


def _changes(expected: Job, new: Job) -> tuple[tuple, tuple[int, ...]]:
    """``new``'s params and the CAS columns in which it differs from ``expected``: only those
    are written, since a row read from an index may be a candidate without arguments or
    output, and must not blank them."""
    old_p, new_p = _job_params(expected), _job_params(new)
    return new_p, tuple(i for i in _CAS_COLUMNS if old_p[i] != new_p[i])


def _cas_sql(changed: tuple[int, ...], rows: int) -> str:
    """The CAS UPDATE of ``rows`` rows that write the columns ``changed`` (and revision): the
    values and the conditions of each row come from one row of a VALUES list."""
    sql = _CAS_SQL.get((changed, rows))
    if sql is not None:
        return sql
    if not _BATCHED:
        sql = ("UPDATE k2_jobs SET " + "".join(f"{_JOB_COLUMNS[i]} = ?, " for i in changed) + "revision = ? "
               "WHERE type = ? AND name = ? AND uid = ? AND status = ? AND epoch = ? AND worker_id IS ? AND revision = ?")
    else:
        n = len(changed)
        sets = "".join(f"{_JOB_COLUMNS[i]} = v.column{k + 1}, " for k, i in enumerate(changed))
        row = "(" + ", ".join("?" for _ in range(n + 8)) + ")"
        sql = (f"UPDATE k2_jobs SET {sets}revision = v.column{n + 1} FROM (VALUES {', '.join([row] * rows)}) AS v "
               f"WHERE k2_jobs.type = v.column{n + 2} AND k2_jobs.name = v.column{n + 3} AND k2_jobs.uid = v.column{n + 4} "
               f"AND k2_jobs.status = v.column{n + 5} AND k2_jobs.epoch = v.column{n + 6} "
               f"AND k2_jobs.worker_id IS v.column{n + 7} AND k2_jobs.revision = v.column{n + 8}{_RETURNING}")
    if len(_CAS_SQL) < 512:
        _CAS_SQL[(changed, rows)] = sql
    return sql


_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """
        CREATE TABLE k2_jobs (
            type TEXT NOT NULL,
            name TEXT NOT NULL,
            uid TEXT NOT NULL,
            status TEXT NOT NULL,
            archived INTEGER NOT NULL DEFAULT 0,
            affinity TEXT NOT NULL DEFAULT '',
            arguments TEXT NOT NULL DEFAULT '{}',
            execution_interval TEXT NOT NULL DEFAULT '',
            creation_time REAL NOT NULL,
            start_time REAL,
            end_time REAL,
            next_run REAL,
            hold_until REAL,
            error_msg TEXT NOT NULL DEFAULT '',
            output TEXT,
            tries INTEGER NOT NULL DEFAULT 0,
            worker_id TEXT,
            epoch INTEGER NOT NULL DEFAULT 0,
            revision INTEGER NOT NULL DEFAULT 1,
            priority INTEGER NOT NULL DEFAULT 4,
            PRIMARY KEY (type, name, uid)
        ) WITHOUT ROWID
        """,
        # Claim candidates: WAITING rows by due time.
        "CREATE INDEX k2_jobs_waiting ON k2_jobs (next_run) WHERE status = 'WAITING'",
        # Live rows by status and owner (and due time): control requests, unowned / orphaned
        # work, an owner's scheduled jobs that come due.
        "CREATE INDEX k2_jobs_live_status ON k2_jobs (status, worker_id, next_run) WHERE archived = 0",
        # Live rows by key: JOBSTATUS without touching history.
        "CREATE INDEX k2_jobs_live_key ON k2_jobs (type, name, uid) WHERE archived = 0",
        # History by end time: JOBSTATUS n DAYS AGO and retention.
        "CREATE INDEX k2_jobs_archive ON k2_jobs (end_time) WHERE archived = 1",
        """
        CREATE TABLE nodes (
            name TEXT PRIMARY KEY,
            incarnation TEXT NOT NULL,
            dc TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started REAL NOT NULL,
            version TEXT NOT NULL,
            beat INTEGER NOT NULL,
            beat_time REAL NOT NULL,
            state TEXT NOT NULL,
            running INTEGER NOT NULL,
            info TEXT NOT NULL,
            tasks TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE kill_requests (
            node TEXT NOT NULL,
            task INTEGER NOT NULL,
            requested_at REAL NOT NULL,
            requested_by TEXT NOT NULL,
            PRIMARY KEY (node, task)
        )
        """,
    ),
    # 2: run history, per-job counters (observability); dependencies, zones, misfire policy,
    # directory listeners (scheduling).
    2: (
        *(f"ALTER TABLE k2_jobs ADD COLUMN {c} INTEGER NOT NULL DEFAULT 0"
          for c in ("runs", "successes", "failures", "retries_error", "retries_lost", "kills", "blocked")),
        *(f"ALTER TABLE k2_jobs ADD COLUMN {c} TEXT NOT NULL DEFAULT ''"
          for c in ("depends_on", "time_zone", "late_threshold", "overlap")),
        # Claim candidates, again: never blocked rows; by priority as well as by due time.
        "DROP INDEX k2_jobs_waiting",
        "CREATE INDEX k2_jobs_waiting ON k2_jobs (next_run) WHERE status = 'WAITING' AND blocked = 0",
        "CREATE INDEX k2_jobs_waiting_priority ON k2_jobs (priority DESC, next_run) WHERE status = 'WAITING' AND blocked = 0",
        "CREATE INDEX k2_jobs_blocked ON k2_jobs (next_run) WHERE blocked = 1 AND archived = 0",
        """
        CREATE TABLE k2_listener_files (
            type TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, file TEXT NOT NULL,
            note TEXT NOT NULL, marked_at REAL NOT NULL,
            PRIMARY KEY (type, name, uid, file)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE k2_job_runs (
            type TEXT NOT NULL,
            name TEXT NOT NULL,
            uid TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            node TEXT NOT NULL,
            due REAL,
            start REAL,
            "end" REAL NOT NULL,
            result TEXT NOT NULL,
            status TEXT NOT NULL,
            tries INTEGER NOT NULL,
            error TEXT NOT NULL DEFAULT '',
            output TEXT,
            exit_code INTEGER,
            log TEXT NOT NULL DEFAULT '',
            note TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (type, name, uid, epoch, "end")
        ) WITHOUT ROWID
        """,
        'CREATE INDEX k2_job_runs_end ON k2_job_runs ("end")',
    ),
}

# The store's clock, evaluated by SQLite itself (this host's real clock, whatever a node's
# time source says).
_STORE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


_fromts = datetime.fromtimestamp


def _when(value: float) -> datetime:
    """A NOT NULL time column."""
    return datetime.fromtimestamp(value, UTC)


def _dt(value: float | None) -> datetime | None:
    return None if value is None else _when(value)


def _job_params(job: Job) -> tuple:
    return (
        job.key.type, job.key.name, job.key.uid, job.status.value, int(job.archived), job.affinity,
        job.arguments, job.execution_interval, _ts(job.creation_time), _ts(job.start_time),
        _ts(job.end_time), _ts(job.next_run), _ts(job.hold_until), job.error_msg, job.output,
        job.tries, job.worker_id, job.epoch, job.revision, job.priority,
        job.runs, job.successes, job.failures, job.retries_error, job.retries_lost, job.kills,
        job.depends_on, int(job.blocked), job.time_zone, job.late_threshold, job.overlap,
    )


_STATUS = {s.value: s for s in Status}


# _row_to_job builds a Job from positions (a third cheaper than by keyword; it runs a few times
# per run on the node's loop): the Job fields must stay in the order of the columns.
assert [f.name for f in dataclasses.fields(Job)] == [
    "key", "status", "creation_time", "archived", "affinity", "arguments", "execution_interval",
    *_JOB_COLUMNS[9:13], *_JOB_COLUMNS[13:27], "blocked", *_JOB_COLUMNS[28:],
], "Job fields and k2_jobs columns are out of step"


def _row_to_job(r: Sequence) -> Job:
    return job_from_values((
        JobKey(r[0], r[1], r[2]), _STATUS[r[3]], _fromts(r[8], UTC), bool(r[4]), r[5], r[6], r[7],
        None if r[9] is None else _fromts(r[9], UTC), None if r[10] is None else _fromts(r[10], UTC),
        None if r[11] is None else _fromts(r[11], UTC), None if r[12] is None else _fromts(r[12], UTC),
        *r[13:27], bool(r[27]), *r[28:31],
    ))


def _run_params(r: RunRecord) -> tuple:
    return (r.key.type, r.key.name, r.key.uid, r.epoch, r.node, _ts(r.due), _ts(r.start), _ts(r.end), r.result,
            r.status, r.tries, r.error, r.output, r.exit_code, r.log, r.note)


def _row_to_run(r: Sequence) -> RunRecord:
    return RunRecord(JobKey(r[0], r[1], r[2]), r[3], r[4], _dt(r[5]), _dt(r[6]), _when(r[7]), r[8], r[9], r[10],
                     r[11], r[12], r[13], r[14], r[15])


_RUN_COLS = ", ".join(f'"{c}"' for c in _RUN_COLUMNS)
_INSERT_RUN_SQL = f"INSERT OR IGNORE INTO k2_job_runs ({_RUN_COLS}) VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})"


class SqliteStore(JobStore):
    backend = "sqlite"
    groups_writes = True

    def __init__(self, path: str | os.PathLike, *, synchronous: str = "FULL", busy_timeout_ms: int = 10_000) -> None:
        self.path = str(path)
        self.identity = os.path.realpath(self.path)
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"bad synchronous mode {synchronous!r}")
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # Threads of one process queue here for the write lock instead of in SQLite's busy
        # handler, which sleeps 1, 2, 5, 10 ... ms between tries: a claim must not wait 10 ms
        # for a completion write of the same node that took 50 us.
        self._writer = threading.Lock()
        self._closed = False
        parent = Path(self.path).parent
        if not parent.exists():
            raise StoreError(f"cannot open SQLite store {self.path!r}: directory {str(parent)!r} does not exist")
        try:  # its WAL and shared-memory files take the database file's mode
            private_file(self.path, make_parent=False)
        except OSError as exc:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc.strerror or exc}") from None
        self._migrate()

    # -- connections -------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError("store is closed")
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=0,  # busy waits are ours: see _busy_retry
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA busy_timeout = 0")
                self._ensure_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from None
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _ensure_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new database to WAL. The switch needs the file to itself, which several
        node processes starting together on a fresh file do not give it at once: retry."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000.0
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
                continue
            if mode.lower() != "wal":
                raise StoreError(f"cannot put {self.path!r} in WAL mode (got {mode})")
            return

    def _busy_retry(self, attempt: Callable[[], T], what: str) -> T:
        """Run ``attempt`` until SQLite stops answering "busy"/"locked", up to the busy timeout.
        Tries again after 0.1 ms, doubling to 2 ms: another process's write transaction lasts
        well under a millisecond, and SQLite's own handler would sleep up to 100 ms at a time."""
        deadline = None
        pause = 0.0001
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" not in text and "busy" not in text:
                    raise StoreError(f"SQLite error: {exc}") from None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.busy_timeout_ms / 1000.0
                elif now > deadline:
                    raise StoreError(f"SQLite store {self.path!r} stayed locked ({what}): {exc}") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.002)

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Take the write lock: this process's writer mutex, then BEGIN IMMEDIATE."""
        if not self._writer.acquire(timeout=self.busy_timeout_ms / 1000.0):
            raise StoreError(f"SQLite store {self.path!r}: timed out waiting for this process's other writer")
        try:
            self._busy_retry(lambda: conn.execute("BEGIN IMMEDIATE"), "BEGIN IMMEDIATE")
        except BaseException:
            self._writer.release()
            raise

    def _end(self, conn: sqlite3.Connection, commit: bool) -> None:
        try:
            if commit:
                self._busy_retry(lambda: conn.execute("COMMIT"), "COMMIT")
            else:
                conn.execute("ROLLBACK")
        finally:
            if conn.in_transaction:  # a COMMIT that failed for good: do not leave it open
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            self._writer.release()

    @contextmanager
    def _write(self, atomic: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error). Inside
        :meth:`transaction` it is a savepoint of that transaction instead, or nothing for an
        ``atomic`` write (one statement: SQLite undoes a failed statement by itself)."""
        conn = self._conn()
        if getattr(self._local, "in_transaction", False):
            if atomic:
                yield conn
                return
            conn.execute("SAVEPOINT w")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                raise
            conn.execute("RELEASE w")
            return
        self._begin(conn)
        try:
            yield conn
        except BaseException:
            self._end(conn, commit=False)
            raise
        self._end(conn, commit=True)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "in_transaction", False):
            yield
            return
        conn = self._conn()
        self._begin(conn)
        self._local.in_transaction = True
        try:
            yield
        except BaseException:
            self._local.in_transaction = False
            self._end(conn, commit=False)
            raise
        self._local.in_transaction = False
        self._end(conn, commit=True)

    def _read(self, sql: str, params: Sequence = ()) -> list:
        conn = self._conn()
        return self._busy_retry(lambda: conn.execute(sql, params).fetchall(), "read")

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            conns, self._all = self._all, []
        for c in conns:
            try:
                c.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()

    def _migrate(self) -> None:
        with self._write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"SQLite store {self.path!r} has schema version {version}, newer than this "
                    f"fabricjobs understands ({SCHEMA_VERSION}); upgrade fabricjobs"
                )
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in _MIGRATIONS[v]:
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {v}")

    def schema_version(self) -> int:
        return self._read("PRAGMA user_version")[0][0]

    def store_time(self) -> datetime:
        return _when(self._read(f"SELECT {_STORE_NOW}")[0][0])

    # -- jobs: writes --------------------------------------------------------------------------

    def insert(self, job: Job) -> CasResult:
        # One statement, atomic by itself (no savepoint even inside a transaction).
        with self._write(atomic=True) as conn:
            return self._insert(conn, job)

    def _insert(self, conn: sqlite3.Connection, job: Job) -> CasResult:
        """RETURNING hands back the row as written, so only a refused insert reads the row in
        its way."""
        cur = conn.execute(_insert_sql(1), _insert_params(job))
        if _RETURNING:
            returned = cur.fetchall()
            if returned:
                return CasResult(applied=True, row=_row_to_job(returned[0]))
            return CasResult(applied=False, row=self._get(conn, job.key))
        return CasResult(applied=cur.rowcount == 1, row=self._get(conn, job.key))

    def insert_many(self, jobs: Sequence[Job]) -> list[CasResult]:
        """Up to 64 rows per INSERT statement (its rows are applied in order, so a key given
        twice is refused the second time). A refusal is rare: the statement that met one is
        undone and its rows before the refused one are inserted again, without the rest."""
        if not _BATCHED:
            return super().insert_many(jobs)
        results: list[CasResult] = []
        with self._write() as conn:
            for batch in chunked(jobs, 64):
                conn.execute("SAVEPOINT insert_many")
                returned = conn.execute(_insert_sql(len(batch)),
                                        [p for job in batch for p in _insert_params(job)]).fetchall()
                if len(returned) == len(batch):
                    conn.execute("RELEASE insert_many")
                    rows = {(r[0], r[1], r[2]): r for r in returned}
                    results.extend(CasResult(True, row=_row_to_job(rows[(j.key.type, j.key.name, j.key.uid)]))
                                   for j in batch)
                    continue
                conn.execute("ROLLBACK TO insert_many")
                conn.execute("RELEASE insert_many")
                for job in batch:  # one at a time up to the refused one
                    results.append(self._insert(conn, job))
                    if not results[-1].applied:
                        return results
        return results

    def cas(self, expected: Job, new: Job) -> CasResult:
        return self.cas_many([(expected, new)])[0]

    def cas_many(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None) -> list[CasResult]:
        """Pairs that write the same columns go together in one UPDATE ... FROM (VALUES ...)
        statement of up to 64 rows, each row still conditioned on its own expected (status,
        epoch, worker_id, revision): a third of the cost of one statement per row, most of
        which is the statement's round trip, not the B-tree work. The rows RETURNING gives
        back are the applied ones; for the others, the current version is read. A key given
        twice is written in order (its second pair after the first, on its own)."""
        if not pairs:
            return []
        for expected, new in pairs:
            if new.key != expected.key:
                raise ValueError(f"CAS cannot change a key: {expected.key} -> {new.key}")
        results: list[CasResult | None] = [None] * len(pairs)
        records = list(runs) if runs is not None else [None] * len(pairs)
        with self._write() as conn:
            shapes: dict[tuple[int, ...], list[tuple[int, tuple, Job]]] = {}
            later: list[int] = []  # a key already in this round: written after it, alone
            keys: set[JobKey] = set()
            for i, (expected, new) in enumerate(pairs):
                if expected.key in keys:
                    later.append(i)
                    continue
                keys.add(expected.key)
                new_p, changed = _changes(expected, new)
                shapes.setdefault(changed, []).append((i, new_p, expected))
            for changed, items in shapes.items():
                at = 0
                for size in _BATCH_SIZES:
                    while len(items) - at >= size:
                        self._cas_batch(conn, changed, items[at:at + size], results)
                        at += size
            for i in later:
                expected, new = pairs[i]
                new_p, changed = _changes(expected, new)
                self._cas_batch(conn, changed, [(i, new_p, expected)], results)
            applied = [_run_params(record) for record, res in zip(records, results)
                       if record is not None and res is not None and res.applied]
            if applied:  # in the same transaction: recorded iff the CAS applied
                conn.executemany(_INSERT_RUN_SQL, applied)
        return results  # type: ignore[return-value]

    def _cas_batch(self, conn: sqlite3.Connection, changed: tuple[int, ...], items: list[tuple[int, tuple, Job]],
                   results: list[CasResult | None]) -> None:
        """One UPDATE for ``items`` (index, new row's params, expected row), all writing
        ``changed``; fills their places in ``results``."""
        params: list = []
        for _, new_p, expected in items:
            params.extend([new_p[j] for j in changed])
            params.extend((expected.revision + 1, expected.key.type, expected.key.name, expected.key.uid,
                           expected.status.value, expected.epoch, expected.worker_id, expected.revision))
        written = conn.execute(_cas_sql(changed, len(items)), params)
        if _BATCHED:
            by_key = {(r[0], r[1], r[2]): r for r in written.fetchall()}  # all: the statement ends here
            for i, _, expected in items:
                r = by_key.get((expected.key.type, expected.key.name, expected.key.uid))
                results[i] = CasResult(True, row=_row_to_job(r)) if r is not None else self._refused(conn, expected.key)
        else:  # SQLite before 3.35.4: one row per statement, read back
            i, _, expected = items[0]
            results[i] = CasResult(True, row=self._get(conn, expected.key)) if written.rowcount == 1 \
                else self._refused(conn, expected.key)

    @staticmethod
    def _refused(conn: sqlite3.Connection, key: JobKey) -> CasResult:
        r = conn.execute(
            "SELECT status, epoch, worker_id, revision FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?",
            (key.type, key.name, key.uid),
        ).fetchone()
        return CasResult(False, current=None if r is None else Version(_STATUS[r[0]], r[1], r[2], r[3]))

    def runs(self, type: str, name: str, uid: str | None = None, limit: int | None = None) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLS} FROM k2_job_runs WHERE type = ? AND name = ?"
        params: list = [type, name]
        if uid is not None:
            sql += " AND uid = ?"
            params.append(uid)
        sql += ' ORDER BY "end" DESC, epoch DESC'
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_row_to_run(r) for r in self._read(sql, params)]

    def run(self, key: JobKey, epoch: int) -> RunRecord | None:
        rows = self._read(f"SELECT {_RUN_COLS} FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ? AND epoch = ? "
                          "AND result != 'SKIPPED' ORDER BY \"end\" DESC LIMIT 1", (key.type, key.name, key.uid, epoch))
        return _row_to_run(rows[0]) if rows else None

    def add_runs(self, records: Sequence[RunRecord]) -> None:
        """Record runs that change no job row (skipped fires)."""
        with self._write() as conn:
            conn.executemany(
                _INSERT_RUN_SQL,
                [_run_params(r) for r in records],
            )

    def mark_file(self, listener: JobKey, file: str, note: str) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO k2_listener_files (type, name, uid, file, note, marked_at) "
                f"VALUES (?, ?, ?, ?, ?, {_STORE_NOW})",
                (listener.type, listener.name, listener.uid, file, note),
            )
            return cur.rowcount == 1

    def marked_files(self, listener: JobKey) -> set[str]:
        rows = self._read("SELECT file FROM k2_listener_files WHERE type = ? AND name = ? AND uid = ?",
                          (listener.type, listener.name, listener.uid))
        return {r[0] for r in rows}

    def delete_runs(self, before: datetime, limit: int = 10_000) -> int:
        with self._write() as conn:
            cur = conn.execute(
                'DELETE FROM k2_job_runs WHERE (type, name, uid, epoch, "end") IN ('
                ' SELECT type, name, uid, epoch, "end" FROM k2_job_runs WHERE "end" < ? LIMIT ?)',
                (_ts(before), limit),
            )
            return cur.rowcount

    def delete_archived(self, before: datetime, limit: int = 10_000, keep: frozenset = frozenset()) -> int:
        with self._write() as conn:
            rows = conn.execute(
                "SELECT type, name, uid FROM k2_jobs WHERE archived = 1 AND end_time < ? LIMIT ?",
                (_ts(before), limit + len(keep)),
            ).fetchall()
            doomed = [r for r in rows if JobKey(*r) not in keep][:limit]
            conn.executemany("DELETE FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?", doomed)
            # A listener's file marks go with it (a restarted listener under the same key keeps
            # them only while its row is kept).
            conn.executemany("DELETE FROM k2_listener_files WHERE type = ? AND name = ? AND uid = ?",
                             [r for r in doomed if r[0] == JobType.INTERFACE_LISTENER.value])
            return len(doomed)

    # -- jobs: reads ---------------------------------------------------------------------------

    @staticmethod
    def _get(conn: sqlite3.Connection, key: JobKey) -> Job | None:
        r = conn.execute(
            f"SELECT {_COLS} FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?",
            (key.type, key.name, key.uid),
        ).fetchone()
        return None if r is None else _row_to_job(r)

    def get(self, key: JobKey) -> Job | None:
        rows = self._read(
            f"SELECT {_COLS} FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?",
            (key.type, key.name, key.uid),
        )
        return _row_to_job(rows[0]) if rows else None

    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None) -> list[Job]:
        where, params = ["archived = 0"], []
        for col, value in (("type", type), ("name", name), ("uid", uid)):
            if value is not None:
                where.append(f"{col} = ?")
                params.append(value)
        rows = self._read(
            f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_live_key WHERE {' AND '.join(where)} "
            "ORDER BY type, name, uid",
            params,
        )
        return [_row_to_job(r) for r in rows]

    def archived_since(self, since: datetime, type: str | None = None) -> list[Job]:
        sql = f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_archive WHERE archived = 1 AND end_time >= ?"
        params: list = [_ts(since)]
        if type is not None:
            sql += " AND type = ?"
            params.append(type)
        rows = self._read(sql + " ORDER BY type, name, uid", params)
        return [_row_to_job(r) for r in rows]

    def waiting(self, limit: int, after: tuple[datetime, JobKey] | None = None) -> list[Job]:
        # Candidates: the columns needed to choose, not arguments or output (they can be big).
        cols = _COLS.replace("arguments", "'{}'").replace(", output,", ", NULL,")
        where, params = "status = 'WAITING'", []
        if after is not None:
            ts, key = after
            where += " AND (next_run, type, name, uid) > (?, ?, ?, ?)"
            params = [_ts(ts), key.type, key.name, key.uid]
        rows = self._read(
            f"SELECT {cols} FROM k2_jobs INDEXED BY k2_jobs_waiting WHERE {where} AND blocked = 0 "
            "ORDER BY next_run, type, name, uid LIMIT ?",
            params + [limit],
        )
        return [_row_to_job(r) for r in rows]

    def waiting_by_priority(self, limit: int) -> list[Job]:
        cols = _COLS.replace("arguments", "'{}'").replace(", output,", ", NULL,")
        rows = self._read(
            f"SELECT {cols} FROM k2_jobs INDEXED BY k2_jobs_waiting_priority WHERE status = 'WAITING' AND blocked = 0 "
            "ORDER BY priority DESC, next_run LIMIT ?", (limit,))
        return [_row_to_job(r) for r in rows]

    def blocked_jobs(self, limit: int, since: datetime | None = None) -> list[Job]:
        page = "AND next_run >= ? " if since is not None else ""
        params = (_ts(since), limit) if since is not None else (limit,)
        rows = self._read(f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_blocked WHERE blocked = 1 AND archived = 0 "
                          f"{page}ORDER BY next_run LIMIT ?", params)
        return [_row_to_job(r) for r in rows]

    def due_scheduled(self, worker_id: str, before: datetime, limit: int) -> list[Job]:
        rows = self._read(
            f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_live_status WHERE archived = 0 "
            "AND status = 'SCHEDULED' AND worker_id = ? AND next_run < ? ORDER BY next_run LIMIT ?",
            (worker_id, _ts(before), limit),
        )
        return [_row_to_job(r) for r in rows]

    def by_status(self, statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        statuses = list(statuses)
        if not statuses:
            return []
        marks = ", ".join("?" for _ in statuses)
        sql = (
            f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_live_status "
            f"WHERE archived = 0 AND status IN ({marks})"
        )
        params: list = [s.value for s in statuses]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_row_to_job(r) for r in self._read(sql, params)]

    def by_owner(
        self, worker_ids: Collection[str | None], statuses: Collection[Status], limit: int | None = None
    ) -> list[Job]:
        statuses = list(statuses)
        owners = [w for w in worker_ids if w is not None]
        unowned = any(w is None for w in worker_ids)
        if not statuses or (not owners and not unowned):
            return []
        out: list[Job] = []
        smarks = ", ".join("?" for _ in statuses)
        svals = [s.value for s in statuses]
        base = (
            f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_live_status "
            f"WHERE archived = 0 AND status IN ({smarks}) AND "
        )
        tail = "" if limit is None else f" LIMIT {int(limit)}"
        for chunk in chunked(owners, 500):
            omarks = ", ".join("?" for _ in chunk)
            out.extend(_row_to_job(r) for r in self._read(base + f"worker_id IN ({omarks})" + tail, svals + chunk))
        if unowned:
            out.extend(_row_to_job(r) for r in self._read(base + "worker_id IS NULL" + tail, svals))
        return out if limit is None else out[:limit]

    # -- nodes ---------------------------------------------------------------------------------

    def write_node(self, node: NodeRow, timeout: float | None = None) -> None:  # one host: the busy timeout rules
        with self._write() as conn:
            conn.execute(
                "INSERT INTO nodes (name, incarnation, dc, host, pid, started, version, beat, beat_time,"
                " state, running, info, tasks) "
                f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, {_STORE_NOW}, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET incarnation = excluded.incarnation, dc = excluded.dc,"
                " host = excluded.host, pid = excluded.pid, started = excluded.started,"
                " version = excluded.version, beat = excluded.beat, beat_time = excluded.beat_time,"
                " state = excluded.state, running = excluded.running, info = excluded.info,"
                " tasks = excluded.tasks",
                (node.name, node.incarnation, node.dc, node.host, node.pid, _ts(node.started), node.version,
                 node.beat, node.state, node.running, node.info, node.tasks),
            )

    def nodes(self, timeout: float | None = None) -> list[NodeRow]:
        rows = self._read(
            "SELECT name, incarnation, dc, host, pid, started, version, beat, state, running, info,"
            " tasks, beat_time FROM nodes ORDER BY name"
        )
        return [
            NodeRow(r[0], r[1], r[2], r[3], r[4], _when(r[5]), r[6], r[7], r[8], r[9], r[10], r[11], _dt(r[12]))
            for r in rows
        ]

    def delete_node(self, row: NodeRow) -> None:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM nodes WHERE name = ? AND incarnation = ? AND beat = ?",
                               (row.name, row.incarnation, row.beat))
            if cur.rowcount:
                conn.execute("DELETE FROM kill_requests WHERE node = ?", (row.name,))

    # -- kill requests -------------------------------------------------------------------------

    def add_kill_request(self, request: KillRequest) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO kill_requests (node, task, requested_at, requested_by) VALUES (?, ?, ?, ?)",
                (request.node, request.task, _ts(request.requested_at), request.requested_by),
            )

    def kill_requests(self, node: str) -> list[KillRequest]:
        rows = self._read(
            "SELECT node, task, requested_at, requested_by FROM kill_requests WHERE node = ? ORDER BY task",
            (node,),
        )
        return [KillRequest(r[0], r[1], _when(r[2]), r[3]) for r in rows]

    def delete_kill_request(self, node: str, task: int) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM kill_requests WHERE node = ? AND task = ?", (node, task))
