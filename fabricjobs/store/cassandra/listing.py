"""The live jobs in key order, a page at a time: ``k2_jobs_live``, one entry per live row,
spread over ``LIVE_SHARDS`` partitions and clustered by key (docs/explanation/cassandra-queue.md,
"Listings").

The index (index.py) is ordered by due time, in buckets that a job moves between; a listing by
key read all of it (twice, to catch the jobs that moved while it read) to show a page of fifty.
Here a page reads at most its own size from each shard (``PER PARTITION LIMIT``), merged by key,
and then the rows of that page: its cost does not grow with the number of live jobs. A key does
not move while its job is live, so pages neither skip nor repeat a job.

Kept like the index: an entry is written before the LWT that makes its row live (an insert, a
resume), and deleted after the one that archives it. A reader checks every entry against its
row: one whose row is archived (or missing) is skipped, and deleted once it has looked so for
longer than ``INTENT_GRACE`` (it may be the entry of a resume whose LWT is still to come). A
live row without its entry is given one by the repair pass (repair.py). Deletes leave
tombstones spread over the key space, where jobs ended lately; they go with gc_grace (10 min).
"""

from __future__ import annotations

import heapq
import zlib
from typing import Iterable

from ...model import Job, JobKey, JobType
from .index import Index
from .session import _result, _Write

LIVE_SHARDS = 8
LISTING_SINCE = 16  # the schema version that made k2_jobs_live
_ALL = list(range(LIVE_SHARDS))
_PAGE = 500  # keys read at a time when a caller wants every live job
_LIVE = "LIVE"  # the "bucket" under which index.py's grace clock watches listing entries


def _live_shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.uid}\0{key.name}\0{key.type}".encode()) % LIVE_SHARDS


class Listing(Index):
    """k2_jobs_live: its writes (called where a row becomes live or archived) and the listing."""

    def _listed_write(self, key: JobKey) -> _Write:
        stmt = self._stmt(("lput",), "INSERT INTO k2_jobs_live (shard, type, name, uid) VALUES (?, ?, ?, ?)")
        return _Write(stmt, (_live_shard(key), key.type, key.name, key.uid), what=f"the listing entry of {key}")

    def _unlisted_write(self, key: JobKey) -> _Write:
        stmt = self._stmt(("ldel",), "DELETE FROM k2_jobs_live WHERE shard = ? AND type = ? AND name = ? AND uid = ?")
        return _Write(stmt, (_live_shard(key), key.type, key.name, key.uid), what=f"the listing entry of {key}")

    def _is_listed(self, keys: list[JobKey]) -> list[bool]:
        stmt = self._stmt(("lget",), "SELECT uid FROM k2_jobs_live WHERE shard = ? AND type = ? AND name = ? AND uid = ?")
        futures = [self._session.execute_async(stmt, (_live_shard(k), k.type, k.name, k.uid)) for k in keys]
        return [_result(f).one() is not None for f in futures]

    # -- the listing ---------------------------------------------------------------------------------

    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None, *,
                  after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        if type is not None and name is not None and uid is not None:
            job = self._select_job(JobKey(type, name, uid))
            if job is None or job.archived or (after is not None and not job.key > after) or limit == 0:
                return []
            return [job]
        out: list[Job] = []
        while limit is None or len(out) < limit:
            want = _PAGE if limit is None else limit - len(out)
            keys = [k for k in self._listed(type, name, after, want) if uid is None or k.uid == uid]
            if not keys:
                break
            out += self._live_rows(keys)
            after = keys[-1]
        return out

    def _live_rows(self, keys: list[JobKey]) -> list[Job]:
        """The live rows of ``keys``; entries whose row is not live are looked at under the
        grace rule and deleted once it has run out (index.py)."""
        live, stale = [], []
        for key, row in zip(keys, self.get_many(keys)):
            if row is not None and not row.archived:
                live.append(row)
                continue
            revision = 0 if row is None else row.revision
            self._observe(_LIVE, key, revision, None)
            if self._intent_expired(_LIVE, key, revision):
                stale.append(self._unlisted_write(key))
        self._send_quietly(stale)
        return live

    def _listed(self, type: str | None, name: str | None, after: JobKey | None, n: int) -> list[JobKey]:
        """The first ``n`` listed keys above ``after`` (of ``type``, and ``name``), by key."""
        if type is None and name is not None:  # a name of any type: each type's keys, merged
            return list(heapq.merge(*(self._listed(t.value, name, after, n) for t in JobType)))[:n]
        where, params = "", []
        if type is not None:
            where += " AND type = ?"
            params.append(type)
            if after is not None and after.type > type:
                return []
            if after is not None and after.type < type:
                after = None
        if name is not None:
            where += " AND name = ?"
            params.append(name)
            if after is not None and after.name > name:
                return []
            if after is not None and after.name < name:
                after = None
        if after is not None:
            cols = ("type", "name", "uid")[(type is not None) + (name is not None):]
            where += " AND uid > ?" if len(cols) == 1 else f" AND ({', '.join(cols)}) > ({', '.join('?' for _ in cols)})"
            params.extend(getattr(after, c) for c in cols)
        stmt = self._stmt(("llist", where), "SELECT shard, type, name, uid FROM k2_jobs_live WHERE shard IN ?"
                                            f"{where} PER PARTITION LIMIT ?")
        rows = _result(self._unpaged(stmt, [_ALL, *params, n]))
        return list(heapq.merge(*_by_shard(rows)))[:n]


def _by_shard(rows: Iterable[dict]) -> list[list[JobKey]]:
    """Each shard's keys (in key order within it, as read): the sorted runs heapq.merge takes."""
    shards: dict[int, list[JobKey]] = {}
    for r in rows:
        shards.setdefault(r["shard"], []).append(JobKey(r["type"], r["name"], r["uid"]))
    return list(shards.values())
