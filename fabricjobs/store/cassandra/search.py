"""The console's bounded reads on Cassandra (store/search.py): a page of archived jobs through
``k2_jobs_archived`` (the archive by day, ARCHIVE_SHARDS shards a day, End Time then key
within), and capped counts of the live rows through the index.

A search reads a day's shards at once, newest End Time first (an unpaged IN with ORDER BY, as
many entries as the page may still look at), from the cursor's day back to ``since``'s. An
entry carries the key, and (since schema version 17) the job's owner and final status, so every
filter is checked on the entries; the rows of the entries that pass are read (a few hundred at
a time) to show them and to skip an entry that is not its row's last end (a job resumed and
ended again has one entry per end). An entry written before version 17 has its row read for
owner and status. A page stops at ``limit`` jobs, at ``examine`` entries, or at ROW_CHECKS rows
read, and says where the next goes on. Entries of the version-3 ``k2_jobs_archive`` are not
searched (JOBSTATUS n DAYS AGO reads them until the retention has emptied it).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

from ...model import Job, JobKey, LIVE_STATUSES, Status
from ..search import BLOCKED, EXAMINE, ArchivePage, ArchiveQuery, Cursor, holds
from .index import _BLOCKED, SHARDS
from .rows import _EPOCH0, UTC, _when
from .schema import ARCHIVE_SHARDS
from .session import _result

ROW_CHECKS = 2000  # rows a page reads at most to check owner and status
_CHUNK = 200  # rows read at once
_FIRST_READ, _MOST_READ = 200, 20_000  # archive entries a search asks for in its first read of a day, at most
_SHARDS = list(range(ARCHIVE_SHARDS))
_INDEX_SHARDS = list(range(SHARDS))


def _may_match(entry: tuple[Cursor, JobKey, str | None, str | None], query: ArchiveQuery) -> bool:
    """Whether an archive entry may be one the query looks for, by what the entry itself holds
    (an owner or status it does not hold, written before schema version 17, is the row's to say)."""
    _, key, owner, status = entry
    if query.type not in (None, key.type) or not holds(key.name, query.name) or not holds(key.uid, query.uid):
        return False
    if owner is not None and query.owner not in (None, owner):
        return False
    return status is None or not query.statuses or status in {s.value for s in query.statuses}


def _ms(when: datetime) -> int:
    return (_when(when) - _EPOCH0) // timedelta(milliseconds=1)


def _at(ms: int) -> datetime:
    return _EPOCH0 + timedelta(milliseconds=ms)


class Search:
    """search_archived and live_counts for CassandraStore (a part of it, beside queue.py's
    buckets and the rows' get_many)."""

    get_many: Callable[[Sequence[JobKey]], list[Job | None]]
    store_time: Callable[[], datetime]
    _stmt: Callable[[tuple, str], Any]
    _unpaged: Callable[[Any, Any], Any]
    _buckets: Callable[[Collection[Status], Iterable[str | None] | None], list[str]]

    def search_archived(self, query: ArchiveQuery) -> ArchivePage:
        found: list[tuple[Cursor, Job]] = []
        examine = query.examine or EXAMINE["cassandra"]
        looked, checked, last = 0, 0, None
        pending: list[tuple[Cursor, JobKey]] = []
        for entry in self._entries(query):
            looked += 1
            last = entry[0]
            if _may_match(entry, query):
                pending.append((entry[0], entry[1]))
            if len(pending) >= _CHUNK or looked >= examine:
                checked += len(pending)
                found += self._checked(pending, query)
                pending = []
            if len(found) > query.limit:
                break
            if looked >= examine or checked >= ROW_CHECKS:
                return ArchivePage([j for _, j in found][:query.limit], last, _at(int(last[0])))
        found += self._checked(pending, query)
        if len(found) > query.limit:
            cursor = found[query.limit - 1][0]
            return ArchivePage([j for _, j in found[:query.limit]], cursor, _at(int(cursor[0])))
        return ArchivePage([j for _, j in found], None, query.since)

    def _checked(self, entries: list[tuple[Cursor, JobKey]], query: ArchiveQuery) -> list[tuple[Cursor, Job]]:
        """The entries whose row is wanted and ended at the entry's time (its last end)."""
        rows = self.get_many([key for _, key in entries]) if entries else []
        return [(cursor, row) for (cursor, _), row in zip(entries, rows)
                if row is not None and query.wants(row) and row.end_time is not None and _ms(row.end_time) == cursor[0]]

    def _entries(self, query: ArchiveQuery) -> Iterator[tuple[Cursor, JobKey, str | None, str | None]]:
        """Archive entries in the window, newest first, ``query.examine`` at most: a day's
        shards at once, in reads that start at a few pages' worth of entries and double, so
        that a page found among the first entries read (the usual case: no filter, or one that
        most entries pass) costs about its size, not EXAMINE entries."""
        if query.after is not None:
            end_ms, type, name, uid = query.after
            upper: tuple = (int(end_ms), type, name, uid)
        elif query.until is not None:
            upper = (_ms(query.until),)
        else:
            upper = ()
        latest = (self.store_time() + timedelta(days=1)).astimezone(UTC).date()  # (no entry is newer)
        day = min(_at(int(upper[0])).astimezone(UTC).date(), latest) if upper else latest
        first, since, left = query.since.astimezone(UTC).date(), _ms(query.since), query.examine or EXAMINE["cassandra"]
        chunk = max(_FIRST_READ, 4 * (query.limit + 1))
        while day >= first and left > 0:
            bound = upper
            while left > 0:
                asked = min(chunk, left)
                rows = _result(self._day_entries(day, bound, asked))
                got = 0
                for r in rows:
                    got += 1
                    end = _ms(r["end_time"])
                    if end < since:
                        return
                    left -= 1
                    bound = (end, r["type"], r["name"], r["uid"])
                    yield bound, JobKey(r["type"], r["name"], r["uid"]), r["owner"], r["status"]
                if got < asked:
                    break  # the day is done
                chunk = min(2 * chunk, _MOST_READ)
            upper = ()
            day -= timedelta(days=1)

    def _day_entries(self, day: date, upper: tuple, limit: int):
        bound = {0: "", 1: " AND end_time < ?", 4: " AND (end_time, type, name, uid) < (?, ?, ?, ?)"}[len(upper)]
        stmt = self._stmt(("archsearch", len(upper)),
                          "SELECT end_time, type, name, uid, owner, status FROM k2_jobs_archived WHERE day = ? AND shard IN ?"
                          # Every clustering column: over an IN, Cassandra merges the partitions by
                          # the ORDER BY columns only, and a read that goes on from a (time, key)
                          # bound must get the entries of one millisecond in key order too.
                          f"{bound} ORDER BY end_time DESC, type DESC, name DESC, uid DESC LIMIT ?")
        values = [(_at(v) if i == 0 else v) for i, v in enumerate(upper)]
        return self._unpaged(stmt, [day.strftime("%Y-%m-%d"), _SHARDS, *values, limit])

    # -- counts ---------------------------------------------------------------------------------

    def live_counts(self, cap: int) -> dict[str, int]:
        """Index entries per status, each key once (its newest revision), at most twice a
        shard's share of ``cap`` read per bucket and shard: a status with a full partition
        counts as more than ``cap``. An entry ahead of its row (a change in flight) counts as
        the status it is going to, a superseded one not swept yet as the one it was."""
        per_shard = 2 * cap // SHARDS + 1
        buckets = list(dict.fromkeys(self._buckets(sorted(LIVE_STATUSES, key=lambda s: s.value), None)))
        stmt = self._stmt(("livecount",), "SELECT bucket, shard, type, name, uid, revision, status "
                                          "FROM k2_jobs_index WHERE bucket IN ? AND shard IN ? PER PARTITION LIMIT ?")
        futures = [self._unpaged(stmt, [buckets[i:i + 8], _INDEX_SHARDS, per_shard])
                   for i in range(0, len(buckets), 8)]
        newest: dict[JobKey, tuple[int, str]] = {}
        sizes: dict[tuple[str, int], int] = {}
        for f in futures:
            for r in _result(f):
                key = JobKey(r["type"], r["name"], r["uid"])
                label = BLOCKED if r["bucket"] == _BLOCKED else (r["status"] or Status.WAITING.value)
                sizes[(r["bucket"], r["shard"])] = sizes.get((r["bucket"], r["shard"]), 0) + 1
                if key not in newest or r["revision"] > newest[key][0]:
                    newest[key] = (r["revision"], label)
        counts: dict[str, int] = {}
        for _, label in newest.values():
            counts[label] = counts.get(label, 0) + 1
        full = {BLOCKED if bucket == _BLOCKED else bucket.partition("|")[0] for (bucket, _), n in sizes.items()
                if n >= per_shard}
        return {label: cap + 1 if label in full else min(n, cap + 1) for label, n in counts.items()}
