"""The k2_jobs_index entries: which bucket and shard a row's entry is in, writing it before the
row's LWT (an intent), and deleting an entry only on evidence that it is no longer true.

``k2_jobs_index`` is where a reconcile pass finds the rows it may act on without scanning: one
entry per live row, in a *bucket* named after its status (and owner for IN_PROCESS / SCHEDULED:
``SCHEDULED|node-a``; priority for WAITING: ``WAITING|4``), spread over ``SHARDS`` partitions and
clustered by due time. Plain writes (no LWT on this table). Reading it is queue.py; the
tombstones that moving entries leave are swept up by sweep.py.

Keeping the index right without transactions across tables

A change of a row from bucket B1 (revision r) to bucket B2 (revision r + 1) writes the B2
entry first (an *intent*), then the LWT, then deletes the B1 entry; an insert writes its
revision-1 entry before its ``IF NOT EXISTS``. A crash in between leaves an extra entry, never
a missing one, so no live job becomes invisible. Only the row's own revision tells a
superseded entry from an intent whose LWT may still come (the row may even not exist yet),
so an entry is deleted only on that evidence:

* revision < the row's: superseded (revisions only grow), deleted at once by whoever meets it
  (a CAS that fails on it with a newer current row, or a scan, see below);
* revision = the row's: the row's true entry if it is where the row puts it (the row's
  bucket and due time): never deleted by a reader. Any other entry at that revision is the
  intent of a change that lost (or never ran) against the one that made the row: its LWT
  cannot apply any more, and it is deleted at once;
* revision > the row's, or no row at all: possibly an intent whose LWT has not happened
  *yet*. It is deleted only once it has been there, unchanged, for longer than
  ``INTENT_GRACE`` (far longer than one attempt of a writer, which writes its intent again
  before each retry), as the reader's own monotonic clock measures from its first sighting
  (no two hosts' clocks are compared), so a slow writer's intent is never taken away before
  its LWT; one whose writer died is gone after the grace.

A CAS that fails on a candidate applies these rules to the candidate's entry with the current
row it got back (reading the row's bucket and due time when the revisions are equal). One that
fails because the entry is ahead of its row (no row yet, or an older one: an intent whose LWT
is still to come) also remembers the entry as *ahead*: until a read shows its row caught up,
scans take it like a key with several entries (below), row read first, instead of handing it
out again. Without that, nodes woken while a script's STARTJOBs were being written tried the
same unwritten rows pass after pass (on Apache Cassandra, beside two busy loops: 585 of 985
claims lost, 536 of them on rows not written yet, three times each), and every such LWT
contended with the insert's own Paxos round, which made the window longer. A scan
that finds one entry for a key returns it without reading the row (the hot path); a key with
several entries (rare: a change in flight, or a writer that died between its intent and its
LWT) has its row read, and the row's true entry is the candidate. A writer whose LWT did not
apply drops its own intent unless the row now is what it describes; an insert that sees no
row at all leaves its intent to the grace rule (another insert of the same key may have
written the very same entry and still be before its LWT).
"""

from __future__ import annotations

import threading
import time
import zlib
from datetime import datetime, timedelta
from typing import Callable

from ...errors import StoreError
from ...model import Job, JobKey, Status
from ..base import Version
from .rows import _EPOCH0, Rows, _stored_ms
from .session import _bound, _Write
from .sweep import Sweeper

SHARDS = 8  # partitions per bucket: raise it past ~2,700 claims/s from one priority (docs/explanation/cassandra-data-model.md)
INTENT_GRACE = timedelta(seconds=60)
_BLOCKED = "BLOCKED"


def _bucket(status: Status, worker_id: str | None, archived: bool, blocked: bool = False, priority: int = 4) -> str | None:
    """Which index bucket a live row is in: SCHEDULED|owner, IN_PROCESS|owner, WAITING|priority,
    BLOCKED (any status, while a parent is unfinished), STOPPING, RESTART."""
    if archived or status.is_final:
        return None
    if blocked and status in (Status.WAITING, Status.SCHEDULED):
        return _BLOCKED
    if status in (Status.IN_PROCESS, Status.SCHEDULED):
        return f"{status.value}|{worker_id or ''}"
    if status is Status.WAITING:
        return f"WAITING|{priority}"
    return status.value


def _job_bucket(job: Job) -> str | None:
    return _bucket(job.status, job.worker_id, job.archived, job.blocked, job.priority)


def _slot(row: Job) -> tuple[str | None, datetime]:
    """Where a row's index entry is (bucket, due time), as stored: Cassandra keeps timestamps
    in whole milliseconds, so a Job built here (microseconds) and one read back compare equal."""
    return _job_bucket(row), _stored_ms(row.next_run or _EPOCH0)


def _shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.type}\0{key.name}\0{key.uid}".encode()) % SHARDS


class Index(Rows):
    """Keeping each live row's index entry where the row says, without a transaction."""

    _owners_known: set[tuple[str, str]]
    _registry_read: dict[str, tuple[float, frozenset[str]]]
    _keep_for: float
    _empty_waiting: tuple[float, int, tuple[int, int] | None] | None
    _waiting_written: int
    _seen: dict[tuple, tuple[datetime | None, float]]
    _ahead: set[tuple[str, JobKey, int]]
    _monotonic: Callable[[], float]
    _sweeper: Sweeper

    def _init_index(self, wall: Callable[[], float] = time.time) -> None:
        """This process's memory of the index: what it registered, when it first saw each
        possible intent, and what its sweeps may cover (dated by ``wall``: Cassandra's time)."""
        self._owners_known = set()
        self._registry_read = {}  # kind -> (monotonic, tags): the last read of k2_jobs_owners
        self._keep_for = 0.0  # seconds what was read is kept (Queue.refresh)
        self._empty_waiting = None  # (monotonic, _waiting_written, priorities) of an empty read (Queue.waiting)
        self._waiting_written = 0  # bumped by every entry this process writes to a WAITING bucket
        self._waiting_lock = threading.Lock()
        # When this process first saw each possible intent (its written_at as seen), on its own
        # monotonic clock: an intent's age is never a comparison of two hosts' clocks.
        self._seen = {}
        self._ahead = set()  # (bucket, key, revision) of entries a CAS found ahead of their row
        self._monotonic = time.monotonic
        self._sweeper = Sweeper(wall)

    def _register(self, registry: str, tag: str, timeout: float | None = None) -> None:
        """Write ``tag`` (an owner or a priority) to k2_jobs_owners: a full read visits its buckets."""
        self._run(self._stmt(("owner",), "INSERT INTO k2_jobs_owners (kind, owner) VALUES (?, ?)"), (registry, tag), timeout)
        self._owners_known.add((registry, tag))

    def _entry_write(self, job: Job, revision: int) -> _Write | None:
        """The index entry of ``job`` at ``revision`` (None: a row in no bucket). Registers a new
        owner or priority in k2_jobs_owners first (once per process)."""
        bucket = _job_bucket(job)
        if bucket is None:
            return None
        kind, _, tag = bucket.partition("|")
        registry = "priority" if kind == Status.WAITING.value else "owner"
        self._made_waiting(bucket)
        if tag and (registry, tag) not in self._owners_known:
            self._register(registry, tag)
        stmt = self._stmt(("iput",),
            "INSERT INTO k2_jobs_index (bucket, shard, next_run, type, name, uid, revision, status, worker_id,"
            " hold_until, affinity, priority, epoch, tries, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now()))")
        k = job.key
        return _Write(stmt, (
            bucket, _shard(k), job.next_run or _EPOCH0, k.type, k.name, k.uid, revision, job.status.value,
            _bound(job.worker_id), _bound(job.hold_until), job.affinity, job.priority, job.epoch, job.tries,
        ), what=f"the index entry of {k}")

    def _made_waiting(self, bucket: str | None) -> None:
        """A row of this process's is (or is about to be) in ``bucket``: if that is a WAITING
        bucket, an empty read of the queue kept from before says nothing of it (Queue.waiting).
        Told when the entry is written and again when the row's LWT has applied, so that a
        read between the two, which may have missed the entry, is not kept either."""
        if bucket is not None and bucket.startswith(f"{Status.WAITING.value}|"):
            with self._waiting_lock:
                self._waiting_written += 1

    def _index_upsert(self, job: Job, revision: int) -> None:
        write = self._entry_write(job, revision)
        if write is not None:
            self._send([write], bounded=True)
            self._made_waiting(_job_bucket(job))  # (no LWT may follow, as in the repair pass: told once it is there)

    def _delete_write(self, bucket: str | None, key: JobKey, next_run: datetime | None, revision: int) -> _Write | None:
        """The delete of an index entry; once sent, the sweeper knows where a tombstone is."""
        if bucket is None:
            return None
        stmt = self._stmt(("idel",),
            "DELETE FROM k2_jobs_index WHERE bucket = ? AND shard = ? AND next_run = ? AND type = ? AND name = ?"
            " AND uid = ? AND revision = ?")
        due = next_run or _EPOCH0
        self._seen.pop((bucket, key, revision), None)
        self._ahead.discard((bucket, key, revision))
        partition, position = (bucket, _shard(key)), (_stored_ms(due), key.type, key.name, key.uid, revision)
        return _Write(stmt, (bucket, _shard(key), due, key.type, key.name, key.uid, revision),
                      on_sent=lambda: self._sweeper.deleted(partition, position))

    def _tidy(self, bucket: str | None, key: JobKey, next_run: datetime | None, revision: int, *, repair: bool = True,
              later: list | None = None) -> None:
        """Delete an index entry that is no longer true, after the LWT decided (into ``later``,
        to be sent with others, if given). If this write is lost the entry is only stale: the
        next reader that meets it deletes it."""
        write = self._delete_write(bucket, key, next_run, revision)
        if write is None:
            return
        if repair:  # not the writer's own entry of a change it made
            self.stats.index_repairs += 1
        if later is not None:
            later.append(write)
        else:
            self._send_quietly([write])

    def _observe(self, bucket: str, key: JobKey, revision: int, written_at: datetime | None) -> None:
        """Note that this entry exists as of now (kept from the first sighting while its
        ``written_at`` stays the same: a writer that retries writes its intent again)."""
        k = (bucket, key, revision)
        seen = self._seen.get(k)
        if seen is None or seen[0] != written_at:
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[k] = (written_at, self._monotonic())

    def _intent_expired(self, bucket: str, key: JobKey, revision: int) -> bool:
        """Whether an entry that may be an intent has existed, unchanged, for longer than
        ``INTENT_GRACE`` (far longer than any attempt of a writer, which re-writes its intent
        before each retry), measured on this process's own clock since it first saw the entry.
        Never seen: not expired (a later scan starts its clock)."""
        seen = self._seen.get((bucket, key, revision))
        return seen is not None and self._monotonic() - seen[1] > INTENT_GRACE.total_seconds()

    def _repair(self, expected: Job, current: Version | None, later: list | None = None) -> None:
        """A CAS on ``expected`` failed: drop its index entry if it is stale.

        Only a newer row proves the entry superseded. A missing row or an older one means the
        entry may be an intent whose LWT is still to come (an insert's entry before its
        ``IF NOT EXISTS``): it goes only after ``INTENT_GRACE``, else the row would be left
        without an entry once that LWT applies."""
        bucket = _job_bucket(expected)
        if bucket is None:
            return
        if current is not None and current.revision > expected.revision:
            self._tidy(bucket, expected.key, expected.next_run, expected.revision, later=later)
        elif current is None or current.revision < expected.revision:
            if self._intent_expired(bucket, expected.key, expected.revision):
                self._tidy(bucket, expected.key, expected.next_run, expected.revision, later=later)
            else:
                if len(self._ahead) > 10_000:
                    self._ahead.clear()  # only a saving: forgotten entries cost a failed CAS each
                self._ahead.add((bucket, expected.key, expected.revision))
        else:
            # Same revision, other content: a losing (or dead) writer's intent, e.g. a dead
            # node's outcome intent after a takeover made the same revision. It can never
            # apply; delete it unless it sits where the row's true entry does (rare; read).
            try:
                row = self._select_job(expected.key)
            except StoreError:
                return  # only tidying: a later CAS on it tries again
            if row is not None and row.revision == expected.revision \
                    and Version.of(row) != Version.of(expected) and _slot(row) != _slot(expected):
                self._tidy(bucket, expected.key, expected.next_run, expected.revision, later=later)
