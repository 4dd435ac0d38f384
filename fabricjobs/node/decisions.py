"""What a node writes after a run, and when it takes over a job: pure functions of rows.

Kept apart from threads and processes so each rule (docs/explanation/architecture.md,
docs/explanation/nodes.md) is one small, tested function. Every function returns
``(event, new_row)`` for :func:`fabricjobs.model.advance`, or ``None`` when this node must not
write (it lost the row: fencing, docs/explanation/guarantees.md).
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from datetime import datetime, timedelta, timezone

from ..calendar import Calendar
from ..jobs.context import FailMode
from ..jobs.given_keys import FAILURE_KEYS, LATE_KEYS
from ..worker.protocol import KILLED, LEASE_LOST, OK, Outcome, OutcomeKind
from ..store.base import RunRecord
from ..model import Event, Job, JobKey, JobType, RunResult, Status
from ..names import derived_uid
from ..schedule import Schedule, ScheduleError, ScheduleKind, parse_schedule

RELEASED = OutcomeKind.RELEASED  # the node itself gives a run back
FIRE_LEAD_MAX = 1.0  # seconds ahead of its due time a scheduler prepares a fire at most (scheduler.py)


@dataclass(frozen=True)
class RunFacts:
    """What the node knows about one run, independent of the current row."""

    me: str
    epoch: int
    due: datetime  # next_run when the job was claimed (the fire time it stands for)
    started: datetime
    # A run this node gives back: how long it leaves the job to the other nodes, counted from
    # the moment it is given back (not from the decision: stopping the run may take longer).
    hold_for: timedelta | None = None
    # The job's schedule (EXEC_INTERVAL, TZ) when the run was claimed: an UPDATEJOB during the
    # run is told from it.
    schedule: tuple[str, str] | None = None


def still_mine(row: Job | None, run: RunFacts) -> bool:
    return row is not None and not row.archived and row.worker_id == run.me and row.epoch == run.epoch


def after_run(
    row: Job | None,
    run: RunFacts,
    outcome: Outcome,
    now: datetime,
    *,
    max_tries: int,
    retry_delay: timedelta,
    zone,
) -> tuple[Event, Job] | None:
    """Post-execution (the seed's JobExecutor): the row's status decides first, then the outcome."""
    if row is None or not still_mine(row, run):
        return None
    counts = {"runs": row.runs + 1, "kills": row.kills + (outcome.kind == KILLED)}
    if outcome.kind == OK:
        counts["successes"] = row.successes + 1
    elif outcome.kind != RELEASED and row.status is Status.IN_PROCESS:
        counts["failures"] = row.failures + 1
    row_in = row

    def counted(**changes) -> Job:
        """The row after this run: its counters and ``changes`` in one copy (a final status
        with ``archived``, as advance() would set it): every run of every job makes one."""
        return row_in.replace(**counts, **changes)

    if row_in.status is Status.STOPPING:
        return Event.STOPPED, counted(status=Status.TERMINATED, end_time=now, canceled=row.canceled + 1, archived=True)
    if row_in.status is Status.RESTART:
        return Event.RESTARTED, counted(
            status=Status.WAITING, worker_id=None, epoch=row.epoch + 1, next_run=now, tries=0,
            hold_until=None, end_time=now,
        )
    if row_in.status is not Status.IN_PROCESS:
        return None
    if outcome.kind == OK:
        return _after_success(row, run, outcome, now, zone, counted)
    if outcome.kind == RELEASED:  # handed back, or never begun: the fire it stands for is still due
        # ... at its own due time: a fire prepared ahead and sent back from its train before it
        # (a slow train-mate) would otherwise run at once, then again at that time.
        return Event.RELEASE, counted(
            status=Status.WAITING, next_run=run.due or now, end_time=now,
            hold_until=now + run.hold_for if run.hold_for is not None else None,
        )
    return failed(counted(), outcome.error or outcome.kind, outcome.mode, now, max_tries=max_tries,
                  retry_delay=retry_delay, lost=outcome.kind == LEASE_LOST)


def _after_success(row: Job, run: RunFacts, outcome: Outcome, now: datetime, zone, counted) -> tuple[Event, Job]:
    """A run of a running row ended well: back to its schedule, or done (``counted``: the
    row with this run's counters and the changes given)."""
    try:
        schedule = parse_schedule(row.execution_interval, row.time_zone or zone)
    except ScheduleError:
        schedule = None
    if row.resume_at is not None and not row.finishing:  # RUNJOB's extra run: back to the schedule
        return Event.DONE_RECURRING, counted(
            status=Status.SCHEDULED, next_run=resumed_due(schedule, row.resume_at, now, row.overlap),
            resume_at=None, end_time=now, output=outcome.output, tries=0, hold_until=None,
        )
    if schedule is not None and schedule.is_recurring and not row.finishing:
        nxt, _skipped = schedule.after_run(run.due, run.started, now, row.overlap)
        if row.next_run is not None and row.next_run != run.due:
            nxt = now  # UPDATEJOB ... RESET_END_TIME=true during the run: next one at once
        return Event.DONE_RECURRING, counted(
            status=Status.SCHEDULED, next_run=nxt, end_time=now, output=outcome.output,
            tries=0, hold_until=None,
        )
    updated = run.schedule is not None and run.schedule != (row.execution_interval, row.time_zone)
    if schedule is not None and schedule.kind is ScheduleKind.ONCE_AT and updated and not row.finishing:
        at = schedule.first_due(now)
        if at > run.due:  # UPDATEJOB EXEC_INTERVAL='<a later time>' during the run: it applies now
            return Event.DONE_RECURRING, counted(status=Status.SCHEDULED, next_run=at, end_time=now,
                                                 output=outcome.output, tries=0, hold_until=None)
    # A one-time job's run, or FINISHJOB's last run of a recurring job: no fire after it.
    return Event.DONE_ONCE, counted(status=Status.PROCESSED, end_time=now, output=outcome.output,
                                    finishing=False, archived=True)


def resumed_due(schedule: Schedule | None, kept: datetime, ended: datetime, overlap: str) -> datetime:
    """When a job is next due after RUNJOB's extra run, which ended at ``ended``: the fire its
    schedule had (``kept``). One that came due while the extra run went on is by ``overlap``,
    as for a fire during a scheduled run: queued (right away) or skipped (the next one after)."""
    if kept >= ended or schedule is None or not schedule.is_recurring:
        return kept
    policy = (overlap or ("QUEUE" if schedule.interval is not None else "SKIP")).upper()
    if policy == "QUEUE":
        return kept
    return schedule.next_due_after(ended, grid_from=kept) or kept


def failed(
    row: Job, error: str, mode: FailMode, now: datetime, *, max_tries: int, retry_delay: timedelta,
    lost: bool = False,
) -> tuple[Event, Job]:
    """A failed attempt: WAITING with tries + 1 (others may take it at once, this node only
    after the retry delay), or FAILED when no tries are left or the job said no retry. The
    retry stands for the same due time (a recurring job's fixed rate stays anchored on its
    fire, and the retry's current_job().due says which fire it is). ``lost``: the run ended
    because its node lost its lease, not by an error of its own: its retry counts as one after
    a lost run, as a takeover's does."""
    tries = row.tries + 1
    if mode is FailMode.NO_RETRY or (mode is not FailMode.ALWAYS_RETRY and tries >= max_tries):
        return Event.FAIL_FINAL, failed_for_good(row, tries).replace(status=Status.FAILED, tries=tries, error_msg=error,
                                                                     end_time=now)
    return Event.FAIL_RETRY, row.replace(
        status=Status.WAITING, tries=tries, error_msg=error, end_time=now, next_run=row.next_run or now,
        hold_until=now + retry_delay,
        **({"retries_lost": row.retries_lost + 1} if lost else {"retries_error": row.retries_error + 1}),
    )


def failed_for_good(row: Job, tries: int) -> Job:
    """SMILA's two kinds of final failure, counted: after a retry (``tries`` > 1) or without."""
    if tries > 1:
        return row.replace(failed_after_retry=row.failed_after_retry + 1)
    return row.replace(failed_without_retry=row.failed_without_retry + 1)


def take_over(row: Job, me: str, now: datetime, *, max_tries: int) -> tuple[Event, Job]:
    """Take a job whose owner is dead (or this node's previous life): CAS on (owner, epoch),
    epoch + 1. A run that was going on counts as a failed try (its node crashed)."""
    previous = row.worker_id
    if row.status is Status.STOPPING:
        return Event.STOPPED, row.replace(status=Status.TERMINATED, end_time=now, worker_id=me, epoch=row.epoch + 1,
                                          runs=row.runs + 1, canceled=row.canceled + 1)
    if row.status is Status.RESTART:
        return Event.RESTARTED, row.replace(
            status=Status.WAITING, worker_id=None, epoch=row.epoch + 1, next_run=now, tries=0, hold_until=None,
            runs=row.runs + 1,
        )
    if row.status is Status.IN_PROCESS:
        tries = row.tries + 1
        note = f"node {previous} was lost while running this job"
        lost = row.replace(runs=row.runs + 1, failures=row.failures + 1)
        if tries >= max_tries:
            return Event.FAIL_FINAL, failed_for_good(lost, tries).replace(
                status=Status.FAILED, tries=tries, error_msg=note + "; no tries left", end_time=now,
                worker_id=me, epoch=row.epoch + 1,
            )
        retried = lost.replace(epoch=row.epoch + 1, tries=tries, error_msg=note, hold_until=None,
                               retries_lost=row.retries_lost + 1)
        if row.blocked:  # parents given to it while the run went on hold back its next try
            return Event.FAIL_RETRY, retried.replace(status=Status.WAITING, worker_id=None, next_run=now)
        return Event.TAKEOVER, retried.replace(worker_id=me, start_time=now)
    return Event.TAKEOVER, adopted(row, me)


def adopted(row: Job, me: str) -> Job:
    """A SCHEDULED (or WAITING) row with ``me`` its new owner: same status, epoch + 1."""
    return row.replace(worker_id=me, epoch=row.epoch + 1, hold_until=None)


def claim(row: Job, me: str, now: datetime, prepared: bool = False) -> tuple[Event, Job]:
    """Take a WAITING row to run it. A fire prepared ahead of its due time starts at the due
    time: that is its start time, and its worker waits for it. So does any row due within
    FIRE_LEAD_MAX (a prepared fire given back by a node that stopped, claimed here); one due
    later was not prepared by any scheduler (a writer whose clock runs fast) and starts now.
    ``now`` may be older than the preparation (read when a long pass began), so a fire this
    node's scheduler prepared is never bounded by it: it prepares at most FIRE_LEAD_MAX ahead.
    A SCHEDULED row is a fire its owner's scheduler offered (offers.py): taken in one write."""
    due, start = row.next_run, now
    if due is not None and now < due and (prepared or due - now <= timedelta(seconds=FIRE_LEAD_MAX)):
        start = due
    return Event.FIRE if row.status is Status.SCHEDULED else Event.CLAIM, row.replace(
        status=Status.IN_PROCESS, worker_id=me, epoch=row.epoch + 1, start_time=start, hold_until=None,
    )


def fire(row: Job) -> tuple[Event, Job]:
    """The owner's scheduler reached next_run: SCHEDULED -> WAITING (next_run stays the due time)."""
    return Event.DUE, row.replace(status=Status.WAITING)


_RESULTS = {OutcomeKind.OK: RunResult.OK, OutcomeKind.ERROR: RunResult.ERROR, OutcomeKind.KILLED: RunResult.KILLED,
            OutcomeKind.LEASE_LOST: RunResult.LOST, RELEASED: RunResult.RELEASED}


_COLLAPSED_COUNTED = 1_000  # fires a run's note counts at most (each a cron step: a job down for days costs no more)


def run_record(run: RunFacts, key, outcome: Outcome, new: Job, now: datetime, zone=None) -> RunRecord:
    """The history line of a run that ended with ``outcome`` and left the row as ``new``."""
    if new.status is Status.TERMINATED:
        result = RunResult.STOPPED
    elif new.status is Status.WAITING and new.worker_id is None and outcome.kind != RELEASED:
        result = RunResult.RESTARTED
    else:
        result = _RESULTS.get(outcome.kind, RunResult.INTERRUPTED)
    notes = []
    try:
        schedule = parse_schedule(new.execution_interval, new.time_zone or zone)
    except ScheduleError:
        schedule = None
    if schedule is not None and schedule.is_recurring:
        collapsed = schedule.collapsed(run.due, run.started, most=_COLLAPSED_COUNTED)
        if collapsed:  # (its owner was down or paused, or the node had no room: one run stands for them)
            notes.append(f"{collapsed:,}{'+' if collapsed >= _COLLAPSED_COUNTED else ''} later fire(s) came due "
                         "before this run started and ran as this one")
    if outcome.kind == OK and new.status is Status.SCHEDULED and schedule is not None:
        _, skipped = schedule.after_run(run.due, run.started, now, new.overlap, most=_COLLAPSED_COUNTED)
        if skipped:
            notes.append(f"{skipped:,}{'+' if skipped >= _COLLAPSED_COUNTED else ''} fire(s) skipped while this run "
                         "was still going (OVERLAP=SKIP)")
    note = "; ".join(notes)
    return RunRecord(
        key=key, epoch=run.epoch, node=run.me, due=run.due, start=run.started, end=now, result=result,
        status=new.status.value, tries=new.tries, error=outcome.error, output=outcome.output,
        exit_code=outcome.exit_code, log=outcome.log, note=note,
    )


def calendar_fire(row: Job, calendar: Calendar | None, now: datetime, zone) -> tuple[Job, RunRecord] | None:
    """A due fire that a rule of its job's calendar excludes (IPF's job calendar): skipped,
    the job rescheduled to its next due time, and the skip recorded with the rule. None: run it."""
    if calendar is None or row.next_run is None:
        return None
    try:
        schedule = parse_schedule(row.execution_interval, row.time_zone or zone)
    except ScheduleError:
        return None
    rule = calendar.excluding(row.next_run.astimezone(schedule.zone))
    if rule is None or not schedule.is_recurring:
        return None
    nxt = schedule.next_due_after(max(now, row.next_run), grid_from=row.next_run)
    record = RunRecord(
        key=row.key, epoch=row.epoch, node=row.worker_id or "", due=row.next_run, start=None,
        end=max(now, row.next_run),  # (a fire is taken a little ahead of its due time)
        result=RunResult.SKIPPED, status=Status.SCHEDULED.value, tries=row.tries,
        note=f"fire due at {row.next_run.isoformat(timespec='milliseconds')} skipped: calendar '{calendar.name}' "
             f"excludes it ({rule.text})",
    )
    return row.replace(next_run=nxt), record


def late_fire(row: Job, now: datetime, zone) -> tuple[Job, RunRecord] | None:
    """A due fire later than its LATE_THRESHOLD (IPF's lateExecutionThreshold): skipped, the
    job rescheduled to its next due time after now, and the skip recorded. None: run it."""
    if not row.late_threshold or row.next_run is None or row.late_action == "RUN":
        return None
    try:
        threshold = parse_schedule(row.late_threshold, "UTC").interval
        schedule = parse_schedule(row.execution_interval, row.time_zone or zone)
    except ScheduleError:
        return None
    late = now - row.next_run
    if threshold is None or late <= threshold or not schedule.is_recurring:
        return None
    nxt = schedule.next_due_after(now, grid_from=row.next_run)
    record = RunRecord(
        key=row.key, epoch=row.epoch, node=row.worker_id or "", due=row.next_run, start=None, end=now,
        result=RunResult.SKIPPED, status=Status.SCHEDULED.value, tries=row.tries,
        note=f"fire due at {row.next_run.isoformat(timespec='milliseconds')} skipped: {f'{late.total_seconds():.3f}'.rstrip('0').rstrip('.')} s late "
             f"(LATE_THRESHOLD {row.late_threshold})" + (f"; started {row.late_action}" if "." in row.late_action else ""),
    )
    return row.replace(next_run=nxt), record


def late_handler(row: Job, now: datetime) -> Job | None:
    """The late-handler job LATE_ACTION='TYPE.NAME' names, for the fire of ``row`` due at its
    next_run that came too late (IPF's lateExecute): a one-time job to run now, with the late
    job's key, due time and lateness in its ARGS. Its UID is the late job's key and the fire's,
    so a fire starts one handler however often the owner tries, and two jobs of one UID one
    each. None: no handler."""
    if "." not in row.late_action or row.next_run is None:
        return None
    job_type, _, name = row.late_action.partition(".")
    due = row.next_run.astimezone(timezone.utc)
    args = _handler_args(job_type, LATE_KEYS, (str(row.key), row.type, row.name, row.uid,
                                               due.isoformat(timespec="milliseconds"), round((now - due).total_seconds(), 3)))
    return Job(key=JobKey(job_type, name, derived_uid(str(row.key), f".late.{due:%Y%m%dT%H%M%S.%f}"[:-3])), status=Status.WAITING,
               creation_time=now, arguments=json.dumps(args), next_run=now, affinity=row.affinity,
               owner=row.owner, requestor=row.requestor)


def _handler_args(job_type: str, keys: tuple[str, ...], values: tuple) -> dict:
    """A handler's ARGS: by name for a USER_JOB (its parameters); for a PROCESS job the same
    values in the same order as its arguments (ARGS "0", "1", ...: argv 1, 2, ...)."""
    if job_type.upper() == JobType.PROCESS:
        return {str(i): str(v) for i, v in enumerate(values)}
    return dict(zip(keys, values))


def failure_job(row: Job, now: datetime, run: int | None = None) -> Job | None:
    """The job ON_FAILURE='TYPE.NAME' names, for ``row`` just FAILED (IPF's failure command): a
    one-time job to run now with the failed job's key, run and error in its ARGS. The run is
    the row's epoch, or ``run`` where the row moved past it (a takeover of a lost run writes
    epoch + 1; the history numbers the lost run). Its UID is the failed job's key and the run's,
    so a failure starts one, and failures of two jobs of one UID one each. None: nothing to
    start."""
    if row.status is not Status.FAILED or "." not in row.on_failure:
        return None
    run = row.epoch if run is None else run
    job_type, _, name = row.on_failure.partition(".")
    args = _handler_args(job_type, FAILURE_KEYS, (str(row.key), row.type, row.name, row.uid, run, row.error_msg))
    return Job(key=JobKey(job_type, name, derived_uid(str(row.key), f".failed.{run}")), status=Status.WAITING, creation_time=now,
               arguments=json.dumps(args), next_run=now, affinity=row.affinity,
               owner=row.owner, requestor=row.requestor)


def lost_run_record(row: Job, new: Job, now: datetime, last_seen: datetime | None = None) -> RunRecord | None:
    """The history line of a run whose node was lost (written by the node that takes over).
    It ended, as far as anyone knows, when its node was last seen (``last_seen``: the time of
    the node's last heartbeat), not when the takeover came, a dead threshold later."""
    if row.status not in (Status.IN_PROCESS, Status.STOPPING, Status.RESTART):
        return None
    end = now
    if last_seen is not None:
        end = min(now, max(last_seen, row.start_time or last_seen))
    return RunRecord(
        key=row.key, epoch=row.epoch, node=row.worker_id or "", due=row.next_run, start=row.start_time, end=end,
        result=RunResult.LOST, status=new.status.value, tries=new.tries,
        error=f"node {row.worker_id} was lost while running this job",
    )
