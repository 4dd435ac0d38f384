"""The job row, its key, its statuses and the transitions between them.

These values are shared by every layer: the store persists :class:`Job`, the service and the
node change it only through :func:`advance`, which refuses a transition that is not in
:data:`TRANSITIONS` (docs/explanation/architecture.md). Tests read the same table.
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
import zlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Callable, Iterable, Sequence


class JobType(StrEnum):
    USER_JOB = "USER_JOB"
    PROCESS = "PROCESS"
    INTERFACE_LISTENER = "INTERFACE_LISTENER"

    @classmethod
    def parse(cls, text: str) -> "JobType":
        try:
            return cls(text.upper())
        except ValueError:
            known = ", ".join(t.value for t in cls)
            why = PLATFORM_TYPES.get(text.upper())
            because = (f": {text.upper()} is a job type of the K2View Fabric platform ({why}); fabricjobs has no "
                       "such engine: it runs Python functions (USER_JOB), executables (PROCESS) and directory watches "
                       "(INTERFACE_LISTENER)") if why else ""
            close = difflib.get_close_matches(text.upper(), [t.value for t in cls], n=1, cutoff=0.75)
            if close and not why:
                because = f"; did you mean {close[0]}?"
            raise ValueError(f"unknown job type {text!r} (known types: {known}){because}") from None


#: Fabric's job types that run on engines of the K2View platform around Fabric Jobs, which
#: fabricjobs does not have; STARTJOB says so when it refuses one (docs/guides/writing-jobs.md).
PLATFORM_TYPES = {
    "BROADWAY": "it runs a Broadway flow", "BROADWAY_JOB": "it runs a Broadway flow",
    "BATCH_JOB": "it runs a batch (migrate) command over LU instances",
    "BATCH_PROCESS": "it runs a batch (migrate) command over LU instances",
    "COMMONAREA_TABLE_SYNC": "it populates a common-area table",
    "COMMONARE_TABLE_SYNC": "it populates a common-area table",
    "COMMONAREA_TABLE_REPLICATE": "it replicates common-area data between Fabric nodes",
    "CDC": "it publishes LU changes to a CDC consumer", "CDC_JOB": "it publishes LU changes to a CDC consumer",
    "PARSER": "it runs an LU parser",
}


class Status(StrEnum):
    WAITING = "WAITING"
    SCHEDULED = "SCHEDULED"
    IN_PROCESS = "IN_PROCESS"
    STOPPING = "STOPPING"
    RESTART = "RESTART"
    TERMINATED = "TERMINATED"
    PROCESSED = "PROCESSED"
    FAILED = "FAILED"
    # RJM's unreleased job (STARTJOB ... HOLD=true, UPDATEJOB ... HOLD=true): never claimed or
    # fired, whatever its schedule or parents, until RELEASEJOB (which releases its held
    # children too). No owner, no due time: both are worked out afresh at its release.
    HELD = "HELD"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset({Status.TERMINATED, Status.PROCESSED, Status.FAILED})
LIVE_STATUSES = frozenset(Status) - FINAL_STATUSES
#: Statuses during which a run may be going on (its node must be alive or be taken over).
RUNNING_STATUSES = frozenset({Status.IN_PROCESS, Status.STOPPING, Status.RESTART})

DEFAULT_PRIORITY = 4
#: A job's run counters (JOBSTATUS ... DETAILS). They count the runs of the key, as JOBHISTORY
#: lists them: a STARTJOB that reuses an archived row keeps them (docs/explanation/design-choices.md).
RUN_COUNTERS = ("runs", "successes", "failures", "retries_error", "retries_lost", "kills", "failed_after_retry",
                "failed_without_retry", "canceled")
MIN_PARALLELISM, MAX_PARALLELISM = 2, 64  # PARALLELISM=n: the tasks of one job


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    type: str
    name: str
    uid: str

    def __str__(self) -> str:  # the seed's log form: USER_JOB.Customer.userJob3.uid3
        return f"{self.type}.{self.name}.{self.uid}"

    def describe(self) -> str:  # the seed's message form
        return f"[type: {self.type}, name: {self.name}, uid: {self.uid}]"

    def __reduce__(self):  # pickled with every run sent to a worker: by value, a third of the cost
        return JobKey, (self.type, self.name, self.uid)

    def lane(self, lanes: int) -> int:
        """The claim lane of this key among ``lanes`` (node/lanes.py): the same in every process
        and after restarts, and computed by the SQLite store in SQL as well (``fj_lane``)."""
        return claim_lane(self.type, self.name, self.uid, lanes)


def claim_lane(type: str, name: str, uid: str, lanes: int) -> int:
    """:meth:`JobKey.lane` from the key's parts (what a store's query has at hand)."""
    return zlib.crc32(f"{type}.{name}.{uid}".encode()) % lanes


@dataclass(frozen=True, slots=True)
class Job:
    """One row of k2_jobs (docs/explanation/architecture.md).

    ``epoch`` is the fencing counter: +1 whenever the owner changes (every claim).
    ``revision`` is +1 on every change of the row, so a compare-and-set conditioned on it sees
    any concurrent write, also one that leaves status and epoch alone (UPDATEJOB).
    ``next_run`` is the due time: when a SCHEDULED job fires, or since when a WAITING job may
    be claimed. ``hold_until`` keeps ``worker_id`` from re-claiming the job before that time
    (retry delay, give-up delay); other nodes may take it at once.
    """

    key: JobKey
    status: Status
    creation_time: datetime
    archived: bool = False
    affinity: str = ""
    arguments: str = "{}"
    execution_interval: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None
    next_run: datetime | None = None
    hold_until: datetime | None = None
    error_msg: str = ""
    output: str | None = None
    tries: int = 0
    worker_id: str | None = None
    epoch: int = 0
    revision: int = 0
    priority: int = DEFAULT_PRIORITY
    # Counters over the job's life (SMILA-style), shown by JOBSTATUS ... DETAILS.
    runs: int = 0  # runs that ended (any way)
    successes: int = 0
    failures: int = 0  # runs that ended in an error, a kill or the loss of their node
    retries_error: int = 0  # failures that were retried
    retries_lost: int = 0  # runs taken over from a lost node
    kills: int = 0  # runs ended by KILL
    # Scheduling beyond Fabric (docs/guides/schedules.md).
    depends_on: str = ""  # parent keys, "TYPE.NAME.UID,TYPE.NAME.UID"
    blocked: bool = False  # a parent has not reached PROCESSED: never claimed
    time_zone: str = ""  # IANA zone of cron / timestamp schedules ('' : the node's)
    late_threshold: str = ""  # HH:MM:SS: a fire later than this after its due time is skipped
    overlap: str = ""  # SKIP | QUEUE: a fire due while the previous run still goes ('' : by schedule kind)
    # FINISHJOB (SMILA's finish): the run going on completes, then the job ends PROCESSED.
    finishing: bool = False
    # RUNJOB (SMILA's runOnce): the fire the schedule goes on with after the extra run.
    resume_at: datetime | None = None
    # IPF's lateExecute: what a fire later than LATE_THRESHOLD does ('' or SKIP: skipped; RUN:
    # runs anyway; TYPE.NAME: skipped, and that job is started with the late fire in its ARGS).
    late_action: str = ""
    # IPF's failure command: TYPE.NAME of a job started when a run fails for good ('' : none).
    on_failure: str = ""
    # Who started the job (DolphinDB's userID): the OS user of a shell, script or program, or
    # the HTTP API token's name ('' : a row from before schema 7 / 10). UPDATEJOB leaves it.
    owner: str = ""
    # IPF's jobRequestor: the team or application the job is for (a requestor has many jobs).
    requestor: str = ""
    # IPF's job calendar: the name of a stored calendar whose rules skip fires ('' : none).
    calendar: str = ""
    # RJM's rjm_delete: files (under [jobs] CLEANUP_ROOT, comma-separated) deleted after each
    # successful run, by the node that wrote it; left in place after a failure, for diagnosis.
    delete_on_success: str = ""
    # DolphinDB's tasks of a job (PARALLELISM=n): the job the user named has parallelism n and
    # task_of ''; each of its n tasks has parallelism n and task_of the job's key, UID '<uid>/<i>'.
    parallelism: int = 0
    task_of: str = ""
    # SMILA's job run counters beyond the six above: runs that failed for good after a retry,
    # or at their first try (no tries left, FAIL_NO_RETRY, a lost node), and runs cancelled
    # (ended by STOPJOB).
    failed_after_retry: int = 0
    failed_without_retry: int = 0
    canceled: int = 0

    @property
    def type(self) -> str:
        return self.key.type

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def uid(self) -> str:
        return self.key.uid

    @property
    def waits_for_parents(self) -> bool:
        """Blocked and not running: what listings and counts call BLOCKED. A run going on whose
        job was given new parents is running; its next run is what they hold back."""
        return self.blocked and self.status in (Status.WAITING, Status.SCHEDULED)

    def replace(self, **changes) -> "Job":
        # dataclasses.replace, at half its cost: every transition of every run makes a few.
        values = list(_JOB_VALUES(self))
        try:
            for name, value in changes.items():
                values[_JOB_INDEX[name]] = value
        except KeyError as exc:
            raise TypeError(f"Job has no field {exc.args[0]!r}") from None
        return job_from_values(values)


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_JOB_INDEX = {name: i for i, name in enumerate(_JOB_FIELDS)}
_JOB_VALUES = operator.attrgetter(*_JOB_FIELDS)


def _values_constructor() -> Callable[[Sequence], Job]:
    """A Job from all its field values in order, at half the cost of ``Job(*values)``: the
    frozen dataclass's __init__ looks up ``object.__setattr__`` for each of ~30 fields, and
    the node builds several rows per run (each CAS result, each decision). Generated as
    dataclasses generates __init__, with each slot's setter bound once."""
    setters = {f"_set{i}": getattr(Job, name).__set__ for i, name in enumerate(_JOB_FIELDS)}
    body = "".join(f"    _set{i}(job, values[{i}])\n" for i in range(len(_JOB_FIELDS)))
    source = (f"def job_from_values(values, _new=object.__new__, _Job=Job, {', '.join(f'{k}={k}' for k in setters)}):\n"
              f"    job = _new(_Job)\n{body}    return job\n")
    namespace: dict = {"Job": Job, **setters}
    exec(source, namespace)  # noqa: S102 - generated from the field names above, no outside input
    return namespace["job_from_values"]


job_from_values = _values_constructor()


class Event(StrEnum):
    """What happened to a job; each names one row of the transition table."""

    START = "START"  # STARTJOB, run now or on an HH:MM:SS interval
    START_SCHEDULED = "START_SCHEDULED"  # STARTJOB with a cron or timestamp
    DUE = "DUE"  # the owner's scheduler reached next_run
    CLAIM = "CLAIM"  # a node takes a WAITING job to run it
    FIRE = "FIRE"  # the owner runs a due fire of its SCHEDULED job: DUE and CLAIM in one write
    DONE_ONCE = "DONE_ONCE"  # a run of a one-time job returned
    DONE_RECURRING = "DONE_RECURRING"  # a run of a recurring job returned
    FAIL_RETRY = "FAIL_RETRY"  # a run raised / exited non-zero / was killed; tries left
    FAIL_FINAL = "FAIL_FINAL"  # same, no tries left or fail-no-retry
    STOP = "STOP"  # STOPJOB on a job with a run going on
    STOP_IDLE = "STOP_IDLE"  # STOPJOB on a job with no run: straight to TERMINATED
    FINISH = "FINISH"  # FINISHJOB on a job with a run going on or due: it completes, no fire after it
    FINISH_IDLE = "FINISH_IDLE"  # FINISHJOB on a job between fires: straight to PROCESSED
    RUN_ONCE = "RUN_ONCE"  # RUNJOB on a job between fires: due now, its schedule kept aside
    STOPPED = "STOPPED"  # the stopped run ended
    RESTART = "RESTART"  # RESTARTJOB on a job with a run going on
    RESTART_IDLE = "RESTART_IDLE"  # RESTARTJOB on a job with no run
    RESTARTED = "RESTARTED"  # the restarted run ended: WAITING, no owner
    RESUME = "RESUME"  # RESUMEJOB of an archived job, run now or on an interval
    RESUME_SCHEDULED = "RESUME_SCHEDULED"  # RESUMEJOB of an archived cron / timestamp job
    UPDATE = "UPDATE"  # UPDATEJOB: new affinity / args / schedule, status kept
    RESCHEDULE = "RESCHEDULE"  # UPDATEJOB of a new schedule on a job with no run
    TAKEOVER = "TAKEOVER"  # another node takes the job of a dead node (or its own, after restart)
    RELEASE = "RELEASE"  # a node over its recommended count gives a run back
    START_HELD = "START_HELD"  # STARTJOB ... HOLD=true (RJM's set-up before its rjmgo)
    HOLD = "HOLD"  # UPDATEJOB ... HOLD=true on a job with no run
    UNHOLD = "UNHOLD"  # RELEASEJOB: as if started now (WAITING, or SCHEDULED by its schedule)
    TASK_FAILED = "TASK_FAILED"  # a task of a parallel job failed for good: the job is FAILED


class RunResult(StrEnum):
    """How a run ended, in its history line (``k2_job_runs``, JOBHISTORY's result column)."""

    OK = "OK"  # returned / exited 0
    ERROR = "ERROR"  # raised / exited non-zero
    KILLED = "KILLED"  # KILL, or a PROCESS run past its time limit
    STOPPED = "STOPPED"  # STOPJOB ended it: TERMINATED
    RESTARTED = "RESTARTED"  # RESTARTJOB ended it: WAITING again, no owner
    RELEASED = "RELEASED"  # its node handed it back (over its recommended count, or never begun)
    LOST = "LOST"  # its node's lease lapsed, or it was taken over from a dead node
    INTERRUPTED = "INTERRUPTED"  # its node shut down under it
    SKIPPED = "SKIPPED"  # a fire that did not run (too late, or OVERLAP=SKIP)


class NodeState(StrEnum):
    """What a node's own row says of it."""

    RUNNING = "running"  # it beats; judge it by its beats
    STOPPED = "stopped"  # it shut down cleanly: its work may be taken over at once


@dataclass(frozen=True, slots=True)
class Transition:
    event: Event
    sources: frozenset[Status | None]  # None: no row with that key
    targets: frozenset[Status]  # empty: the status stays as it is


def _t(event: Event, sources: Iterable[Status | None], targets: Iterable[Status] = ()) -> Transition:
    return Transition(event, frozenset(sources), frozenset(targets))


_NEW = (None, *FINAL_STATUSES)
_IDLE = (Status.WAITING, Status.SCHEDULED)

#: The status transitions (docs/explanation/architecture.md), as data. The service and the node
#: write rows only through these.
TRANSITIONS: dict[Event, Transition] = {
    t.event: t
    for t in (
        _t(Event.START, _NEW, [Status.WAITING]),
        _t(Event.START_SCHEDULED, _NEW, [Status.SCHEDULED]),
        _t(Event.DUE, [Status.SCHEDULED], [Status.WAITING]),
        _t(Event.CLAIM, [Status.WAITING], [Status.IN_PROCESS]),
        _t(Event.FIRE, [Status.SCHEDULED], [Status.IN_PROCESS]),
        _t(Event.DONE_ONCE, [Status.IN_PROCESS], [Status.PROCESSED]),
        _t(Event.DONE_RECURRING, [Status.IN_PROCESS], [Status.SCHEDULED]),
        _t(Event.FAIL_RETRY, [Status.IN_PROCESS], [Status.WAITING]),
        _t(Event.FAIL_FINAL, [Status.IN_PROCESS], [Status.FAILED]),
        _t(Event.STOP, [Status.IN_PROCESS, Status.RESTART], [Status.STOPPING]),
        _t(Event.STOP_IDLE, [*_IDLE, Status.HELD], [Status.TERMINATED]),
        _t(Event.STOPPED, [Status.STOPPING], [Status.TERMINATED]),
        _t(Event.FINISH, [Status.WAITING, Status.SCHEDULED, Status.IN_PROCESS, Status.RESTART]),
        _t(Event.FINISH_IDLE, [Status.SCHEDULED], [Status.PROCESSED]),
        _t(Event.RUN_ONCE, [Status.SCHEDULED], [Status.WAITING]),
        _t(Event.RESTART, [Status.IN_PROCESS, Status.STOPPING], [Status.RESTART]),
        _t(Event.RESTART_IDLE, _IDLE, [Status.WAITING]),
        _t(Event.RESTARTED, [Status.RESTART], [Status.WAITING]),
        _t(Event.RESUME, FINAL_STATUSES, [Status.WAITING]),
        _t(Event.RESUME_SCHEDULED, FINAL_STATUSES, [Status.SCHEDULED]),
        _t(Event.UPDATE, LIVE_STATUSES),
        # A new schedule may move a job with no run between WAITING and SCHEDULED
        # (EXEC_INTERVAL='' makes a SCHEDULED job a one-time job that runs now).
        _t(Event.RESCHEDULE, _IDLE, _IDLE),
        _t(Event.TAKEOVER, [Status.WAITING, Status.SCHEDULED, *RUNNING_STATUSES]),
        _t(Event.RELEASE, [Status.IN_PROCESS], [Status.WAITING]),
        _t(Event.START_HELD, _NEW, [Status.HELD]),
        _t(Event.HOLD, _IDLE, [Status.HELD]),
        _t(Event.UNHOLD, [Status.HELD], _IDLE),
        _t(Event.TASK_FAILED, [Status.WAITING], [Status.FAILED]),
    )
}


class TransitionError(RuntimeError):
    """A code path tried a transition that docs/explanation/architecture.md does not allow (a bug)."""


def check_transition(event: Event, source: Status | None, target: Status) -> None:
    rule = TRANSITIONS[event]
    if source not in rule.sources:
        raise TransitionError(f"{event}: not allowed from {source}")
    allowed = rule.targets or (frozenset({source}) if source is not None else frozenset())
    if target not in allowed:
        raise TransitionError(f"{event}: {source} -> {target} is not allowed")


def advance(job: Job | None, event: Event, new: Job) -> Job:
    """Check that going from ``job`` to ``new`` is the transition ``event`` and return ``new``.

    ``archived`` follows the status: set exactly when the new status is final. An ended job
    is blocked by nothing (parents given to it while its last run went on have no run left
    to hold back; RESUMEJOB reads them again).
    """
    source = None if job is None else job.status
    check_transition(event, source, new.status)
    archived = new.status.is_final
    if new.archived != archived:
        new = new.replace(archived=archived)
    if archived and new.blocked:
        new = new.replace(blocked=False)
    return new
