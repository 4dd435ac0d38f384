"""The commands that read jobs: JOBSTATUS, JOBHISTORY, JOBLOG, and WAITJOB (which reads
until the job is done)."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timedelta

from .. import parallel
from ..affinity import parse_affinity
from ..cluster import NodeView, candidates, job_progress, read_cluster
from ..commands import statements
from ..errors import CommandError, JobNotFound
from ..model import FINAL_STATUSES, LIVE_STATUSES, RUNNING_STATUSES, Job, JobKey, Status
from ..result import Result
from ..store.base import RunRecord
from ..store.search import ArchiveQuery
from .core import ServiceCore
from .follow import follow_lines
from .recent import RECENT_COLUMNS, recent_rows
from .session import Session

STATUS_COLUMNS = (
    "Type", "Name", "UID", "Status", "Creation Time", "Start Time", "End Time", "Affinity",
    "Is Archived", "Next Run", "Ownership Candidates Num", "Notes", "Node", "Tries", "Priority", "Progress",
)
DETAIL_COLUMNS = STATUS_COLUMNS + ("Output", "Arguments")
COUNTER_COLUMNS = ("Runs", "Successes", "Failures", "Retries After Error", "Retries After Node Loss", "Kills",
                   "Failed After Retry", "Failed Without Retry", "Canceled")
FULL_COLUMNS = DETAIL_COLUMNS + ("Execution Interval", "Time Zone", "Late Threshold", "Late Action", "Overlap",
                                  "Depends On", "On Failure", "Blocked", "Epoch", "Owner", "Requestor", "Calendar", "Delete On Success", "Parallelism",
                                  "Task Of") + COUNTER_COLUMNS
#: The HTTP API's job list: JOBSTATUS's columns, and who a job is for (its filters).
LIST_COLUMNS = STATUS_COLUMNS + ("Owner", "Requestor")
HISTORY_COLUMNS = ("Run", "UID", "Node", "Result", "Status", "Due", "Start", "End", "Duration (ms)", "Tries",
                   "Error", "Exit Code", "Output", "Note")
HISTORY_LIMIT = 50
RECORD_GRACE_SEC = 2.0  # WAITJOB ... RUN n: how long a run that is over may take to show its record
NEXT_RUN_TEXT = {Status.IN_PROCESS: "Already running", Status.WAITING: "Ready to be executed",
                 Status.HELD: "Held: RELEASEJOB runs it"}
FINISHING_TEXT = "None: finishing (FINISHJOB)"  # this run (or the due one) is the last
#: JOBSTATUS's ended jobs (n DAYS AGO, WHERE STATUS='FAILED'): shown at most, and search pages read for them
ENDED_SHOWN, ENDED_PAGES = 1000, 20


class JobViews(ServiceCore):
    """JOBSTATUS, JOBHISTORY, JOBLOG and WAITJOB."""

    # -- JOBSTATUS -----------------------------------------------------------------------------

    def job_status(self, cmd: statements.JobStatus, session: Session) -> Result:
        nodes = read_cluster(self.store)
        notices: tuple[str, ...] = ()
        if cmd.uid is not None:
            assert cmd.type is not None and cmd.name is not None  # the grammar gives a UID only with both
            job = self.store.get(JobKey(cmd.type, cmd.name, cmd.uid))
            jobs = [job] if job is not None else []
        else:
            live = not cmd.statuses or bool(cmd.statuses & LIVE_STATUSES)
            jobs = self.store.live_jobs(type=cmd.type, name=cmd.name) if live else []
            if cmd.days_ago is not None or cmd.statuses & FINAL_STATUSES:  # n DAYS AGO, or FAILED: the last ones kept
                archived, notices = self._ended(cmd)
                jobs = sorted(jobs + archived, key=lambda j: j.key)
        jobs = [j for j in jobs if cmd.owner in (None, j.owner) and cmd.requestor in (None, j.requestor)
                and (not cmd.statuses or j.status in cmd.statuses)]
        if cmd.details:  # a record per block, with the job's counters (SMILA's job run statistics)
            return Result(FULL_COLUMNS, tuple(self._status_row(j, nodes, detail=True, full=True) for j in jobs),
                          vertical=True, notices=notices)
        if cmd.uid is not None:
            return Result(DETAIL_COLUMNS, tuple(self._status_row(j, nodes, detail=True) for j in jobs))
        return Result(STATUS_COLUMNS, tuple(self._status_row(j, nodes) for j in jobs), notices=notices)

    def _ended(self, cmd: statements.JobStatus) -> tuple[list[Job], tuple[str, ...]]:
        """The archived jobs of JOBSTATUS n DAYS AGO (those that ended in the window), or of
        JOBSTATUS ... WHERE STATUS with a final status (those still kept): the ENDED_SHOWN
        that ended last, through the store's search (newest first, a bounded page at a time,
        ENDED_PAGES pages at most), with a notice when there were more. A window of a busy
        cluster holds millions; the shell prints what a person reads, and says how to see the
        rest (docs/guides/watching-jobs.md)."""
        now = self.clock.now()
        since = now - timedelta(days=cmd.days_ago) if cmd.days_ago is not None else self._kept_since(now)
        statuses = archived_statuses(cmd.statuses)
        if statuses is None:
            return [], ()
        query = ArchiveQuery(since=since, type=cmd.type, name=cmd.name or "", owner=cmd.owner, statuses=statuses,
                             limit=ENDED_SHOWN)
        found: list[Job] = []
        for _ in range(ENDED_PAGES):
            page = self.store.search_archived(query)
            found += [j for j in page.jobs if cmd.name in (None, j.name)]
            if page.next is None or len(found) >= ENDED_SHOWN:
                cut = page.next is not None
                break
            query = dataclasses.replace(query, after=page.next, limit=ENDED_SHOWN - len(found))
        else:
            cut = True
        if not cut:
            return found, ()
        shown = found[:ENDED_SHOWN]  # newest End Time first: the last one shown ended earliest
        down_to = f"{shown[-1].end_time or page.reached:%Y-%m-%d %H:%M}"
        if cmd.days_ago is not None:
            return shown, (f"(the {len(shown):,} jobs that ended last, down to {down_to} UTC; there are more in "
                           f"the window: name a <TYPE> '<NAME>', or page through them all with GET "
                           f"/api/v1/jobs?scope=archived)",)
        return shown, (f"(the ended jobs down to {down_to} UTC; add n DAYS AGO for a window)",)

    def _kept_since(self, now: datetime) -> datetime:
        """The oldest End Time the store still keeps an archived job of."""
        return now - timedelta(hours=self.config.get("jobs", "K2JOB_ARCHIVING_TIME_HOUR"))

    def status_rows(self, jobs: list[Job], nodes: list[NodeView]) -> Result:
        """JOBSTATUS's rows of jobs and nodes already read (the web console reads them once
        per interval for every browser)."""
        return Result(STATUS_COLUMNS, tuple(self._status_row(j, nodes) for j in jobs))

    def _status_row(self, job: Job, nodes: list[NodeView], detail: bool = False, full: bool = False,
                    who: bool = False) -> tuple:
        next_run: datetime | str | None
        if job.status is Status.SCHEDULED:
            next_run = job.next_run
        else:
            next_run = NEXT_RUN_TEXT.get(job.status, "")
        try:
            cands = candidates(nodes, parse_affinity(job.affinity), job.priority)
        except ValueError:
            cands = 0
        notes = job.error_msg
        if parallel.is_parent(job) and job.status is Status.WAITING:  # its tasks' progress, as it stands
            next_run, notes = "Waiting for its tasks", parallel.progress(parallel.tasks(self.store, job))
        elif job.blocked and job.status is Status.WAITING:
            next_run = "Blocked by its parents"
        elif job.finishing and not job.archived:
            next_run = FINISHING_TEXT
        row: tuple = (
            job.type, job.name, job.uid, job.status.value, job.creation_time, job.start_time,
            job.end_time, job.affinity or "ANY", job.archived, next_run, cands, notes,
            job.worker_id or "", job.tries, job.priority, self._progress(job, nodes),
        )
        if detail:
            row += (job.output or "", job.arguments)
        if full:
            row += (job.execution_interval, job.time_zone or str(self.zone or "(node's)"), job.late_threshold,
                    job.late_action or "SKIP", job.overlap or "(by schedule)", job.depends_on.replace(",", ", "),
                    job.on_failure, job.blocked, job.epoch,
                    job.owner, job.requestor, job.calendar or "", job.delete_on_success, job.parallelism, job.task_of,
                    job.runs, job.successes, job.failures, job.retries_error, job.retries_lost, job.kills,
                    job.failed_after_retry, job.failed_without_retry, job.canceled)
        if who:
            row += (job.owner, job.requestor)
        return row

    @staticmethod
    def _progress(job: Job, nodes: list[NodeView]) -> str:
        """A running job's reported progress (``current_job().progress``), as its node last
        published it with its tasks."""
        if job.status is not Status.IN_PROCESS or not job.worker_id:
            return ""
        return job_progress(str(job.key), job.epoch, next((n for n in nodes if n.name == job.worker_id), None))

    # -- JOBHISTORY / JOBLOG / WAITJOB -----------------------------------------------------------

    def job_history(self, cmd: statements.JobHistory, session: Session) -> Result:
        if cmd.recent is not None:  # the whole cluster's runs going on, waiting and ended (getRecentJobs)
            return Result(RECENT_COLUMNS, recent_rows(self.store, cmd.recent))
        assert cmd.type is not None and cmd.name is not None  # the grammar gives a type and name without RECENT
        runs = self.store.runs(cmd.type, cmd.name, cmd.uid, limit=cmd.limit or HISTORY_LIMIT)
        rows = [history_row(r) for r in runs]
        notices = () if cmd.limit or len(runs) < HISTORY_LIMIT else (f"(the last {HISTORY_LIMIT}; LIMIT n shows more)",)
        return Result(HISTORY_COLUMNS, tuple(rows), notices=notices)

    def job_log(self, cmd: statements.JobLog, session: Session) -> Result:
        row = self._followed(cmd) if cmd.follow else None
        if row is not None:  # a live job: its run going on, or its next one
            deadline = None if cmd.timeout is None else time.monotonic() + cmd.timeout
            return Result(lines=follow_lines(self.store, row, deadline, run_summary))
        r = self.find_run(statements.JobLog(cmd.type, cmd.name, cmd.uid, cmd.run))
        text = run_summary(r) + "\n" + (r.log or "(no log lines)")
        if cmd.follow:  # a final job: its last run's log, still as lines (a program iterates them)
            return Result(lines=iter(text.split("\n")))
        return Result(status=text)

    def _followed(self, cmd: statements.JobLog) -> Job | None:
        """The live job JOBLOG ... FOLLOW follows; None if there is none (final or archived:
        its last run's log is shown, as JOBLOG does)."""
        if cmd.uid is not None:
            key = JobKey(cmd.type, cmd.name, cmd.uid)
            row = self.store.get(key)
            if row is None:
                raise JobNotFound(f"No such job {key.describe()}")
            return None if row.archived else row
        live = self.store.live_jobs(type=cmd.type, name=cmd.name)
        if len(live) > 1:
            raise CommandError(f"{len(live)} live jobs are named {cmd.name!r}; add WITH UID='<uid>' to follow one")
        return live[0] if live else None

    def find_run(self, cmd: statements.JobLog) -> RunRecord:
        """The run JOBLOG shows: run ``cmd.run`` (default: the last) of the jobs named."""
        # The last run: one line (a name's whole history is not read for it); run n of one job:
        # its line, read by its key (not every line of a job that may have millions).
        if cmd.run is not None and cmd.uid is not None:
            record = self.store.run(JobKey(cmd.type, cmd.name, cmd.uid), cmd.run)
            runs = [record] if record is not None else []
        else:
            runs = self.store.runs(cmd.type, cmd.name, cmd.uid, limit=1 if cmd.run is None else None)
        if cmd.run is not None:
            runs = [r for r in runs if r.epoch == cmd.run]
            if len({r.key.uid for r in runs}) > 1:
                raise CommandError(f"run {cmd.run} exists for several jobs named {cmd.name!r}; add WITH UID='<uid>'")
        if not runs:
            which = f"run {cmd.run}" if cmd.run is not None else "run"
            raise JobNotFound(f"No recorded {which} of [type: {cmd.type}, name: {cmd.name}"
                              + (f", uid: {cmd.uid}]" if cmd.uid is not None else "]"))
        return runs[0]

    def wait_job(self, cmd: statements.WaitJob, session: Session) -> Result:
        """The seed's JobWait actor: until the job is final; a recurring job until the run
        going on (or, if none is, the next one) ends."""
        key = JobKey(cmd.type, cmd.name, cmd.uid)
        start = self.store.get(key)
        if start is None:
            raise JobNotFound(f"No such job {key.describe()}")
        began = time.monotonic()
        deadline = None if cmd.timeout is None else began + cmd.timeout
        if cmd.run is not None:
            return self._wait_run(key, cmd.run, deadline, began)
        recurring = self._schedule(start.execution_interval, start.time_zone).is_recurring if not start.archived else False

        def done(row: Job) -> bool:
            if row.archived:
                return True
            return recurring and row.end_time != start.end_time and row.status not in RUNNING_STATUSES

        row = self._await(key, done, deadline, "WAITJOB")
        nodes = read_cluster(self.store)
        return Result(DETAIL_COLUMNS, (self._status_row(row, nodes, detail=True),),
                      notices=(f"waited {time.monotonic() - began:.1f} s",))

    def _wait_run(self, key: JobKey, run: int, deadline: float | None, began: float) -> Result:
        """WAITJOB ... RUN n: the row says when run ``n`` is over (its epoch moved past it, or
        it is no longer running in it); then its record is the answer."""

        def over(row: Job) -> bool:
            return row.archived or row.epoch > run or (row.epoch == run and row.status not in RUNNING_STATUSES)

        row = self._await(key, over, deadline, f"WAITJOB ... RUN {run}")
        # The record goes in with the outcome, or (Cassandra) just after it: a moment's grace.
        grace = time.monotonic() + RECORD_GRACE_SEC
        while True:
            record = self.store.run(key, run)  # its line alone, read by its key
            if record is not None:
                return Result(HISTORY_COLUMNS, (history_row(record),),
                              notices=(f"waited {time.monotonic() - began:.1f} s",))
            if row.epoch < run or time.monotonic() >= grace:
                raise JobNotFound(f"No recorded run {run} of {key.describe()}"
                                  + (" (it is archived)" if row.archived and row.epoch < run else ""))
            time.sleep(0.05)


def history_row(r: RunRecord) -> tuple:
    """One run as JOBHISTORY shows it (HISTORY_COLUMNS)."""
    took = int((r.end - r.start).total_seconds() * 1000) if r.start and r.end else None
    return (r.epoch, r.key.uid, r.node, r.result, r.status, r.due, r.start, r.end, took, r.tries,
            r.error, r.exit_code, r.output or "", r.note)


def run_summary(r: RunRecord) -> str:
    """JOBLOG's first line: which run, where, and how it ended."""
    return f"run {r.epoch} of {r.key} on {r.node}: {r.result} -> {r.status}" + (f" ({r.error})" if r.error else "")


def archived_statuses(statuses: frozenset[Status]) -> frozenset[Status] | None:
    """The statuses a search of the archive looks for when ``statuses`` are asked for: the final
    ones among them (empty: any final one, as nothing was asked); None when only live statuses
    were asked for, which no archived job has."""
    final = statuses & FINAL_STATUSES
    return None if statuses and not final else final
