"""The statements of the command language, listed once.

The grammar (grammar/fabricjobs.lark) says what each statement's text may be; this table says,
for each, which typed command it becomes, which service method carries it out and how the
shell's ``help`` shows it. The parser, the service's dispatch and ``help`` are derived from
it, and tests/commands/test_table.py checks it against the grammar's ``_statement`` rule
and the ``Command`` union, so that a statement added in one place only fails the suite.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import statements as st


@dataclass(frozen=True)
class StatementInfo:
    keyword: str  # STARTJOB; its grammar rule is the lower-case word (startjob)
    command: type  # the typed command the parser builds
    handler: str  # the CommandService method that carries it out
    usage: tuple[str, ...]  # the help lines (the docs page ``doc`` says the rest)
    job_statement: bool = False  # <KEYWORD> <TYPE> param=... (parsed by one shared rule)
    summary: str = ""  # one sentence: what it does (docs/reference/statements.md)
    doc: str = ""  # the docs page (and section) that explains it, relative to docs/

    @property
    def rule(self) -> str:
        return self.keyword.lower()


_JOB = "<TYPE> NAME='<name>'"

STATEMENTS: tuple[StatementInfo, ...] = (
    StatementInfo("STARTJOB", st.StartJob, "start_job", (
        f"STARTJOB {_JOB} [UID='<uid>'] [AFFINITY='<affinity>'] [ARGS='<json>'] [EXEC_INTERVAL='<interval>']",
        "         [DEPENDS_ON='<TYPE.NAME.UID>,...'] [PRIORITY=0..9] [TZ='<zone>'] [LATE_THRESHOLD='HH:MM:SS']",
        "         [OVERLAP='SKIP|QUEUE'] [LATE_ACTION='SKIP|RUN|<TYPE>.<NAME>']",
        "         [ON_FAILURE='<TYPE>.<NAME>'] [REQUESTOR='<requestor>'] [CALENDAR='<calendar>']",
        "         [DELETE_ON_SUCCESS='<file>,...'] [HOLD=true|false] [PARALLELISM=2..64] [IF NOT EXISTS]"), job_statement=True,
                  summary="Creates a job (or reuses the key of an archived one): run once now, at a time, or on a schedule.",
                  doc="guides/commands.md#startjob"),
    StatementInfo("STOPJOB", st.StopJob, "stop_job", (f"STOPJOB {_JOB} [UID='<uid>'] [WAIT [TIMEOUT <s>]]",),
                  job_statement=True,
                  summary="Cancels jobs: a running one is asked to abort (killed after STOP_GRACE_SEC), then TERMINATED.",
                  doc="guides/commands.md#stopjob"),
    StatementInfo("FINISHJOB", st.FinishJob, "finish_job", (f"FINISHJOB {_JOB} [UID='<uid>'] [WAIT [TIMEOUT <s>]]",),
                  job_statement=True,
                  summary="Ends a recurring job after the run going on: that run completes, then the job is PROCESSED.",
                  doc="guides/commands.md#finishjob"),
    StatementInfo("RUNJOB", st.RunJob, "run_job", (f"RUNJOB {_JOB} [UID='<uid>']",), job_statement=True,
                  summary="Runs a recurring job once now, between its fires, and keeps its schedule as it was.",
                  doc="guides/commands.md#runjob"),
    StatementInfo("RELEASEJOB", st.ReleaseJob, "release_job", (f"RELEASEJOB {_JOB} [UID='<uid>']",), job_statement=True,
                  summary="Releases a job held with HOLD=true, and every held job below it in the DEPENDS_ON graph.",
                  doc="guides/dependencies.md#hold-and-releasejob"),
    StatementInfo("RESTARTJOB", st.RestartJob, "restart_job", (
        f"RESTARTJOB {_JOB} [UID='<uid>']",
        "RESTARTJOB <TYPE> [NAME='<name>' [UID='<uid>']] RUNNING"), job_statement=True,
                  summary="Ends a job's run and makes it WAITING again for any node; RUNNING restarts only the running ones (a deploy).",
                  doc="guides/commands.md#restartjob"),
    StatementInfo("RESUMEJOB", st.ResumeJob, "resume_job", (f"RESUMEJOB {_JOB} UID='<uid>'",), job_statement=True,
                  summary="Brings an archived job (PROCESSED, TERMINATED, FAILED) back by its schedule, tries reset.",
                  doc="guides/commands.md#resumejob"),
    StatementInfo("UPDATEJOB", st.UpdateJob, "update_job", (
        f"UPDATEJOB {_JOB} [UID=..] [AFFINITY=..] [ARGS=..] [EXEC_INTERVAL=..] [RESET_END_TIME=true|false]",
        "          [PRIORITY=..] [TZ=..] [LATE_THRESHOLD=..] [OVERLAP=..] [LATE_ACTION=..] [ON_FAILURE=..]",
        "          [DEPENDS_ON=..] [REQUESTOR=..] [CALENDAR=..]",
        "          [DELETE_ON_SUCCESS=..] [HOLD=true]"),
        job_statement=True,
                  summary="Changes a live job's parameters (affinity, args, schedule, parents, priority, ...); HOLD=true holds it.",
                  doc="guides/commands.md#updatejob"),
    StatementInfo("JOBSTATUS", st.JobStatus, "job_status",
                  ("JOBSTATUS [<n> DAYS AGO | <TYPE> ['<NAME>' [WITH UID='<UID>' | <n> DAYS AGO]]]",
                   "          [BY '<owner>'] [REQUESTOR '<requestor>']",
                   "          [WHERE STATUS = '<status>' | WHERE STATUS IN ('<status>', ...)] [DETAILS]"),
                  summary="Lists jobs: live ones, those archived in the last n days, one type, name or UID, by owner, "
                          "requestor or status.",
                  doc="guides/watching-jobs.md#jobstatus"),
    StatementInfo("JOBHISTORY", st.JobHistory, "job_history", ("JOBHISTORY <TYPE> '<NAME>' [WITH UID='<UID>'] [LIMIT <n>]",
                                                              "JOBHISTORY RECENT <n>"),
                  summary="Lists a job's recorded runs, newest first, or the last n runs of the whole cluster (RECENT).",
                  doc="guides/watching-jobs.md#jobhistory"),
    StatementInfo("JOBLOG", st.JobLog, "job_log", ("JOBLOG <TYPE> '<NAME>' [WITH UID='<UID>'] [RUN <n> | FOLLOW [TIMEOUT <s>]]",),
                  summary="Prints one run's log from any shell, or follows a running run's lines as they come (FOLLOW).",
                  doc="guides/watching-jobs.md#joblog"),
    StatementInfo("WAITJOB", st.WaitJob, "wait_job", ("WAITJOB <TYPE> '<NAME>' WITH UID='<UID>' [RUN <n>] [TIMEOUT <s>]",),
                  summary="Waits until a job (or one of its runs, RUN n) has ended and answers its row.",
                  doc="guides/watching-jobs.md#waitjob-and-stopjob-wait"),
    StatementInfo("DELETEHISTORY", st.DeleteHistory, "delete_history", ("DELETEHISTORY <TYPE> '<NAME>' WITH UID='<UID>'",),
                  summary="Deletes one job's recorded runs and their logs; the job itself is left alone.",
                  doc="guides/watching-jobs.md#deletehistory"),
    StatementInfo("CREATECALENDAR", st.CreateCalendar, "create_calendar",
                  ("CREATECALENDAR '<name>' EXCLUDE '<date | date..date | cron>' [EXCLUDE '...' ...]",),
                  summary="Makes (or replaces) a stored calendar whose rules skip the fires of the recurring jobs that name it.",
                  doc="guides/schedules.md#calendars"),
    StatementInfo("DROPCALENDAR", st.DropCalendar, "drop_calendar", ("DROPCALENDAR '<name>'",),
                  summary="Drops a calendar no live job names.",
                  doc="guides/schedules.md#calendars"),
    StatementInfo("CALENDARS", st.Calendars, "calendars", ("CALENDARS",),
                  summary="Lists the stored calendars with the number of live jobs that name each.",
                  doc="guides/schedules.md#calendars"),
    StatementInfo("PS", st.Ps, "ps", ("PS [ALL]",),
                  summary="Lists the tasks running on the shell's node, or on every live node (ALL).",
                  doc="guides/watching-jobs.md#ps-and-kill"),
    StatementInfo("KILL", st.Kill, "kill", ("KILL '<node>' <task>",),
                  summary="Ends a task on a node at once, from any shell; the run counts as a failed try.",
                  doc="guides/watching-jobs.md#ps-and-kill"),
    StatementInfo("NODES", st.Nodes, "nodes", ("NODES [DETAILS]",),
                  summary="Lists the cluster's nodes: state, last beat, running tasks, capacity per affinity.",
                  doc="guides/watching-jobs.md#nodes"),
    StatementInfo("SET", st.Set, "set", ("SET <key> [=] <value>",),
                  summary="Sets a session value that every later STARTJOB of the session carries in its session scope.",
                  doc="guides/commands.md#set-and-the-session-scope"),
)

BY_RULE = {s.rule: s for s in STATEMENTS}
JOB_COMMANDS = {s.rule: s.command for s in STATEMENTS if s.job_statement}


def usage() -> str:
    """Every statement's help lines, in the table's order."""
    return "\n".join(f"  {line}" for s in STATEMENTS for line in s.usage)


@dataclass(frozen=True)
class ParameterInfo:
    """A job statement's ``NAME=value`` parameter, for the reference (docs/reference/statements.md);
    which statements take it is the grammar's to say (tests/commands/test_table.py keeps the
    two in step)."""

    name: str  # NAME; its grammar terminal is P_NAME
    value: str  # the form of its value
    summary: str
    doc: str = ""  # the docs page (and section) that explains it, relative to docs/


PARAMETERS: tuple[ParameterInfo, ...] = (
    ParameterInfo("NAME", "'<name>'", "What runs: a USER_JOB's function, a PROCESS job's executable, a listener's job.",
                  "guides/writing-jobs.md"),
    ParameterInfo("UID", "'<uid>'", "The job's own id within its NAME; STARTJOB generates a unique one without it.",
                  "guides/commands.md#startjob"),
    ParameterInfo("AFFINITY", "'<affinity>'", "Where it may run: ANY (default), node.id names, node names, a DC or an IP address.",
                  "guides/cluster.md#affinity"),
    ParameterInfo("ARGS", "'<json object>'", "The job's arguments: a USER_JOB's parameters by name, a PROCESS job's argv.",
                  "guides/writing-jobs.md"),
    ParameterInfo("EXEC_INTERVAL", "'<interval>'", "Its schedule: empty (once, now), a timestamp, HH:MM:SS (fixed rate) or cron.",
                  "guides/schedules.md"),
    ParameterInfo("RESET_END_TIME", "true|false", "UPDATEJOB: the next run of the new schedule is due now.",
                  "guides/commands.md#updatejob"),
    ParameterInfo("DEPENDS_ON", "'<TYPE.NAME.UID>,...'", "Parents: the job is blocked until every one is PROCESSED.",
                  "guides/dependencies.md#depends_on"),
    ParameterInfo("PRIORITY", "0..9", "Claim order among waiting jobs (default 4), aged so that none starves.",
                  "guides/schedules.md#priority"),
    ParameterInfo("TZ", "'<zone>'", "The IANA zone its cron or timestamp is read in (default: the node's TIME_ZONE).",
                  "guides/schedules.md#time-zones"),
    ParameterInfo("LATE_THRESHOLD", "'HH:MM:SS'", "A recurring fire later than this is handled by LATE_ACTION.",
                  "guides/schedules.md#late-fires"),
    ParameterInfo("OVERLAP", "'SKIP|QUEUE'", "What a fire due while the previous run still goes does.",
                  "guides/schedules.md#overlap"),
    ParameterInfo("LATE_ACTION", "'SKIP|RUN|<TYPE>.<NAME>'", "What a late fire does: skipped, run, or skipped and a handler started.",
                  "guides/schedules.md#late-fires"),
    ParameterInfo("ON_FAILURE", "'<TYPE>.<NAME>'", "A job started once when a run fails for good.",
                  "guides/dependencies.md#on_failure"),
    ParameterInfo("REQUESTOR", "'<requestor>'", "Whom the job is for (a team, an application); JOBSTATUS filters by it.",
                  "guides/commands.md#owners-priority-ceilings-and-requestors"),
    ParameterInfo("CALENDAR", "'<calendar>'", "A stored calendar whose rules skip fires of this recurring job.",
                  "guides/schedules.md#calendars"),
    ParameterInfo("DELETE_ON_SUCCESS", "'<file>,...'", "Files under CLEANUP_ROOT deleted after each successful run.",
                  "guides/commands.md#delete_on_success"),
    ParameterInfo("HOLD", "true|false", "STARTJOB: create it HELD (never claimed or fired until RELEASEJOB); UPDATEJOB: hold it.",
                  "guides/dependencies.md#hold-and-releasejob"),
    ParameterInfo("PARALLELISM", "2..64", "Split a one-time USER_JOB into n tasks that any nodes run at once.",
                  "guides/commands.md#parallel-tasks-of-a-job-parallelism"),
)
