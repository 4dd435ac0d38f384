"""What outlives a run and a row, all written with the retention as TTL: run history, archived
keys by day, and a directory listener's file marks.

``k2_job_run_history`` holds a partition per job and RUN_BUCKET runs, so that a job that runs
every second does not grow one partition for its whole retention; ``k2_job_run_keys`` points,
by job name and day, at a job's partitions past its first (only a job run more than RUN_BUCKET
times has any); ``k2_job_runs_by_name`` at a name's run lines, newest first (byname.py: the
history of a name, however many uids it has). ``k2_jobs_archived``
holds archived keys by day (ARCHIVE_SHARDS shards a day) and end time (JOBSTATUS n DAYS AGO).
The version-3 tables (``k2_job_runs``, ``k2_job_run_uids``, ``k2_jobs_archive``) are only read,
until the TTL has emptied them after an upgrade. Retention is the TTL: ``delete_runs`` and
``delete_archived`` have nothing to do.
"""

from __future__ import annotations

import random
import zlib
from datetime import datetime, timedelta
from typing import Sequence

from ...errors import StoreError, StoreUnavailable
from ...model import Job, JobKey
from ..base import RunRecord
from .byname import ByName
from .recent import Recent
from .rows import UTC, _aware, _unknown_outcome, _when
from .schema import ARCHIVE_SHARDS, RUN_BUCKET
from .session import _bound, _result, _Write, driver_error, log

MARK_ATTEMPTS = 3  # an LWT that did not apply, as a SERIAL read settled it, is sent again

_BIG_VALUES = 2048  # characters of output and log above which a history line is sent alone
_RUN_COLUMNS = ("type", "name", "uid", "epoch", "node", "due_time", "start_time", "end_time", "result", "status",
                "tries", "error", "output", "exit_code", "log", "note")
_ARCHIVE_SHARDS = list(range(ARCHIVE_SHARDS))


def _day(when) -> str:
    return when.strftime("%Y-%m-%d")


def _archive_shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.uid}\0{key.name}\0{key.type}".encode()) % ARCHIVE_SHARDS


_MARKS_PER_BATCH = 20  # file marks per conditional batch (paths of up to 1 KiB: within Cassandra's batch size limits)
NAME_RUNS = 10_000  # lines of a whole name read at most when no limit is given
LEGACY_UIDS = 200  # uids of a name per day read from the tables before version 16


class History(ByName, Recent):
    """Run history, the archive by day, and listener file marks."""

    _run_keys_noted: set[tuple]  # (key, day, bucket) this process noted in k2_job_run_keys
    archive_ttl: int

    def _init_history(self) -> None:
        """Nothing noted yet: the first line of each (key, day, bucket) notes it."""
        self._run_keys_noted = set()
        self._recent_hours_noted = set()

    # -- run history -----------------------------------------------------------------------------

    def _run_writes(self, r: RunRecord) -> list[_Write]:
        """A history line, in its job's partition of RUN_BUCKET runs, and (once a day per
        process) the note in k2_job_run_keys that this uid and bucket have runs that day."""
        stmt = self._stmt(("runput",),
            f"INSERT INTO k2_job_run_history ({', '.join(_RUN_COLUMNS)}, bucket) "
            f"VALUES ({', '.join('?' for _ in _RUN_COLUMNS)}, ?) USING TTL ?")
        values = tuple(map(_bound, (r.key.type, r.key.name, r.key.uid, r.epoch, r.node, r.due, r.start, r.end,
                                    r.result, r.status, r.tries, r.error, r.output, r.exit_code, r.log, r.note)))
        size = sum(len(v) for v in (r.error, r.output, r.log, r.note) if isinstance(v, str))
        what = f"the history line of run {r.epoch} of {r.key}"
        # Cassandra warns of a batch over 5 KiB: a line with a long output goes alone.
        out = [_Write(stmt, values + (r.epoch // RUN_BUCKET, self.archive_ttl), what=what, big=size > _BIG_VALUES)]
        out += self._recent_writes(r, big=len(r.error) + len(r.note) > _BIG_VALUES)
        out.append(self._by_name_write(r))
        day = _day(self.store_time())  # the day the line is written: its TTL runs from then
        noted = (r.key, day, r.epoch // RUN_BUCKET)
        # A pointer to a partition past the job's first (bucket 0, which every read of a uid
        # reads anyway): only a job run more than RUN_BUCKET times has one, once a day.
        if noted[2] > 0 and noted not in self._run_keys_noted:
            if len(self._run_keys_noted) > 100_000:
                self._run_keys_noted.clear()
            keys = self._stmt(("runkey",), "INSERT INTO k2_job_run_keys (type, name, day, uid, bucket) "
                                           "VALUES (?, ?, ?, ?, ?) USING TTL ?")
            # Outlives the day's last line by the day itself.
            out.append(_Write(keys, (r.key.type, r.key.name, day, r.key.uid, r.epoch // RUN_BUCKET,
                                     self.archive_ttl + 86400), what=what,
                              on_sent=lambda: self._run_keys_noted.add(noted)))
        return out

    def _unrun_writes(self, r: RunRecord) -> list[_Write]:
        stmt = self._stmt(("rundel",), "DELETE FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? "
                                       "AND bucket = ? AND epoch = ? AND end_time = ?")
        return [_Write(stmt, (r.key.type, r.key.name, r.key.uid, r.epoch // RUN_BUCKET, r.epoch, r.end),
                       what=f"the history line of fenced run {r.epoch} of {r.key}"), self._unrecent_write(r)]

    @staticmethod
    def _to_run(row: dict) -> RunRecord:
        return RunRecord(
            JobKey(row["type"], row["name"], row["uid"]), row["epoch"], row["node"], _aware(row["due_time"]),
            _aware(row["start_time"]), _when(row["end_time"]), row["result"], row["status"], row["tries"] or 0,
            row["error"] or "", row["output"], row["exit_code"], row["log"] or "", row.get("note") or "",
        )

    def runs(self, type: str, name: str, uid: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """One uid: its partitions of k2_job_run_history (bucket 0, and those k2_job_run_keys
        points at), ``limit`` lines each, newest first. A whole name: the newest ``limit``
        lines that k2_job_runs_by_name points at (byname.py), at most NAME_RUNS without a
        limit. Plus what the tables of earlier versions hold, until their TTL has emptied
        them (bounded: see _legacy_parts)."""
        if uid is None:
            return self._runs_of_name(type, name, limit)
        cols = ", ".join(_RUN_COLUMNS)
        parts = {(uid, 0)} | set(self._pointed(type, name, uid))
        lim, more = (" LIMIT ?", (limit,)) if limit is not None else ("", ())
        new = self._stmt(("runsh", limit is not None),
                         f"SELECT {cols} FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? AND bucket = ?{lim}")
        old = self._stmt(("runsu", limit is not None),
                         f"SELECT {cols} FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ?{lim}")
        futures = [self._session.execute_async(new, (type, name, u, b) + more) for u, b in sorted(parts)]
        futures.append(self._session.execute_async(old, (type, name, uid) + more))
        out = sorted((self._to_run(r) for f in futures for r in _result(f)), key=lambda r: (r.end, r.epoch), reverse=True)
        return out if limit is None else out[:limit]

    def _pointed(self, type: str, name: str, uid: str | None, per_day: int | None = None) -> list[tuple[str, int]]:
        """(uid, bucket) that k2_job_run_keys points at over the retention's days (one uid: a
        slice of each day's partition; every uid: at most ``per_day`` of each)."""
        today = self.store_time().date()
        days = [_day(today - timedelta(days=d)) for d in range(-1, self.archive_ttl // 86400 + 2)]
        stmt = self._stmt(("runkeys", uid is not None, per_day is not None),
                          "SELECT uid, bucket FROM k2_job_run_keys WHERE type = ? AND name = ? AND day IN ?"
                          + (" AND uid = ?" if uid is not None else "")
                          + (" PER PARTITION LIMIT ?" if per_day is not None else ""))
        params = (type, name, days) + ((uid,) if uid is not None else ()) + ((per_day,) if per_day is not None else ())
        return [(r["uid"], r["bucket"]) for r in _result(self._unpaged(stmt, params))]

    def _runs_of_name(self, type: str, name: str, limit: int | None) -> list[RunRecord]:
        """The newest lines the name's pointers lead to; a pointer whose line is gone (a
        fenced run's, a DELETEHISTORY) leads nowhere, so more pointers are read until ``want``
        lines are found or there are no more."""
        want = NAME_RUNS if limit is None else limit
        cols = ", ".join(_RUN_COLUMNS)
        line = self._stmt(("runline",), f"SELECT {cols} FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? "
                                        "AND bucket = ? AND epoch = ?")
        asked = want
        while True:
            pointers = self._name_runs(type, name, asked)
            futures = [self._session.execute_async(line, (k.type, k.name, k.uid, epoch // RUN_BUCKET, epoch))
                       for k, epoch in pointers]
            out = [self._to_run(r) for f in futures for r in _result(f)]
            if len(out) >= want or len(pointers) < asked or asked >= 4 * NAME_RUNS:
                break
            asked = min(4 * NAME_RUNS, 2 * asked + (want - len(out)))
        if len(out) < want:  # lines from before schema version 16, while the retention keeps them
            out += self._legacy_runs(type, name, want)
        unique = {(r.key, r.epoch, r.end): r for r in out}
        return sorted(unique.values(), key=lambda r: (r.end, r.epoch), reverse=True)[:want]

    def _legacy_runs(self, type: str, name: str, limit: int) -> list[RunRecord]:
        """Lines of a name recorded before schema version 16 (no pointer by name): through
        k2_job_run_keys, at most LEGACY_UIDS of its uids a day, and the version-3 tables,
        LEGACY_UIDS uids; ``limit`` lines each. Gone once the retention has passed."""
        cols = ", ".join(_RUN_COLUMNS)
        parts = sorted(set(self._pointed(type, name, None, per_day=LEGACY_UIDS)))
        uids = self._session.execute_async(self._stmt(("runuids",), "SELECT uid FROM k2_job_run_uids WHERE type = ? "
                                                                     "AND name = ? LIMIT ?"), (type, name, LEGACY_UIDS))
        new = self._stmt(("runsh", True),
                         f"SELECT {cols} FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? AND bucket = ? LIMIT ?")
        old = self._stmt(("runsu", True), f"SELECT {cols} FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ? LIMIT ?")
        futures = [self._session.execute_async(new, (type, name, u, b, limit)) for u, b in parts]
        futures += [self._session.execute_async(old, (type, name, r["uid"], limit)) for r in _result(uids)]
        return [self._to_run(r) for f in futures for r in _result(f)]

    def run(self, key: JobKey, epoch: int) -> RunRecord | None:
        cols = ", ".join(_RUN_COLUMNS)
        new = self._session.execute_async(self._stmt(("run1",), f"SELECT {cols} FROM k2_job_run_history WHERE type = ? "
                                                               "AND name = ? AND uid = ? AND bucket = ? AND epoch = ?"),
                                          (key.type, key.name, key.uid, epoch // RUN_BUCKET, epoch))
        old = self._session.execute_async(self._stmt(("run1v3",), f"SELECT {cols} FROM k2_job_runs WHERE type = ? AND name = ? "
                                                                 "AND uid = ? AND epoch = ?"),
                                          (key.type, key.name, key.uid, epoch))
        runs = [self._to_run(r) for f in (new, old) for r in _result(f) if r["result"] != "SKIPPED"]
        return max(runs, key=lambda r: r.end) if runs else None

    def add_runs(self, records: Sequence[RunRecord]) -> None:
        try:
            self._send([w for r in records for w in self._run_writes(r)], bounded=False)
        except StoreError as exc:  # the job rows are right; only history lines are missing
            log.warning("could not record %d runs (%s)", len(records), exc)

    def delete_runs(self, before: datetime, limit: int = 10_000) -> int:
        return 0  # run records expire by TTL

    def delete_job_runs(self, key: JobKey) -> int:
        """Partition deletes of every table the job's lines are read from: its partitions of
        k2_job_run_history (the buckets of the lines ``runs`` finds: a line lives in the
        bucket of its epoch), and of the version-3 k2_job_runs with its k2_job_run_uids entry;
        and a row delete of each line in k2_job_runs_recent.

        k2_job_run_keys is left to its TTL: its rows only point at partitions, an empty one
        costs a read that returns nothing, and a node that noted a (day, bucket) writes no
        second pointer (``_run_keys_noted``): deleting one would hide that node's later runs
        of this job from JOBHISTORY until the next day.
        """
        runs = self.runs(key.type, key.name, key.uid)
        params = (key.type, key.name, key.uid)
        what = f"the run history of {key}"
        history = self._stmt(("rundelpart",), "DELETE FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? "
                                              "AND bucket = ?")
        writes = [_Write(history, params + (bucket,), what=what)
                  for bucket in sorted({r.epoch // RUN_BUCKET for r in runs})]
        # A row delete each: the hour partitions hold other jobs' lines. (The name's pointers
        # to them point at nothing now, and are passed over: byname.py.)
        writes += [self._unrecent_write(r) for r in runs]
        writes.append(_Write(self._stmt(("rundelv3",), "DELETE FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ?"),
                             params, what=what))
        writes.append(_Write(self._stmt(("runuiddel",), "DELETE FROM k2_job_run_uids WHERE type = ? AND name = ? "
                                                        "AND uid = ?"), params, what=what))
        self._send(writes, bounded=False)
        return len(runs)

    # -- the archive by day ------------------------------------------------------------------------

    def _archive_write(self, job: Job) -> _Write | None:
        if job.end_time is None:
            return None
        stmt = self._stmt(("aput",), "INSERT INTO k2_jobs_archived (day, shard, end_time, type, name, uid, owner, status) "
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?")
        k = job.key
        return _Write(stmt, (_day(job.end_time), _archive_shard(k), job.end_time, k.type, k.name, k.uid, job.owner,
                             job.status.value, self.archive_ttl), what=f"the archive entry of {k}")

    def archived_since(self, since: datetime, type: str | None = None, *, name: str | None = None,
                       after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        day = since.astimezone(UTC).date()
        today = self.store_time().date() + timedelta(days=1)
        if (today - day).days > self.archive_ttl // 86400 + 2:
            found = self._archive_scan(since)  # a window beyond the retention: what is kept, not each day
        else:
            found = self._archive_days(since, day, today)
        keys = sorted({k for k in found if type in (None, k.type) and name in (None, k.name)
                       and (after is None or k > after)})
        # The archive files keys by end time, not by key: the window's keys are read whole (a
        # key is small), its rows only as far as the page goes (an entry's row may have moved
        # on: started again, or expired).
        out: list[Job] = []
        chunk = max(limit or len(keys), 1)
        for i in range(0, len(keys), chunk):
            rows = self.get_many(keys[i:i + chunk])
            out += [j for j in rows if j is not None and j.archived and j.end_time is not None and j.end_time >= since]
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def _archive_days(self, since: datetime, day, last) -> list[JobKey]:
        # A day's ARCHIVE_SHARDS partitions in one unpaged IN (read at once); and the day's
        # partition of k2_jobs_archive, the version-3 table, until its TTL has emptied it.
        stmt = self._stmt(("asel",), "SELECT type, name, uid FROM k2_jobs_archived WHERE day = ? AND shard IN ? "
                                     "AND end_time >= ?")
        legacy = self._stmt(("asel3",), "SELECT type, name, uid FROM k2_jobs_archive WHERE day = ? AND end_time >= ?")
        futures = []
        while day <= last:
            futures.append(self._unpaged(stmt, (_day(day), _ARCHIVE_SHARDS, since)))
            futures.append(self._session.execute_async(legacy, (_day(day), since)))
            day += timedelta(days=1)
        return [JobKey(r["type"], r["name"], r["uid"]) for f in futures for r in _result(f)]

    def _archive_scan(self, since: datetime) -> list[JobKey]:
        """Every entry the archive still keeps (its TTL is the retention), both tables, paged:
        a read per day since a ``since`` years back would be thousands of reads of empty days.
        Entries are filed by their End Time's day, which may lie before the retention (a node's
        clock), so the days cannot simply be cut at it."""
        keys = []
        for table in ("k2_jobs_archived", "k2_jobs_archive"):
            stmt = self._stmt(("ascan", table), f"SELECT end_time, type, name, uid FROM {table}")
            try:
                rows = list(self._session.execute(stmt))  # every page
            except Exception as exc:
                raise driver_error(exc, f"Cassandra: {type(exc).__name__}: {exc}") from None
            keys += [JobKey(r["type"], r["name"], r["uid"]) for r in rows
                     if r["end_time"] is not None and _when(r["end_time"]) >= since]
        return keys

    def delete_archived(self, before: datetime, limit: int = 10_000, keep: frozenset = frozenset()) -> int:
        return 0  # archived rows expire by TTL (``keep`` cannot hold one back: see docs/guides/cluster.md#retention)

    # -- a listener's file marks -------------------------------------------------------------------

    def mark_file(self, listener: JobKey, file: str, note: str) -> bool:
        token = f"{note} #{random.getrandbits(64):016x}"  # tells our write from a rival's
        # An UPDATE, not an INSERT: an INSERT's row marker is not covered by the TTL that
        # _marks_follow gives the mark's cells later (the k2_jobs insert does the same).
        stmt = self._stmt(("mark",), "UPDATE k2_listener_files SET note = ?, marked_at = toTimestamp(now()) "
                                    "WHERE type = ? AND name = ? AND uid = ? AND file = ? IF note = null")
        params = (token, listener.type, listener.name, listener.uid, file)
        # Prepared up front: an unknown outcome is a host that went silent, the worst moment to
        # prepare a statement (the prepare itself may go to that host and wait it out).
        read = self._stmt(("markread",), "SELECT note FROM k2_listener_files WHERE type = ? AND name = ? AND uid = ? AND file = ?")
        why = ""
        for _ in range(MARK_ATTEMPTS):
            try:
                row = self._session.execute(stmt, params, execution_profile="lwt").one()
                return bool(row["[applied]"]) or row.get("note") == token
            except Exception as exc:
                why = _unknown_outcome(exc)  # raises unless the LWT may have applied
                self.stats.unknown_outcomes += 1
            found = self._serially(lambda: self._read_mark(read, params[1:]))
            if found is not None and found["note"] is not None:
                return found["note"] == token
            # The SERIAL read saw no mark at all: the LWT did not apply, and False would say a
            # rival was first (the listener would then skip a file nobody handled). Again.
            log.info("the mark of %s for %s did not apply (%s); trying again", file, listener, why)
        raise StoreUnavailable(f"Cassandra: the mark of {file} did not apply after {MARK_ATTEMPTS} tries ({why})")

    def _read_mark(self, read, params: tuple) -> dict | None:
        try:
            return self._session.execute(read, params, execution_profile="serial").one()
        except Exception as exc:
            raise driver_error(exc, f"Cassandra: cannot read a file mark: {type(exc).__name__}: {exc}") from None

    def _marks_follow(self, listener: JobKey, ttl: int) -> None:
        """A listener's file marks share its row's TTL: rewritten with it when the row is
        archived (they expire together, as SQLite deletes them together), without one when
        a STARTJOB brings the row back (they must outlive a long-running listener). Lost, the
        marks only outlive the row, or expire with a listener restarted under the same key
        a retention period later, whose files then count as present at its start."""
        try:
            rows = list(self._run(self._stmt(("marks",), "SELECT file, note, marked_at FROM k2_listener_files "
                                                         "WHERE type = ? AND name = ? AND uid = ?"),
                                  (listener.type, listener.name, listener.uid)))
        except StoreError as exc:  # the row's change applied: report that, not this
            log.warning("could not carry the file marks of %s along with its row (%s)", listener, exc)
            return
        # Conditional, like the marks' own writes (mark_file): a plain write beside LWTs on the
        # same rows is ordered by its timestamp only, not by Paxos. One partition, so a batch
        # of them is one Paxos round.
        from cassandra.query import BatchStatement

        stmt = self._stmt(("markttl",), "UPDATE k2_listener_files USING TTL ? SET note = ?, marked_at = ? WHERE "
                                        "type = ? AND name = ? AND uid = ? AND file = ? IF note = ?")
        rows = [r for r in rows if r["note"] is not None]

        def params(r) -> tuple:
            return (ttl, r["note"], r["marked_at"], listener.type, listener.name, listener.uid, r["file"], r["note"])

        for i in range(0, len(rows), _MARKS_PER_BATCH):
            chunk = rows[i:i + _MARKS_PER_BATCH]
            batch = BatchStatement()
            for r in chunk:
                batch.add(stmt, params(r))
            try:
                if self._session.execute(batch, execution_profile="lwt").one()["[applied]"]:
                    continue
                # One mark changed or expired meanwhile fails the whole batch: each on its own.
                for r in chunk:
                    self._session.execute(stmt, params(r), execution_profile="lwt")
            except Exception as exc:  # as a lost one: the marks outlive the row, or expire early
                log.warning("could not carry the file marks of %s along with its row (%s)", listener, exc)
                return

    def marked_files(self, listener: JobKey) -> set[str]:
        rows = self._run(self._stmt(("marked",), "SELECT file, note FROM k2_listener_files WHERE type = ? AND name = ? "
                                                 "AND uid = ?"), (listener.type, listener.name, listener.uid))
        return {r["file"] for r in rows if r["note"] is not None}  # (a marker whose cells expired is no mark)
