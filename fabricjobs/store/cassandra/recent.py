"""The cluster's recent runs (JOBHISTORY RECENT n, DolphinDB's getRecentJobs) on Cassandra.

Every run line is written twice: in its job's partition of ``k2_job_run_history`` (JOBHISTORY
of one job) and in ``k2_job_runs_recent``, partitioned by the hour of its end and
RECENT_SHARDS shards (so that one hour of a busy cluster is not one hot partition), newest
first within a partition. ``k2_job_runs_hours`` lists, per day, the hours that have lines
(each process notes an hour once), so that a read never probes empty hours.

RECENT n reads, from today backwards, a day's hour list (one small partition), then each of
those hours' shards, ``n`` lines each, newest hour first, and stops at the first hour after
which it holds n lines: no line of an older hour can be newer. So it reads at most the
retention's days of hour lists (about 31, a handful of rows each), and in a cluster with runs
going, one day's list and one or two hours' shards: a bounded read, never a table scan, and
only when an operator asks (no node reads it).
"""

from __future__ import annotations

import zlib
from datetime import datetime, timedelta

from ..base import RunRecord
from ...model import JobKey
from .rows import UTC, Rows, _aware, _when
from .schema import RECENT_SHARDS
from .session import _bound, _result, _Write

_RECENT_COLUMNS = ("type", "name", "uid", "epoch", "node", "due_time", "start_time", "end_time", "result", "status",
                   "tries", "error", "note")
_RECENT_KEY = "hour = ? AND shard = ? AND end_time = ? AND type = ? AND name = ? AND uid = ? AND epoch = ?"


def _hour(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H")


def _shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.uid}\0{key.name}\0{key.type}".encode()) % RECENT_SHARDS


def _recent_key(r: RunRecord) -> tuple:
    return (_hour(r.end), _shard(r.key), r.end, r.key.type, r.key.name, r.key.uid, r.epoch)


class Recent(Rows):
    """The run lines of the whole cluster by hour."""

    _recent_hours_noted: set[str]  # hours this process noted in k2_job_runs_hours
    archive_ttl: int

    def _recent_writes(self, r: RunRecord, big: bool) -> list[_Write]:
        """The line in its hour's shard, and (once per process and hour) the hour in its day's list."""
        cols = ", ".join(_RECENT_COLUMNS)
        stmt = self._stmt(("recentput",), f"INSERT INTO k2_job_runs_recent (hour, shard, {cols}) "
                                          f"VALUES (?, ?, {', '.join('?' for _ in _RECENT_COLUMNS)}) USING TTL ?")
        values = tuple(map(_bound, (r.key.type, r.key.name, r.key.uid, r.epoch, r.node, r.due, r.start, r.end,
                                    r.result, r.status, r.tries, r.error, r.note)))
        hour = _hour(r.end)
        out = [_Write(stmt, (hour, _shard(r.key)) + values + (self.archive_ttl,),
                      what=f"the recent-runs line of run {r.epoch} of {r.key}", big=big)]
        if hour not in self._recent_hours_noted:
            if len(self._recent_hours_noted) > 10_000:
                self._recent_hours_noted.clear()
            mark = self._stmt(("recenthour",), "INSERT INTO k2_job_runs_hours (day, hour) VALUES (?, ?) USING TTL ?")
            out.append(_Write(mark, (hour[:10], hour, self.archive_ttl + 3600), what=f"the hour {hour} of recent runs",
                              on_sent=lambda: self._recent_hours_noted.add(hour)))
        return out

    def _unrecent_write(self, r: RunRecord) -> _Write:
        stmt = self._stmt(("recentdel",), f"DELETE FROM k2_job_runs_recent WHERE {_RECENT_KEY}")
        return _Write(stmt, _recent_key(r), what=f"the recent-runs line of run {r.epoch} of {r.key}")

    def recent_runs(self, limit: int, since: datetime | None = None) -> list[RunRecord]:
        """(``since``: the hours before its own are not read, and the days before its own not asked.)"""
        hours_stmt = self._stmt(("recenthours",), "SELECT hour FROM k2_job_runs_hours WHERE day = ?")
        cols = ", ".join(_RECENT_COLUMNS)
        lines_stmt = self._stmt(("recentsel",), f"SELECT {cols} FROM k2_job_runs_recent WHERE hour = ? AND shard = ? LIMIT ?")
        found: list[RunRecord] = []
        today = self.store_time().date()
        first = "" if since is None else _hour(since)
        for back in range(-1, self.archive_ttl // 86400 + 2):  # tomorrow too: a node's clock ahead of ours
            day = (today - timedelta(days=back)).strftime("%Y-%m-%d")
            if day < first[:10]:
                break
            for hour in sorted((r["hour"] for r in self._run(hours_stmt, (day,)) if r["hour"] >= first), reverse=True):
                futures = [self._session.execute_async(lines_stmt, (hour, shard, limit)) for shard in range(RECENT_SHARDS)]
                found += [run for f in futures for row in _result(f) for run in (self._to_recent(row),)
                          if since is None or run.end >= since]
                if len(found) >= limit:
                    return _newest(found, limit)
        return _newest(found, limit)

    @staticmethod
    def _to_recent(row: dict) -> RunRecord:
        return RunRecord(
            JobKey(row["type"], row["name"], row["uid"]), row["epoch"], row["node"], _aware(row["due_time"]),
            _aware(row["start_time"]), _when(row["end_time"]), row["result"], row["status"], row["tries"] or 0,
            row["error"] or "", None, None, "", row.get("note") or "",
        )


def _newest(runs: list[RunRecord], limit: int) -> list[RunRecord]:
    return sorted(runs, key=lambda r: (r.end, r.epoch), reverse=True)[:limit]
