"""SqliteStore: the JobStore on one SQLite file, each method its SQL.

A CAS is one conditional ``UPDATE`` whose rowcount (or ``RETURNING``) says whether it applied;
:meth:`cas_many` puts many of them in one transaction (one fsync: group commit), and rows that
write the same columns in one statement.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from typing import Iterable, Collection, Sequence

from ...calendar import Calendar, from_text
from ...model import Job, JobKey, JobType, Status
from ..base import LIVE_LOG_KEEP_SEC, CasResult, JobStore, KillRequest, Lane, NodeRow, RunRecord, Version, Whole, each_whole
from .connection import Connections
from .rows import _COLS, _RUN_COLS, _STATUS, _STORE_NOW, _dt, _row_to_job, _row_to_run, _run_params, _ts, _when
from .schema import SCHEMA_VERSION, migrate, not_newer
from .search import Search
from .statements import _BATCHED, _INSERT_RUN_SQL, _RETURNING, _insert_params, _insert_sql, cas_statements


class SqliteStore(Connections, Search, JobStore):
    """k2_jobs and its companions in one SQLite file, for the nodes of one host."""

    backend = "sqlite"
    reads_lanes = True  # fj_lane() on the index entry: other lanes' rows are never fetched

    def __init__(self, path: str | os.PathLike, *, synchronous: str = "FULL", busy_timeout_ms: int = 10_000) -> None:
        self._open(path, synchronous, busy_timeout_ms)
        version = self.schema_version()  # (read first: a current file needs no write lock, so NODES
        not_newer(version, self.path)     # and JOBSTATUS work while another process holds it)
        if version != SCHEMA_VERSION:
            with self._write() as conn:
                migrate(conn, self.path)

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

    def cas(self, expected: Job, new: Job, *, whole: bool = False) -> CasResult:
        return self.cas_many([(expected, new)], whole=whole)[0]

    def cas_many(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None, *,
                 whole: Whole = False) -> list[CasResult]:
        """Pairs that write the same columns go together in one UPDATE ... FROM (VALUES ...)
        statement of up to 64 rows, each row still conditioned on its own expected (status,
        epoch, worker_id, revision): a third of the cost of one statement per row, most of
        which is the statement's round trip, not the B-tree work. The rows RETURNING gives
        back are the applied ones; for the others, the current version is read. A key given
        twice is written in order (its second pair after the first, on its own).

        Only the statements run under the write lock: the parameters are built before it is
        taken and the rows returned are decoded after it is released (four nodes on one file
        held it 85 % of a drain, 10 ms a transaction, much of it this Python work)."""
        if not pairs:
            return []
        for expected, new in pairs:
            if new.key != expected.key:
                raise ValueError(f"CAS cannot change a key: {expected.key} -> {new.key}")
        flags = each_whole(whole, len(pairs))
        statements = cas_statements(pairs, returning_rows=not all(flags))
        records = [None if record is None else _run_params(record) for record in runs] if runs is not None \
            else [None] * len(pairs)
        results: list[CasResult | None] = [None] * len(pairs)
        applied: dict[int, tuple | None] = {}  # index -> the row as RETURNING gave it (None: read it)
        with self._write() as conn:
            for sql, params, items in statements:
                written = conn.execute(sql, params)
                if _BATCHED:
                    by_key = {(r[0], r[1], r[2]): r for r in written.fetchall()}  # all: the statement ends here
                    for i, expected in items:
                        applied[i] = by_key.get((expected.key.type, expected.key.name, expected.key.uid))
                else:  # SQLite before 3.35.4: one row per statement, read back (unless whole: not used)
                    i, expected = items[0]
                    applied[i] = None if written.rowcount != 1 else () if flags[i] else self._row(conn, expected.key)
                for i, expected in items:
                    if applied[i] is None:  # read in the transaction: what the statement met
                        results[i] = self._refused(conn, expected.key)
            recorded = [record for i, record in enumerate(records) if record is not None and applied.get(i) is not None]
            if recorded:  # in the same transaction: recorded iff the CAS applied
                conn.executemany(_INSERT_RUN_SQL, recorded)
        for i, row in applied.items():
            if row is not None:
                expected, new = pairs[i]
                results[i] = CasResult(True, row=new.replace(revision=expected.revision + 1) if flags[i] else _row_to_job(row))
        return results  # type: ignore[return-value]

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

    def recent_runs(self, limit: int, since: datetime | None = None) -> list[RunRecord]:
        # The index on "end" gives the newest lines first, without a sort of the table; no
        # output or log (a line may hold megabytes of them).
        cols = _RUN_COLS.replace('"output"', "NULL").replace('"log"', "''")
        where, params = ('WHERE "end" >= ? ', [_ts(since), limit]) if since is not None else ("", [limit])
        return [_row_to_run(r) for r in self._read(f'SELECT {cols} FROM k2_job_runs {where}ORDER BY "end" DESC, epoch DESC '
                                                    "LIMIT ?", params)]

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
            # Live log lines: past the retention, and at most a day old in any case (the run
            # record has the log; these only serve JOBLOG ... FOLLOW while the run goes on).
            conn.execute(
                "DELETE FROM k2_live_log WHERE (type, name, uid, epoch, seq) IN ("
                " SELECT type, name, uid, epoch, seq FROM k2_live_log"
                f" WHERE written_at < MAX(?, {_STORE_NOW} - {LIVE_LOG_KEEP_SEC}) LIMIT ?)",
                (_ts(before), limit),
            )
            return cur.rowcount

    def delete_job_runs(self, key: JobKey) -> int:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ?",
                               (key.type, key.name, key.uid))
            conn.execute("DELETE FROM k2_live_log WHERE type = ? AND name = ? AND uid = ?", (key.type, key.name, key.uid))
            return cur.rowcount

    def append_live_log(self, key: JobKey, epoch: int, first_seq: int, lines: Sequence[str]) -> None:
        if not lines:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO k2_live_log (type, name, uid, epoch, seq, line, written_at) "
                f"VALUES (?, ?, ?, ?, ?, ?, {_STORE_NOW})",
                [(key.type, key.name, key.uid, epoch, first_seq + i, line) for i, line in enumerate(lines)],
            )

    def live_log(self, key: JobKey, epoch: int, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, str]]:
        rows = self._read("SELECT seq, line FROM k2_live_log WHERE type = ? AND name = ? AND uid = ? AND epoch = ? "
                          "AND seq > ? ORDER BY seq LIMIT ?", (key.type, key.name, key.uid, epoch, after_seq, limit))
        return [(int(seq), line) for seq, line in rows]

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

    @classmethod
    def _get(cls, conn: sqlite3.Connection, key: JobKey) -> Job | None:
        r = cls._row(conn, key)
        return None if r is None else _row_to_job(r)

    @staticmethod
    def _row(conn: sqlite3.Connection, key: JobKey) -> tuple | None:
        return conn.execute(
            f"SELECT {_COLS} FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?",
            (key.type, key.name, key.uid),
        ).fetchone()

    def get(self, key: JobKey) -> Job | None:
        rows = self._read(
            f"SELECT {_COLS} FROM k2_jobs WHERE type = ? AND name = ? AND uid = ?",
            (key.type, key.name, key.uid),
        )
        return _row_to_job(rows[0]) if rows else None

    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None, *,
                  after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        """A range read of the live index in key order (``after`` its lower bound, exclusive):
        a page reads its own rows, not every live one. A column after the key's fixed prefix
        is compared as ``+col``, a filter and not an index constraint, so that SQLite keeps
        reading in key order (no sort) and stops at the limit."""
        fixed = _key_prefix(type, name, uid)
        where: list[str] = ["archived = 0"]
        params: list[str | int] = []
        for i, (col, value) in enumerate((("type", type), ("name", name), ("uid", uid))):
            if value is not None:
                where.append(f"{'' if i < len(fixed) else '+'}{col} = ?")
                params.append(value)
        if after is not None:
            bound = _key_bound(after, fixed)
            if bound is None:
                return []
            clause, values = bound
            if clause:
                where.append(clause)
                params.extend(values)
        if limit is not None:
            params.append(max(limit, 0))  # SQLite reads a negative LIMIT as none
        rows = self._read(
            f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_live_key WHERE {' AND '.join(where)} "
            "ORDER BY type, name, uid" + (" LIMIT ?" if limit is not None else ""),
            params,
        )
        return [_row_to_job(r) for r in rows]

    def archived_since(self, since: datetime, type: str | None = None, *, name: str | None = None,
                       after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        sql = f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_archive WHERE archived = 1 AND end_time >= ?"
        params: list = [_ts(since)]
        for column, value in (("type", type), ("name", name)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        if after is not None:
            sql += " AND (type, name, uid) > (?, ?, ?)"
            params += [after.type, after.name, after.uid]
        sql += " ORDER BY type, name, uid"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_row_to_job(r) for r in self._read(sql, params)]

    def waiting(self, limit: int, after: tuple[datetime, JobKey] | None = None,
                priorities: tuple[int, int] | None = None, lane: Lane | None = None) -> list[Job]:
        # Candidates: the columns needed to choose, not arguments or output (they can be big).
        cols = _COLS.replace("arguments", "'{}'").replace(", output,", ", NULL,")
        where, params = "status = 'WAITING'", []
        if after is not None:
            ts, key = after
            where += " AND (next_run, type, name, uid) > (?, ?, ?, ?)"
            params = [_ts(ts), key.type, key.name, key.uid]
        if priorities is not None:
            where += " AND priority BETWEEN ? AND ?"
            params += list(priorities)
        if lane is not None:  # the key's lane from the index entry: other lanes' rows are never read
            where += " AND (worker_id IS NOT NULL OR fj_lane(type, name, uid, ?) = ?)"
            params += list(lane)
        rows = self._read(
            f"SELECT {cols} FROM k2_jobs INDEXED BY k2_jobs_waiting WHERE {where} AND blocked = 0 "
            "ORDER BY next_run, type, name, uid LIMIT ?",
            params + [limit],
        )
        return [_row_to_job(r) for r in rows]

    def waiting_by_priority(self, limit: int, priorities: tuple[int, int] | None = None) -> list[Job]:
        cols = _COLS.replace("arguments", "'{}'").replace(", output,", ", NULL,")
        low, high = priorities if priorities is not None else (0, 9)
        rows = self._read(
            f"SELECT {cols} FROM k2_jobs INDEXED BY k2_jobs_waiting_priority WHERE status = 'WAITING' AND blocked = 0 "
            "AND priority BETWEEN ? AND ? ORDER BY priority DESC, next_run LIMIT ?", (low, high, limit))
        return [_row_to_job(r) for r in rows]

    def blocked_jobs(self, limit: int, since: datetime | None = None) -> list[Job]:
        page = "AND next_run >= ? " if since is not None else ""
        params = (_ts(since), limit) if since is not None else (limit,)
        rows = self._read(f"SELECT {_COLS} FROM k2_jobs INDEXED BY k2_jobs_blocked WHERE blocked = 1 AND archived = 0 "
                          "AND status IN ('WAITING', 'SCHEDULED') "
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

    _NODE_COLUMNS = ("SELECT name, incarnation, dc, host, pid, started, version, beat, state, running, info,"
                     " tasks, beat_time FROM nodes")

    def nodes(self, timeout: float | None = None) -> list[NodeRow]:
        return [_node_row(r) for r in self._read(f"{self._NODE_COLUMNS} ORDER BY name")]

    def node(self, name: str, timeout: float | None = None) -> NodeRow | None:
        rows = self._read(f"{self._NODE_COLUMNS} WHERE name = ?", (name,))
        return _node_row(rows[0]) if rows else None

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

    # -- calendars -----------------------------------------------------------------------------

    def put_calendar(self, calendar: Calendar) -> None:
        with self._write() as conn:
            conn.execute("INSERT INTO k2_calendars (name, rules, updated) VALUES (?, ?, ?) ON CONFLICT (name)"
                         " DO UPDATE SET rules = excluded.rules, updated = excluded.updated",
                         (calendar.name, calendar.text, _ts(self.store_time())))

    def calendar(self, name: str) -> Calendar | None:
        rows = self._read("SELECT name, rules FROM k2_calendars WHERE name = ?", (name,))
        return from_text(rows[0][0], rows[0][1]) if rows else None

    def calendars(self) -> list[Calendar]:
        return [from_text(r[0], r[1]) for r in self._read("SELECT name, rules FROM k2_calendars ORDER BY name")]

    def delete_calendar(self, name: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM k2_calendars WHERE name = ?", (name,)).rowcount > 0


def _node_row(r) -> NodeRow:
    return NodeRow(r[0], r[1], r[2], r[3], r[4], _when(r[5]), r[6], r[7], r[8], r[9], r[10], r[11], _dt(r[12]))


def _key_prefix(type: str | None, name: str | None, uid: str | None) -> tuple[str, ...]:
    """The leading key columns a read fixes by equality (what the live index ranges by)."""
    if type is None:
        return ()
    if name is None:
        return (type,)
    return (type, name) if uid is None else (type, name, uid)


def _key_bound(after: JobKey, fixed: tuple[str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """``key > after`` for a read whose leading key columns are ``fixed``: the clause on
    the columns left and its parameters, so that SQLite ranges over the live index after the
    equalities (a whole-key row value there makes it filter or sort instead); ("", ()) when
    every key of the read is above ``after``. None: none is."""
    cols, bound = ("type", "name", "uid"), (after.type, after.name, after.uid)
    n = len(fixed)
    if bound[:n] != fixed:
        return None if bound[:n] > fixed else ("", ())
    if n == len(cols):
        return None  # the one key the read can return is ``after`` itself
    return f"({', '.join(cols[n:])}) > ({', '.join('?' * (len(cols) - n))})", bound[n:]

def chunked(items: Iterable, size: int) -> Iterable[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
