"""The Cassandra store: k2_jobs with lightweight-transaction CAS, for a cluster that spans hosts.

Data model (keyspace ``[cassandra] KEYSPACE``, default ``k2system``)

``k2_jobs``          one partition per job key, so LWT contention is per job. Every change
                     of a row is a prepared LWT (``IF NOT EXISTS`` or ``IF status = ? AND
                     epoch = ? AND worker_id = ? AND revision = ?``), never a plain write.
                     Archived rows are written ``USING TTL`` (K2JOB_ARCHIVING_TIME_HOUR).
``k2_jobs_index``    where a reconcile pass finds the rows it may act on without scanning:
                     one entry per live row, in a *bucket* named after its status (and owner
                     for IN_PROCESS / SCHEDULED: ``SCHEDULED|node-a``), spread over
                     ``SHARDS`` partitions and clustered by due time, so "the oldest WAITING
                     jobs" and "node-a's SCHEDULED jobs due before T" are range reads.
                     Plain writes (no LWT on this table); the tombstones that moving entries
                     leave are swept up by range deletes (sweep.py).
``k2_jobs_owners``   the owners that have had index entries (to list IN_PROCESS/SCHEDULED buckets).
``k2_job_run_history`` run history, a partition per job and RUN_BUCKET runs; ``k2_job_run_keys``
                     which (uid, bucket) have runs, by job name and day (JOBHISTORY, JOBLOG).
``k2_jobs_archived`` archived keys by day (16 shards a day) and end time (JOBSTATUS n DAYS AGO),
                     with TTL; ``k2_jobs_archive`` (one partition a day) is only read, until
                     the TTL has emptied it after an upgrade from schema version 3.
``nodes``            one row per node, plain writes by that node only; ``beat_time`` is set by
                     the coordinator's clock (``toTimestamp(now())``).
``kill_requests``    KILL requests per node.
``fabricjobs_schema`` the schema version.

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
row it got back (reading the row's bucket and due time when the revisions are equal). A scan
that finds one entry for a key returns it without reading the row (the hot path); a key with
several entries (rare: a change in flight, or a writer that died between its intent and its
LWT) has its row read, and the row's true entry is the candidate. A writer whose LWT did not
apply drops its own intent unless the row now is what it describes; an insert that sees no
row at all leaves its intent to the grace rule (another insert of the same key may have
written the very same entry and still be before its LWT).

Entries carry the columns a node needs to choose (status, owner, due time, hold, affinity,
priority, epoch, tries); rows built from them are "candidates" whose arguments, output and
error are not filled in. That is safe because :meth:`cas` writes only the columns that
changed (a full rewrite, merged with the stored row, when a row is archived or un-archived,
so TTLs cover every cell) and returns the stored row read back.

Unknown outcomes: a ``WriteTimeout`` of type CAS or SIMPLE, the protocol-v5 error 0x1700
(CAS_WRITE_UNKNOWN, which the Python driver surfaces as a bare ``ErrorMessage``) and a
client-side ``OperationTimedOut`` are settled by a SERIAL read of the row: if it shows our
write (the revision we wrote with our status, owner and epoch), the CAS applied; if the row
is unchanged, the timeout was contention and the LWT is retried with jittered backoff
(bounded); otherwise it did not apply. LWT statements use a retry policy that never resends.

LWTs per job life cycle: a one-time job costs 3 (insert, claim, outcome); each fire of a
recurring job costs 3 (due, claim, outcome). See the README for what that means in latency.
"""

from __future__ import annotations

import logging
import random

import ssl
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any, Collection, Iterable, Sequence

from ...config import Config
from ...errors import StoreError
from ...model import Job, JobKey, JobType, Status
from ..base import CasResult, JobStore, KillRequest, NodeRow, RunRecord, StoreStats, Version
from .schema import ARCHIVE_SHARDS, RUN_BUCKET, COUNTERS as _COUNTERS, SchemaManager, check_keyspace_name, qualify
from .sweep import ENTRY_WRITE_BOUND, Sweeper, SweepPlan

log = logging.getLogger("fabricjobs.store.cassandra")

UTC = timezone.utc
SHARDS = 8
_ALL_SHARDS = list(range(SHARDS))
_SCAN_BUCKETS = 8  # buckets per index read: an IN over at most 8 x SHARDS partitions
INTENT_GRACE = timedelta(seconds=60)
_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)
_CAS_UNKNOWN = 0x1700
_CONTENTION_RETRIES = 8
_ENTRY_WRITES = 5  # attempts at an index entry write acknowledged within ENTRY_WRITE_BOUND
_BATCH = 8  # statements per unlogged batch (Cassandra warns from 10 partitions in one)
_BIG_VALUES = 2048  # characters of output and log above which a history line is sent alone
_STATUS = {s.value: s for s in Status}

_JOB_COLUMNS = tuple(
    f.name for f in fields(Job) if f.name != "key"
)  # status, creation_time, archived, affinity, arguments, ..., the counters
_RUN_COLUMNS = ("type", "name", "uid", "epoch", "node", "due_time", "start_time", "end_time", "result", "status",
                "tries", "error", "output", "exit_code", "log", "note")
_CLUSTERING = ("next_run", "type", "name", "uid", "revision")  # of k2_jobs_index, in order
_INDEX_COLUMNS = ("status", "worker_id", "hold_until", "affinity", "priority", "epoch", "tries")

def _when(value: datetime) -> datetime:
    """A time column that always has a value (a key, or written with every row), in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else _when(value)


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


_BLOCKED = "BLOCKED"


def _job_bucket(job: Job) -> str | None:
    return _bucket(job.status, job.worker_id, job.archived, job.blocked, job.priority)


def _slot(row: Job) -> tuple[str | None, datetime]:
    """Where a row's index entry is (bucket, due time), as stored: Cassandra keeps timestamps
    in whole milliseconds, so a Job built here (microseconds) and one read back compare equal."""
    return _job_bucket(row), _stored_ms(row.next_run or _EPOCH0)


def _stored_ms(when: datetime) -> datetime:
    """``when`` as Cassandra stores a timestamp: in whole milliseconds."""
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


_NO_PROFILE = object()


def _bound(value):
    """A value to bind, or the driver's "unset" for None: a bound null writes a tombstone."""
    if value is None:
        from cassandra.query import UNSET_VALUE

        return UNSET_VALUE
    return value


def _unknown_outcome(exc: Exception) -> str:
    """Why an LWT that raised ``exc`` may or may not have applied (to be settled by a SERIAL
    read); a StoreError for an error that proves it did not: a write timeout or failure (the
    proposal may have reached some replicas), the protocol-v5 CAS_WRITE_UNKNOWN, the client's
    own timeout, and a connection lost after the request may have been sent."""
    from cassandra import OperationTimedOut, WriteFailure, WriteTimeout
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.policies import WriteType
    from cassandra.protocol import ErrorMessage

    if isinstance(exc, WriteTimeout):
        if exc.write_type not in (WriteType.CAS, WriteType.SIMPLE):
            raise StoreError(f"Cassandra write timeout ({exc})") from None
        return f"WriteTimeout({WriteType.value_to_name.get(exc.write_type, exc.write_type)})"
    if isinstance(exc, WriteFailure):
        return f"WriteFailure({exc})"
    if isinstance(exc, OperationTimedOut):
        return "client timeout"
    if isinstance(exc, (ConnectionException, NoHostAvailable)):
        if isinstance(exc, NoHostAvailable) and not any(
                isinstance(e, (ConnectionException, OperationTimedOut)) for e in exc.errors.values()):
            raise StoreError(f"Cassandra: {exc}") from None  # refused before it was sent
        return f"connection lost ({type(exc).__name__})"
    if isinstance(exc, ErrorMessage) and getattr(exc, "code", None) == _CAS_UNKNOWN:
        return "CAS_WRITE_UNKNOWN"
    if isinstance(exc, StoreError):
        raise exc
    raise StoreError(f"Cassandra error: {exc}") from None


def _result(future):
    try:
        return future.result()
    except Exception as exc:
        raise StoreError(f"Cassandra: {type(exc).__name__}: {exc}") from None


def _day(when) -> str:
    return when.strftime("%Y-%m-%d")


def _archive_shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.uid}\0{key.name}\0{key.type}".encode()) % ARCHIVE_SHARDS


_ARCHIVE_SHARDS = list(range(ARCHIVE_SHARDS))


def _shard(key: JobKey) -> int:
    return zlib.crc32(f"{key.type}\0{key.name}\0{key.uid}".encode()) % SHARDS


class _CountingSession:
    """The driver's session, counting what is sent by kind (StoreStats): the figures of
    scripts/bench_cassandra.py and of the node's metrics are what the cluster was asked."""

    def __init__(self, session, stats: StoreStats) -> None:
        from cassandra import DriverException
        from cassandra.query import BatchStatement

        self._s = session
        self._unfinished = DriverException
        self.stats = stats
        self._batch_type = BatchStatement
        self._last_warned: dict[str, float] = {}

    def _count(self, stmt, profile) -> None:
        if profile == "lwt":
            self.stats.lwt_attempts += 1
            return
        if isinstance(stmt, self._batch_type):  # one request, however many statements
            self.stats.writes += 1
            return
        text = getattr(stmt, "query_string", None) or getattr(getattr(stmt, "prepared_statement", None), "query_string", "") or ""
        if text.lstrip()[:6].upper() == "SELECT":
            self.stats.reads += 1
            if profile == "serial":
                self.stats.serial_reads += 1
        elif text:
            self.stats.writes += 1

    def execute(self, stmt, params=None, execution_profile=_NO_PROFILE, **kw):
        return self.execute_async(stmt, params, execution_profile, **kw).result()

    def execute_async(self, stmt, params=None, execution_profile=_NO_PROFILE, **kw):
        self._count(stmt, execution_profile)
        if execution_profile is _NO_PROFILE:
            future = self._s.execute_async(stmt, params, **kw)
        else:
            future = self._s.execute_async(stmt, params, execution_profile=execution_profile, **kw)
        future.add_callbacks(lambda _rows: self._warned(future), lambda _exc: None)
        return future

    def _warned(self, future) -> None:
        """Cassandra's warnings to the client (tombstones met by a read, a batch too large)
        are otherwise dropped by the driver: each is counted and logged, at most once a minute
        per kind, since each points at a data-model problem an operator must see."""
        try:
            warnings = future.warnings
        except self._unfinished:
            # The driver runs a callback added just as the response lands before it marks
            # the future finished, and `warnings` refuses until then; the response's
            # warnings are already stored by that point.
            warnings = getattr(future, "_warnings", None)
        for text in warnings or ():
            self.stats.server_warnings += 1
            kind = " ".join(w for w in text.split()[:6] if not w.isdigit())
            now = time.monotonic()
            if now - self._last_warned.get(kind, float("-inf")) >= 60.0:
                self._last_warned[kind] = now
                log.warning("Cassandra warned: %s", text)

    def __getattr__(self, name):  # prepare, cluster, shutdown, ...
        return getattr(self._s, name)


@dataclass
class _Write:
    """One plain write, to be sent alone or in a batch (CassandraStore._send)."""
    stmt: Any
    params: tuple
    what: str = "an index entry"
    swept: tuple | None = None  # an index delete: (partition, position), told to the sweeper once sent
    big: bool = False  # too big to share a batch
    on_sent: Any = None  # called once the write is acknowledged


@dataclass
class _Change:
    """One prepared CAS of cas_many: its LWT, and the writes before and after it."""
    expected: Job
    target: Job
    revision: int
    full: bool
    stmt: Any
    params: tuple
    new_bucket: str | None
    record: RunRecord | None
    before: list = field(default_factory=list)
    after: list = field(default_factory=list)

    @property
    def key(self) -> JobKey:
        return self.expected.key


@dataclass(frozen=True)
class _Entry:
    bucket: str
    shard: int
    next_run: datetime
    key: JobKey
    revision: int
    written_at: datetime | None
    job: Job  # a candidate built from the entry


class CassandraStore(JobStore):
    backend = "cassandra"
    deletes_archived = False  # archived rows expire by TTL

    def __init__(
        self,
        *,
        hosts: Sequence[str],
        port: int = 9042,
        keyspace: str = "k2system",
        replication: str = "SimpleStrategy:1",
        local_dc: str = "",
        consistency: str = "LOCAL_QUORUM",
        serial_consistency: str = "SERIAL",
        username: str = "",
        password: str = "",
        tls: bool = False,
        tls_ca_file: str = "",
        tls_cert_file: str = "",
        tls_key_file: str = "",
        tls_verify: bool = True,
        connect_timeout: float = 10.0,
        request_timeout: float = 10.0,
        create_schema: bool = True,
        protocol_version: int = 4,
        archive_ttl_seconds: int = 720 * 3600,
        token_aware: bool = True,
    ) -> None:
        # The driver is imported here, not at module level: choosing SQLite never pays for it.
        from cassandra import ConsistencyLevel
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy, FallthroughRetryPolicy, TokenAwarePolicy
        from cassandra.query import dict_factory

        check_keyspace_name(keyspace)
        self.keyspace = keyspace
        self.identity = f"cassandra:{','.join(sorted(hosts))}:{port}:{keyspace}"
        self.archive_ttl = max(1, int(archive_ttl_seconds))
        self.request_timeout = request_timeout
        cl = ConsistencyLevel.name_to_value[consistency]
        serial = ConsistencyLevel.name_to_value[serial_consistency]

        def lbp():
            # Token-aware: a statement goes to a replica of its partition, saving the hop from a
            # coordinator that holds no copy (and, for an LWT, a Paxos round's extra latency).
            dc_aware = DCAwareRoundRobinPolicy(local_dc=local_dc or None)
            return TokenAwarePolicy(dc_aware) if token_aware else dc_aware

        profiles = {
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=lbp(), consistency_level=cl, row_factory=dict_factory,
                request_timeout=request_timeout,
            ),
            "lwt": ExecutionProfile(
                load_balancing_policy=lbp(), consistency_level=cl, serial_consistency_level=serial,
                retry_policy=FallthroughRetryPolicy(), row_factory=dict_factory, request_timeout=request_timeout,
            ),
            "serial": ExecutionProfile(
                load_balancing_policy=lbp(), consistency_level=serial, retry_policy=FallthroughRetryPolicy(),
                row_factory=dict_factory, request_timeout=request_timeout,
            ),
        }
        kwargs: dict[str, Any] = {}
        if username:
            from cassandra.auth import PlainTextAuthProvider

            kwargs["auth_provider"] = PlainTextAuthProvider(username=username, password=password)
        if tls:
            ctx = ssl.create_default_context(cafile=tls_ca_file or None)
            if not tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if tls_cert_file:
                ctx.load_cert_chain(tls_cert_file, tls_key_file or None)
            kwargs["ssl_context"] = ctx
        self._cluster = Cluster(
            list(hosts), port=port, protocol_version=protocol_version, execution_profiles=profiles,
            # Routing by token needs the token ring and the keyspace's replication (schema metadata).
            connect_timeout=connect_timeout, schema_metadata_enabled=token_aware, token_metadata_enabled=token_aware,
            **kwargs,
        )
        self.stats = StoreStats()
        try:
            self._session = _CountingSession(self._cluster.connect(), self.stats)
        except Exception as exc:
            self._cluster.shutdown()
            raise StoreError(f"cannot connect to Cassandra at {', '.join(hosts)}:{port}: {exc}") from None
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="cassandra-cas")
        self._prepared: dict[tuple, Any] = {}
        self._prep_lock = threading.Lock()
        self._owners_known: set[tuple[str, str]] = set()
        self._run_keys_noted: set[tuple] = set()  # (key, day, bucket) this process noted in k2_job_run_keys
        # When this process first saw each possible intent (its written_at as seen), on its own
        # monotonic clock: an intent's age is never a comparison of two hosts' clocks.
        self._seen: dict[tuple, tuple[datetime | None, float]] = {}
        self._monotonic = time.monotonic
        self._latency_clock = time.monotonic
        self._sweeper = Sweeper()
        self._closed = False
        try:
            self._setup_schema(create_schema, replication)
        except Exception:
            self.close()
            raise

    @classmethod
    def from_config(cls, config: Config) -> "CassandraStore":
        c = config.section("cassandra")
        return cls(
            hosts=c["HOSTS"], port=c["PORT"], keyspace=c["KEYSPACE"], replication=c["REPLICATION"],
            local_dc=c["LOCAL_DC"], consistency=c["CONSISTENCY"], serial_consistency=c["SERIAL_CONSISTENCY"],
            username=c["USERNAME"], password=c["PASSWORD"], tls=c["TLS"], tls_ca_file=c["TLS_CA_FILE"],
            tls_cert_file=c["TLS_CERT_FILE"], tls_key_file=c["TLS_KEY_FILE"], tls_verify=c["TLS_VERIFY"],
            connect_timeout=c["CONNECT_TIMEOUT_SEC"], request_timeout=c["REQUEST_TIMEOUT_SEC"],
            create_schema=c["CREATE_SCHEMA"], protocol_version=c["PROTOCOL_VERSION"],
            archive_ttl_seconds=int(config.get("jobs", "K2JOB_ARCHIVING_TIME_HOUR") * 3600),
            token_aware=c["TOKEN_AWARE"],
        )

    # -- schema ----------------------------------------------------------------------------------

    def _setup_schema(self, create: bool, replication: str) -> None:
        self._schema = SchemaManager(self._session, self.keyspace)
        self._schema.ensure(create, replication)

    def schema_version(self) -> int:
        return self._schema.version() or 0

    def _stmt(self, key: tuple, cql: str):
        stmt = self._prepared.get(key)
        if stmt is None:
            with self._prep_lock:
                stmt = self._prepared.get(key)
                if stmt is None:
                    try:
                        stmt = self._session.prepare(qualify(cql, self.keyspace))
                    except Exception as exc:
                        raise StoreError(f"Cassandra: cannot prepare a statement: {type(exc).__name__}: {exc}") from None
                    self._prepared[key] = stmt
        return stmt

    def _run(self, stmt, params=(), timeout: float | None = None):
        """Execute a plain statement; a driver error becomes a StoreError with its text."""
        try:
            if timeout is not None:
                return self._session.execute(stmt, params, timeout=timeout)
            return self._session.execute(stmt, params)
        except Exception as exc:
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"Cassandra: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self._cluster.shutdown()

    def store_time(self) -> datetime:
        row = self._run(self._stmt(("now",), "SELECT toTimestamp(now()) AS now FROM system.local")).one()
        return _when(row["now"])

    # -- rows <-> jobs ---------------------------------------------------------------------------

    @staticmethod
    def _job(row: dict) -> Job:
        return Job(
            key=JobKey(row["type"], row["name"], row["uid"]),
            status=_STATUS[row["status"]],
            creation_time=_aware(row["creation_time"]),  # type: ignore[arg-type]  # null only in a row half gone by TTL
            archived=bool(row["archived"]),
            affinity=row["affinity"] or "",
            arguments=row["arguments"] if row["arguments"] is not None else "{}",
            execution_interval=row["execution_interval"] or "",
            start_time=_aware(row["start_time"]),
            end_time=_aware(row["end_time"]),
            next_run=_aware(row["next_run"]),
            hold_until=_aware(row["hold_until"]),
            error_msg=row["error_msg"] or "",
            output=row["output"],
            tries=row["tries"] or 0,
            worker_id=row["worker_id"],
            epoch=row["epoch"] or 0,
            revision=row["revision"] or 0,
            priority=row["priority"] if row["priority"] is not None else 4,
            **{c: row.get(c) or 0 for c in _COUNTERS},
            depends_on=row.get("depends_on") or "",
            blocked=bool(row.get("blocked")),
            time_zone=row.get("time_zone") or "",
            late_threshold=row.get("late_threshold") or "",
            overlap=row.get("overlap") or "",
        )

    def _get_stmt(self):
        return self._stmt(("get",), f"SELECT type, name, uid, {', '.join(_JOB_COLUMNS)} FROM k2_jobs "
                                    "WHERE type = ? AND name = ? AND uid = ?")

    def _select_job(self, key: JobKey, serial: bool = False) -> Job | None:
        stmt = self._get_stmt()
        try:
            if serial:
                row = self._session.execute(stmt, (key.type, key.name, key.uid), execution_profile="serial").one()
            else:
                row = self._session.execute(stmt, (key.type, key.name, key.uid)).one()
        except Exception as exc:
            raise StoreError(f"Cassandra: cannot read {key}: {type(exc).__name__}: {exc}") from None
        return None if row is None or row.get("status") is None else self._job(row)

    # -- the LWT core ----------------------------------------------------------------------------

    def _execute_lwt(self, stmt, params, key: JobKey, ours, unchanged,
                     before_retry=None) -> tuple[bool, dict | None, Job | None]:
        """Run one LWT; settle an unknown outcome with a SERIAL read.

        Returns (applied, the [applied] row when known, the row read at SERIAL when the
        outcome had to be settled). ``ours(row)`` says whether a row shows our write;
        ``unchanged(row)`` whether the row is still as the LWT expected (then the unknown
        outcome was contention, and the LWT is sent again after a jittered pause, with
        ``before_retry()`` first: it re-writes the index intent, so that no reader's grace can
        run out under a write that is still being tried). An attempt after an unknown outcome
        that answers "not applied" may have met our own earlier attempt: it is checked too.

        Unknown outcomes: a write timeout or failure (the proposal may have reached some
        replicas), the protocol-v5 CAS_WRITE_UNKNOWN, the client's own timeout, and a
        connection lost after the request may have been sent.
        """
        backoff = 0.01
        retried = False
        for attempt in range(_CONTENTION_RETRIES):
            try:
                row = self._session.execute(stmt, params, execution_profile="lwt").one()
                if row["[applied]"] or not retried:
                    return bool(row["[applied]"]), row, None
                why = "a retry not applied"  # maybe because our earlier attempt did apply
            except Exception as exc:
                why = _unknown_outcome(exc)
            self.stats.unknown_outcomes += 1
            current = self._settle_read(key)
            if current is not None and ours(current):
                log.info("LWT on %s had an unknown outcome (%s); a SERIAL read shows it applied", key, why)
                return True, None, current
            if attempt + 1 < _CONTENTION_RETRIES and unchanged(current):
                # Nobody changed the row: the timeout was contention. Try again, later.
                self.stats.contention_retries += 1
                time.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, 0.5)
                if before_retry is not None:
                    before_retry()
                retried = True
                continue
            log.info("LWT on %s had an unknown outcome (%s); a SERIAL read shows it did not apply", key, why)
            return False, None, current
        raise StoreError(f"gave up on {key} after {_CONTENTION_RETRIES} contended attempts")

    def _settle_read(self, key: JobKey) -> Job | None:
        """The row at SERIAL, to settle an unknown outcome. A lost connection may have taken
        the only reachable host down with it: the read is tried again until the driver has
        reconnected, for up to two request timeouts or 5 s (then the outcome stays unknown and the
        caller's write fails; it is looked at again later)."""
        deadline = time.monotonic() + max(2 * self.request_timeout, 5.0)
        pause = 0.05
        while True:
            try:
                return self._select_job(key, serial=True)
            except StoreError:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    # -- index maintenance -----------------------------------------------------------------------

    def _entry_write(self, job: Job, revision: int) -> _Write | None:
        """The index entry of ``job`` at ``revision`` (None: a row in no bucket). Registers a new
        owner or priority in k2_jobs_owners first (once per process)."""
        bucket = _job_bucket(job)
        if bucket is None:
            return None
        kind, _, tag = bucket.partition("|")
        registry = "priority" if kind == Status.WAITING.value else "owner"
        if tag and (registry, tag) not in self._owners_known:
            self._run(self._stmt(("owner",), "INSERT INTO k2_jobs_owners (kind, owner) VALUES (?, ?)"), (registry, tag))
            self._owners_known.add((registry, tag))
        stmt = self._stmt(("iput",),
            "INSERT INTO k2_jobs_index (bucket, shard, next_run, type, name, uid, revision, status, worker_id,"
            " hold_until, affinity, priority, epoch, tries, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now()))")
        k = job.key
        return _Write(stmt, (
            bucket, _shard(k), job.next_run or _EPOCH0, k.type, k.name, k.uid, revision, job.status.value,
            _bound(job.worker_id), _bound(job.hold_until), job.affinity, job.priority, job.epoch, job.tries,
        ), what=f"the index entry of {k}")

    def _index_upsert(self, job: Job, revision: int) -> None:
        write = self._entry_write(job, revision)
        if write is not None:
            self._send([write], bounded=True)

    def _delete_write(self, bucket: str | None, key: JobKey, next_run: datetime | None, revision: int) -> _Write | None:
        if bucket is None:
            return None
        stmt = self._stmt(("idel",),
            "DELETE FROM k2_jobs_index WHERE bucket = ? AND shard = ? AND next_run = ? AND type = ? AND name = ?"
            " AND uid = ? AND revision = ?")
        due = next_run or _EPOCH0
        self._seen.pop((bucket, key, revision), None)
        return _Write(stmt, (bucket, _shard(key), due, key.type, key.name, key.uid, revision),
                      swept=((bucket, _shard(key)), (_stored_ms(due), key.type, key.name, key.uid, revision)))

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

    def _archive_write(self, job: Job) -> _Write | None:
        if job.end_time is None:
            return None
        stmt = self._stmt(("aput",),
            "INSERT INTO k2_jobs_archived (day, shard, end_time, type, name, uid) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?")
        k = job.key
        return _Write(stmt, (_day(job.end_time), _archive_shard(k), job.end_time, k.type, k.name, k.uid,
                             self.archive_ttl), what=f"the archive entry of {k}")

    # -- plain writes, batched ---------------------------------------------------------------------

    def _send(self, writes: Sequence[_Write], *, bounded: bool) -> None:
        """Send plain writes in as few requests as they fit in: unlogged batches of up to
        ``_BATCH`` small statements (fewer partitions than Cassandra's warning threshold for
        unlogged batches, 10); a big one (a run line with its output) alone. With ``bounded``,
        a request acknowledged later than ENTRY_WRITE_BOUND after it was sent is sent again
        (a fresh stamp): an index entry stamped that long before it landed could fall under a
        sweep that read its partition in between (sweep.py). Raises StoreError."""
        from cassandra.query import BatchStatement, BatchType

        chunks: list[list[_Write]] = []
        for w in writes:
            if w.big or not chunks or len(chunks[-1]) >= _BATCH or chunks[-1][0].big:
                chunks.append([w])
            else:
                chunks[-1].append(w)

        def request(chunk):
            if len(chunk) == 1:
                return chunk[0].stmt.bind(chunk[0].params)
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for w in chunk:
                batch.add(w.stmt, w.params)
            return batch

        def send(chunk):
            started = self._latency_clock()
            acked: list[float] = []
            future = self._session.execute_async(request(chunk))
            future.add_callbacks(lambda _rows: acked.append(self._latency_clock()), lambda _exc: None)
            return future, started, acked

        pending = [(chunk, *send(chunk)) for chunk in chunks]
        for chunk, future, started, acked in pending:
            for attempt in range(_ENTRY_WRITES):
                try:
                    future.result()
                except Exception as exc:
                    raise StoreError(f"Cassandra: cannot write {chunk[0].what}: {type(exc).__name__}: {exc}") from None
                if not bounded or (acked[0] if acked else self._latency_clock()) - started <= ENTRY_WRITE_BOUND:
                    break
                self.stats.slow_entry_writes += 1
                if attempt + 1 == _ENTRY_WRITES:
                    raise StoreError(f"writes of {chunk[0].what} took longer than {ENTRY_WRITE_BOUND:g} s "
                                     f"{_ENTRY_WRITES} times")
                future, started, acked = send(chunk)
            for w in chunk:
                if w.swept is not None:
                    self._sweeper.deleted(*w.swept)
                if w.on_sent is not None:
                    w.on_sent()

    def _send_quietly(self, writes: Sequence[_Write]) -> None:
        """Tidying writes (index deletes, a fenced run's line): a lost one is met as stale by a
        later reader, so a failure is logged, not raised."""
        if not writes:
            return
        try:
            self._send(writes, bounded=False)
        except StoreError as exc:
            log.warning("could not tidy up after a change (%s); a later reader will", exc)

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

    # -- jobs: writes ----------------------------------------------------------------------------

    def insert_many(self, jobs: Sequence[Job]) -> list[CasResult]:
        """As :meth:`JobStore.insert_many`, but the inserts of a group go out concurrently (one
        by one, a script's 200 STARTJOBs were 400 round trips in a row: the submitter, not the
        cluster, bounded a bulk submit). To keep "the jobs after a refused one are not written"
        without a transaction, the keys are read first, at once. A group ends before a key that
        has a row or came earlier in ``jobs``; that one goes alone (it is refused, or reuses an
        archived row). Left open: a key created by another writer between that read and its
        LWT is refused while the jobs after it in its group were written; they are logged, and
        the results of the whole group are returned."""
        results: list[CasResult] = []
        found = self.get_many([j.key for j in jobs]) if len(jobs) > 1 else [None] * len(jobs)
        i, seen = 0, set()
        while i < len(jobs):
            end = i + 1
            alone = found[i] is not None or jobs[i].key in seen
            seen.add(jobs[i].key)
            while not alone and end < len(jobs) and found[end] is None and jobs[end].key not in seen:
                seen.add(jobs[end].key)
                end += 1
            group = jobs[i:end]
            # Each its own intent, then its LWT; not all intents first: an intent is an entry
            # that nodes read and try to claim, in vain until its row is written.
            done = list(self._pool.map(self.insert, group)) if len(group) > 1 else [self.insert(group[0])]
            refused = next((k for k, res in enumerate(done) if not res.applied), None)
            if refused is not None:
                written = [j.key for j, res in zip(group[refused + 1:], done[refused + 1:]) if res.applied]
                if written:
                    log.warning("STARTJOB of %s was refused (another writer created it just now); %d jobs after "
                                "it in the same group were written all the same: %s", group[refused].key,
                                len(written), ", ".join(map(str, written)))
                return results + done  # aligned with ``jobs``; the caller stops at the refused one
            results += done
            i = end
        return results

    def insert(self, job: Job) -> CasResult:
        new = job.replace(revision=1)
        self._index_upsert(new, 1)
        # An UPDATE, not an INSERT: an INSERT writes a row marker that no later UPDATE ... USING
        # TTL covers, so an archived row would leave its key behind when its cells expire. The
        # condition "revision = null" holds exactly when no row (or only expired cells) is
        # there. Columns without a value are left unset: a bound null is a tombstone per cell.
        sets = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS)
        stmt = self._stmt(("insert",), f"UPDATE k2_jobs SET {sets} WHERE type = ? AND name = ? AND uid = ? "
                                       "IF revision = null")
        params = tuple(_bound(getattr(new, c)) for c in _JOB_COLUMNS) + (job.key.type, job.key.name, job.key.uid)

        def ours(row: Job) -> bool:
            return row.revision == 1 and row.creation_time == new.creation_time and row.arguments == new.arguments

        applied, lwt_row, settled = self._execute_lwt(stmt, params, job.key, ours, lambda row: row is None,
                                                      before_retry=lambda: self._index_upsert(new, 1))
        if applied:
            return CasResult(True, row=settled or new)
        # A refused conditional UPDATE returns only the condition's column: read the row.
        existing = settled if settled is not None else self._select_job(job.key)
        # Drop our intent only if an existing row proves it false: the row is past revision 1, or
        # its entry is elsewhere (compared as stored: an identical insert that won wrote this
        # very entry). With no row to be seen, the same entry may be the intent of another
        # insert of this key still before its LWT; the grace rule removes it if it is orphaned.
        if existing is not None and (existing.revision, _slot(existing)) != (1, _slot(new)):
            self._tidy(_job_bucket(new), new.key, new.next_run, 1, repair=False)  # our intent describes no row
        if existing is None or not existing.archived:
            return CasResult(False, row=existing)
        # An archived row with this key: reuse it, counting on from its epoch and revision.
        reused = self.cas(existing, new.replace(epoch=existing.epoch + 1, revision=existing.revision))
        if reused.applied:
            return reused
        return CasResult(False, row=self._select_job(job.key))

    def cas(self, expected: Job, new: Job) -> CasResult:
        return self.cas_many([(expected, new)])[0]

    def cas_many(self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None) -> list[CasResult]:
        """Each change in three rounds, each round for all changes at once: the writes that
        must precede the LWTs (index intents, archive entries, history lines) in batches; the
        LWTs, concurrently; the writes that follow them (superseded entries deleted, a fenced
        run's history line taken back) in batches. A claim of 16 rows is then 2 batches and 16
        LWTs, not 32 plain writes and 16 LWTs."""
        records = list(runs) if runs is not None else [None] * len(pairs)
        results: list[CasResult | None] = [None] * len(pairs)
        changes: list[tuple[int, _Change]] = []
        for i, ((expected, new), record) in enumerate(zip(pairs, records)):
            prepared = self._prepare(expected, new, record)
            if isinstance(prepared, CasResult):
                results[i] = prepared
            else:
                changes.append((i, prepared))
        before = [w for _, c in changes for w in c.before]
        self._send(before, bounded=True)
        for _, c in changes:
            if c.new_bucket is not None:
                self._seen[(c.new_bucket, c.key, c.revision)] = (None, self._monotonic())  # our own: fresh
        if len(changes) > 1:
            applied = list(self._pool.map(lambda ic: self._apply(ic[1]), changes))
        else:
            applied = [self._apply(c) for _, c in changes]
        for (i, _), res in zip(changes, applied):
            results[i] = res
        self._send_quietly([w for _, c in changes for w in c.after])
        return results  # type: ignore[return-value]

    def _prepare(self, expected: Job, new: Job, record: RunRecord | None) -> "_Change | CasResult":
        if new.key != expected.key:
            raise ValueError(f"CAS cannot change a key: {expected.key} -> {new.key}")
        key = expected.key
        revision = expected.revision + 1
        full = expected.archived or new.archived
        stored = None
        if full:
            # A write that archives, un-archives or touches an archived row rewrites every cell,
            # so that one TTL covers all of them (or is lifted from all of them) and they expire
            # together: the row then leaves nothing behind. Merge the change into the stored row:
            # ``expected`` itself when it is a whole row (the LWT's condition on its revision
            # then proves nothing else changed); an index candidate is read first.
            stored = expected if expected.creation_time != _EPOCH0 else self._select_job(key)
            if stored is None or Version.of(stored) != Version.of(expected):
                current = None if stored is None else Version.of(stored)
                self._repair(expected, current)
                return CasResult(False, current=current)
            changes = {c: getattr(new, c) for c in _JOB_COLUMNS if getattr(new, c) != getattr(expected, c)}
            target = stored.replace(**changes)
            columns = [c for c in _JOB_COLUMNS if c != "revision"]
        else:
            target = new
            columns = [c for c in _JOB_COLUMNS if c != "revision" and getattr(new, c) != getattr(expected, c)]
        target = target.replace(revision=revision)
        ttl = self.archive_ttl if target.archived else 0
        sets = ", ".join(f"{c} = ?" for c in columns + ["revision"])
        stmt = self._stmt(("cas",) + tuple(columns),
                          f"UPDATE k2_jobs USING TTL ? SET {sets} WHERE type = ? AND name = ? AND uid = ? "
                          "IF status = ? AND epoch = ? AND worker_id = ? AND revision = ?")
        # A null clears a cell (a cell tombstone): bound only where the stored row has a value.
        values = [_bound(getattr(target, c)) if stored is not None and getattr(stored, c) is None
                  else getattr(target, c) for c in columns] + [revision]
        params = tuple(v.value if isinstance(v, Status) else v for v in values)
        params = (ttl,) + params + (key.type, key.name, key.uid, expected.status.value, expected.epoch,
                                    expected.worker_id, expected.revision)
        change = _Change(expected, target, revision, full, stmt, params, _job_bucket(target), record)
        # Before the LWT: the intent; the archive entry, so that the moment the row is archived
        # JOBSTATUS n DAYS AGO can find it (readers check the row, so an entry whose LWT fails
        # is inert); the history line, so that whoever sees the outcome (WAITJOB, then JOBLOG)
        # finds its run (a writer whose LWT loses takes it back: a fenced run records nothing).
        change.before = [w for w in (self._entry_write(target, revision),
                                     self._archive_write(target) if target.archived else None) if w is not None]
        if record is not None:
            change.before += self._run_writes(record)
        return change

    def _apply(self, c: "_Change") -> CasResult:
        """The LWT of a prepared change, and what it leaves to tidy (``c.after``)."""
        key, target, expected, revision = c.key, c.target, c.expected, c.revision

        def ours(row: Job) -> bool:
            return (row.revision, row.status, row.worker_id, row.epoch) == (revision, target.status, target.worker_id, target.epoch)

        applied, lwt_row, settled = self._execute_lwt(
            c.stmt, c.params, key, ours, lambda row: row is not None and Version.of(row) == Version.of(expected),
            before_retry=lambda: self._index_upsert(target, revision))
        if applied:
            self._tidy(_job_bucket(expected), key, expected.next_run, expected.revision, repair=False, later=c.after)
            if expected.archived != target.archived and key.type == JobType.INTERFACE_LISTENER.value:
                self._marks_follow(key, self.archive_ttl if target.archived else 0)
            if c.new_bucket is not None:
                self._seen.pop((c.new_bucket, key, revision), None)
            row = settled if c.full is False and settled is not None else None
            if row is None:
                row = target if c.full else self._select_job(key)
            return CasResult(True, row=row)
        if c.record is not None:
            c.after.append(self._unrun_write(c.record))
        if settled is not None:
            current = Version.of(settled)
        elif lwt_row is not None and lwt_row.get("status") is not None:
            current = Version(_STATUS[lwt_row["status"]], lwt_row["epoch"], lwt_row["worker_id"], lwt_row["revision"])
        else:
            current = None
        # Our intent stays only if the row now is exactly what it describes (someone made the
        # same change first); otherwise it is dropped. Unlike a reader's, this delete needs no
        # grace: the entry is ours (its bucket carries our target's owner, due time and
        # revision), and leaving it would let it outlive a different change to that revision.
        if c.new_bucket is not None and not (
            current is not None and current.revision == revision
            and _bucket(current.status, current.worker_id, False, target.blocked, target.priority) == c.new_bucket
        ):
            self._tidy(c.new_bucket, key, target.next_run, revision, repair=False, later=c.after)
        self._repair(expected, current, later=c.after)
        return CasResult(False, current=current)

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
        day = _day(datetime.now(UTC))  # the day the line is written: its TTL runs from then
        noted = (r.key, day, r.epoch // RUN_BUCKET)
        if noted not in self._run_keys_noted:
            if len(self._run_keys_noted) > 100_000:
                self._run_keys_noted.clear()
            keys = self._stmt(("runkey",), "INSERT INTO k2_job_run_keys (type, name, day, uid, bucket) "
                                           "VALUES (?, ?, ?, ?, ?) USING TTL ?")
            # Outlives the day's last line by the day itself.
            out.append(_Write(keys, (r.key.type, r.key.name, day, r.key.uid, r.epoch // RUN_BUCKET,
                                     self.archive_ttl + 86400), what=what,
                              on_sent=lambda: self._run_keys_noted.add(noted)))
        return out

    def _unrun_write(self, r: RunRecord) -> _Write:
        stmt = self._stmt(("rundel",), "DELETE FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? "
                                       "AND bucket = ? AND epoch = ? AND end_time = ?")
        return _Write(stmt, (r.key.type, r.key.name, r.key.uid, r.epoch // RUN_BUCKET, r.epoch, r.end),
                      what=f"the history line of fenced run {r.epoch} of {r.key}")

    @staticmethod
    def _to_run(row: dict) -> RunRecord:
        return RunRecord(
            JobKey(row["type"], row["name"], row["uid"]), row["epoch"], row["node"], _aware(row["due_time"]),
            _aware(row["start_time"]), _when(row["end_time"]), row["result"], row["status"], row["tries"] or 0,
            row["error"] or "", row["output"], row["exit_code"], row["log"] or "", row.get("note") or "",
        )

    def runs(self, type: str, name: str, uid: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """k2_job_run_keys says which (uid, bucket) partitions of k2_job_run_history have runs,
        one partition per day of the retention (read at once, unpaged); then those partitions
        (newest run first, ``limit`` each). Plus the version-3 tables until their TTL has
        emptied them: one partition per job key, and k2_job_run_uids for the uids."""
        cols = ", ".join(_RUN_COLUMNS)
        today = datetime.now(UTC).date()
        days = [_day(today - timedelta(days=d)) for d in range(-1, self.archive_ttl // 86400 + 2)]
        keys_stmt = self._stmt(("runkeys", uid is not None),
                               "SELECT uid, bucket FROM k2_job_run_keys WHERE type = ? AND name = ? AND day IN ?"
                               + (" AND uid = ?" if uid is not None else ""))
        keys = self._unpaged(keys_stmt, (type, name, days) + ((uid,) if uid is not None else ()))
        legacy = None if uid is not None else self._session.execute_async(
            self._stmt(("runuids",), "SELECT uid FROM k2_job_run_uids WHERE type = ? AND name = ?"), (type, name))
        parts = sorted({(r["uid"], r["bucket"]) for r in _result(keys)})
        legacy_uids = [uid] if legacy is None else [r["uid"] for r in _result(legacy)]
        lim = " LIMIT ?" if limit is not None else ""
        more = (limit,) if limit is not None else ()
        new = self._stmt(("runsh", limit is not None),
                         f"SELECT {cols} FROM k2_job_run_history WHERE type = ? AND name = ? AND uid = ? AND bucket = ?{lim}")
        old = self._stmt(("runsu", limit is not None),
                         f"SELECT {cols} FROM k2_job_runs WHERE type = ? AND name = ? AND uid = ?{lim}")
        futures = [self._session.execute_async(new, (type, name, u, b) + more) for u, b in parts]
        futures += [self._session.execute_async(old, (type, name, u) + more) for u in legacy_uids]
        out = sorted((self._to_run(r) for f in futures for r in _result(f)), key=lambda r: (r.end, r.epoch), reverse=True)
        return out if limit is None else out[:limit]

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

    def mark_file(self, listener: JobKey, file: str, note: str) -> bool:
        token = f"{note} #{random.getrandbits(64):016x}"  # tells our write from a rival's
        stmt = self._stmt(("mark",), "INSERT INTO k2_listener_files (type, name, uid, file, note, marked_at) "
                                    "VALUES (?, ?, ?, ?, ?, toTimestamp(now())) IF NOT EXISTS")
        params = (listener.type, listener.name, listener.uid, file, token)
        try:
            return bool(self._session.execute(stmt, params, execution_profile="lwt").one()["[applied]"])
        except Exception as exc:
            _unknown_outcome(exc)  # raises unless the LWT may have applied
            self.stats.unknown_outcomes += 1
        read = self._stmt(("markread",), "SELECT note FROM k2_listener_files WHERE type = ? AND name = ? AND uid = ? AND file = ?")
        row = self._session.execute(read, params[:4], execution_profile="serial").one()
        return row is not None and row["note"] == token

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
        stmt = self._stmt(("markttl",), "INSERT INTO k2_listener_files (type, name, uid, file, note, marked_at) "
                                        "VALUES (?, ?, ?, ?, ?, ?) USING TTL ?")
        self._send_quietly([_Write(stmt, (listener.type, listener.name, listener.uid, r["file"], r["note"],
                                          r["marked_at"], ttl), what=f"a file mark of {listener}") for r in rows])

    def marked_files(self, listener: JobKey) -> set[str]:
        rows = self._run(self._stmt(("marked",), "SELECT file FROM k2_listener_files WHERE type = ? AND name = ? AND uid = ?"),
                         (listener.type, listener.name, listener.uid))
        return {r["file"] for r in rows}

    def delete_runs(self, before: datetime, limit: int = 10_000) -> int:
        return 0  # run records expire by TTL

    def delete_archived(self, before: datetime, limit: int = 10_000, keep: frozenset = frozenset()) -> int:
        return 0  # archived rows expire by TTL (``keep`` cannot hold one back: see README, Retention)

    # -- jobs: reads -----------------------------------------------------------------------------

    def get(self, key: JobKey) -> Job | None:
        return self._select_job(key)

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
            plan = self._sweeper.plan(partition, live, read_at=read_at, since=since, before=before,
                                      complete=limit is None or len(live) < limit)
            if plan is not None:
                self._sweep(plan)
        entries.sort(key=lambda e: (e.next_run, e.key))
        return entries

    def _unpaged(self, stmt, params):
        """Send a read over several partitions unpaged: a paged one makes the coordinator read
        them one after another, an unpaged one all at once."""
        bound = stmt.bind(params)
        bound.fetch_size = None
        return self._session.execute_async(bound)

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
        may be an intent whose LWT never happened and the older one the row's true entry."""
        by_key: dict[JobKey, dict[tuple, _Entry]] = {}
        for e in entries:  # the same entry twice (a bucket scanned twice) is one entry
            by_key.setdefault(e.key, {})[(e.bucket, e.next_run, e.revision)] = e
        chosen = [next(iter(es.values())) for es in by_key.values() if len(es) == 1]
        several = [k for k, es in by_key.items() if len(es) > 1]
        if several:
            for key, row in zip(several, self.get_many(several)):
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
        rows = self._run(self._stmt(("owners",), "SELECT owner FROM k2_jobs_owners WHERE kind = ?"), (kind,))
        return [r["owner"] for r in rows]

    def _owners(self) -> list[str]:
        return self._registry("owner")

    def _waiting_buckets(self) -> list[str]:
        priorities = sorted({int(p) for p in self._registry("priority")} | {4}, reverse=True)
        return [f"WAITING|{p}" for p in priorities]

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

    def _candidates(self, buckets: list[str], owners: set | None = None, statuses: Collection[Status] | None = None) -> list[Job]:
        jobs = [e.job for e in self._latest(self._scan(buckets))] if buckets else []
        if owners is not None:
            jobs = [j for j in jobs if j.worker_id in owners]
        if statuses is not None:  # the BLOCKED bucket holds WAITING and SCHEDULED rows
            jobs = [j for j in jobs if j.status in statuses]
        return jobs

    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None) -> list[Job]:
        if type is not None and name is not None and uid is not None:
            job = self._select_job(JobKey(type, name, uid))
            return [job] if job is not None and not job.archived else []
        keys = [j.key for j in self._candidates(self._buckets(tuple(s for s in Status if not s.is_final), None))]
        keys = [k for k in keys if (type is None or k.type == type) and (name is None or k.name == name)
                and (uid is None or k.uid == uid)]
        rows = self.get_many(keys)
        return sorted((j for j in rows if j is not None and not j.archived), key=lambda j: j.key)

    def get_many(self, keys: Sequence[JobKey]) -> list[Job | None]:
        stmt = self._get_stmt()
        out: list[Job | None] = []
        for i in range(0, len(keys), 256):
            futures = [self._session.execute_async(stmt, (k.type, k.name, k.uid)) for k in keys[i:i + 256]]
            for f in futures:
                row = _result(f).one()
                out.append(None if row is None or row.get("status") is None else self._job(row))
        return out

    def archived_since(self, since: datetime, type: str | None = None) -> list[Job]:
        # A day's ARCHIVE_SHARDS partitions in one unpaged IN (read at once); and the day's
        # partition of k2_jobs_archive, the version-3 table, until its TTL has emptied it.
        stmt = self._stmt(("asel",), "SELECT type, name, uid FROM k2_jobs_archived WHERE day = ? AND shard IN ? "
                                     "AND end_time >= ?")
        legacy = self._stmt(("asel3",), "SELECT type, name, uid FROM k2_jobs_archive WHERE day = ? AND end_time >= ?")
        day = since.astimezone(UTC).date()
        today = datetime.now(UTC).date() + timedelta(days=1)
        keys: dict[JobKey, None] = {}
        futures = []
        while day <= today:
            futures.append(self._unpaged(stmt, (_day(day), _ARCHIVE_SHARDS, since)))
            futures.append(self._session.execute_async(legacy, (_day(day), since)))
            day += timedelta(days=1)
        for f in futures:
            for r in _result(f):
                k = JobKey(r["type"], r["name"], r["uid"])
                if type is None or k.type == type:
                    keys[k] = None
        rows = self.get_many(list(keys))
        return sorted((j for j in rows if j is not None and j.archived and j.end_time is not None and j.end_time >= since),
                      key=lambda j: j.key)

    def waiting(self, limit: int, after: tuple[datetime, JobKey] | None = None) -> list[Job]:
        entries = self._scan(self._waiting_buckets(), limit=limit, since=after[0] if after else None)
        jobs = [e.job for e in self._latest(entries)]
        if after is not None:
            jobs = [j for j in jobs if ((j.next_run or _EPOCH0), j.key) > (after[0], after[1])]
        return jobs[:limit]

    def waiting_by_priority(self, limit: int) -> list[Job]:
        jobs: list[Job] = []
        for bucket in self._waiting_buckets():  # highest priority first
            jobs.extend(e.job for e in self._latest(self._scan(bucket, limit=limit)))
            if len(jobs) >= limit:
                break
        return sorted(jobs, key=lambda j: (-j.priority, j.next_run or _EPOCH0, j.key))[:limit]

    def blocked_jobs(self, limit: int, since: datetime | None = None) -> list[Job]:
        keys = [e.key for e in self._latest(self._scan(_BLOCKED, since=since, limit=limit))][:limit]
        return [j for j in self.get_many(keys) if j is not None and j.blocked and not j.archived]

    def due_scheduled(self, worker_id: str, before: datetime, limit: int) -> list[Job]:
        entries = self._scan(f"{Status.SCHEDULED.value}|{worker_id}", before=before, limit=limit)
        return [e.job for e in self._latest(entries)][:limit]

    def by_status(self, statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        jobs = self._candidates(self._buckets(statuses, None), statuses=set(statuses))
        return jobs if limit is None else jobs[:limit]

    def by_owner(self, worker_ids: Collection[str | None], statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        owners = set(worker_ids)
        if not owners or not statuses:
            return []
        owned = [s for s in statuses if s in (Status.IN_PROCESS, Status.SCHEDULED)]
        shared = [s for s in statuses if s not in owned]
        jobs = self._candidates(self._buckets(owned, owners), owners, set(owned)) if owned else []
        if shared:
            seen = {j.key for j in jobs}
            jobs += [j for j in self._candidates(self._buckets(shared, None), owners, set(shared)) if j.key not in seen]
        return jobs if limit is None else jobs[:limit]

    # -- nodes -------------------------------------------------------------------------------------

    def write_node(self, node: NodeRow, timeout: float | None = None) -> None:
        stmt = self._stmt(("node",),
            "INSERT INTO nodes (name, incarnation, dc, host, pid, started, version, beat, beat_time, state, running,"
            " info, tasks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now()), ?, ?, ?, ?)")
        self._run(stmt, (node.name, node.incarnation, node.dc, node.host, node.pid, node.started,
                         node.version, node.beat, node.state, node.running, node.info, node.tasks), timeout)

    def nodes(self, timeout: float | None = None) -> list[NodeRow]:
        rows = self._run(self._stmt(("nodes",), "SELECT name, incarnation, dc, host, pid, started, version, beat,"
                                                " beat_time, state, running, info, tasks, WRITETIME(beat) AS stamp FROM nodes"),
                         (), timeout)
        out = [
            NodeRow(r["name"], r["incarnation"], r["dc"], r["host"], r["pid"], _when(r["started"]), r["version"],
                    r["beat"], r["state"], r["running"], r["info"], r["tasks"], _aware(r["beat_time"]), r["stamp"])
            for r in rows
        ]
        return sorted(out, key=lambda n: n.name)

    def delete_node(self, row: NodeRow) -> None:
        """A delete stamped with the read beat's own write time: it hides that beat and older
        cells, never a beat written after it (a later client timestamp), whatever the clock of
        the host that deletes. No LWT: the row only ever gets plain writes."""
        if row.stamp is None:
            return
        self._run(self._stmt(("ndel",), "DELETE FROM nodes USING TIMESTAMP ? WHERE name = ?"), (row.stamp, row.name))
        # Its KILL requests go whatever their age: none can reach a node gone this long, and
        # a node that starts under this name clears its own anyway.
        self._run(self._stmt(("kdelall",), "DELETE FROM kill_requests WHERE node = ?"), (row.name,))
        # And its place in the owners registry: the node layer forgets a node only once it
        # owns nothing, so no bucket of its name is left to list (a node that comes back
        # under this name registers again with its first entry). The registry stays as small
        # as the set of nodes alive within the retention.
        self._run(self._stmt(("odel",), "DELETE FROM k2_jobs_owners WHERE kind = 'owner' AND owner = ?"), (row.name,))
        self._owners_known.discard(("owner", row.name))

    # -- kill requests -----------------------------------------------------------------------------

    def add_kill_request(self, request: KillRequest) -> None:
        stmt = self._stmt(("kput",), "INSERT INTO kill_requests (node, task, requested_at, requested_by) VALUES (?, ?, ?, ?)")
        self._run(stmt, (request.node, request.task, request.requested_at, request.requested_by))

    def kill_requests(self, node: str) -> list[KillRequest]:
        rows = self._run(self._stmt(("ksel",), "SELECT * FROM kill_requests WHERE node = ?"), (node,))
        return [KillRequest(r["node"], r["task"], _when(r["requested_at"]), r["requested_by"]) for r in rows]

    def delete_kill_request(self, node: str, task: int) -> None:
        self._run(self._stmt(("kdel",), "DELETE FROM kill_requests WHERE node = ? AND task = ?"), (node, task))
