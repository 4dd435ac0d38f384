"""The JSON shapes of the API, derived from the service's own column lists.

A job in the API is JOBSTATUS's row, a run JOBHISTORY's, a node NODES's: each model below is
built from the service's column tuple (``"Ownership Candidates Num"`` becomes
``ownership_candidates_num``), with the type :data:`COLUMN_TYPES` gives each column. So the
OpenAPI document, the responses and the shell's tables cannot drift apart: a column added to
the service without a type here fails at import.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..errors import WaitTimeout
from ..model import MAX_PARALLELISM, MIN_PARALLELISM
from ..result import Result
from ..service import (
    CALENDAR_COLUMNS, CALENDARS_COLUMNS, CHANGE_COLUMNS, DELETED_COLUMNS, FULL_COLUMNS, HISTORY_COLUMNS, LIST_COLUMNS,
    NODES_COLUMNS, NODES_DETAIL_COLUMNS, PS_COLUMNS, RECENT_COLUMNS,
)

_TIME = datetime | None
_TEXT = str | None
_INT = int | None
COLUMN_TYPES: dict[str, Any] = {
    # jobs (JOBSTATUS, its DETAILS, the change commands)
    "Type": str, "Name": str, "UID": str, "Status": str, "Notes": _TEXT, "Creation Time": _TIME,
    "Start Time": _TIME, "End Time": _TIME, "Affinity": _TEXT, "Is Archived": bool,
    "Next Run": datetime | str | None, "Ownership Candidates Num": int, "Node": _TEXT, "Tries": int,
    "Priority": _INT, "Output": _TEXT, "Arguments": _TEXT, "Execution Interval": _TEXT, "Time Zone": _TEXT,
    "Late Threshold": _TEXT, "Late Action": _TEXT, "Overlap": _TEXT, "Depends On": _TEXT, "On Failure": _TEXT, "Blocked": bool, "Epoch": int,
    "Runs": int, "Successes": int, "Failures": int, "Retries After Error": int,
    "Retries After Node Loss": int, "Kills": int,
    "Failed After Retry": int, "Failed Without Retry": int, "Canceled": int,  # SMILA's other run counters
    "Owner": str, "Requestor": str,  # who started the job (OS user or token name), who it is for
    "Parallelism": _INT, "Task Of": str,  # PARALLELISM=n: a parallel job's tasks (n), a task's job
    "Calendar": str, "Delete On Success": str,  # RJM's rjm_delete: files deleted after each success  # the stored calendar whose rules skip its fires ("" : none)
    # runs (JOBHISTORY; RECENT: a pending job's run has no number yet)
    "Run": _INT, "User": str, "Received": _TIME,
    "Result": str, "Due": _TIME, "Start": _TIME, "End": _TIME, "Duration (ms)": _INT,
    "Error": _TEXT, "Exit Code": _INT, "Note": _TEXT, "Deleted Runs": int,
    # nodes and tasks (NODES, PS)
    "node": str, "dc": _TEXT, "host": _TEXT, "pid": _INT, "state": str, "last beat (s)": float | None,
    "running": _INT, "capacity": _TEXT, "version": _TEXT, "started": _TIME, "task": _INT, "thread": _INT,
    "type": _TEXT, "description": _TEXT, "duration (ms)": _INT, "Progress": str, "progress": str,
    # NODES DETAILS
    "incarnation": _TEXT, "beat": _INT, "heartbeat": _TEXT, "time zone": _TEXT, "addresses": _TEXT,
    "priorities": _TEXT, "tasks": _TEXT, "isolation": _TEXT,
    # calendars (CALENDARS, CREATECALENDAR, DROPCALENDAR)
    "Rules": str, "Live Jobs": int,
}


@functools.cache  # a few dozen column names, asked for once per field of every row listed
def field_name(column: str) -> str:
    """A column's JSON name: ``"Duration (ms)"`` -> ``duration_ms``."""
    return re.sub(r"[^a-z0-9]+", "_", column.lower()).strip("_")


def _names(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(field_name(c) for c in columns)


def _model(name: str, columns: tuple[str, ...], doc: str) -> type[BaseModel]:
    fields: dict[str, Any] = {field_name(c): (COLUMN_TYPES[c], Field(description=c)) for c in columns}
    return create_model(name, __doc__=doc, **fields)


Job = _model("Job", LIST_COLUMNS, "A job as JOBSTATUS shows it, with its owner and requestor.")
JobDetail = _model("JobDetail", FULL_COLUMNS, "A job as JOBSTATUS ... WITH UID ... DETAILS shows it, counters included.")
Change = _model("Change", CHANGE_COLUMNS, "A job after STARTJOB, STOPJOB, RESTARTJOB, RESUMEJOB or UPDATEJOB.")
Run = _model("Run", HISTORY_COLUMNS, "One ended run, as JOBHISTORY shows it; its number is the run's epoch.")
DeletedRuns = _model("DeletedRuns", DELETED_COLUMNS, "What DELETEHISTORY deleted: how many runs of the job.")
RecentRun = _model("RecentRun", RECENT_COLUMNS, "A run of any job as JOBHISTORY RECENT shows it: going on (result "
                   "RUNNING), waiting for a node (PENDING: no run number, start or end yet) or ended.")
Node = _model("Node", NODES_COLUMNS, "A node as NODES shows it.")
NodeDetail = _model("NodeDetail", NODES_DETAIL_COLUMNS, "A node as NODES DETAILS shows it.")
Calendar = _model("Calendar", CALENDARS_COLUMNS, "A stored calendar as CALENDARS shows it (rules separated by '; ').")
CalendarChange = _model("CalendarChange", CALENDAR_COLUMNS, "A calendar after CREATECALENDAR or DROPCALENDAR.")
Task = _model("Task", PS_COLUMNS, "A running task as PS shows it.")


def record(columns: tuple[str, ...], row: tuple) -> dict[str, Any]:
    """One result row as a model's fields."""
    return _fields(_names(columns), row)


def records(result: Result) -> list[dict[str, Any]]:
    names = _names(result.columns)
    return [_fields(names, r) for r in result.rows]


def _fields(names: tuple[str, ...], row: tuple) -> dict[str, Any]:
    return {name: _json_safe(v) for name, v in zip(names, row)}


def _json_safe(value: Any) -> Any:
    """JSON has no infinity (a node that never beat is infinitely old): null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# -- bodies and envelopes ----------------------------------------------------------------------

class _Body(BaseModel):
    # A misspelt parameter is an error, as in the language; and a value is taken as the JSON
    # type it is, never converted (true is not PRIORITY 1, "yes" is not HOLD=true).
    model_config = ConfigDict(extra="forbid", strict=True)


class StartBody(_Body):
    """STARTJOB's parameters (docs/guides/commands.md#startjob). ``args`` is the job's JSON object."""

    type: str = Field(description="USER_JOB, PROCESS or INTERFACE_LISTENER", examples=["USER_JOB"])
    name: str = Field(min_length=1, examples=["Customer.userJob1"])
    uid: str | None = Field(default=None, min_length=1, description="default: a new unique one")
    affinity: str | None = None
    args: dict[str, Any] | None = None
    exec_interval: str | None = None
    depends_on: list[str] | None = Field(default=None, description="parents as TYPE.NAME.UID")
    priority: int | None = Field(default=None, ge=0, le=9)
    tz: str | None = None
    late_threshold: str | None = Field(default=None, description="HH:MM:SS")
    overlap: Literal["", "SKIP", "QUEUE"] | None = None
    requestor: str | None = Field(default=None, description="the team or application the job is for (IPF's "
                                  "jobRequestor); the job's owner is this request's token name")
    late_action: str | None = Field(default=None, description="SKIP, RUN or TYPE.NAME of a late-handler job")
    on_failure: str | None = Field(default=None, description="TYPE.NAME of the job to start when a run fails for good")
    calendar: str | None = Field(default=None, description="a stored calendar (PUT /calendars/{name}) whose rules "
                                 "skip fires; a recurring job only")
    delete_on_success: str | None = Field(default=None, description="file,file,...: deleted after each successful "
                                          "run ([jobs] CLEANUP_ROOT)")
    hold: bool | None = Field(default=None, description="true: created HELD; POST .../release runs it")
    parallelism: int | None = Field(default=None, description=f"{MIN_PARALLELISM} to {MAX_PARALLELISM}: a one-time "
                                    "USER_JOB run as that many tasks, each with its index")
    if_not_exists: bool = Field(default=False, description="true: a job with this UID (needed), live or archived, "
                                "is answered as it is (STARTJOB ... IF NOT EXISTS)")


class UpdateBody(_Body):
    """UPDATEJOB's parameters: the ones given replace the job's values (docs/guides/commands.md#updatejob)."""

    affinity: str | None = None
    args: dict[str, Any] | None = None
    exec_interval: str | None = None
    reset_end_time: bool | None = None
    depends_on: list[str] | None = None
    priority: int | None = Field(default=None, ge=0, le=9)
    tz: str | None = None
    late_threshold: str | None = None
    overlap: Literal["", "SKIP", "QUEUE"] | None = None
    requestor: str | None = Field(default=None, description="a new requestor ('': none)")
    late_action: str | None = Field(default=None, description="SKIP, RUN or TYPE.NAME ('': SKIP)")
    on_failure: str | None = Field(default=None, description="TYPE.NAME ('': none)")
    calendar: str | None = Field(default=None, description="a stored calendar ('': none)")
    delete_on_success: str | None = Field(default=None, description="file,file,... ('': none)")
    hold: bool | None = Field(default=None, description="true only: a job with no run going is HELD "
                              "(POST .../release releases it)")


class CalendarBody(_Body):
    """CREATECALENDAR's EXCLUDE rules (docs/guides/schedules.md#calendars)."""

    exclude: list[str] = Field(description="each a date (YYYY-MM-DD), a range (YYYY-MM-DD..YYYY-MM-DD), dates "
                               "separated by commas, or a five-field cron expression",
                               examples=[["2026-12-25", "* * * * sat,sun"]])


class CommandBody(_Body):
    text: str = Field(description="one or more statements of the command language",
                      examples=["jobstatus user_job;"])


class CommandResult(BaseModel):
    """What ``Client.fetch`` returns for the last statement: rows keyed by column name."""

    columns: list[str]
    rows: list[dict[str, Any]]
    status: str | None = None
    notices: list[str] = []


class JobList(BaseModel):
    jobs: list[Job]  # type: ignore[valid-type]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: the last page")


class WaitResult(BaseModel):
    done: bool = Field(description="false: the timeout came first; the job is shown as it is now")
    waited_sec: float
    job: JobDetail  # type: ignore[valid-type]


class RunWaitResult(BaseModel):
    done: bool = Field(description="false: the timeout came first and the run has not ended")
    waited_sec: float
    run: Run | None = Field(description="the ended run, as JOBHISTORY shows it; null if not done")  # type: ignore[valid-type]


class RunLog(BaseModel):
    run: int
    summary: str = Field(description="JOBLOG's first line: run N of KEY on NODE: RESULT -> STATUS")
    log: str


class Message(BaseModel):
    status: str


class ErrorBody(BaseModel):
    error: str = Field(description="the command language's error type: JobNotFound, JobAlreadyRunning, ...")
    message: str
    line: int | None = None
    column: int | None = None
    expected: list[str] | None = None
    failed: str | None = Field(None, description="InsertInterrupted: the job whose STARTJOB the store failed")
    written: list[str] | None = Field(None, description="InsertInterrupted: jobs after it written all the same")
    also_failed: list[str] | None = Field(None, description="InsertInterrupted: jobs after it that failed too")
    statement: int | None = Field(None, description="POST /commands with several statements: the one that failed "
                                  "(from 1)")
    ran: int | None = Field(None, description="POST /commands: statements that ran before it (what they did stays)")
    lines: list[str] | None = Field(None, description="POST /commands, a JOBLOG ... FOLLOW whose time ran out (504): "
                                    "the lines it followed until then")


def command_result(result: Result) -> CommandResult:
    """``result`` as JSON. A JOBLOG ... FOLLOW whose time runs out raises its WaitTimeout (a
    504) with the lines shown before it (``lines`` in its body): the shell prints them as they
    come, a client of the API must not lose them."""
    lines: list[str] = []
    if result.lines is not None:
        try:
            lines.extend(result.lines)
        except WaitTimeout as exc:
            exc.lines = lines  # type: ignore[attr-defined]
            raise
    return CommandResult(columns=list(result.columns),
                         rows=[{c: _json_safe(v) for c, v in zip(result.columns, r)} for r in result.rows],
                         status="\n".join(lines) if result.lines is not None else result.status,
                         notices=list(result.notices))
