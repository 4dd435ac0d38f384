"""The live jobs in key order, a page at a time: ``k2_jobs_live``, one entry per live row,
spread over ``LIVE_SHARDS`` partitions and clustered by key (docs/explanation/cassandra-queue.md,
"Listings").

The index (index.py) is ordered by due time, in buckets that a job moves between; a listing by
key read all of it (twice, to catch the jobs that moved while it read) to show a page of fifty.
Here each shard is read in key order, a page at a time, and the shards are merged as they are
read: a page of n costs about n entries (and n rows), not the number of live jobs. A key does
not move while its job is live, so pages neither skip nor repeat a job.

An entry names one *life* of its key: the key and its row's creation time (a STARTJOB that
reuses an archived key and a RESUMEJOB start a new life, with a new creation time). Kept like
the index: an entry is written before the LWT that makes its row live, and the entry of that
life deleted after the LWT that archives it; a delete names its life, so it never takes a new
life's entry written meanwhile. A reader checks each entry against its row: an older life's
entry (the row has another creation time, or is archived with this one) is deleted at once;
one of a life the row has not reached (an insert or a resume whose LWT is still to come, or
never came) is skipped, and deleted only once it has stood unchanged for ``INTENT_GRACE``
(``written_at`` tells a rewritten entry apart). A live row without its entry is given one by
the repair pass (repair.py). Deletes leave tombstones where jobs ended lately, spread over the
key space; they go with gc_grace (10 minutes).
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from datetime import datetime
from typing import Iterator

from ...model import Job, JobKey, JobType
from .index import Index
from .rows import _EPOCH0, _aware, _stored_ms, _when
from .session import _result, _Write

LIVE_SHARDS = 8
LISTING_SINCE = 16  # the schema version that made k2_jobs_live
_PAGE = 500  # entries per page of a shard's read when a caller wants every live job
_LIVE = "LIVE"  # the "bucket" under which index.py's grace clock watches listing entries


def _live_shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.uid}\0{key.name}\0{key.type}".encode()) % LIVE_SHARDS


def life_of(job: Job) -> datetime:
    """Which life of its key a row is in: its creation time, as stored."""
    return _stored_ms(job.creation_time or _EPOCH0)


class Listing(Index):
    """k2_jobs_live: its writes (called where a row becomes live or archived) and the listing."""

    def _listed_write(self, job: Job) -> _Write:
        stmt = self._stmt(("lput",), "INSERT INTO k2_jobs_live (shard, type, name, uid, created, written_at) "
                                     "VALUES (?, ?, ?, ?, ?, toTimestamp(now()))")
        k = job.key
        return _Write(stmt, (_live_shard(k), k.type, k.name, k.uid, life_of(job)), what=f"the listing entry of {k}")

    def _unlisted_write(self, key: JobKey, created: datetime) -> _Write:
        stmt = self._stmt(("ldel",), "DELETE FROM k2_jobs_live WHERE shard = ? AND type = ? AND name = ? AND uid = ? "
                                     "AND created = ?")
        self._seen.pop((_LIVE, key, int(created.timestamp() * 1000)), None)
        return _Write(stmt, (_live_shard(key), key.type, key.name, key.uid, created),
                      what=f"the listing entry of {key}")

    def _is_listed(self, rows: list[Job]) -> list[bool]:
        """Whether each row's own life is listed."""
        stmt = self._stmt(("lget",), "SELECT uid FROM k2_jobs_live WHERE shard = ? AND type = ? AND name = ? AND uid = ? "
                                     "AND created = ?")
        futures = [self._session.execute_async(stmt, (_live_shard(r.key), r.key.type, r.key.name, r.key.uid, life_of(r)))
                   for r in rows]
        return [_result(f).one() is not None for f in futures]

    # -- the listing ---------------------------------------------------------------------------------

    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None, *,
                  after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        if type is not None and name is not None and uid is not None:
            job = self._select_job(JobKey(type, name, uid))
            if job is None or job.archived or (after is not None and not job.key > after) or limit == 0:
                return []
            return [job]
        if limit == 0:
            return []
        page = _PAGE if limit is None else max(4, limit // LIVE_SHARDS + 2)
        entries = self._listed(type, name, after, page)
        if uid is not None:
            entries = (e for e in entries if e[0].uid == uid)
        out: list[Job] = []
        while limit is None or len(out) < limit:
            want = _PAGE if limit is None else limit - len(out)
            chunk = list(itertools.islice(entries, want))
            if not chunk:
                break
            out += self._live_rows(chunk)
        return out if limit is None else out[:limit]

    def _live_rows(self, entries: list[tuple[JobKey, datetime, datetime | None]]) -> list[Job]:
        """The live rows the entries name, once each; entries the rows prove false go (see the
        module docstring)."""
        keys = list(dict.fromkeys(key for key, _, _ in entries))
        rows = dict(zip(keys, self.get_many(keys)))
        live: dict[JobKey, Job] = {}
        stale = []
        for key, created, written_at in entries:
            row = rows[key]
            life = None if row is None else life_of(row)
            if row is not None and not row.archived and created == life:
                live[key] = row  # the row's own life
                continue
            if row is not None and (created < life or (row.archived and created == life)):  # type: ignore[operator]
                stale.append(self._unlisted_write(key, created))  # an older life's entry
                continue
            if row is not None and not row.archived and key not in live:
                live[key] = row  # listed under a life it has not reached: list the row all the same
            token = int(created.timestamp() * 1000)  # a life still to come, or one that never came
            self._observe(_LIVE, key, token, written_at)
            if self._intent_expired(_LIVE, key, token):
                stale.append(self._unlisted_write(key, created))
        self._send_quietly(stale)
        return [live[k] for k in keys if k in live]

    def _listed(self, type: str | None, name: str | None, after: JobKey | None,
                page: int) -> Iterator[tuple[JobKey, datetime, datetime | None]]:
        """The listed entries above ``after`` (of ``type``, and ``name``), by key: each shard
        read in key order, ``page`` entries a request, merged as they come."""
        if type is None and name is not None:  # a name of any type: each type's entries, merged
            return heapq.merge(*(self._listed(t.value, name, after, page) for t in JobType))
        where, params = "", []
        if type is not None:
            where += " AND type = ?"
            params.append(type)
            if after is not None and after.type > type:
                return iter(())
            if after is not None and after.type < type:
                after = None
        if name is not None:
            where += " AND name = ?"
            params.append(name)
            if after is not None and after.name > name:
                return iter(())
            if after is not None and after.name < name:
                after = None
        if after is not None:
            cols = ("type", "name", "uid")[(type is not None) + (name is not None):]
            where += " AND uid > ?" if len(cols) == 1 else f" AND ({', '.join(cols)}) > ({', '.join('?' for _ in cols)})"
            params.extend(getattr(after, c) for c in cols)
        stmt = self._stmt(("llist", where), f"SELECT type, name, uid, created, written_at FROM k2_jobs_live "
                                            f"WHERE shard = ?{where}")
        futures = []
        for shard in range(LIVE_SHARDS):
            bound = stmt.bind([shard, *params])
            bound.fetch_size = page
            futures.append(self._session.execute_async(bound))
        return heapq.merge(*(_entries(_result(f)) for f in futures))


def _entries(rows) -> Iterator[tuple[JobKey, datetime, datetime | None]]:
    """A shard's entries, as its pages come (the driver fetches the next page on demand)."""
    for r in rows:
        yield JobKey(r["type"], r["name"], r["uid"]), _when(r["created"]), _aware(r["written_at"])
