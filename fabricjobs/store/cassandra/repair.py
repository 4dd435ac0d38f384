"""The index repair pass: k2_jobs read page by page, in token order, and every live row whose
index entry is missing given its entry again (docs/explanation/cassandra-queue.md, "Repair").

The index is kept right by the order of writes (index.py): an entry is written before the LWT
that makes its row so, and deleted only on proof that it is false. Nothing reads a row that
has no entry, so a row that lost its entry anyway (an operator's delete, a restore of one
table without the other, a bug) would never be claimed again. This pass is the safety net:
slow (each node reads only its share of the token ring, a page at a time, at a rate the node
sets), and counted (``StoreStats.index_restored``), so that a repair that ever finds work shows.

A row read here may move on before its entry is looked up: a missing entry is written again
only if a second read of the row still shows the same revision. Were it to move on just after,
the entry written is merely superseded, and the next reader that meets it deletes it.
"""

from __future__ import annotations

from ...model import Job, JobKey
from ..base import RepairPage
from .index import _shard, _slot
from .listing import Listing
from .rows import _EPOCH0, _STATUS, _aware
from .session import _result, log

_MIN_TOKEN = -(2 ** 63)
_MAX_TOKEN = 2 ** 63 - 1
_COLUMNS = ("status", "archived", "worker_id", "next_run", "hold_until", "affinity", "priority", "epoch", "tries",
            "revision", "blocked", "creation_time")


def share_range(lanes: int, index: int) -> tuple[int, int]:
    """The tokens (lo, hi] of share ``index`` of ``lanes`` of the Murmur3 ring."""
    span = (_MAX_TOKEN - _MIN_TOKEN) // lanes
    lo = _MIN_TOKEN + index * span  # (Murmur3 gives no key the minimum token: "> lo" misses none)
    hi = _MAX_TOKEN if index == lanes - 1 else lo + span
    return lo, hi


def _candidate(r: dict) -> Job:
    """A row as the repair pass reads it: the columns its index entry carries."""
    next_run = _aware(r["next_run"])
    return Job(key=JobKey(r["type"], r["name"], r["uid"]), status=_STATUS[r["status"]],
               creation_time=_aware(r["creation_time"]) or _EPOCH0,
               archived=bool(r["archived"]), affinity=r["affinity"] or "", next_run=next_run,
               hold_until=_aware(r["hold_until"]), tries=r["tries"] or 0, worker_id=r["worker_id"],
               epoch=r["epoch"] or 0, revision=r["revision"] or 0,
               priority=r["priority"] if r["priority"] is not None else 4, blocked=bool(r["blocked"]))


class Repair(Listing):
    """Finding live rows without their index entry (or listing entry), and giving them one."""

    def _relist(self, rows: list[Job]) -> int:
        """Give each of ``rows`` (live when read) that is not listed its listing entry again
        (listing.py), if a second read shows it still live; how many were."""
        unlisted = [row for row, listed in zip(rows, self._is_listed(rows)) if not listed]
        if not unlisted:
            return 0
        again = [now for now in self.get_many([r.key for r in unlisted]) if now is not None and not now.archived]
        self._send([self._listed_write(r) for r in again], bounded=False)
        self.stats.index_restored += len(again)
        if again:
            log.warning("index repair: %d live jobs were missing from the listing (%s%s); they are listed again",
                        len(again), ", ".join(str(r.key) for r in again[:5]), ", ..." if len(again) > 5 else "")
        return len(again)

    def repair_index(self, share: tuple[int, int], cursor: object | None, limit: int) -> RepairPage:
        lanes, index = share
        lo, hi = share_range(lanes, index)
        start = lo if cursor is None else int(cursor)  # type: ignore[call-overload]
        stmt = self._stmt(("repair-page",),
            f"SELECT token(type, name, uid) AS t, type, name, uid, {', '.join(_COLUMNS)} FROM k2_jobs "
            "WHERE token(type, name, uid) > ? AND token(type, name, uid) <= ? LIMIT ?")
        rows = list(self._run(stmt, (start, hi, limit)))
        self.stats.repair_rows += len(rows)
        live = [_candidate(r) for r in rows if r["status"] is not None and not r["archived"]
                and not _STATUS[r["status"]].is_final]
        restored = self._restore(live)
        end = None if len(rows) < limit else rows[-1]["t"]
        return RepairPage(cursor=end, read=len(rows), restored=restored)

    def _restore(self, rows: list[Job]) -> int:
        """Give each of ``rows`` whose entry is missing its entry again; how many were."""
        look = self._stmt(("repair-entry",),
            "SELECT revision FROM k2_jobs_index WHERE bucket = ? AND shard = ? AND next_run = ? AND type = ?"
            " AND name = ? AND uid = ? AND revision = ?")
        futures = []
        for row in rows:
            bucket, due = _slot(row)
            if bucket is None:
                continue
            k = row.key
            futures.append((row, self._session.execute_async(look, (bucket, _shard(k), due, k.type, k.name, k.uid,
                                                                   row.revision))))
        missing = [row for row, f in futures if _result(f).one() is None]
        restored = self._relist(rows)
        if not missing:
            return restored
        for row, now in zip(missing, self.get_many([r.key for r in missing])):
            if now is None or now.revision != row.revision or _slot(now) != _slot(row):
                continue  # it moved on: its new entry was written before it did
            self._index_upsert(now, now.revision)
            restored += 1
            self.stats.index_restored += 1
            log.warning("index repair: %s (%s, revision %d) had no index entry; it has one again",
                        row.key, row.status.value, row.revision)
        return restored
