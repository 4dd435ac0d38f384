"""Typed, immutable command objects: what the grammar means, independent of its text.

The parser (:mod:`.parser`) turns text into these; the service carries them out; nothing
downstream ever sees a parse tree. Every field is already validated and normalised:
``type`` is an upper-case job type string, ``args`` is the JSON text of an object (or None
when absent), ``exec_interval`` has been checked to be a valid schedule text,
``depends_on`` holds the parents' :class:`~fabricjobs.model.JobKey` (read once, by the parser).

``None`` always means "not given" (so UPDATEJOB can tell "leave alone" from "set to empty").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..model import JobKey, Status


@dataclass(frozen=True, slots=True)
class StartJob:
    type: str
    name: str
    uid: str | None = None
    affinity: str | None = None
    args: str | None = None
    exec_interval: str | None = None
    depends_on: tuple[JobKey, ...] | None = None  # parent keys, from DEPENDS_ON='TYPE.NAME.UID,...'
    priority: int | None = None  # 0..9
    tz: str | None = None
    late_threshold: str | None = None  # HH:MM:SS ('' : none)
    overlap: str | None = None  # SKIP | QUEUE ('' : by schedule kind)
    late_action: str | None = None  # SKIP | RUN | TYPE.NAME ('' : SKIP)
    on_failure: str | None = None  # TYPE.NAME of the job to start when a run fails for good
    requestor: str | None = None  # the team or application the job is for (IPF's jobRequestor)
    calendar: str | None = None  # a stored calendar whose rules skip fires (IPF)
    delete_on_success: str | None = None  # files deleted after each successful run (RJM's rjm_delete)
    if_not_exists: bool = False  # a row with the key (live or archived) is returned unchanged
    hold: bool | None = None  # HOLD=true: created HELD, run only after RELEASEJOB (RJM)
    parallelism: int | None = None  # DolphinDB's tasks of a job: n tasks (2..64), each with its index


@dataclass(frozen=True, slots=True)
class StopJob:
    """STOPJOB ...; with WAIT, returns once the job is final (TIMEOUT in seconds)."""

    type: str
    name: str
    uid: str | None = None
    wait: bool = False
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class FinishJob:
    """FINISHJOB ... (SMILA's finish; STOPJOB is its cancel): a recurring job's run going on
    completes, then it fires no more. With WAIT, returns once the job is final."""

    type: str
    name: str
    uid: str | None = None
    wait: bool = False
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class RunJob:
    """RUNJOB ... (SMILA's runOnce): a job between its fires runs once now; its schedule is
    left as it was."""

    type: str
    name: str
    uid: str | None = None


@dataclass(frozen=True, slots=True)
class RestartJob:
    """RESTARTJOB ...; with RUNNING (a deploy), only the jobs with a run going, and NAME may be
    left out (every running job of the type)."""

    type: str
    name: str | None
    uid: str | None = None
    running: bool = False


@dataclass(frozen=True, slots=True)
class ResumeJob:
    type: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class UpdateJob:
    type: str
    name: str
    uid: str | None = None
    affinity: str | None = None
    args: str | None = None
    exec_interval: str | None = None
    reset_end_time: bool | None = None
    depends_on: tuple[JobKey, ...] | None = None
    priority: int | None = None
    tz: str | None = None
    late_threshold: str | None = None
    overlap: str | None = None
    late_action: str | None = None
    on_failure: str | None = None
    requestor: str | None = None
    calendar: str | None = None  # '' : none
    delete_on_success: str | None = None  # '' : none
    hold: bool | None = None  # HOLD=true: a job with no run going is HELD (HOLD=false: RELEASEJOB's)


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    """RELEASEJOB ... (RJM's rjmgo): a HELD job, and recursively its held children, are
    released: as if started now."""

    type: str
    name: str
    uid: str | None = None


@dataclass(frozen=True, slots=True)
class JobStatus:
    """JOBSTATUS; JOBSTATUS <n> DAYS AGO; JOBSTATUS <TYPE> ['<NAME>'] [<n> DAYS AGO];
    JOBSTATUS <TYPE> '<NAME>' WITH UID='<UID>'; each with [BY '<owner>'] [REQUESTOR '<requestor>']
    [WHERE STATUS IN ('<status>', ...)]."""

    type: str | None = None
    name: str | None = None
    uid: str | None = None
    days_ago: int | None = None
    details: bool = False  # one record per block, with the job's counters
    owner: str | None = None  # BY '<owner>': only the jobs this user started
    requestor: str | None = None  # REQUESTOR '<requestor>': only the jobs for this requestor
    statuses: frozenset[Status] = frozenset()  # WHERE STATUS ...: only these (empty: any)


@dataclass(frozen=True, slots=True)
class Ps:
    all: bool = False


@dataclass(frozen=True, slots=True)
class Kill:
    node: str
    task: int


@dataclass(frozen=True, slots=True)
class Set:
    """SET <key> [=] <value>. ``key`` is as written; the service applies the case rules."""

    key: str
    value: str


@dataclass(frozen=True, slots=True)
class Nodes:
    """NODES [DETAILS]: the cluster's nodes, their state and capacity."""

    details: bool = False


@dataclass(frozen=True, slots=True)
class JobHistory:
    """JOBHISTORY <TYPE> '<NAME>' [WITH UID='<UID>'] [LIMIT n]: the runs of a job, newest first;
    JOBHISTORY RECENT n (``recent``; no type or name): the last n runs of the whole cluster."""

    type: str | None = None
    name: str | None = None
    uid: str | None = None
    limit: int | None = None
    recent: int | None = None


@dataclass(frozen=True, slots=True)
class JobLog:
    """JOBLOG <TYPE> '<NAME>' [WITH UID='<UID>'] [RUN n]: the log of one run (default: the last);
    with FOLLOW [TIMEOUT n] (``follow``, ``timeout``): the lines of the run going on (or of the
    next one) as they come, until it ends."""

    type: str
    name: str
    uid: str | None = None
    run: int | None = None
    follow: bool = False
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class WaitJob:
    """WAITJOB <TYPE> '<NAME>' WITH UID='<UID>' [RUN n] [TIMEOUT n]: until the job is final,
    or (a recurring job) until its current or next run ends; with RUN, until that run has ended
    (SMILA's job run id: the epoch, JOBHISTORY's run number)."""

    type: str
    name: str
    uid: str
    timeout: float | None = None
    run: int | None = None


@dataclass(frozen=True, slots=True)
class DeleteHistory:
    """DELETEHISTORY <TYPE> '<NAME>' WITH UID='<UID>': delete one job's recorded runs and their
    logs (what JOBHISTORY and JOBLOG show); refused while a run of it is going."""

    type: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class CreateCalendar:
    """CREATECALENDAR '<name>' EXCLUDE '<rule>' [EXCLUDE '<rule>' ...]: make or replace a stored
    calendar (IPF); a job with CALENDAR='<name>' skips the fires its rules exclude."""

    name: str
    rules: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DropCalendar:
    """DROPCALENDAR '<name>': refused while a live job names it."""

    name: str


@dataclass(frozen=True, slots=True)
class Calendars:
    """CALENDARS: every stored calendar, its rules and how many live jobs name it."""


Command = Union[
    StartJob, StopJob, FinishJob, RunJob, ReleaseJob, RestartJob, ResumeJob, UpdateJob, JobStatus, Ps, Kill, Set, Nodes, JobHistory, JobLog, WaitJob,
    DeleteHistory, CreateCalendar, DropCalendar, Calendars,
]


@dataclass(frozen=True, slots=True)
class Statement:
    """One parsed statement with where it came from (for error messages and echo)."""

    command: Command
    text: str  # the statement's source text, without the trailing ';'
    line: int  # 1-based line of its first character in the script
