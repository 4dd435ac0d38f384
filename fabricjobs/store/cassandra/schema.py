"""The Cassandra schema: its tables, their storage options, and how a cluster of nodes creates
or upgrades it safely.

Creating tables from several nodes at once is unsafe on Cassandra 5.0 as such: two coordinators
that both run ``CREATE TABLE IF NOT EXISTS`` can each make the table with a different id, and
the replicas disagree about which one holds the data. Here every table has a fixed id (derived
from its keyspace and name), every schema statement is followed by a wait for schema agreement,
and a schema that is still settling is waited out (SchemaManager): any number of nodes may
start at once on an empty keyspace.

Storage options, per table (docs/explanation/cassandra-data-model.md says the same):

``k2_jobs``          leveled compaction: rows are updated in place many times, and every read
                     is a single-row read that should touch one SSTable per level.
                     gc_grace_seconds stays at Cassandra's 10 days: a cell that a write
                     cleared (``worker_id`` set to null on a release) must not come back from a
                     replica that was down, so tombstones live until a repair has run.
``k2_jobs_index``    leveled; gc_grace_seconds 1 hour. The index is a hint, every entry is
                     checked against its row: a deleted entry that a lagging replica brings
                     back is met as stale and deleted again, so its tombstones need not wait.
``k2_jobs_live``     leveled; gc_grace_seconds 10 minutes: a hint like the index (every entry is
                     checked against its row), so a deleted entry brought back is harmless; its
                     tombstones are those of jobs archived lately, spread over the key space.
``k2_jobs_archive``, ``k2_jobs_archived``, ``k2_job_runs``, ``k2_job_run_uids``, ``k2_job_run_history``, ``k2_job_run_keys``
                     written with a TTL only (the retention): time-window compaction by day,
                     so whole SSTables expire and are dropped without compaction, and a
                     gc_grace_seconds of 3 hours (the hint window): expired cells are the same
                     on every replica, nothing can come back.
``nodes``, ``k2_jobs_owners``, ``k2_listener_files``
                     small; gc_grace_seconds 1 day: a resurrected node row is judged dead and
                     deleted again.
``kill_requests``    gc_grace_seconds 10 minutes: every node reads its partition each pass, and
                     each KILL leaves a tombstone there; a request a lagging replica brings
                     back is older than the node's start, which ignores it (reconcile.py).
"""

from __future__ import annotations

import logging
import random
import re
import time
import uuid
from typing import Any, Callable

from ...errors import SchemaVersionError, StoreError, StoreUnavailable

log = logging.getLogger("fabricjobs.store.cassandra")

SCHEMA_VERSION = 17
ARCHIVE_SHARDS = 16  # partitions per day of k2_jobs_archived
RUN_BUCKET = 4096  # runs (epochs) of one job per k2_job_run_history partition
RECENT_SHARDS = 4  # k2_job_runs_recent partitions per hour (recent.py)
BY_NAME_SHARDS = 32  # k2_job_runs_by_name partitions per job name and day (byname.py): 270,000 rows at 100 runs/s of one name
KEYSPACE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
COUNTERS = ("runs", "successes", "failures", "retries_error", "retries_lost", "kills")
SCHEDULING = {"depends_on": "text", "blocked": "boolean", "time_zone": "text", "late_threshold": "text", "overlap": "text"}
RUN_MODES = {"finishing": "boolean"}  # version 6: FINISHJOB (SMILA's finish)
RUN_ONCE = {"resume_at": "timestamp"}  # version 7: RUNJOB (SMILA's runOnce)
LATE = {"late_action": "text"}  # version 8: LATE_ACTION (IPF's lateExecute)
ON_FAILURE = {"on_failure": "text"}  # version 9: ON_FAILURE (IPF's failureCommand)
OWNERS = {"owner": "text", "requestor": "text"}  # version 10: DolphinDB's userID, IPF's jobRequestor (docs/explanation/design-choices.md)
CALENDAR = {"calendar": "text"}  # version 11: IPF's job calendar (docs/explanation/design-choices.md), with k2_calendars
CLEANUP = {"delete_on_success": "text"}  # version 13: RJM's rjm_delete (docs/explanation/design-choices.md)
PARALLEL = {"parallelism": "int", "task_of": "text"}  # version 14: DolphinDB's tasks of a job (docs/explanation/design-choices.md)
SMILA_COUNTERS = {"failed_after_retry": "int", "failed_without_retry": "int", "canceled": "int"}  # version 15 (docs/explanation/design-choices.md)
PLACEMENT = {"store_dc": "text", "store_serial": "text", "store_consistency": "text"}  # version 16: topology.py
SCHEMA_WAIT = 180.0  # seconds a node waits for the schema to settle
FIRST_AGREEMENT = 10.0  # seconds a start waits for agreement before it reads (best effort)
DDL_TIMEOUT = 60.0  # seconds one schema statement may take (a busy node applies DDL slowly)

_LEVELED = "compaction = {'class': 'LeveledCompactionStrategy'}"
#: Every write to a time-window table carries its own TTL (the history's keep time); the table's
#: default is a backstop that keeps Cassandra 5.0's zero_ttl_on_twcs guardrail quiet (a time-window
#: table without a TTL never drops a whole SSTable, so Cassandra warns a role that creates one,
#: and the warnings alert fired on a fresh deployment's first start). A year: well inside the
#: expiration dates Cassandra 5.0 accepts in its default storage compatibility mode.
_BACKSTOP_TTL = f"default_time_to_live = {365 * 86400}"
_BY_DAY = ("compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', "
           f"'compaction_window_size': 1}} AND {_BACKSTOP_TTL}")

#: Storage options of each table (see the module docstring for why).
TABLE_OPTIONS: dict[str, str] = {
    "k2_jobs": f"{_LEVELED} AND gc_grace_seconds = 864000",
    "k2_jobs_index": f"{_LEVELED} AND gc_grace_seconds = 3600",
    "k2_jobs_owners": "gc_grace_seconds = 86400",
    "k2_jobs_archive": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_jobs_archived": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_job_run_history": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_job_run_keys": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_job_runs_recent": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_job_runs_hours": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "nodes": "gc_grace_seconds = 86400",
    "kill_requests": "gc_grace_seconds = 600",
    "k2_job_runs": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_job_run_uids": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_listener_files": "gc_grace_seconds = 86400",
    "k2_calendars": "gc_grace_seconds = 86400",
    # Lines only ever expire (TTL, livelog.py): no tombstones to keep, hour windows to drop whole.
    "k2_jobs_live": f"{_LEVELED} AND gc_grace_seconds = 600",
    "k2_job_runs_by_name": f"{_BY_DAY} AND gc_grace_seconds = 10800",
    "k2_live_log": "compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'HOURS',"
                   f" 'compaction_window_size': 1}} AND {_BACKSTOP_TTL} AND gc_grace_seconds = 3600",
}

_JOBS_V1 = """k2_jobs (
        type text, name text, uid text,
        status text, archived boolean, affinity text, arguments text, execution_interval text,
        creation_time timestamp, start_time timestamp, end_time timestamp, next_run timestamp,
        hold_until timestamp, error_msg text, output text, tries int, worker_id text,
        epoch bigint, revision bigint, priority int,{extra}
        PRIMARY KEY ((type, name, uid)))"""
_INDEX = """k2_jobs_index (
        bucket text, shard int, next_run timestamp, type text, name text, uid text, revision bigint,
        status text, worker_id text, hold_until timestamp, affinity text, priority int, epoch bigint,
        tries int, written_at timestamp,
        PRIMARY KEY ((bucket, shard), next_run, type, name, uid, revision))"""
_OWNERS = "k2_jobs_owners (kind text, owner text, PRIMARY KEY ((kind), owner))"
_ARCHIVE = """k2_jobs_archive (
        day text, end_time timestamp, type text, name text, uid text,
        PRIMARY KEY ((day), end_time, type, name, uid))"""
#: Version 4: archived keys by (day, shard): one partition per day held every job that ended
#: that day (8.6 million rows at 100 jobs/s), far past the ~100 MB Cassandra keeps a partition
#: comfortable at. k2_jobs_archive stays, read until its TTL has emptied it.
_ARCHIVED = """k2_jobs_archived (
        day text, shard int, end_time timestamp, type text, name text, uid text, owner text, status text,
        PRIMARY KEY ((day, shard), end_time, type, name, uid))"""
#: Version 17: an archive entry carries what the console's history search filters on besides
#: the key (search.py), so that a search by owner or status reads no row to pass over one.
ARCHIVE_FILTERS = {"owner": "text", "status": "text"}
_NODES = """nodes (
        name text PRIMARY KEY, incarnation text, dc text, host text, pid int, started timestamp,
        version text, beat bigint, beat_time timestamp, state text, running int, info text, tasks text)"""
_KILLS = "kill_requests (node text, task bigint, requested_at timestamp, requested_by text, PRIMARY KEY ((node), task))"
_SCHEMA = "fabricjobs_schema (id text PRIMARY KEY, version int)"
_RUNS = """k2_job_runs (
        type text, name text, uid text, epoch bigint, node text, due_time timestamp,
        start_time timestamp, end_time timestamp, result text, status text, tries int,
        error text, output text, exit_code int, log text, note text,
        PRIMARY KEY ((type, name, uid), epoch, end_time))"""
_RUN_UIDS = "k2_job_run_uids (type text, name text, uid text, PRIMARY KEY ((type, name), uid))"
#: Version 4: a job's history in partitions of RUN_BUCKET runs (one partition per job held every
#: run of a job that fires every second: 2.6 million rows over a 30-day retention), and which
#: (uid, bucket) have runs, by day (one partition per job name held every uid ever run: a
#: name run once per order, with a uid each, grows without bound). k2_job_runs and
#: k2_job_run_uids stay, read until their TTL has emptied them.
_RUN_HISTORY = """k2_job_run_history (
        type text, name text, uid text, bucket int, epoch bigint, node text, due_time timestamp,
        start_time timestamp, end_time timestamp, result text, status text, tries int,
        error text, output text, exit_code int, log text, note text,
        PRIMARY KEY ((type, name, uid, bucket), epoch, end_time))"""
_RUN_KEYS = """k2_job_run_keys (
        type text, name text, day text, uid text, bucket int,
        PRIMARY KEY ((type, name, day), uid, bucket))"""
#: Version 5: every run line of the cluster by the hour of its end (JOBHISTORY RECENT n), and
#: which hours have lines, by day (recent.py).
_RECENT = """k2_job_runs_recent (
        hour text, shard int, end_time timestamp, type text, name text, uid text, epoch bigint,
        node text, due_time timestamp, start_time timestamp, result text, status text, tries int,
        error text, note text,
        PRIMARY KEY ((hour, shard), end_time, type, name, uid, epoch))"""
_RECENT_ORDER = "CLUSTERING ORDER BY (end_time DESC, type ASC, name ASC, uid ASC, epoch ASC)"
_RECENT_HOURS = "k2_job_runs_hours (day text, hour text, PRIMARY KEY (day, hour))"
_LISTENER = """k2_listener_files (
        type text, name text, uid text, file text, note text, marked_at timestamp,
        PRIMARY KEY ((type, name, uid), file))"""
_RUNS_ORDER = "CLUSTERING ORDER BY (epoch DESC, end_time DESC)"
#: Version 11: the calendars (a few, each read by name by the nodes that fire its jobs).
_CALENDARS = "k2_calendars (name text PRIMARY KEY, rules text, updated timestamp)"
#: Version 16: the live keys in key order, for listings a page at a time (listing.py).
_LIVE = """k2_jobs_live (shard int, type text, name text, uid text, created timestamp, written_at timestamp,
        PRIMARY KEY ((shard), type, name, uid, created))"""
#: Version 16: pointers to run lines by job name and day, newest first (byname.py).
_BY_NAME = """k2_job_runs_by_name (
        type text, name text, day text, shard int, end_time timestamp, uid text, epoch bigint,
        PRIMARY KEY ((type, name, day, shard), end_time, uid, epoch))"""
_BY_NAME_ORDER = "CLUSTERING ORDER BY (end_time DESC, uid ASC, epoch ASC)"
#: Version 12: a running run's log lines as they come (JOBLOG ... FOLLOW, livelog.py).
_LIVE_LOG = """k2_live_log (
        type text, name text, uid text, epoch bigint, seq bigint, line text,
        PRIMARY KEY ((type, name, uid, epoch), seq))"""


#: Version 16: where each node writes from (its Cassandra DC and levels), for topology.py's rules.
_NODES_NOW = _NODES.replace(" tasks text)", " tasks text," + ",".join(f" {c} {t}" for c, t in PLACEMENT.items()) + ")")


def _create(body: str, options: str = "") -> str:
    return f"CREATE TABLE IF NOT EXISTS {body}" + (f" WITH {options}" if options else "")


def _name(body: str) -> str:
    return body.split(" ", 1)[0]


#: Version 1's tables (kept to test upgrades from it).
SCHEMA_V1: tuple[str, ...] = tuple(
    _create(b) for b in (_JOBS_V1.format(extra=""), _INDEX, _OWNERS, _ARCHIVE, _NODES, _KILLS, _SCHEMA)
)

_EXTRA = "".join(f"\n        {c} int," for c in COUNTERS) + "".join(f"\n        {c} {t}," for c, t in (SCHEDULING | RUN_MODES | RUN_ONCE | LATE | ON_FAILURE | OWNERS | CALENDAR | CLEANUP | PARALLEL | SMILA_COUNTERS).items())

#: The current schema, made in one go in a new keyspace (fabricjobs_schema first: it holds the lock).
SCHEMA: tuple[str, ...] = (_create(_SCHEMA),) + tuple(
    _create(body, TABLE_OPTIONS[_name(body)] + (f" AND {_RUNS_ORDER}" if body in (_RUNS, _RUN_HISTORY) else "")
            + (f" AND {_RECENT_ORDER}" if body == _RECENT else "") + (f" AND {_BY_NAME_ORDER}" if body == _BY_NAME else ""))
    for body in (_JOBS_V1.format(extra=_EXTRA), _INDEX, _OWNERS, _ARCHIVE, _ARCHIVED, _NODES_NOW, _KILLS, _RUNS, _RUN_UIDS,
                 _RUN_HISTORY, _RUN_KEYS, _LISTENER, _RECENT, _RECENT_HOURS, _CALENDARS, _LIVE_LOG, _LIVE, _BY_NAME)
)

_LATER_TABLES = ("k2_jobs_archived", "k2_job_run_history", "k2_job_run_keys", "k2_job_runs_recent", "k2_job_runs_hours",
                 "k2_calendars", "k2_live_log", "k2_jobs_live", "k2_job_runs_by_name")

#: Changes from the version before, applied in order under the lock (each is idempotent: a
#: statement that finds its change already made is skipped).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        *(f"ALTER TABLE k2_jobs ADD {c} int" for c in COUNTERS),
        *(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in SCHEDULING.items()),
        _create(_RUNS, _RUNS_ORDER),
        _create(_RUN_UIDS),
        _create(_LISTENER),
    ),
    3: tuple(f"ALTER TABLE {table} WITH {options}" for table, options in TABLE_OPTIONS.items()
             if table not in _LATER_TABLES),  # made by a later version, with their options
    4: (_create(_ARCHIVED, TABLE_OPTIONS["k2_jobs_archived"]),
        _create(_RUN_HISTORY, f"{TABLE_OPTIONS['k2_job_run_history']} AND {_RUNS_ORDER}"),
        _create(_RUN_KEYS, TABLE_OPTIONS["k2_job_run_keys"])),
    5: (_create(_RECENT, f"{TABLE_OPTIONS['k2_job_runs_recent']} AND {_RECENT_ORDER}"),
        _create(_RECENT_HOURS, TABLE_OPTIONS["k2_job_runs_hours"])),
    6: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in RUN_MODES.items()),
    7: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in RUN_ONCE.items()),
    8: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in LATE.items()),
    9: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in ON_FAILURE.items()),
    10: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in OWNERS.items()),
    11: (*(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in CALENDAR.items()),
         _create(_CALENDARS, TABLE_OPTIONS["k2_calendars"])),
    12: (_create(_LIVE_LOG, TABLE_OPTIONS["k2_live_log"]),),
    13: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in CLEANUP.items()),
    14: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in PARALLEL.items()),
    15: tuple(f"ALTER TABLE k2_jobs ADD {c} {t}" for c, t in SMILA_COUNTERS.items()),
    16: (*(f"ALTER TABLE nodes ADD {c} {t}" for c, t in PLACEMENT.items()),
         f"ALTER TABLE kill_requests WITH {TABLE_OPTIONS['kill_requests']}",
         _create(_LIVE, TABLE_OPTIONS["k2_jobs_live"]),
         _create(_BY_NAME, f"{TABLE_OPTIONS['k2_job_runs_by_name']} AND {_BY_NAME_ORDER}")),
    17: tuple(f"ALTER TABLE k2_jobs_archived ADD {c} {t}" for c, t in ARCHIVE_FILTERS.items()),
}


def parse_replication(text: str) -> dict[str, Any]:
    """'SimpleStrategy:3' or 'NetworkTopologyStrategy:DC1=3,DC2=3' -> a CQL replication map."""
    strategy, _, rest = text.partition(":")
    strategy = strategy.strip()
    if strategy == "SimpleStrategy":
        try:
            factor = int(rest or "1")
        except ValueError:
            raise StoreError(f"[cassandra] REPLICATION: bad replication factor {rest!r}") from None
        return {"class": "SimpleStrategy", "replication_factor": factor}
    if strategy == "NetworkTopologyStrategy":
        out: dict[str, Any] = {"class": "NetworkTopologyStrategy"}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            dc, _, n = part.partition("=")
            if not dc or not n.isdigit():
                raise StoreError(f"[cassandra] REPLICATION: expected DC=factor, got {part!r}")
            out[dc.strip()] = int(n)
        if len(out) == 1:
            raise StoreError("[cassandra] REPLICATION: NetworkTopologyStrategy needs at least one DC=factor")
        return out
    raise StoreError(f"[cassandra] REPLICATION: expected SimpleStrategy:<n> or NetworkTopologyStrategy:DC=n,..., got {text!r}")


_TABLE_IDS = uuid.UUID("5f0c6a63-2f59-4c0e-9c52-4c1e8f7d2b11")  # namespace of fabricjobs' fixed table ids


def _settling(exc: Exception) -> bool:
    """Whether an error is a schema change not yet known to every replica (a table that a
    concurrent node created a moment ago): worth waiting for agreement and trying again."""
    text = str(exc).lower()
    return any(s in text for s in ("does not exist", "unknown cf", "unconfigured table", "unknown table",
                                   "unknown keyspace", "incompatible_schema", "incompatible schema",
                                   "timed out", "timeout"))


_TABLE_REF = re.compile(r"\b(FROM|INTO|UPDATE|TABLE(?:\s+IF\s+NOT\s+EXISTS)?)\s+([A-Za-z_]\w*)\b(?!\.)")


def qualify(cql: str, keyspace: str) -> str:
    """``cql`` with its table names prefixed by ``keyspace``. Statements name their keyspace
    instead of relying on ``USE``: Cassandra 5 warns about prepared statements on a
    connection with a current keyspace (a name could mean two tables), and a shared session
    could then only ever serve one keyspace."""
    return _TABLE_REF.sub(lambda m: f"{m.group(1)} {keyspace}.{m.group(2)}", cql)


def check_keyspace_name(keyspace: str) -> None:
    if not KEYSPACE_RE.match(keyspace):
        raise StoreError(f"[cassandra] KEYSPACE: {keyspace!r} is not a valid keyspace name (letters, digits, _)")


def _replication_cql(replication: str) -> str:
    rep = parse_replication(replication)
    return "{" + ", ".join(f"'{k}': " + (f"'{v}'" if isinstance(v, str) else str(v)) for k, v in rep.items()) + "}"


def schema_cql(keyspace: str, replication: str) -> str:
    """The CQL that creates this code's schema in ``keyspace`` (for CREATE_SCHEMA = false:
    an administrator runs it once, e.g. ``fabricjobs cassandra-schema | cqlsh``)."""
    check_keyspace_name(keyspace)
    lines = [f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {_replication_cql(replication)};"]
    lines += [with_table_id(qualify(" ".join(ddl.split()), keyspace), keyspace) + ";" for ddl in SCHEMA]
    lines.append(f"INSERT INTO {keyspace}.fabricjobs_schema (id, version) VALUES ('k2_jobs', {SCHEMA_VERSION});")
    return "\n".join(lines)


class SchemaManager:
    """Creates or upgrades the schema of one keyspace through a connected driver session.

    Any number of nodes may do it at the same instant (docs/explanation/cassandra-queue.md,
    "Starting together"): every table is created with a fixed id (``table_id``), so two
    coordinators that both create it make the same table; every statement (a no-op ``IF NOT
    EXISTS`` included) is followed by a wait until the live replicas agree on the schema, so
    the next one never reaches a replica that lacks what the last one made; and the errors of
    a schema still settling (an unknown keyspace or table, INCOMPATIBLE_SCHEMA) are waited out
    and the whole step tried again, until ``wait`` seconds have passed. No lock: there is
    nothing left for one to protect, and a lock whose holder stalled held up every other node.
    """

    def __init__(self, session, keyspace: str, *, lwt_profile: str = "lwt", serial_profile: str = "serial",
                 wait: float = SCHEMA_WAIT) -> None:
        self.s = session
        self.keyspace = keyspace
        self.lwt = lwt_profile
        self.serial = serial_profile
        self.wait = wait

    def ensure(self, create: bool, replication: str | Callable[[], str]) -> int:
        """Make the keyspace's schema current (``create``) or check that it is; the version.
        ``replication``: of a keyspace this creates (a function: asked only then)."""
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return self._ensure_once(create, replication)
            except StoreError:
                raise  # said by a step, and final (a settling schema reaches here as the driver's error)
            except Exception as exc:
                if not _settling(exc) or time.monotonic() > deadline:
                    raise StoreError(f"cannot set up the fabricjobs schema of keyspace {self.keyspace!r}: {exc}") from None
                log.info("the schema of keyspace %s is still settling (%s); trying again", self.keyspace, exc)
                self._agree()
                time.sleep(0.2 + random.random() * 0.3)

    def _ensure_once(self, create: bool, replication: str | Callable[[], str]) -> int:
        # What another node made a moment ago is known here before anything is read; but only
        # a change needs agreement: a cluster that disagrees for long (a rolling upgrade of
        # Cassandra itself) must not keep a node with nothing to change from starting.
        self._agree(wait=FIRST_AGREEMENT, required=False)
        if not self._keyspace_exists():
            if not create:
                raise StoreError(f"keyspace {self.keyspace!r} does not exist; create it or set [cassandra] CREATE_SCHEMA = true")
            self._create_keyspace(replication if isinstance(replication, str) else replication())
        version = self.version()
        if version == SCHEMA_VERSION:
            return version  # the usual start: nothing to change, no DDL sent
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"Cassandra keyspace {self.keyspace!r} has schema version {version}, newer than this "
                f"fabricjobs understands ({SCHEMA_VERSION}); upgrade fabricjobs"
            )
        if not create:
            if version is None:
                raise StoreError(f"keyspace {self.keyspace!r} has no fabricjobs schema; set [cassandra] CREATE_SCHEMA = true")
            raise StoreError(
                f"Cassandra keyspace {self.keyspace!r} has schema version {version}; this fabricjobs needs "
                f"{SCHEMA_VERSION}: upgrade it once with [cassandra] CREATE_SCHEMA = true (or the CQL in docs/guides/operations/upgrade.md)"
            )
        return self._upgrade(version)

    def _agree(self, wait: float | None = None, required: bool = True) -> None:
        """Wait (up to ``wait``, default the manager's) until every live replica has the same
        schema version; ``required``: a StoreError if they do not, else a warning."""
        wait = self.wait if wait is None else wait
        if self.s.cluster.control_connection.wait_for_schema_agreement(wait_time=wait):
            return
        if required:
            raise StoreUnavailable(f"Cassandra replicas did not agree on the schema of {self.keyspace!r} within "
                             f"{wait:.0f} s; check that every node is up")
        log.warning("the Cassandra replicas do not agree on the schema yet (after %.0f s); going on", wait)

    def _q(self, cql: str) -> str:
        return qualify(cql, self.keyspace)

    def version(self) -> int | None:
        """The schema version, or None for a keyspace without fabricjobs tables. A read left
        unanswered is tried again (twice): a node starting just after a partition healed met a
        replica that had not yet caught up, and exited on its first read (the host that timed
        out is tried last next, see session.py). One that meets a table still settling raises
        it for :meth:`ensure` to wait out ('Unknown CF' from a coordinator that did not know a
        table another node had just made, Apache Cassandra 5.0)."""
        for attempt in range(3):
            try:
                row = self.s.execute(self._q("SELECT version FROM fabricjobs_schema WHERE id = 'k2_jobs'"),
                                     execution_profile=self.serial).one()
                return None if row is None else row["version"]
            except Exception as exc:
                if _unanswered(exc) and attempt < 2:
                    continue
                text = str(exc).lower()
                if "fabricjobs_schema" in text and ("unconfigured table" in text or "does not exist" in text):
                    return None  # a keyspace without fabricjobs tables (agreed on: see _ensure_once)
                raise
        raise AssertionError("unreachable")

    # -- steps -----------------------------------------------------------------------------------

    def _keyspace_exists(self) -> bool:
        row = self.s.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                             (self.keyspace,)).one()
        return row is not None

    def _create_keyspace(self, replication: str) -> None:
        cql = f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = {_replication_cql(replication)}"
        try:
            self._ddl(cql)
        except StoreError as exc:
            text = str(exc)
            if "guardrail" in text.lower() or "not allowed" in text.lower():
                raise StoreError(f"[cassandra] REPLICATION = {replication}: the cluster refuses to create keyspace "
                                 f"{self.keyspace!r} ({text}); use NetworkTopologyStrategy:<DC>=<factor>") from None
            raise

    def _ddl(self, cql: str) -> None:
        """One schema statement (a table with its fixed id), then wait until every live replica
        has the same schema: also after a no-op, which answers at once, before the change that
        another node made has reached every replica."""
        try:
            self.s.execute(with_table_id(self._q(cql), self.keyspace), timeout=DDL_TIMEOUT)
        except Exception as exc:
            if _settling(exc):
                raise
            raise StoreError(f"Cassandra refused a schema change ({' '.join(cql.split())[:80]}...): {exc}") from None
        self._agree()

    def _upgrade(self, version: int | None) -> int:
        if version is None:
            for ddl in SCHEMA:
                self._ddl(ddl)
            self.s.execute(self._q("INSERT INTO fabricjobs_schema (id, version) VALUES ('k2_jobs', %s) IF NOT EXISTS"),
                           (SCHEMA_VERSION,), execution_profile=self.lwt)
            log.info("created the fabricjobs schema (version %d) in keyspace %s", SCHEMA_VERSION, self.keyspace)
            return SCHEMA_VERSION
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for ddl in MIGRATIONS[target]:
                try:
                    self._ddl(ddl)
                except StoreError as exc:  # made by another node, or an earlier, interrupted upgrade
                    if "conflicts with an existing column" not in str(exc) and "already exist" not in str(exc):
                        raise
            # Several nodes may upgrade at once: each statement is idempotent, and one of them
            # moves the version on (the others' conditions fail, which is the same outcome).
            self.s.execute(self._q("UPDATE fabricjobs_schema SET version = %s WHERE id = 'k2_jobs' IF version = %s"),
                           (target, target - 1), execution_profile=self.lwt)
            log.info("upgraded the fabricjobs schema of keyspace %s to version %d", self.keyspace, target)
        return SCHEMA_VERSION


_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\.(\w+)", re.IGNORECASE)


def table_id(keyspace: str, table: str) -> uuid.UUID:
    """The id every fabricjobs process gives ``keyspace.table``: two coordinators creating
    the table at once then make one table, not two that the replicas disagree on."""
    return uuid.uuid5(_TABLE_IDS, f"{keyspace}.{table}")


def with_table_id(cql: str, keyspace: str) -> str:
    """A qualified ``CREATE TABLE`` with its fixed id option added (other statements as given)."""
    m = _CREATE_TABLE.match(cql)
    if m is None or re.search(r"\bid\s*=", cql, re.IGNORECASE):
        return cql
    option = f"id = '{table_id(m.group(1), m.group(2))}'"
    return cql + (f" AND {option}" if re.search(r"\)\s*WITH\b", cql, re.IGNORECASE) else f" WITH {option}")


def _unanswered(exc: BaseException) -> bool:
    """A request that timed out (on the client, or a read timeout or unavailable replicas on the
    coordinator): another try, on another host, may well be answered."""
    from cassandra import OperationTimedOut, ReadTimeout, Unavailable
    from cassandra.cluster import NoHostAvailable

    transient = (OperationTimedOut, ReadTimeout, Unavailable)
    if isinstance(exc, NoHostAvailable):
        return bool(exc.errors) and all(isinstance(e, transient) for e in exc.errors.values())
    return isinstance(exc, transient)
