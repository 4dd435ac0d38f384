"""Reading the index as a queue: scans over buckets and shards, one candidate per key, and the
reads a node's reconcile pass makes with them ("the oldest WAITING jobs", "node-a's SCHEDULED
jobs due before T" are range reads of index partitions, not scans of k2_jobs).

Which of several entries of one key is the candidate is decided by index.py's rules (a key
with one entry is taken without reading its row: the hot path). What a scan read of a
partition then decides its sweep (sweep.py), sent from here.

Entries carry the columns a node needs to choose (status, owner, due time, hold, affinity,
priority, epoch, tries); rows built from them are "candidates" whose arguments, output and
error are not filled in. That is safe because :meth:`cas` writes only the columns that
changed (a full rewrite, merged with the stored row, when a row is archived or un-archived,
so TTLs cover every cell) and returns the stored row read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Collection, Iterable, Sequence

from ...model import Job, JobKey, Status
from ..base import Lane, in_lane
from .index import _BLOCKED, SHARDS, Index, _slot
from .rows import _EPOCH0, _STATUS, _aware, _when
from .session import _result, log
from .sweep import SweepPlan

_ALL_SHARDS = list(range(SHARDS))
_SCAN_BUCKETS = 8  # buckets per index read: an IN over at most 8 x SHARDS partitions
_CLUSTERING = ("next_run", "type", "name", "uid", "revision")  # of k2_jobs_index, in order
_SHARED_CAP = 10_000  # entries per partition by_owner reads of a bucket every owner shares
EMPTY_WAITING_KEEP = 0.1  # seconds an empty read of WAITING rows is kept between refreshes (Queue.waiting)
_INDEX_COLUMNS = ("status", "worker_id", "hold_until", "affinity", "priority", "epoch", "tries")
#: What a claim candidate read from the index carries of its row (Queue.waiting), besides its
#: key and revision: the rest (arguments, counters, ...) is not known without reading the row.
CANDIDATE_FIELDS = (*_INDEX_COLUMNS, "next_run", "blocked")


@dataclass(frozen=True)
class _Entry:
    """One index entry as a scan read it."""
    bucket: str
    shard: int
    next_run: datetime
    key: JobKey
    revision: int
    written_at: datetime | None
    job: Job  # a candidate built from the entry


class Queue(Index):
    """The index read: candidates for the node's decisions, and the JobStore reads built on them."""

    def _scan(self, buckets: str | Sequence[str], *, before: datetime | None = None,
              since: datetime | None = None, limit: int | None = None) -> list[_Entry]:
        """Entries of the given buckets from every shard, soonest due first; ``limit`` is per
        partition (bucket and shard). One request per ``_SCAN_BUCKETS`` buckets, an IN over
        their partitions, instead of one per partition: a full reconcile pass on an idle node
        was ~60 requests, and on a busy cluster their count, not their rows, is the cost. The
        request is not paged: a paged IN makes the coordinator read its partitions one after
        another, an unpaged one reads them all at once (each is bounded by ``limit`` or by
        what its bucket can hold). What it read then decides the sweeps (sweep.py)."""
        bucket_list = [buckets] if isinstance(buckets, str) else list(dict.fromkeys(buckets))
        cols = "bucket, shard, next_run, type, name, uid, revision, written_at, " + ", ".join(_INDEX_COLUMNS)
        where = "bucket IN ? AND shard IN ?" + (" AND next_run < ?" if before is not None else "") \
            + (" AND next_run >= ?" if since is not None else "")
        cql = f"SELECT {cols} FROM k2_jobs_index WHERE {where}" + (" PER PARTITION LIMIT ?" if limit is not None else "")
        stmt = self._stmt(("scan", before is not None, since is not None, limit is not None), cql)
        read_at = self._sweeper.now()  # before the read: what the sweeps may shadow is older
        futures = []
        for i in range(0, len(bucket_list), _SCAN_BUCKETS):
            params: list = [bucket_list[i:i + _SCAN_BUCKETS], _ALL_SHARDS]
            if before is not None:
                params.append(before)
            if since is not None:
                params.append(since)
            if limit is not None:
                params.append(limit)
            futures.append(self._unpaged(stmt, params))
        entries = []
        seen: dict[tuple[str, int], list[tuple]] = {(b, s): [] for b in bucket_list for s in _ALL_SHARDS}
        for f in futures:
            for r in _result(f):
                key = JobKey(r["type"], r["name"], r["uid"])
                next_run = _when(r["next_run"])
                seen[(r["bucket"], r["shard"])].append((next_run, key.type, key.name, key.uid, r["revision"]))
                job = Job(
                    key=key, status=_STATUS[r["status"]], creation_time=_EPOCH0,
                    affinity=r["affinity"] or "", next_run=None if next_run == _EPOCH0 else next_run,
                    hold_until=_aware(r["hold_until"]), tries=r["tries"] or 0, worker_id=r["worker_id"],
                    epoch=r["epoch"] or 0, revision=r["revision"],
                    priority=r["priority"] if r["priority"] is not None else 4,
                )
                if r["bucket"] == _BLOCKED:
                    job = job.replace(blocked=True)
                entries.append(_Entry(r["bucket"], r["shard"], next_run, key, r["revision"], _aware(r["written_at"]), job))
        for partition, live in seen.items():
            if self._clock.refuses or not self._clock.sure:
                break  # tidying is left to hosts that may write, by a clock they know (clock.py)
            plan = self._sweeper.plan(partition, live, read_at=read_at, since=since, before=before,
                                      complete=limit is None or len(live) < limit)
            if plan is not None:
                self._sweep(plan)
        entries.sort(key=lambda e: (e.next_run, e.key))
        return entries

    def _sweep(self, plan: SweepPlan):
        """One range delete per gap of ``plan``, in one unlogged batch (one partition: one
        mutation), stamped in the past (see sweep.py). Sent, not waited for: a lost
        sweep costs only the tombstones it would have covered, until the next."""
        from cassandra.query import BatchStatement, BatchType

        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        bucket, shard = plan.partition
        for gap in plan.gaps:
            where = ""
            params: list = [plan.stamp_us, bucket, shard]
            for end, op in ((gap.lo, ">=" if gap.lo_included else ">"), (gap.hi, "<")):
                if end is not None:
                    cols = _CLUSTERING[:len(end)]
                    where += f" AND ({', '.join(cols)}) {op} ({', '.join('?' for _ in cols)})"
                    params.extend(end)
            stmt = self._stmt(("sweep", where), f"DELETE FROM k2_jobs_index USING TIMESTAMP ? WHERE bucket = ? AND shard = ?{where}")
            batch.add(stmt, params)
        self.stats.index_sweeps += 1
        future = self._session.execute_async(batch)
        future.add_errback(lambda exc: log.debug("index sweep of %s failed: %s", plan.partition, exc))
        return future

    def _latest(self, entries: Iterable[_Entry]) -> list[_Entry]:
        """One candidate entry per key, soonest due first.

        A key with one entry returns it without a read (the hot path: a wrong candidate only
        costs a failed CAS, which :meth:`_repair` settles). A key with several entries is
        decided by its row's revision (see the module docstring), since the newest entry
        may be an intent whose LWT never happened and the older one the row's true entry;
        so is one whose entry a CAS found ahead of its row (index.py): it is a candidate
        again once its row has caught up."""
        by_key: dict[JobKey, dict[tuple, _Entry]] = {}
        for e in entries:  # the same entry twice (a bucket scanned twice) is one entry
            by_key.setdefault(e.key, {})[(e.bucket, e.next_run, e.revision)] = e
        chosen, several = [], []
        for key, es in by_key.items():
            if len(es) > 1 or (self._ahead and any((e.bucket, key, e.revision) in self._ahead for e in es.values())):
                several.append(key)
            else:
                chosen.append(next(iter(es.values())))
        if several:
            for key, row in zip(several, self.get_many(several)):
                for e in by_key[key].values():
                    if row is not None and row.revision >= e.revision:
                        self._ahead.discard((e.bucket, key, e.revision))  # its row caught up
                settled = self._settle(list(by_key[key].values()), row)
                if settled is not None:
                    chosen.append(settled)
        for e in chosen:  # the entry's own age, for _repair's grace rule
            self._observe(e.bucket, e.key, e.revision, e.written_at)
        return sorted(chosen, key=lambda e: (e.next_run, e.key))

    def _settle(self, entries: list[_Entry], row: Job | None) -> _Entry | None:
        """Several entries of one key, and its row (None: none yet): delete the ones the row
        proves false and the expired intents; return the row's true entry if it is among them."""
        true_entry = None
        for e in entries:
            if row is None or e.revision > row.revision:
                self._observe(e.bucket, e.key, e.revision, e.written_at)
                if self._intent_expired(e.bucket, e.key, e.revision):  # an intent whose LWT never came
                    self._tidy(e.bucket, e.key, e.next_run, e.revision)
            elif e.revision < row.revision or (e.bucket, e.next_run) != _slot(row):
                self._tidy(e.bucket, e.key, e.next_run, e.revision)  # superseded, or a loser's intent
            else:
                true_entry = e
        return true_entry

    def _registry(self, kind: str) -> list[str]:
        """The owners (or priorities) that have had index entries: read each time, or kept for
        the time :meth:`refresh` allows. A node's every claim pass names the WAITING buckets:
        read each time, the registry was as many reads per recurring fire as the index's own
        (2.5 a fire with 20 jobs due every second). What this process registered itself is
        always in (docs/explanation/cassandra-data-model.md)."""
        at = self._monotonic()
        read = self._registry_read.get(kind)
        if read is None or not 0 <= at - read[0] < self._keep_for:
            rows = self._run(self._stmt(("owners",), "SELECT owner FROM k2_jobs_owners WHERE kind = ?"), (kind,))
            read = (at, frozenset(r["owner"] for r in rows))
            self._registry_read[kind] = read
        own = {tag for registry, tag in frozenset(self._owners_known) if registry == kind}  # (a copy: others add)
        return sorted(read[1] | own)

    def refresh(self, keep_for: float = 0.0) -> None:
        self._registry_read = {}
        self._keep_for = keep_for
        self._empty_waiting = None

    def _empty_waiting_holds(self, priorities: tuple[int, int] | None) -> bool:
        """The last first page of WAITING rows (of these priorities) was empty, was read since
        this process last made a row WAITING, and not longer ago than the time it is kept."""
        empty = self._empty_waiting
        if empty is None or self._keep_for <= 0:
            return False
        at, written, of = empty
        age = self._monotonic() - at
        return of == priorities and written == self._waiting_written and 0 <= age < min(self._keep_for, EMPTY_WAITING_KEEP)

    def _owners(self) -> list[str]:
        return self._registry("owner")

    def _waiting_buckets(self, within: tuple[int, int] | None = None) -> list[str]:
        """The WAITING|priority buckets, highest first (``within``: those in (low, high) only)."""
        priorities = sorted({int(p) for p in self._registry("priority")} | {4}, reverse=True)
        low, high = within if within is not None else (min(priorities), max(priorities))
        return [f"WAITING|{p}" for p in priorities if low <= p <= high]

    def _buckets(self, statuses: Collection[Status], owners: Iterable[str | None] | None) -> list[str]:
        out = []
        for s in statuses:
            if s is Status.WAITING:
                out.extend(self._waiting_buckets())
                out.append(_BLOCKED)
            elif s in (Status.IN_PROCESS, Status.SCHEDULED):
                names = [""] + self._owners() if owners is None else [o or "" for o in owners]
                out.extend(f"{s.value}|{o}" for o in dict.fromkeys(names))
                if s is Status.SCHEDULED and _BLOCKED not in out:
                    out.append(_BLOCKED)
            elif not s.is_final:
                out.append(s.value)
        return out

    def _candidates(self, buckets: list[str], owners: set | None = None, statuses: Collection[Status] | None = None,
                    limit: int | None = None) -> list[Job]:
        """The candidates of ``buckets``; with ``limit``, the read of each partition stops at
        that many entries (soonest due first): a read bounded by the caller's need, not by
        how big the bucket has grown (a dead node's thousands of schedules, a mass STOPJOB)."""
        jobs = [e.job for e in self._latest(self._scan(buckets, limit=limit))] if buckets else []
        if owners is not None:
            jobs = [j for j in jobs if j.worker_id in owners]
        if statuses is not None:  # the BLOCKED bucket holds WAITING and SCHEDULED rows
            jobs = [j for j in jobs if j.status in statuses]
        return jobs

    def waiting(self, limit: int, after: tuple[datetime, JobKey] | None = None,
                priorities: tuple[int, int] | None = None, lane: Lane | None = None) -> list[Job]:
        """(The index has no lane to read by: a lane's rows are the others' pages, filtered.)

        Kept between refreshes (:meth:`refresh`), a first page that came back empty stays so
        for EMPTY_WAITING_KEEP unless this process made a row WAITING since: a node's claim
        passes, woken by each run that ends and each fire offered, read an empty queue dozens
        of times a second. Another process's new row is seen at the next full pass (a doorbell
        on its host) or within that time."""
        if after is None and self._empty_waiting_holds(priorities):
            return []
        jobs: list[Job] = []
        first = after is None
        while True:
            read = (self._monotonic(), self._waiting_written, priorities)
            page = self._waiting_page(limit, after, priorities)
            if first and not page and self._keep_for > 0:
                self._empty_waiting = read
            first = False
            jobs += [j for j in page if in_lane(j, lane)]
            if lane is None or len(jobs) >= limit or len(page) < limit:
                return jobs[:limit]
            after = (page[-1].next_run or _EPOCH0, page[-1].key)

    def _waiting_page(self, limit: int, after: tuple[datetime, JobKey] | None,
                      priorities: tuple[int, int] | None) -> list[Job]:
        buckets = self._waiting_buckets(priorities)
        if not buckets:
            return []
        entries = self._scan(buckets, limit=limit, since=after[0] if after else None)
        jobs = [e.job for e in self._latest(entries)]
        if after is not None:
            jobs = [j for j in jobs if ((j.next_run or _EPOCH0), j.key) > (after[0], after[1])]
        return jobs[:limit]

    def waiting_by_priority(self, limit: int, priorities: tuple[int, int] | None = None) -> list[Job]:
        jobs: list[Job] = []
        for bucket in self._waiting_buckets(priorities):  # highest priority first
            jobs.extend(e.job for e in self._latest(self._scan(bucket, limit=limit)))
            if len(jobs) >= limit:
                break
        return sorted(jobs, key=lambda j: (-j.priority, j.next_run or _EPOCH0, j.key))[:limit]

    def blocked_jobs(self, limit: int, since: datetime | None = None) -> list[Job]:
        keys = [e.key for e in self._latest(self._scan(_BLOCKED, since=since, limit=limit))][:limit]
        return [j for j in self.get_many(keys) if j is not None and j.waits_for_parents and not j.archived]

    def due_scheduled(self, worker_id: str, before: datetime, limit: int) -> list[Job]:
        entries = self._scan(f"{Status.SCHEDULED.value}|{worker_id}", before=before, limit=limit)
        return [e.job for e in self._latest(entries)][:limit]

    def by_status(self, statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        jobs = self._candidates(self._buckets(statuses, None), statuses=set(statuses), limit=limit)
        return jobs if limit is None else jobs[:limit]

    def by_owner(self, worker_ids: Collection[str | None], statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        owners = set(worker_ids)
        if not owners or not statuses:
            return []
        owned = [s for s in statuses if s in (Status.IN_PROCESS, Status.SCHEDULED)]
        shared = [s for s in statuses if s not in owned]
        jobs = self._candidates(self._buckets(owned, owners), owners, set(owned), limit) if owned else []
        if shared:
            # Buckets every owner shares (STOPPING, RESTART, WAITING): the owners' rows may be
            # anywhere in them, so the read stops at a cap, not at the caller's limit.
            seen = {j.key for j in jobs}
            cap = None if limit is None else max(limit, _SHARED_CAP)
            jobs += [j for j in self._candidates(self._buckets(shared, None), owners, set(shared), cap)
                     if j.key not in seen]
        return jobs if limit is None else jobs[:limit]
