"""The commands that change job rows: STARTJOB, STOPJOB, FINISHJOB, RUNJOB, RESTARTJOB, RESUMEJOB, UPDATEJOB;
and DELETEHISTORY, which deletes a job's run history and leaves its row alone.

Each decides, from the row as it stands, the transition to make (model.TRANSITIONS) and
makes it by compare-and-set (:meth:`ServiceCore._change`), then wakes the nodes.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Sequence

from .. import dependencies, names, parallel
from ..clock import shown_time
from ..commands import statements
from ..errors import CommandError, InsertInterrupted, JobAlreadyRunning, JobNotFound, ValidationError
from ..model import RUNNING_STATUSES, Event, Job, JobKey, JobType, Status, advance
from ..result import Result
from ..schedule import Schedule, resolve_zone
from ..store.base import CasResult
from .calendars import CalendarCommands
from .hold import HoldCommands
from .parallel import ParallelCommands
from ..jobs.given_keys import CHILD_KEYS
from ..jobs.source import JobResolutionError
from ..worker.listener import OWN_ARGS, resumed_mark
from .session import Session, keep_session_scope, owner_of, with_session_scope

START_COLUMNS = ("Type", "Name", "UID", "Status", "Notes")
CHANGE_COLUMNS = ("Type", "Name", "UID", "Status", "Notes")
DELETED_COLUMNS = ("Type", "Name", "UID", "Deleted Runs")
FINISH_NOTE = "finishing: this run completes, then no more fires"
FINISH_BLOCKED_NOTE = ("blocked by its parents, so not finished: it would end PROCESSED before they are, and free "
                       "its own children (STOPJOB ends it; or FINISHJOB it once they are PROCESSED)")
RUN_DUE_NOTE = "already due: its run starts now"
RUN_GOING_NOTE = "a run is going on: not run again"
RUN_HELD_NOTE = "held: RELEASEJOB runs it"
RUN_BLOCKED_NOTE = "blocked by its parents: it runs once they are PROCESSED, not now"
EXISTS_NOTE = "(it exists: left as it is)"  # STARTJOB ... IF NOT EXISTS met the key


class JobCommands(HoldCommands, CalendarCommands, ParallelCommands):
    """STARTJOB, STOPJOB, FINISHJOB, RUNJOB, RESTARTJOB, RESUMEJOB, UPDATEJOB and DELETEHISTORY."""

    # -- STARTJOB ------------------------------------------------------------------------------

    def start_job(self, cmd: statements.StartJob, session: Session) -> Result:
        if cmd.parallelism:
            self._check_parallel(cmd)
        job = self._new_job(cmd, session)
        if cmd.parallelism:
            return self._started(*self._insert_parallel(job, cmd.parallelism))
        if not cmd.if_not_exists:
            return self._insert_new(job)
        # IF NOT EXISTS: a row with the key, live or archived, is the answer as it is. The
        # insert still decides when there is none (another script may be creating it now): a
        # live row that blocks it is returned too. (The one race left, the job created *and*
        # archived between the read and the insert, re-runs it, as STARTJOB would.)
        existing, created = self.store.get(job.key), False
        if existing is None:
            res = self.store.insert(job)
            if res.applied:
                self._ring()
            existing, created = res.row, res.applied  # the new row, or the live row that blocked it
        assert existing is not None  # insert always answers with a row
        return Result(START_COLUMNS, (self._change_row(existing),), notices=() if created else (EXISTS_NOTE,))

    def _new_job(self, cmd: statements.StartJob, session: Session) -> Job:
        """STARTJOB's checks and its row; the store is read only for DEPENDS_ON."""
        self.check_size(cmd)
        _check_definition(cmd)
        self.catalog.check(cmd.type, cmd.name)
        self._check_arguments(cmd.type, cmd.name, cmd.args, session)
        self._check_affinity(cmd.affinity)
        schedule = self._schedule(cmd.exec_interval, cmd.tz)
        now = self.clock.now()
        key = JobKey(cmd.type, cmd.name, cmd.uid if cmd.uid is not None else str(uuid.uuid4()))
        parents = dependencies.parent_keys(cmd.depends_on or ())
        dependencies.check_new(self.store, key, parents)
        blockers = dependencies.blocking(self.store, parents)
        job = Job(
            key=key,
            status=schedule.start_status(cmd.calendar or ""),
            creation_time=now,
            affinity=cmd.affinity or "",
            arguments=with_session_scope(cmd.args, session.session_scope()),
            execution_interval=cmd.exec_interval or "",
            next_run=schedule.first_due(now),
            priority=self._priority(cmd.priority, session),
            depends_on=",".join(str(p) for p in parents),
            blocked=bool(blockers),
            error_msg=dependencies.note(blockers),
            time_zone=cmd.tz or "",
            late_threshold=cmd.late_threshold or "",
            overlap=cmd.overlap or "",
            late_action=self._late_action(cmd.late_action, "LATE_ACTION"),
            on_failure=self._late_action(cmd.on_failure, "ON_FAILURE"),
            owner=owner_of(session),
            requestor=cmd.requestor or "",
            calendar=self._calendar(cmd.calendar, schedule),
            delete_on_success=self._cleanup(cmd.delete_on_success),
        )
        job = self._noted(job, "STARTJOB", session)
        if cmd.hold:  # RJM: set up now, run after RELEASEJOB
            return advance(None, Event.START_HELD, self._held(job))
        return advance(None, Event.START if job.status is Status.WAITING else Event.START_SCHEDULED, job)

    def _check_arguments(self, job_type: str, name: str, args: str | None, session: Session) -> None:
        """A new job's ARGS (or an UPDATEJOB's) as its kind of job will use them."""
        if job_type == JobType.INTERFACE_LISTENER:
            self.catalog.check_listener(args)
            self.catalog.check_user_arguments(name, args, (*OWN_ARGS, *CHILD_KEYS))  # its other keys go to its files' jobs
        elif job_type == JobType.PROCESS:
            self.catalog.check_process_arguments(args)
        elif job_type == JobType.USER_JOB:
            self.catalog.check_user_arguments(name, args, session.given_keys)

    def _start_group(self, group: Sequence[statements.Command], session: Session, results: list[Result]) -> None:
        """Consecutive STARTJOBs of a script, written in one store transaction; their results
        are added to ``results`` after its commit, then the first error (if any) is raised.

        Checks and rows first, outside the transaction: the store's write lock (which every
        node's claims and heartbeats wait for) is held for the inserts alone."""
        rows: list[Job] = []
        error: Exception | None = None
        for command in group:
            assert isinstance(command, statements.StartJob)  # what the script groups
            try:
                rows.append(self._new_job(command, session))
            except Exception as exc:  # the ones before it are kept, as one by one (a bug too)
                error = exc
                break
        # Created (and, run at once or on an interval, first due) when written: the
        # group's checks took time that is not its jobs' lateness.
        now = self.clock.now()
        rows = [_created_at(row, now) for row in rows]
        made: list[Result] = []  # (into ``results`` once committed: a failed commit made none of them)
        with self.store.transaction():
            try:
                inserted = self.store.insert_many(rows)
            except InsertInterrupted as exc:  # a store without transactions wrote the jobs before it
                exc.rest_of_group = len(rows) - exc.position - 1  # (a shell that goes on skips them)
                inserted, error = [CasResult(True, row=row) for row in rows[:exc.position]], exc
            for row, res in zip(rows, inserted):
                try:
                    made.append(self._started(row, res))
                except CommandError as exc:  # comes before any error of a later check
                    error = exc
                    break
        results.extend(made)
        self._ring_now()  # nodes start on this group while the next one is written
        if error is not None:
            raise error

    def _late_action(self, action: str | None, what: str) -> str:
        """LATE_ACTION (or ON_FAILURE) as stored; a job it names must be one the catalog would
        start, and one that runs once: a USER_JOB (its ARGS by name) or a PROCESS job (the same
        values as its arguments), not a listener, which runs until stopped."""
        if action and action not in ("SKIP", "RUN"):
            job_type, _, name = action.partition(".")
            if job_type.upper() not in (JobType.USER_JOB, JobType.PROCESS):
                raise ValidationError(f"{what} must name a USER_JOB or a PROCESS job, which runs once and is "
                                      f"handed what happened; got {action!r}")
            self.catalog.check(job_type, name)
        return action or ""

    def _cleanup(self, files: str | None) -> str:
        """DELETE_ON_SUCCESS as stored; its files must be under this cluster's CLEANUP_ROOT."""
        if files:
            self.catalog.cleanup_files(files)
        return files or ""

    def _insert_new(self, job: Job) -> Result:
        return self._started(job, self.store.insert(job))

    def _started(self, job: Job, res: CasResult) -> Result:
        if not res.applied:
            raise JobAlreadyRunning(f"Job is running {job.key.describe()}")
        self._ring()
        return Result(START_COLUMNS, (self._change_row(res.stored),))

    # -- STOPJOB / RESTARTJOB / RESUMEJOB --------------------------------------------------------

    def stop_job(self, cmd: statements.StopJob, session: Session) -> Result:
        now = self.clock.now()

        def decide(row: Job):
            if row.archived or row.status is Status.STOPPING:
                return None
            if row.status in (Status.WAITING, Status.SCHEDULED, Status.HELD):
                stopped = row.replace(status=Status.TERMINATED, end_time=now)
                return Event.STOP_IDLE, self._noted(stopped, "STOPJOB", session)
            return Event.STOP, self._noted(row.replace(status=Status.STOPPING), "STOPJOB", session)

        matching = self._matching(cmd.type, cmd.name, cmd.uid)
        changed = [self._change(j.key, decide) for j in matching]
        for task in self._tasks_of(matching):  # a parallel job's tasks stop with it
            self._change(task, decide)
        self._ring()
        rows = [r for r in changed if r is not None]
        if cmd.wait:
            # The seed's StopJob actor: return once every stopped job is final.
            deadline = None if cmd.timeout is None else time.monotonic() + cmd.timeout
            rows = [self._await(r.key, lambda j: j.archived, deadline, "STOPJOB WAIT") for r in rows]
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r) for r in rows))

    def finish_job(self, cmd: statements.FinishJob, session: Session) -> Result:
        """SMILA's finish (STOPJOB is its cancel): a recurring job's run going on, or its fire
        already due (WAITING, or SCHEDULED past its due time: its owner is about to run it,
        docs/explanation/nodes.md#the-scheduler), completes; then the job is PROCESSED and fires
        no more. One between fires (SCHEDULED) is PROCESSED at once. One-time jobs are left alone
        (their run ends them anyway); a NAME with none but those is refused."""
        now = self.clock.now()
        notes: dict[JobKey, str] = {}

        def decide(row: Job):
            if row.archived or row.finishing or row.status in (Status.STOPPING, Status.HELD):
                return None
            idle = row.status is Status.SCHEDULED and not _due(row, now)
            if row.blocked and (idle or row.status in RUNNING_STATUSES):
                # (A due fire, WAITING, is finished: it runs once its parents are PROCESSED.)
                notes[row.key] = FINISH_BLOCKED_NOTE
                return None
            if idle:
                return Event.FINISH_IDLE, self._noted(row.replace(status=Status.PROCESSED, end_time=now),
                                                      "FINISHJOB", session)
            notes[row.key] = FINISH_NOTE
            return Event.FINISH, self._noted(row.replace(finishing=True), "FINISHJOB", session)

        matching = self._matching(cmd.type, cmd.name, cmd.uid)
        recurring = [j for j in matching if self._schedule(j.execution_interval, j.time_zone).is_recurring]
        if not recurring:
            raise CommandError(f"{matching[0].key.describe() if len(matching) == 1 else 'No job matched'} is not a "
                               "recurring job: FINISHJOB ends a recurring job after its run (a one-time job's run "
                               "ends it anyway; STOPJOB cancels it)")
        rows = [r for r in (self._change(j.key, decide) for j in recurring) if r is not None]
        if rows and all(notes.get(r.key) == FINISH_BLOCKED_NOTE for r in rows):
            raise CommandError(f"Job is blocked {rows[0].key.describe()}: {FINISH_BLOCKED_NOTE}; nothing was changed")
        self._ring()
        if cmd.wait:
            deadline = None if cmd.timeout is None else time.monotonic() + cmd.timeout
            rows = [r if notes.get(r.key) == FINISH_BLOCKED_NOTE else
                    self._await(r.key, lambda j: j.archived, deadline, "FINISHJOB WAIT") for r in rows]
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r, notes.get(r.key, "") if not r.archived else "")
                                            for r in rows))

    def run_job(self, cmd: statements.RunJob, session: Session) -> Result:
        """SMILA's runOnce: a job between its fires (SCHEDULED) runs once now, and then its
        schedule goes on with the fire it had (``resume_at``), unchanged. A job whose run is
        already due (WAITING) is shown as it is; one with a run going on is not run again."""
        now = self.clock.now()
        notes: dict[JobKey, str] = {}

        def decide(row: Job):
            due = _due(row, now)
            if not row.archived and row.waits_for_parents:  # (it said "runs once now", and nothing ran)
                notes[row.key] = RUN_BLOCKED_NOTE
                return None
            if row.archived or row.status is not Status.SCHEDULED or due:
                status = Status.WAITING if due else row.status  # a due fire is under way
                notes[row.key] = {Status.WAITING: RUN_DUE_NOTE, Status.HELD: RUN_HELD_NOTE}.get(status, RUN_GOING_NOTE)
                return None
            kept = row.next_run or now
            notes[row.key] = f"runs once now; its schedule goes on at {_shown(kept, self.zone)}"
            return Event.RUN_ONCE, self._noted(row.replace(
                status=Status.WAITING, next_run=now, resume_at=kept, worker_id=None, epoch=row.epoch + 1,
                hold_until=None,
            ), "RUNJOB", session)

        rows = [r for r in (self._change(j.key, decide) for j in self._matching(cmd.type, cmd.name, cmd.uid))
                if r is not None]
        if rows and all(notes.get(r.key) == RUN_BLOCKED_NOTE for r in rows):
            raise CommandError(f"Job is blocked {rows[0].key.describe()}: {RUN_BLOCKED_NOTE} (RUNJOB runs a job "
                               "once between its fires); nothing was changed")
        if rows and all(notes.get(r.key) == RUN_HELD_NOTE for r in rows):
            raise CommandError(f"Job is held {rows[0].key.describe()}: RELEASEJOB runs it (RUNJOB runs a job once "
                               "between its fires)")
        if rows and all(notes.get(r.key) == RUN_GOING_NOTE for r in rows):
            raise JobAlreadyRunning(f"Job is running {rows[0].key.describe()} ({rows[0].status.value}): RUNJOB "
                                    "runs a job once between its fires")
        self._ring()
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r, notes.get(r.key, "")) for r in rows))

    def restart_job(self, cmd: statements.RestartJob, session: Session) -> Result:
        """The course's RESTARTJOB: stop and start each matching job, an idle one at once. With
        RUNNING (a deploy: "restarts running jobs with updated code"), only jobs with a run going
        (IN_PROCESS); idle ones, a recurring job between fires too, keep their schedule, and
        finding none running is no error (a deploy restarts what there is)."""
        now = self.clock.now()

        def decide(row: Job):
            # A job being stopped stays so: the stop was asked first (RESUMEJOB starts it again).
            if row.archived or row.status in (Status.RESTART, Status.HELD, Status.STOPPING):
                return None
            if cmd.running and row.status is not Status.IN_PROCESS:
                return None
            if row.status in (Status.WAITING, Status.SCHEDULED):
                return Event.RESTART_IDLE, self._noted(row.replace(
                    status=Status.WAITING, next_run=now, worker_id=None, epoch=row.epoch + 1,
                    tries=0, hold_until=None,
                ), "RESTARTJOB", session)
            return Event.RESTART, self._noted(row.replace(status=Status.RESTART), "RESTARTJOB", session)

        shown: tuple[Status, ...] = (Status.IN_PROCESS, Status.RESTART) if cmd.running else tuple(Status)
        matching = self.store.live_jobs(type=cmd.type, name=cmd.name, uid=cmd.uid) if cmd.running \
            else self._matching(cmd.type, cmd.name, cmd.uid)
        rows = [self._change(j.key, decide) for j in matching if j.status in shown]
        self._ring()
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r) for r in rows if r is not None and r.status in shown))

    def resume_job(self, cmd: statements.ResumeJob, session: Session) -> Result:
        key = JobKey(cmd.type, cmd.name, cmd.uid)
        now = self.clock.now()

        def decide(row: Job):
            if not row.archived:
                raise JobAlreadyRunning(f"Job is running {key.describe()}")
            if row.calendar:  # dropped while the job was not live (DROPCALENDAR checks live jobs only)
                self._stored_calendar(row.calendar)
            schedule = self._schedule(row.execution_interval, row.time_zone)
            status = schedule.start_status(row.calendar)
            event = Event.RESUME if status is Status.WAITING else Event.RESUME_SCHEDULED
            new = row.replace(
                status=status, archived=False, creation_time=now, next_run=schedule.first_due(now),
                tries=0, hold_until=None, worker_id=None, epoch=row.epoch + 1, finishing=False, resume_at=None,
                start_time=None, end_time=None)  # (a new life: no run of it has started or ended yet)
            if parallel.is_parent(row):  # a parallel job waits for its tasks again
                new = new.replace(blocked=True)
            else:  # as if started now: blocked while a parent is not PROCESSED (read now)
                blockers = dependencies.blocking(self.store, dependencies.parents_of(row))
                new = new.replace(blocked=bool(blockers), error_msg=dependencies.note(blockers) or row.error_msg)
            return event, self._noted(new, "RESUMEJOB", session)

        if key.type == JobType.INTERFACE_LISTENER:
            # Before its new life can run: it goes on where the stopped one was, so the files
            # dropped meanwhile are new to it (worker/listener.py; an unused mark if refused).
            stopped = self.store.get(key)
            if stopped is not None and stopped.archived:
                self.store.mark_file(key, resumed_mark(now), "RESUMEJOB: the files not handled yet are new")
        row = self._change(key, decide)
        if row is None:
            raise JobNotFound(f"No such job {key.describe()}")
        self._ring()
        return Result(CHANGE_COLUMNS, (self._change_row(row),))

    # -- DELETEHISTORY -------------------------------------------------------------------------

    def delete_history(self, cmd: statements.DeleteHistory, session: Session) -> Result:
        """Delete one job's recorded runs and their logs (SMILA's DELETE of job run data).

        Refused, with nothing deleted, for a job that does not exist (live or archived) and
        while a run of it is going (IN_PROCESS, STOPPING, RESTART): that run would record its
        line after the delete. A run claimed while the delete itself is under way ends as
        usual and is recorded. The job's row, counters and schedule are left as they are.
        """
        key = JobKey(cmd.type, cmd.name, cmd.uid)
        row = self.store.get(key)
        if row is None:
            raise JobNotFound(f"No such job {key.describe()}")
        if not row.archived and row.status in RUNNING_STATUSES:
            raise JobAlreadyRunning(f"Job is running {key.describe()} ({row.status.value}): its run history is "
                                    "not deleted while a run is going (STOPJOB ... WAIT, or WAITJOB, first)")
        deleted = self.store.delete_job_runs(key)
        if session.actor is not None:
            self._change(key, lambda r: self._history_deleted(r, session))
        return Result(DELETED_COLUMNS, ((key.type, key.name, key.uid, deleted),))

    def _history_deleted(self, row: Job, session: Session) -> tuple[Event, Job] | None:
        """DELETEHISTORY's author in the Notes of a live job with no run going. An archived
        job's Notes keep saying how it ended, and a running one's are its run's: there, the web
        process's log line records who deleted (web/audit.py)."""
        if row.archived or row.status in RUNNING_STATUSES:
            return None
        noted = self._noted(row, "DELETEHISTORY", session)
        return (Event.UPDATE, noted) if noted != row else None

    # -- UPDATEJOB -----------------------------------------------------------------------------

    def _check_update(self, cmd: statements.UpdateJob, session: Session) -> None:
        """UPDATEJOB's checks of its new values, before any row is read."""
        self._check_affinity(cmd.affinity)
        self._late_action(cmd.late_action, "LATE_ACTION")
        self._late_action(cmd.on_failure, "ON_FAILURE")
        if cmd.priority is not None:
            self._priority(cmd.priority, session)
        if cmd.exec_interval is not None:
            self._schedule(cmd.exec_interval, cmd.tz)
        if cmd.args is not None:
            json.loads(cmd.args)  # the parser validated it; a client may hand us anything
            self._check_arguments(cmd.type, cmd.name, cmd.args, session)  # as its kind of job will use them
        if cmd.calendar:
            self._stored_calendar(cmd.calendar)  # (whether each row's schedule recurs: in decide)
        self._cleanup(cmd.delete_on_success)

    def _watched(self, arguments: str | None) -> tuple[Path, str] | None:
        """A listener's directory and pattern, as it reads its ARGS (None: it could not). Its
        files there before its STARTJOB are marked present at its first run only, so what it
        watches cannot change under it (docs/guides/writing-jobs.md, "INTERFACE_LISTENER")."""
        try:
            return self.catalog.check_listener(arguments, must_exist=False)
        except JobResolutionError:
            return None

    def update_job(self, cmd: statements.UpdateJob, session: Session) -> Result:
        _check_definition(cmd)
        self._check_update(cmd, session)
        now = self.clock.now()
        notes: dict[JobKey, str] = {}
        parents = dependencies.parent_keys(cmd.depends_on) if cmd.depends_on is not None else None

        def decide(row: Job):
            new = row
            if cmd.affinity is not None:
                new = new.replace(affinity=cmd.affinity)
            if cmd.args is not None:
                if row.key.type == JobType.INTERFACE_LISTENER and self._watched(row.arguments) != self._watched(cmd.args):
                    raise ValidationError(
                        f"UPDATEJOB cannot change what a listener watches (ARGS path or pattern) {row.key.describe()}: "
                        "every file already there would be new to it. STOPJOB it and STARTJOB a listener of another "
                        "UID; nothing was changed")
                new = new.replace(arguments=keep_session_scope(cmd.args, row.arguments))
            if cmd.exec_interval is not None:
                new = new.replace(execution_interval=cmd.exec_interval)
            for name in ("priority", "late_threshold", "overlap", "late_action", "on_failure", "requestor", "calendar", "delete_on_success"):
                if getattr(cmd, name) is not None:
                    new = new.replace(**{name: getattr(cmd, name)})
            if cmd.tz is not None:
                new = new.replace(time_zone=cmd.tz)
            if parents is not None:
                dependencies.check_new(self.store, row.key, parents)
                blockers = dependencies.blocking(self.store, parents)
                idle = row.status in (Status.WAITING, Status.SCHEDULED)
                # A run going on goes on; the job's next run (a fire, a retry) waits for the
                # new parents: the row stays blocked through its outcome. A held job is never
                # blocked: RELEASEJOB reads its parents.
                held = row.status is Status.HELD
                new = new.replace(depends_on=",".join(str(p) for p in parents), blocked=bool(blockers) and not held,
                                  error_msg=dependencies.note(blockers) if idle else row.error_msg)
                if blockers and not idle and not held:
                    recurring = self._schedule(row.execution_interval, row.time_zone).is_recurring
                    notes[row.key] = (f"running; its next run {dependencies.note(blockers)}" if recurring else
                                      f"running; should this run fail, its retry {dependencies.note(blockers)}")
            if cmd.hold and row.status is not Status.HELD:  # RJM: a queued job held again
                return self._hold(row, new, notes, session)
            rescheduled = cmd.exec_interval is not None or cmd.tz is not None
            schedule = self._schedule(new.execution_interval, new.time_zone)
            if new.calendar and (cmd.calendar or cmd.exec_interval is not None):
                self._calendar(new.calendar, schedule)  # a calendar needs a recurring job, whichever changed
            reset = bool(cmd.reset_end_time)
            if rescheduled or reset:  # a new schedule replaces the fire a RUNJOB kept aside
                new = new.replace(resume_at=None)
            if row.status in (Status.WAITING, Status.SCHEDULED) and (rescheduled or reset):
                due = now if reset else _next_due_for_update(schedule, row, now)
                status = Status.WAITING if due <= now and not new.calendar else Status.SCHEDULED  # (a calendar's fire)
                # A new due time is picked up by whichever node re-owns the job: unowning it
                # (epoch + 1) also fences the old owner's scheduler entry.
                new = new.replace(status=status, next_run=due, worker_id=None, epoch=row.epoch + 1)
                return Event.RESCHEDULE, self._noted(new, "UPDATEJOB", session)
            if row.status in RUNNING_STATUSES and reset and schedule.is_recurring:
                # Running: the executor sees next_run moved and makes the next run due at once.
                new = new.replace(next_run=now)
                notes[row.key] = "running; the next run starts when this one ends"
            if new == row:
                return None
            return Event.UPDATE, self._noted(new, "UPDATEJOB", session)

        matching = self._matching(cmd.type, cmd.name, cmd.uid)
        if parents is not None:
            for j in matching:
                if parallel.is_parent(j) or j.task_of:
                    raise ValidationError(f"DEPENDS_ON: {j.key} is a parallel job or one of its tasks, whose "
                                          "parents are the job's tasks; nothing was changed")
        rows = [r for r in (self._change(j.key, decide) for j in matching) if r is not None]
        if cmd.hold:
            self._refuse_running_hold(rows, notes)
        self._ring()
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r, notes.get(r.key, "")) for r in rows))


def _next_due_for_update(schedule: Schedule, row: Job, now: datetime) -> datetime:
    """When a job whose schedule changed is next due (RESET_END_TIME=false keeps the rhythm)."""
    if schedule.interval is not None:
        base = row.start_time or row.creation_time
        return max(now, base + schedule.interval)
    if schedule.is_recurring:
        return schedule.next_fire_after(now)
    return schedule.first_due(now)


def _shown(when: datetime, zone: str | None) -> str:
    """A time in a note as the shell's tables show times (the node's TIME_ZONE, milliseconds)."""
    return shown_time(when, resolve_zone(zone))


def _created_at(row: Job, now: datetime) -> Job:
    """``row`` as created at ``now`` instead of when it was built (a job due at creation, one
    run at once or on an interval, is due then too)."""
    if row.next_run == row.creation_time:
        return row.replace(creation_time=now, next_run=now)
    return row.replace(creation_time=now)


def _due(row: Job, now: datetime) -> bool:
    """A SCHEDULED row whose fire is due: its owner claims it from SCHEDULED (or writes it
    WAITING when it has no room), so it is a due fire, not a job between fires."""
    return row.status is Status.SCHEDULED and row.next_run is not None and row.next_run <= now


#: What export-jobs writes back of a job's definition as statement text (export.py), besides
#: a new job's key.
_DEFINITION_TEXT = ("affinity", "exec_interval", "tz", "late_threshold", "late_action", "on_failure",
                    "requestor", "calendar", "delete_on_success")


def _check_definition(cmd: statements.StartJob | statements.UpdateJob) -> None:
    """A job's definition must be one a statement could write (export-jobs writes it back as
    one), and a new job's key one a URL path can name (the API, the console). The key an
    UPDATEJOB names is not checked: a job made before these rules stays reachable."""
    for field in _DEFINITION_TEXT:
        value = getattr(cmd, field, None)
        if isinstance(value, str) and (why := names.unwritable(field.upper(), value)) is not None:
            raise ValidationError(why)
    if isinstance(cmd, statements.StartJob):
        for field in ("name", "uid"):
            value = getattr(cmd, field)
            if isinstance(value, str) and (why := names.unwritable(field.upper(), value) or
                                           names.unroutable(field.upper(), value)) is not None:
                raise ValidationError(why)
