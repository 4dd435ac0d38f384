"""The store contract: the one seam between the domain and the databases.

Every backend implements :class:`JobStore`; ``tests/store/test_contract.py`` runs the same
tests against each. The store persists rows and makes compare-and-set atomic; it knows
nothing of commands, shells, schedules or which transitions are legal (that is
:mod:`fabricjobs.model`).

Compare-and-set
    A write names the row it read (``expected``) and the row it wants (``new``). It is applied
    only if the stored row still has the expected ``status``, ``epoch``, ``worker_id`` and
    ``revision``; the store then writes the columns in which ``new`` differs from ``expected``,
    with ``revision + 1``, and returns the stored row. Otherwise nothing is written and the
    result carries the row's current :class:`Version`, so the caller can decide again without
    another read (Cassandra returns exactly these columns from a failed LWT).
    Because ``revision`` changes on every write, a CAS also fails if the row changed in a way
    that left status and epoch alone (UPDATEJOB); ``epoch`` and ``worker_id`` are in the
    condition because they are the fencing token (docs/explanation/guarantees.md).

Reads for the reconcile loop
    :meth:`waiting`, :meth:`due_scheduled`, :meth:`by_status` and :meth:`by_owner` return only live (non-archived)
    rows through indexes, so neither history nor other nodes' scheduled work makes a pass
    slower. No method scans archived rows except :meth:`archived_since`, which is bounded by
    time and only used by ``JOBSTATUS n DAYS AGO``.

    Rows from those four reads are *candidates*: their status, owner, epoch, revision, due
    time, hold, affinity, priority and tries are exact, but a backend may leave arguments,
    output, error and times out (Cassandra reads them from an index). They are meant to choose
    and then to be passed to :meth:`cas`, which writes only what changed and returns the full
    row; read a row with :meth:`get` or :meth:`live_jobs` to show it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Collection, ContextManager, Iterator, Sequence

from ..calendar import Calendar
from ..model import Job, JobKey, NodeState, Status
from .search import ArchivePage, ArchiveQuery
from .stats import RepairPage, StoreStats


#: ``whole`` of the CAS writes: for every pair, or one flag per pair (JobStore.cas_many).
Whole = bool | Sequence[bool]


def each_whole(whole: Whole, count: int) -> list[bool]:
    """``whole`` as one flag per pair."""
    flags = [whole] * count if isinstance(whole, bool) else list(whole)
    if len(flags) != count:
        raise ValueError(f"{len(flags)} whole flags for {count} pairs")
    return flags


@dataclass(frozen=True, slots=True)
class Version:
    """The columns a compare-and-set is conditioned on, as currently stored."""

    status: Status
    epoch: int
    worker_id: str | None
    revision: int

    @classmethod
    def of(cls, job: Job) -> "Version":
        return cls(job.status, job.epoch, job.worker_id, job.revision)


@dataclass(frozen=True, slots=True)
class CasResult:
    """Outcome of one conditional write.

    applied:     the write happened; ``row`` is the row as stored now.
    not applied: ``current`` is the row's current version, or None if there is no such row
                 (for :meth:`JobStore.insert`, ``row`` is the live row that blocked it).
    """

    applied: bool
    row: Job | None = None
    current: Version | None = None

    @property
    def stored(self) -> Job:
        """The row an applied write left (every backend returns it)."""
        assert self.row is not None, "an applied write returns its row"
        return self.row


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One row of ``nodes``: written by its node only (a plain write, no CAS needed).

    ``beat`` is a counter the node increases on every heartbeat; observers judge liveness by
    watching it change on their own monotonic clock. ``beat_time`` is set by the store's clock
    at write time (informational: ages shown in NODES/PS, never used to declare a node dead).
    ``info`` (limits per affinity, running counts, heartbeat settings) and ``tasks`` (what
    PS shows) are JSON texts owned by the node layer; the store does not look inside.
    """

    name: str
    incarnation: str
    dc: str
    host: str
    pid: int
    started: datetime
    version: str
    beat: int
    state: str = NodeState.RUNNING  # a NodeState (a store reads back its text)
    running: int = 0
    info: str = "{}"
    tasks: str = "[]"
    beat_time: datetime | None = None
    stamp: int | None = None  # the store's write stamp of this beat (Cassandra: its WRITETIME)


#: How long a live log line (JOBLOG ... FOLLOW) is kept at most: the run record keeps the log.
LIVE_LOG_KEEP_SEC = 86400


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ended run of a job, in ``k2_job_runs`` (append-only; kept as long as archived rows).

    A run is identified by the job key, its ``epoch`` (every claim starts a new epoch, so
    JOBHISTORY's run number is the epoch) and its end. ``result`` says how it ended (OK, ERROR,
    KILLED, STOPPED, RESTARTED, RELEASED, LOST, INTERRUPTED; SKIPPED for a fire that did not
    run); ``status`` is the job's status after it.
    ``log`` holds the run's log lines (the job's logger, a PROCESS job's stdout and stderr),
    bounded: head and tail kept.
    """

    key: JobKey
    epoch: int
    node: str
    due: datetime | None
    start: datetime | None
    end: datetime
    result: str
    status: str
    tries: int
    error: str = ""
    output: str | None = None
    exit_code: int | None = None
    log: str = ""
    note: str = ""  # scheduling notes: a fire skipped as too late or while the last run still went


@dataclass(frozen=True, slots=True)
class KillRequest:
    node: str
    task: int
    requested_at: datetime
    requested_by: str


Lane = tuple[int, int]  # (lanes, index): a node's claim lane among the live nodes (node/lanes.py)


def in_lane(job: Job, lane: Lane | None) -> bool:
    """Whether :meth:`JobStore.waiting` with ``lane`` returns ``job``: a row with an owner
    (owner precedence decides who takes it, not lanes) or one whose key is in the lane."""
    return lane is None or job.worker_id is not None or job.key.lane(lane[0]) == lane[1]


class JobStore(ABC):
    """Rows of ``k2_jobs`` and ``nodes``. Thread-safe: one store object serves all threads."""

    #: Human name of the backend, for messages.
    backend: str = "?"
    #: True if :meth:`waiting` with a lane reads that lane's rows only (SQLite); False if it
    #: reads every lane's rows and filters them, which saves a claim pass nothing (Cassandra).
    reads_lanes: bool = False
    #: The backend's own counters (a backend that keeps any sets its own object).
    stats: StoreStats = StoreStats()
    #: Which store this is, the same text for every process that opens it (the doorbell's scope).
    identity: str = ""
    #: True if :meth:`delete_archived` deletes rows (SQLite); False if they expire by TTL.
    deletes_archived: bool = True
    #: True if the store keeps an index of live rows of its own, beside the rows, which
    #: :meth:`repair_index` checks (Cassandra); False if the database keeps its indexes (SQLite).
    keeps_index: bool = False
    #: True if the candidates of the reconcile loop's reads (above) are whole rows (SQLite);
    #: False if they lack the columns choosing does not need (Cassandra's index: no schedule,
    #: time zone, calendar, late threshold or arguments). Read a row with :meth:`get_many`
    #: before deciding by those.
    candidates_whole: bool = True

    # -- lifecycle -------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Release connections. The object must not be used afterwards."""

    def store_time(self) -> datetime:
        """Now, by the store's clock (SQLite: this host; Cassandra: the coordinator).

        Used only for ages shown to people (last beat age, task duration), so that those do not
        depend on the clock of whoever wrote the row.
        """
        raise NotImplementedError

    def wall_time(self) -> Callable[[], float] | None:
        """The store's own clock (seconds since the epoch), if it has one that every host must
        follow (Cassandra: its coordinators' time, measured by this process); None: this host's
        clock is the store's (SQLite). Nodes and shells on the store read "now" from it, so that
        due times and history mean the same on every host (docs/explanation/cassandra-queue.md)."""
        return None

    def clock_skew(self) -> float:
        """This host's wall clock minus the store's, as last measured (0: the same clock)."""
        return 0.0

    def check_placement(self, me: str, started: datetime) -> None:
        """A StoreError (Cassandra: PlacementError) if node ``me``, started at ``started``,
        writes beside an older live node in a way the store's topology refuses; nothing to
        check where there is one place to write from (SQLite)."""
        return None

    def refresh(self, keep_for: float = 0.0) -> None:
        """Forget what this store object kept of its reads, and from now on keep it up to
        ``keep_for`` seconds between reads (0: read each time, the default). Cassandra keeps
        which priorities and owners have index buckets, and (for at most a tenth of a second)
        that :meth:`waiting` found no row, unless this object made a row WAITING since. A node
        calls it at each full pass (its poll, or a doorbell after a STARTJOB), so that the many
        claim passes between two full passes do not each read those again; what another process
        changed meanwhile is seen at the next full pass or once the tenth of a second is over
        (docs/explanation/cassandra-queue.md). Nothing to keep on SQLite."""
        return None

    def transaction(self) -> ContextManager[None]:
        """Group this thread's writes: a backend with multi-row transactions commits them
        together when the block ends (one fsync for a whole script of STARTJOBs) and keeps none
        of them if the block raises; others commit each write by itself. Nothing written inside
        may be reported to a user as done before the block has ended. Keep blocks short: other
        writers may wait for them."""
        return nullcontext()

    # -- jobs: writes ----------------------------------------------------------------------

    @abstractmethod
    def insert(self, job: Job) -> CasResult:
        """Insert ``job`` if no row has its key, or replace the row if it is archived.

        Atomic. A replaced row keeps counting: the new row gets the old ``epoch + 1`` and
        ``revision + 1`` (so no stale writer of an earlier life can match it) and keeps the old
        run counters (:data:`~fabricjobs.model.RUN_COUNTERS`: they count the key's runs, as its
        run history lists them), whatever ``job`` holds; a new row gets
        ``epoch = job.epoch`` and ``revision = 1``. If a live row has the key, nothing is written
        and the result's ``row`` is that live row.
        """

    def insert_many(self, jobs: Sequence[Job]) -> list[CasResult]:
        """:meth:`insert` each job in order until one is refused (a live row has its key):
        the results up to and including that one; the jobs after it are not written (a bulk
        submit stops at its first error, what came before it stays)."""
        results: list[CasResult] = []
        for job in jobs:
            results.append(self.insert(job))
            if not results[-1].applied:
                break
        return results

    @abstractmethod
    def cas(self, expected: Job, new: Job, *, whole: bool = False) -> CasResult:
        """Write ``new`` if the stored row still matches ``expected`` (see the module docstring).

        Only the columns in which ``new`` differs from ``expected`` are written (so a candidate
        row can be passed as ``expected``); the applied result's ``row`` is the full row as
        this write left it, even if another change follows it at once (a backend that reads a
        candidate's row back takes from that read only what the candidate did not carry).
        ``new.revision`` is ignored: the stored revision becomes ``expected.revision + 1``.
        ``new.key`` must equal ``expected.key``. ``whole``: as cas_many's (answered without
        reading the row back).
        """

    @abstractmethod
    def cas_many(
        self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None, *, whole: Whole = False,
    ) -> list[CasResult]:
        """Several independent CAS writes; one result per pair, in order.

        ``whole`` (for every pair, or one flag per pair): the expected row is a row as a read
        of the job returned it, not a claim candidate of :meth:`waiting` (whose arguments and
        output are left out): then an applied write's row is ``new`` at the next revision,
        which the store returns without reading or decoding it back (the revision in the
        condition proves nothing else changed). The node's outcome writes are such (profiled:
        decoding the rows returned was a seventh of one node's loop), and so are the claims of
        fires whose rows the node has whole.

        Each is decided on its own (one failing does not undo the others). Backends make this
        cheaper than a loop: SQLite commits them in one transaction, Cassandra sends the LWTs
        concurrently. ``runs[i]``, if given, is recorded in the run history exactly when pair
        ``i`` applied: a writer that lost the row (a fenced, stale executor) records nothing,
        and a record is never overwritten (one per key and epoch). A reader that sees the
        row's change finds its record (Cassandra writes the record first and takes it back if
        the LWT loses; a crash between the two can leave it behind).
        """

    def cas_each(
        self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None,
        on_error: Callable[[Job], None] = lambda expected: None, *, whole: Whole = False,
    ) -> list[CasResult | None]:
        """``cas_many``, falling back to one pair at a time when the batch raises, so that one
        bad write does not hide the results of the others (on Cassandra they have applied,
        and a lost result would leave those rows claimed with nothing running them). None
        for a pair that could not be written at all; ``on_error`` is told of each."""
        if not pairs:
            return []
        records = list(runs) if runs is not None else [None] * len(pairs)
        flags = each_whole(whole, len(pairs))
        try:
            return list(self.cas_many(pairs, records, whole=flags))
        except Exception:
            if len(pairs) == 1:
                on_error(pairs[0][0])
                return [None]
        out: list[CasResult | None] = []
        for pair, record, flag in zip(pairs, records, flags):
            try:
                out.append(self.cas_many([pair], [record], whole=flag)[0])
            except Exception:
                on_error(pair[0])
                out.append(None)
        return out

    def cas_each_within(
        self, pairs: Sequence[tuple[Job, Job]], runs: Sequence[RunRecord | None] | None = None,
        on_error: Callable[[Job], None] = lambda expected: None, *, whole: Whole = False, patience: float,
    ) -> "list[CasResult | None | Future[CasResult]]":
        """``cas_each``, but a write still unanswered once the others have stopped answering for
        ``patience`` seconds is returned as a Future of its result (raising StoreError if it could not be written at all; ``on_error``
        is then not called), which the store goes on settling meanwhile. The node's loop serves
        the writes that answered instead of waiting for the slowest: on Cassandra one LWT sent
        to a coordinator that froze waits out its timeout (docs/explanation/nodes.md, "Writes
        that straggle"). A backend whose writes answer together (SQLite: one transaction)
        returns no Futures."""
        return list(self.cas_each(pairs, runs, on_error, whole=whole))

    @abstractmethod
    def runs(self, type: str, name: str, uid: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Recorded runs of the jobs named (one uid, or all), newest first."""

    @abstractmethod
    def recent_runs(self, limit: int, since: datetime | None = None) -> list[RunRecord]:
        """The ``limit`` recorded runs of the whole cluster that ended last (at or after
        ``since``, when given), newest first (skipped fires included, as in ``runs``). Their
        ``output`` and ``log`` may be left out (None and ""): a list of many jobs' runs shows
        neither. A bounded read (Cassandra: by the hour of the end, recent.py), never a scan of
        the history."""

    @abstractmethod
    def run(self, key: JobKey, epoch: int) -> RunRecord | None:
        """One recorded run (not a skipped fire)."""

    @abstractmethod
    def add_runs(self, records: Sequence[RunRecord]) -> None:
        """Record history lines that change no job row (fires skipped as too late)."""

    @abstractmethod
    def delete_runs(self, before: datetime, limit: int = 10_000) -> int:
        """Delete up to ``limit`` run records that ended before ``before`` (Cassandra: TTL, 0)."""

    @abstractmethod
    def delete_job_runs(self, key: JobKey) -> int:
        """Delete every recorded run of one job (its history lines and their logs, skipped
        fires included: all that ``runs(key.type, key.name, key.uid)`` returns), whatever
        their age. Returns how many there were.

        The job row is not touched, nor are other uids of the name. The caller makes sure no
        run of the job is going (DELETEHISTORY refuses while one is): a run that ends after
        this writes its line as usual. Later runs of the job are recorded and listed as before.
        """

    @abstractmethod
    def delete_archived(self, before: datetime, limit: int = 10_000, keep: frozenset = frozenset()) -> int:
        """Delete up to ``limit`` archived rows whose ``end_time`` is before ``before``, except
        the keys in ``keep`` (parents that blocked children wait on).

        Returns how many were deleted. (Cassandra expires them by TTL instead and returns 0.)
        """

    def repair_index(self, share: tuple[int, int], cursor: object | None, limit: int) -> RepairPage:
        """One page of the repair pass over share ``share`` = (shares, index) of all rows:
        up to ``limit`` rows read from ``cursor`` (None: the start), and every live row whose
        index entry is missing given one. A store whose reads need no index of its own
        (SQLite: its indexes are the database's) has nothing to repair: done at once."""
        return RepairPage(cursor=None, read=0, restored=0)

    # -- jobs: reads -----------------------------------------------------------------------

    @abstractmethod
    def get(self, key: JobKey) -> Job | None:
        """The row with this key, archived or not."""

    def get_many(self, keys: Sequence[JobKey]) -> list[Job | None]:
        """``get`` of each key, in order (None for a missing row). Cassandra reads them
        concurrently: a takeover of many jobs pays for one round trip, not one per job."""
        return [self.get(k) for k in keys]

    @abstractmethod
    def live_jobs(self, type: str | None = None, name: str | None = None, uid: str | None = None, *,
                  after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        """Non-archived rows, optionally narrowed by type, name, uid; ordered by key.
        ``after``/``limit``: a page, the first ``limit`` rows whose key is above ``after``, so
        that a list of a few rows out of many live ones costs about its own size."""

    def each_live(self, page: int = 1000) -> Iterator[Job]:
        """Every live row, by key, read ``page`` rows at a time: a pass over all of them (a
        calendar's users, the dependency graph, an export) holds one page in memory, not
        every live job."""
        after = None
        while True:
            rows = self.live_jobs(after=after, limit=page)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1].key

    @abstractmethod
    def archived_since(self, since: datetime, type: str | None = None, *, name: str | None = None,
                       after: JobKey | None = None, limit: int | None = None) -> list[Job]:
        """Archived rows whose ``end_time`` is at or after ``since``, of ``type`` and ``name``;
        ordered by key. ``after``/``limit``: a page, the first ``limit`` rows whose key is above
        ``after``, reading about that many rows (the keys of the window are read whole where the
        store files them by time, but not their rows)."""

    @abstractmethod
    def search_archived(self, query: ArchiveQuery) -> ArchivePage:
        """A page of the archived jobs ``query`` looks for, newest end first, having looked at
        a bounded number of them whatever the store holds (store/search.py)."""

    @abstractmethod
    def live_counts(self, cap: int) -> dict[str, int]:
        """Live rows per status, blocked ones apart (``search.BLOCKED``), each counted up to
        ``cap`` + 1 through the live indexes (store/search.py); a status with none may be absent."""

    @abstractmethod
    def waiting(self, limit: int, after: tuple[datetime, JobKey] | None = None,
                priorities: tuple[int, int] | None = None, lane: Lane | None = None) -> list[Job]:
        """Up to ``limit`` claimable WAITING rows (not blocked by parents), longest-due first (by
        ``next_run``, then key). ``after`` = the (next_run, key) of the last row of the previous page.
        ``priorities``: only rows whose PRIORITY is in (low, high) (node.id's PRIORITIES), so
        rows a node may not claim never fill its pages. ``lane``: only the rows :func:`in_lane`
        (a node's own claim lane and every owned row), so that a node among several reads
        and decodes its own rows only."""

    @abstractmethod
    def waiting_by_priority(self, limit: int, priorities: tuple[int, int] | None = None) -> list[Job]:
        """Up to ``limit`` claimable WAITING rows, highest priority first, then longest due
        (``priorities`` as for :meth:`waiting`)."""

    @abstractmethod
    def blocked_jobs(self, limit: int, since: datetime | None = None) -> list[Job]:
        """Up to ``limit`` live rows blocked by unfinished parents (full rows), longest due
        first; with ``since``, those due at or after it (the next page of a long list)."""

    @abstractmethod
    def due_scheduled(self, worker_id: str, before: datetime, limit: int) -> list[Job]:
        """Up to ``limit`` SCHEDULED rows owned by ``worker_id`` with ``next_run`` before
        ``before``, soonest first: what that node's scheduler must fire next."""

    @abstractmethod
    def by_status(self, statuses: Collection[Status], limit: int | None = None) -> list[Job]:
        """Live rows in any of ``statuses``."""

    @abstractmethod
    def by_owner(
        self, worker_ids: Collection[str | None], statuses: Collection[Status], limit: int | None = None
    ) -> list[Job]:
        """Live rows in any of ``statuses`` owned by any of ``worker_ids`` (None: unowned),
        at most ``limit`` of them (in no particular order)."""

    # -- directory listeners (INTERFACE_LISTENER jobs) --------------------------------------

    @abstractmethod
    def mark_file(self, listener: JobKey, file: str, note: str) -> bool:
        """Record that ``listener`` handled ``file``; True only for the first caller (atomic:
        of two listeners racing for one file exactly one gets True)."""

    @abstractmethod
    def marked_files(self, listener: JobKey) -> set[str]:
        """Every file recorded for ``listener``."""

    # -- nodes -----------------------------------------------------------------------------

    @abstractmethod
    def write_node(self, node: NodeRow, timeout: float | None = None) -> None:
        """Create or overwrite this node's row; ``beat_time`` is set from the store's clock.
        ``timeout``: give up (StoreError) after that many seconds instead of the store's
        request timeout, so that a heartbeat stuck on one unresponsive server is not the
        node's only try within its lease (the next beat may reach another)."""

    @abstractmethod
    def nodes(self, timeout: float | None = None) -> list[NodeRow]:
        """Every row of ``nodes``, ordered by name (``timeout`` as for :meth:`write_node`)."""

    @abstractmethod
    def node(self, name: str, timeout: float | None = None) -> NodeRow | None:
        """One node's row, or None. A read of one row, not of the whole table: on Cassandra a
        whole-table read is a range read, which waits for a replica that is down but not yet
        known to be (no speculative retry for range reads), and a heartbeat must not."""

    @abstractmethod
    def delete_node(self, row: NodeRow) -> None:
        """Remove a node's row as ``row`` shows it (read by :meth:`nodes`), and its kill
        requests. A beat written since that read survives: the caller judged that beat
        stale, not the node's next one."""

    # -- live log lines (JOBLOG ... FOLLOW: a running run's lines as they come) -------------

    @abstractmethod
    def append_live_log(self, key: JobKey, epoch: int, first_seq: int, lines: Sequence[str]) -> None:
        """Store ``lines`` of run ``epoch`` of ``key`` as numbers ``first_seq``, ``first_seq``
        + 1, ...: written by the run's node while the run goes on. Writing a number again
        replaces its line (a node that retries writes the same lines). Kept for a while only
        (SQLite: until the retention clean-up of run records; Cassandra: a TTL of a day): the
        run record keeps the log for good."""

    @abstractmethod
    def live_log(self, key: JobKey, epoch: int, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, str]]:
        """The live lines of run ``epoch`` of ``key`` numbered above ``after_seq``, in order,
        at most ``limit`` of them: (number, line) pairs."""

    # -- kill requests (KILL from any shell, carried out by the target node) ---------------

    @abstractmethod
    def add_kill_request(self, request: KillRequest) -> None:
        """Record a request; idempotent per (node, task)."""

    @abstractmethod
    def kill_requests(self, node: str) -> list[KillRequest]:
        """Pending requests for ``node``."""

    @abstractmethod
    def delete_kill_request(self, node: str, task: int) -> None:
        """Forget a request once carried out (or found moot)."""

    # -- calendars (IPF's job calendars: fires their rules exclude are skipped) ------------------

    @abstractmethod
    def put_calendar(self, calendar: Calendar) -> None:
        """Create or replace the calendar of that name (the last write wins)."""

    @abstractmethod
    def calendar(self, name: str) -> Calendar | None:
        """The calendar of that name, or None."""

    @abstractmethod
    def calendars(self) -> list[Calendar]:
        """Every calendar, by name."""

    @abstractmethod
    def delete_calendar(self, name: str) -> bool:
        """Remove it; False if there was none."""
