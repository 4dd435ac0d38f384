"""The runs of a job name, newest first, whatever its number of uids: ``k2_job_runs_by_name``
(JOBHISTORY of a name, JOBLOG of a name; docs/explanation/cassandra-queue.md, "History").

A name run with a new uid per job (an order id per run) has as many history partitions as
runs, one per uid; which uids had runs was a row per uid and day in one partition per name and
day (8.6 million rows a day at 100 jobs/s), read whole for every JOBHISTORY of the name. Here
each run line leaves a pointer (uid, epoch) in its name's partition of the day it is written
(its TTL runs from then), in BY_NAME_SHARDS (32) shards, newest end first: the newest n runs are the
first n of each shard of the last days, read day by day from today backwards until n are found.
The lines themselves are then read from their jobs' partitions. A pointer whose line was
deleted (DELETEHISTORY) points at nothing and is passed over; it goes with its TTL.
"""

from __future__ import annotations

import heapq
import zlib
from datetime import timedelta

from ..base import RunRecord
from ...model import JobKey
from .rows import UTC, Rows, _when
from .schema import BY_NAME_SHARDS
from .session import _result, _Write

_SHARDS = list(range(BY_NAME_SHARDS))


def _by_name_shard(uid: str) -> int:
    return zlib.crc32(uid.encode()) % BY_NAME_SHARDS


class ByName(Rows):
    """Pointers to run lines by job name and day."""

    archive_ttl: int

    def _by_name_write(self, r: RunRecord) -> _Write:
        stmt = self._stmt(("bynameput",), "INSERT INTO k2_job_runs_by_name (type, name, day, shard, end_time, uid, epoch)"
                                          " VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?")
        k, day = r.key, self.store_time().astimezone(UTC).strftime("%Y-%m-%d")
        return _Write(stmt, (k.type, k.name, day, _by_name_shard(k.uid), r.end, k.uid, r.epoch, self.archive_ttl),
                      what=f"the name's pointer to run {r.epoch} of {k}")

    def _name_runs(self, type: str, name: str, limit: int) -> list[tuple[JobKey, int]]:
        """The (key, epoch) of the newest ``limit`` runs of the name, newest first: a day's
        shards at a time (``limit`` each, at most), from today back to the retention."""
        stmt = self._stmt(("bynameday",), "SELECT end_time, uid, epoch FROM k2_job_runs_by_name WHERE type = ? AND "
                                          "name = ? AND day = ? AND shard IN ? PER PARTITION LIMIT ?")
        today = self.store_time().date() + timedelta(days=1)  # (a line may end a little ahead of this clock)
        found: list[tuple] = []
        for back in range(self.archive_ttl // 86400 + 3):
            day = (today - timedelta(days=back)).strftime("%Y-%m-%d")
            rows = _result(self._unpaged(stmt, (type, name, day, _SHARDS, limit - len(found))))
            by_shard: dict[int, list[tuple]] = {}
            for r in rows:
                # (newest first within a shard: the merge takes the negated end time)
                by_shard.setdefault(_by_name_shard(r["uid"]), []).append(
                    (-_when(r["end_time"]).timestamp(), r["uid"], -r["epoch"]))
            found += list(heapq.merge(*by_shard.values()))[:limit - len(found)]
            if len(found) >= limit:
                break
        return [(JobKey(type, name, uid), -epoch) for _, uid, epoch in found]
