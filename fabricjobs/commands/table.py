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
    usage: tuple[str, ...]  # the help lines (the README's Commands section says the rest)
    job_statement: bool = False  # <KEYWORD> <TYPE> param=... (parsed by one shared rule)

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
        "         [DELETE_ON_SUCCESS='<file>,...'] [HOLD=true|false] [PARALLELISM=2..64] [IF NOT EXISTS]"), job_statement=True),
    StatementInfo("STOPJOB", st.StopJob, "stop_job", (f"STOPJOB {_JOB} [UID='<uid>'] [WAIT [TIMEOUT <s>]]",),
                  job_statement=True),
    StatementInfo("FINISHJOB", st.FinishJob, "finish_job", (f"FINISHJOB {_JOB} [UID='<uid>'] [WAIT [TIMEOUT <s>]]",),
                  job_statement=True),
    StatementInfo("RUNJOB", st.RunJob, "run_job", (f"RUNJOB {_JOB} [UID='<uid>']",), job_statement=True),
    StatementInfo("RELEASEJOB", st.ReleaseJob, "release_job", (f"RELEASEJOB {_JOB} [UID='<uid>']",), job_statement=True),
    StatementInfo("RESTARTJOB", st.RestartJob, "restart_job", (
        f"RESTARTJOB {_JOB} [UID='<uid>']",
        "RESTARTJOB <TYPE> [NAME='<name>' [UID='<uid>']] RUNNING"), job_statement=True),
    StatementInfo("RESUMEJOB", st.ResumeJob, "resume_job", (f"RESUMEJOB {_JOB} UID='<uid>'",), job_statement=True),
    StatementInfo("UPDATEJOB", st.UpdateJob, "update_job", (
        f"UPDATEJOB {_JOB} [UID=..] [AFFINITY=..] [ARGS=..] [EXEC_INTERVAL=..] [RESET_END_TIME=true|false]",
        "          [PRIORITY=..] [TZ=..] [LATE_THRESHOLD=..] [OVERLAP=..] [LATE_ACTION=..] [ON_FAILURE=..]",
        "          [DEPENDS_ON=..] [REQUESTOR=..] [CALENDAR=..]",
        "          [DELETE_ON_SUCCESS=..] [HOLD=true]"),
        job_statement=True),
    StatementInfo("JOBSTATUS", st.JobStatus, "job_status",
                  ("JOBSTATUS [<n> DAYS AGO | <TYPE> ['<NAME>' [WITH UID='<UID>' | <n> DAYS AGO]]]",
                   "          [BY '<owner>'] [REQUESTOR '<requestor>'] [DETAILS]")),
    StatementInfo("JOBHISTORY", st.JobHistory, "job_history", ("JOBHISTORY <TYPE> '<NAME>' [WITH UID='<UID>'] [LIMIT <n>]",
                                                              "JOBHISTORY RECENT <n>")),
    StatementInfo("JOBLOG", st.JobLog, "job_log", ("JOBLOG <TYPE> '<NAME>' [WITH UID='<UID>'] [RUN <n> | FOLLOW [TIMEOUT <s>]]",)),
    StatementInfo("WAITJOB", st.WaitJob, "wait_job", ("WAITJOB <TYPE> '<NAME>' WITH UID='<UID>' [RUN <n>] [TIMEOUT <s>]",)),
    StatementInfo("DELETEHISTORY", st.DeleteHistory, "delete_history", ("DELETEHISTORY <TYPE> '<NAME>' WITH UID='<UID>'",)),
    StatementInfo("CREATECALENDAR", st.CreateCalendar, "create_calendar",
                  ("CREATECALENDAR '<name>' EXCLUDE '<date | date..date | cron>' [EXCLUDE '...' ...]",)),
    StatementInfo("DROPCALENDAR", st.DropCalendar, "drop_calendar", ("DROPCALENDAR '<name>'",)),
    StatementInfo("CALENDARS", st.Calendars, "calendars", ("CALENDARS",)),
    StatementInfo("PS", st.Ps, "ps", ("PS [ALL]",)),
    StatementInfo("KILL", st.Kill, "kill", ("KILL '<node>' <task>",)),
    StatementInfo("NODES", st.Nodes, "nodes", ("NODES [DETAILS]",)),
    StatementInfo("SET", st.Set, "set", ("SET <key> [=] <value>",)),
)

BY_RULE = {s.rule: s for s in STATEMENTS}
JOB_COMMANDS = {s.rule: s.command for s in STATEMENTS if s.job_statement}


def usage() -> str:
    """Every statement's help lines, in the table's order."""
    return "\n".join(f"  {line}" for s in STATEMENTS for line in s.usage)
