"""What each command means, carried out on a store (SPEC section 6).

The only place command semantics live: the shell, scripts and application code all reach
them through :class:`fabricjobs.client.Client`. Every change of a job row is a
compare-and-set through the store, checked against the transition table by
:func:`fabricjobs.model.advance`; a CAS that loses re-reads the row and decides again.

PS and KILL are routed to the node layer through the store: nodes publish their tasks in
their ``nodes`` row, and a KILL is a request row that the target node carries out.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Iterable, Iterator, Sequence

from . import __version__
from .affinity import parse_affinity
from .clock import Clock
from .cluster import NodeView, candidates, read_cluster
from . import names
from .commands import statements
from .commands.table import STATEMENTS
from .config import Config
from .errors import (
    CommandError, JobAlreadyRunning, JobNotFound, NodeNotFound, ScheduleError, StoreError, TaskNotFound,
    ValidationError, WaitTimeout,
)
from .jobs.registry import JobCatalog
from . import dependencies
from .model import DEFAULT_PRIORITY, RUNNING_STATUSES, Event, Job, JobKey, JobType, Status, advance
from .result import Result
from .schedule import Schedule, parse_schedule
from .store.base import CasResult, JobStore, KillRequest
from .wakeup import Doorbell

log = logging.getLogger("fabricjobs.service")

START_COLUMNS = ("Type", "Name", "UID", "Status", "Notes")
CHANGE_COLUMNS = ("Type", "Name", "UID", "Status", "Notes")
STATUS_COLUMNS = (
    "Type", "Name", "UID", "Status", "Creation Time", "Start Time", "End Time", "Affinity",
    "Is Archived", "Next Run", "Ownership Candidates Num", "Notes", "Node", "Tries", "Priority",
)
DETAIL_COLUMNS = STATUS_COLUMNS + ("Output", "Arguments")
COUNTER_COLUMNS = ("Runs", "Successes", "Failures", "Retries After Error", "Retries After Node Loss", "Kills")
FULL_COLUMNS = DETAIL_COLUMNS + ("Execution Interval", "Time Zone", "Late Threshold", "Overlap", "Depends On",
                                  "Blocked", "Epoch") + COUNTER_COLUMNS
HISTORY_COLUMNS = ("Run", "UID", "Node", "Result", "Status", "Due", "Start", "End", "Duration (ms)", "Tries",
                   "Error", "Exit Code", "Output", "Note")
HISTORY_LIMIT = 50
PS_COLUMNS = ("dc", "node", "task", "thread", "type", "description", "duration (ms)")
NODES_COLUMNS = ("node", "dc", "host", "pid", "state", "last beat (s)", "running", "capacity", "version", "started")
NEXT_RUN_TEXT = {Status.IN_PROCESS: "Already running", Status.WAITING: "Ready to be executed"}
_CAS_ATTEMPTS = 50
# STARTJOBs per store transaction in a script (the nodes are rung after each). The write lock
# is held for the inserts alone (~60 us each on a slow host): ~15 ms, against which every
# lock taken less often counts when busy nodes contend for it (4 nodes: submit 1,150 -> 2,300/s).
_GROUP = 256


def _groupable(command: statements.Command) -> bool:
    """A STARTJOB whose checks read nothing its script may have written just before it."""
    return isinstance(command, statements.StartJob) and not command.depends_on


@dataclass
class Session:
    """Per-connection state: SET variables (in order of first SET) and the session's LOG_ID."""

    scope: dict[str, str] = field(default_factory=dict)
    log_id: str = field(default_factory=lambda: f"{random.randrange(10**15, 10**16)}")
    node: str | None = None  # PS without ALL shows this node (None: decided per PS)

    def set(self, key: str, value: str) -> None:
        # The seed's rule: simple keys upper-cased, qualified keys (k2_ws.ALPINIST) as written.
        self.scope[key if "." in key else key.upper()] = value

    def session_scope(self) -> dict:
        scope = {"EXECUTION_ID": str(uuid.uuid4())}
        scope.update(self.scope)
        scope["LOG_ID"] = self.log_id
        return {"scope": scope}


def with_session_scope(args_text: str | None, scope: dict) -> str:
    """Add ``"session_scope"`` to the caller's ARGS without re-serialising them, so the
    caller's text (formatting, number spelling, key order) is stored exactly as given."""
    text = (args_text or "").strip() or "{}"
    obj = json.loads(text)
    if "session_scope" in obj:
        return text
    extra = json.dumps({"session_scope": scope}, ensure_ascii=False, separators=(",", ":"))[1:-1]
    body = text[:-1].rstrip()
    return (body + ("," if obj else "") + extra + "}")


class CommandService:
    def __init__(
        self,
        store: JobStore,
        config: Config,
        clock: Clock,
        *,
        catalog: JobCatalog | None = None,
        doorbell: Doorbell | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.catalog = catalog or JobCatalog.from_config(config)
        self.doorbell = doorbell or Doorbell.for_store(store)
        self.zone = config.get("node", "TIME_ZONE") or None
        self._batch_depth = 0
        self._rang = False
        self._handlers: dict[type, Callable] = {s.command: getattr(self, s.handler) for s in STATEMENTS}

    def execute(self, command: statements.Command, session: Session) -> Result:
        names.check_command(command)  # parsed commands passed this already; built ones may not have
        return self._handlers[type(command)](command, session)

    def run_script(self, commands: Sequence[statements.Command], session: Session) -> list[Result]:
        """Run commands in order; the first error stops the script (what ran before it stays).

        Consecutive STARTJOBs share one store transaction (at most ``_GROUP`` at a time, so the
        write lock is held briefly): a bulk submit costs one commit per group, not one per job.
        A STARTJOB with DEPENDS_ON runs on its own: its checks read the jobs written before it.
        Their results are returned only after that commit."""
        results: list[Result] = []
        with self.batch():
            i = 0
            while i < len(commands):
                j = i
                while j < len(commands) and j - i < _GROUP and _groupable(commands[j]):
                    j += 1
                if j == i:
                    results.append(self.execute(commands[i], session))
                    i += 1
                    continue
                # Checks and rows first, outside the transaction: the store's write lock (which
                # every node's claims and heartbeats wait for) is held for the inserts alone.
                rows: list[Job] = []
                error: CommandError | None = None
                for command in commands[i:j]:
                    assert isinstance(command, statements.StartJob)  # what _groupable lets in
                    try:
                        rows.append(self._new_job(command, session))
                    except CommandError as exc:  # the ones before it are kept, as one by one
                        error = exc
                        break
                # Created (and, run at once or on an interval, first due) when written: the
                # group's checks took time that is not its jobs' lateness.
                now = self.clock.now()
                rows = [_created_at(row, now) for row in rows]
                with self.store.transaction():
                    for row, res in zip(rows, self.store.insert_many(rows)):
                        try:
                            results.append(self._started(row, res))
                        except CommandError as exc:  # comes before any error of a later check
                            error = exc
                            break
                self._ring_now()  # nodes start on this group while the next one is written
                if error is not None:
                    raise error
                i = j
        return results

    # -- helpers -------------------------------------------------------------------------------

    def _schedule(self, text: str | None, tz: str | None = None) -> Schedule:
        """The job's schedule in its own zone (TZ), else the configured one."""
        try:
            return parse_schedule(text or "", tz or self.zone)
        except ScheduleError as exc:
            raise ValidationError(str(exc)) from None

    def _check_affinity(self, text: str | None) -> None:
        try:
            parse_affinity(text)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    def _ring(self) -> None:
        """Wake the nodes on this host: something for them to do may have appeared. Inside
        :meth:`batch` the ring waits for the end of the batch (one ring per script)."""
        if self._batch_depth:
            self._rang = True
        else:
            self._ring_nodes()

    def _ring_now(self) -> None:
        """Ring for what a batch committed so far, if anything in it asked for a ring."""
        if self._rang:
            self._rang = False
            self._ring_nodes()

    def _ring_nodes(self) -> None:
        """Only a hint that saves the nodes a poll period: it comes after the command's writes
        were committed, so a store that fails here (a read timeout) must not turn a command
        that took effect into an error (a client would retry an accepted STARTJOB and be told
        "Job is running"). The nodes find the work at their next pass."""
        if not self.doorbell.enabled:
            return
        try:
            names = [n.name for n in self.store.nodes()]
        except StoreError as exc:
            log.warning("could not wake the local nodes (%s); they see the change at their next pass", exc)
            return
        self.doorbell.ring(names)

    @contextmanager
    def batch(self) -> Iterator[None]:
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
            if not self._batch_depth:
                self._ring_now()

    def _change(self, key: JobKey, decide: Callable[[Job], tuple[Event, Job] | None]) -> Job | None:
        """Read-decide-CAS until the CAS applies or ``decide`` says there is nothing to do.

        Returns the row as it stands afterwards (None if the row vanished).
        """
        row = self.store.get(key)
        for _ in range(_CAS_ATTEMPTS):
            if row is None:
                return None
            decision = decide(row)
            if decision is None:
                return row
            event, new = decision
            res = self.store.cas(row, advance(row, event, new))
            if res.applied:
                return res.row
            row = self.store.get(key)
        raise CommandError(f"job {key} kept changing under this command; try again")

    def _matching(self, type: str, name: str, uid: str | None) -> list[Job]:
        jobs = self.store.live_jobs(type=type, name=name, uid=uid)
        if not jobs:
            what = f"[type: {type}, name: {name}" + (f", uid: {uid}]" if uid is not None else "]")
            raise JobNotFound(f"No active job {what}")
        return jobs

    @staticmethod
    def _change_row(job: Job, note: str = "") -> tuple:
        return (job.type, job.name, job.uid, job.status.value, note or job.error_msg)

    # -- STARTJOB ------------------------------------------------------------------------------

    def start_job(self, cmd: statements.StartJob, session: Session) -> Result:
        return self._insert_new(self._new_job(cmd, session))

    def _new_job(self, cmd: statements.StartJob, session: Session) -> Job:
        """STARTJOB's checks and its row; the store is read only for DEPENDS_ON."""
        self.catalog.check(cmd.type, cmd.name)
        if cmd.type == JobType.INTERFACE_LISTENER:
            self.catalog.check_listener(cmd.args)
        elif cmd.type == JobType.PROCESS:
            self.catalog.check_process_arguments(cmd.args)
        self._check_affinity(cmd.affinity)
        schedule = self._schedule(cmd.exec_interval, cmd.tz)
        now = self.clock.now()
        key = JobKey(cmd.type, cmd.name, cmd.uid if cmd.uid is not None else str(uuid.uuid4()))
        parents = dependencies.parent_keys(cmd.depends_on or ())
        dependencies.check_new(self.store, key, parents)
        blockers = dependencies.blocking(self.store, parents)
        job = Job(
            key=key,
            status=schedule.initial_status,
            creation_time=now,
            affinity=cmd.affinity or "",
            arguments=with_session_scope(cmd.args, session.session_scope()),
            execution_interval=cmd.exec_interval or "",
            next_run=schedule.first_due(now),
            priority=cmd.priority if cmd.priority is not None else DEFAULT_PRIORITY,
            depends_on=",".join(str(p) for p in parents),
            blocked=bool(blockers),
            error_msg=dependencies.note(blockers),
            time_zone=cmd.tz or "",
            late_threshold=cmd.late_threshold or "",
            overlap=cmd.overlap or "",
        )
        return advance(None, Event.START if job.status is Status.WAITING else Event.START_SCHEDULED, job)

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
            if row.status in (Status.WAITING, Status.SCHEDULED):
                return Event.STOP_IDLE, row.replace(status=Status.TERMINATED, end_time=now)
            return Event.STOP, row.replace(status=Status.STOPPING)

        changed = [self._change(j.key, decide) for j in self._matching(cmd.type, cmd.name, cmd.uid)]
        self._ring()
        rows = [r for r in changed if r is not None]
        if cmd.wait:
            # The seed's StopJob actor: return once every stopped job is final.
            deadline = None if cmd.timeout is None else time.monotonic() + cmd.timeout
            rows = [self._await(r.key, lambda j: j.archived, deadline, "STOPJOB WAIT") for r in rows]
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r) for r in rows))

    def _await(self, key: JobKey, done: Callable[[Job], bool], deadline: float | None, what: str) -> Job:
        """Poll the row until ``done``; WaitTimeout at the deadline (real time, whatever the
        service's clock: waiting is really waiting)."""
        pause = 0.02
        while True:
            row = self.store.get(key)
            if row is None:
                raise JobNotFound(f"No such job {key.describe()}")
            if done(row):
                return row
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{what} timed out: {key} is {row.status.value}")
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 1.5, 0.5)

    def restart_job(self, cmd: statements.RestartJob, session: Session) -> Result:
        now = self.clock.now()

        def decide(row: Job):
            if row.archived or row.status is Status.RESTART:
                return None
            if row.status in (Status.WAITING, Status.SCHEDULED):
                return Event.RESTART_IDLE, row.replace(
                    status=Status.WAITING, next_run=now, worker_id=None, epoch=row.epoch + 1,
                    tries=0, hold_until=None,
                )
            return Event.RESTART, row.replace(status=Status.RESTART)

        rows = [self._change(j.key, decide) for j in self._matching(cmd.type, cmd.name, cmd.uid)]
        self._ring()
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r) for r in rows if r is not None))

    def resume_job(self, cmd: statements.ResumeJob, session: Session) -> Result:
        key = JobKey(cmd.type, cmd.name, cmd.uid)
        now = self.clock.now()

        def decide(row: Job):
            if not row.archived:
                raise JobAlreadyRunning(f"Job is running {key.describe()}")
            schedule = self._schedule(row.execution_interval, row.time_zone)
            status = schedule.initial_status
            event = Event.RESUME if status is Status.WAITING else Event.RESUME_SCHEDULED
            return event, row.replace(
                status=status, archived=False, creation_time=now, next_run=schedule.first_due(now),
                tries=0, hold_until=None, worker_id=None, epoch=row.epoch + 1,
            )

        row = self._change(key, decide)
        if row is None:
            raise JobNotFound(f"No such job {key.describe()}")
        self._ring()
        return Result(CHANGE_COLUMNS, (self._change_row(row),))

    # -- UPDATEJOB -----------------------------------------------------------------------------

    def update_job(self, cmd: statements.UpdateJob, session: Session) -> Result:
        self._check_affinity(cmd.affinity)
        if cmd.exec_interval is not None:
            self._schedule(cmd.exec_interval, cmd.tz)
        if cmd.args is not None:
            json.loads(cmd.args)  # the parser validated it; a client may hand us anything
        now = self.clock.now()
        notes: dict[JobKey, str] = {}
        parents = dependencies.parent_keys(cmd.depends_on) if cmd.depends_on is not None else None

        def decide(row: Job):
            new = row
            if cmd.affinity is not None:
                new = new.replace(affinity=cmd.affinity)
            if cmd.args is not None:
                new = new.replace(arguments=_keep_session_scope(cmd.args, row.arguments))
            if cmd.exec_interval is not None:
                new = new.replace(execution_interval=cmd.exec_interval)
            for name in ("priority", "late_threshold", "overlap"):
                if getattr(cmd, name) is not None:
                    new = new.replace(**{name: getattr(cmd, name)})
            if cmd.tz is not None:
                new = new.replace(time_zone=cmd.tz)
            if parents is not None:
                dependencies.check_new(self.store, row.key, parents)
                blockers = dependencies.blocking(self.store, parents)
                idle = row.status in (Status.WAITING, Status.SCHEDULED)
                new = new.replace(depends_on=",".join(str(p) for p in parents), blocked=bool(blockers) and idle,
                                  error_msg=dependencies.note(blockers) if idle else row.error_msg)
            rescheduled = cmd.exec_interval is not None or cmd.tz is not None
            schedule = self._schedule(new.execution_interval, new.time_zone)
            reset = bool(cmd.reset_end_time)
            if row.status in (Status.WAITING, Status.SCHEDULED) and (rescheduled or reset):
                due = now if reset else _next_due_for_update(schedule, row, now)
                status = Status.WAITING if due <= now else Status.SCHEDULED
                # A new due time is picked up by whichever node re-owns the job: unowning it
                # (epoch + 1) also fences the old owner's scheduler entry.
                new = new.replace(status=status, next_run=due, worker_id=None, epoch=row.epoch + 1)
                return Event.RESCHEDULE, new
            if row.status not in (Status.WAITING, Status.SCHEDULED) and reset and schedule.is_recurring:
                # Running: the executor sees next_run moved and makes the next run due at once.
                new = new.replace(next_run=now)
                notes[row.key] = "running; the next run starts when this one ends"
            if new == row:
                return None
            return Event.UPDATE, new

        rows = [self._change(j.key, decide) for j in self._matching(cmd.type, cmd.name, cmd.uid)]
        self._ring()
        return Result(CHANGE_COLUMNS, tuple(self._change_row(r, notes.get(r.key, "")) for r in rows if r is not None))

    # -- JOBSTATUS -----------------------------------------------------------------------------

    def job_status(self, cmd: statements.JobStatus, session: Session) -> Result:
        nodes = read_cluster(self.store)
        if cmd.uid is not None:
            assert cmd.type is not None and cmd.name is not None  # the grammar gives a UID only with both
            job = self.store.get(JobKey(cmd.type, cmd.name, cmd.uid))
            jobs = [job] if job is not None else []
        else:
            jobs = self.store.live_jobs(type=cmd.type, name=cmd.name)
            if cmd.days_ago is not None:
                since = self.clock.now() - timedelta(days=cmd.days_ago)
                jobs = sorted(jobs + self.store.archived_since(since, type=cmd.type), key=lambda j: j.key)
        if cmd.details:  # a record per block, with the job's counters (SMILA's job run statistics)
            return Result(FULL_COLUMNS, tuple(self._status_row(j, nodes, detail=True, full=True) for j in jobs), vertical=True)
        if cmd.uid is not None:
            return Result(DETAIL_COLUMNS, tuple(self._status_row(j, nodes, detail=True) for j in jobs))
        return Result(STATUS_COLUMNS, tuple(self._status_row(j, nodes) for j in jobs))

    def _status_row(self, job: Job, nodes: list[NodeView], detail: bool = False, full: bool = False) -> tuple:
        next_run: datetime | str | None
        if job.status is Status.SCHEDULED:
            next_run = job.next_run
        else:
            next_run = NEXT_RUN_TEXT.get(job.status, "")
        try:
            cands = candidates(nodes, parse_affinity(job.affinity))
        except ValueError:
            cands = 0
        if job.blocked and job.status is Status.WAITING:
            next_run = "Blocked by its parents"
        row: tuple = (
            job.type, job.name, job.uid, job.status.value, job.creation_time, job.start_time,
            job.end_time, job.affinity or "ANY", job.archived, next_run, cands, job.error_msg,
            job.worker_id or "", job.tries, job.priority,
        )
        if detail:
            row += (job.output or "", job.arguments)
        if full:
            row += (job.execution_interval, job.time_zone or str(self.zone or "(node's)"), job.late_threshold,
                    job.overlap or "(by schedule)", job.depends_on.replace(",", ", "), job.blocked, job.epoch,
                    job.runs, job.successes, job.failures, job.retries_error, job.retries_lost, job.kills)
        return row

    # -- JOBHISTORY / JOBLOG / WAITJOB -----------------------------------------------------------

    def job_history(self, cmd: statements.JobHistory, session: Session) -> Result:
        runs = self.store.runs(cmd.type, cmd.name, cmd.uid, limit=cmd.limit or HISTORY_LIMIT)
        rows = []
        for r in runs:
            took = int((r.end - r.start).total_seconds() * 1000) if r.start and r.end else None
            rows.append((r.epoch, r.key.uid, r.node, r.result, r.status, r.due, r.start, r.end, took, r.tries,
                         r.error, r.exit_code, r.output or "", r.note))
        notices = () if cmd.limit or len(runs) < HISTORY_LIMIT else (f"(the last {HISTORY_LIMIT}; LIMIT n shows more)",)
        return Result(HISTORY_COLUMNS, tuple(rows), notices=notices)

    def job_log(self, cmd: statements.JobLog, session: Session) -> Result:
        runs = self.store.runs(cmd.type, cmd.name, cmd.uid)
        if cmd.run is not None:
            runs = [r for r in runs if r.epoch == cmd.run]
            if len({r.key.uid for r in runs}) > 1:
                raise CommandError(f"run {cmd.run} exists for several jobs named {cmd.name!r}; add WITH UID='<uid>'")
        if not runs:
            which = f" run {cmd.run}" if cmd.run is not None else ""
            raise JobNotFound(f"No recorded{which} run of [type: {cmd.type}, name: {cmd.name}"
                              + (f", uid: {cmd.uid}]" if cmd.uid is not None else "]"))
        r = runs[0]
        head = f"run {r.epoch} of {r.key} on {r.node}: {r.result} -> {r.status}" + (f" ({r.error})" if r.error else "")
        return Result(status=head + "\n" + (r.log or "(no log lines)"))

    def wait_job(self, cmd: statements.WaitJob, session: Session) -> Result:
        """The seed's JobWait actor: until the job is final; a recurring job until the run
        going on (or, if none is, the next one) ends."""
        key = JobKey(cmd.type, cmd.name, cmd.uid)
        start = self.store.get(key)
        if start is None:
            raise JobNotFound(f"No such job {key.describe()}")
        began = time.monotonic()
        deadline = None if cmd.timeout is None else began + cmd.timeout
        recurring = self._schedule(start.execution_interval, start.time_zone).is_recurring if not start.archived else False

        def done(row: Job) -> bool:
            if row.archived:
                return True
            return recurring and row.end_time != start.end_time and row.status not in RUNNING_STATUSES

        row = self._await(key, done, deadline, "WAITJOB")
        nodes = read_cluster(self.store)
        return Result(DETAIL_COLUMNS, (self._status_row(row, nodes, detail=True),),
                      notices=(f"waited {time.monotonic() - began:.1f} s",))

    # -- PS / KILL -----------------------------------------------------------------------------

    def ps(self, cmd: statements.Ps, session: Session) -> Result:
        nodes = [n for n in read_cluster(self.store) if n.is_live]
        if not cmd.all:
            current = session.node or _only_local_node(nodes)
            if current is not None:
                nodes = [n for n in nodes if n.name == current]
                if not nodes:
                    raise NodeNotFound(f"node {current!r} is not alive")
        rows = []
        for n in nodes:
            for t in n.tasks():
                elapsed = int(t.get("elapsed_ms", 0)) + int(n.age * 1000)
                rows.append((n.row.dc, n.name, t.get("task"), t.get("thread"), t.get("type", "JOB"),
                             t.get("description", ""), elapsed))
        rows.sort(key=lambda r: (r[1], r[2]))
        return Result(PS_COLUMNS, tuple(rows))

    def kill(self, cmd: statements.Kill, session: Session) -> Result:
        nodes = {n.name: n for n in read_cluster(self.store)}
        node = nodes.get(cmd.node)
        if node is None or not node.is_live:
            known = ", ".join(n for n, v in nodes.items() if v.is_live) or "none"
            raise NodeNotFound(f"no live node {cmd.node!r} (live nodes: {known})")
        task = next((t for t in node.tasks() if t.get("task") == cmd.task), None)
        if task is None:
            raise TaskNotFound(f"node {cmd.node!r} has no task {cmd.task} (see PS)")
        self.store.add_kill_request(KillRequest(cmd.node, cmd.task, self.clock.now(), _requester()))
        self._ring()
        return Result(status=f"KILL sent to node {cmd.node} for task {cmd.task} ({task.get('description', '')})")

    # -- NODES -----------------------------------------------------------------------------------

    def nodes(self, cmd: statements.Nodes, session: Session) -> Result:
        if cmd.details:
            return self._node_details()
        rows = []
        for n in read_cluster(self.store):
            running = n.info.get("running") or {}
            parts = []
            for name, lim in sorted(n.affinity.limits.items()):
                cap = f"{lim.recommended}" if lim.recommended == lim.absolute else f"{lim.recommended} (max {lim.absolute})"
                parts.append(f"{name} {running.get(name, 0)}/{cap}")
            rows.append((
                n.name, n.row.dc, n.row.host, n.row.pid, n.state, round(n.age, 1), n.row.running,
                ", ".join(parts), n.row.version, n.row.started,
            ))
        return Result(NODES_COLUMNS, tuple(rows))

    def _node_details(self) -> Result:
        columns = NODES_COLUMNS + ("incarnation", "beat", "heartbeat", "time zone", "tasks")
        rows = []
        base = self.nodes(statements.Nodes(), Session())
        for n, row in zip(read_cluster(self.store), base.rows):
            hb = f"{n.info.get('heartbeat_ms', '?')} ms x {n.info.get('miss', '?')}"
            tasks = "; ".join(f"{t.get('task')} {t.get('description', '')}" for t in n.tasks())
            rows.append(row + (n.row.incarnation, n.row.beat, hb, n.info.get("zone", ""), tasks or "-"))
        return Result(columns, tuple(rows), vertical=True)

    # -- SET -----------------------------------------------------------------------------------

    def set(self, cmd: statements.Set, session: Session) -> Result:
        session.set(cmd.key, cmd.value)
        return Result(status="SET")


def _keep_session_scope(new_args: str, old_args: str) -> str:
    """UPDATEJOB ARGS replace the caller's arguments; the job keeps its session scope."""
    try:
        old = json.loads(old_args)
    except json.JSONDecodeError:
        return new_args
    scope = old.get("session_scope") if isinstance(old, dict) else None
    return with_session_scope(new_args, scope) if scope is not None else new_args


def _next_due_for_update(schedule: Schedule, row: Job, now: datetime) -> datetime:
    """When a job whose schedule changed is next due (RESET_END_TIME=false keeps the rhythm)."""
    if schedule.interval is not None:
        base = row.start_time or row.creation_time
        return max(now, base + schedule.interval)
    if schedule.is_recurring:
        return schedule.next_fire_after(now)
    return schedule.first_due(now)


def _only_local_node(nodes: Iterable[NodeView]) -> str | None:
    import socket

    host = socket.gethostname()
    local = [n.name for n in nodes if n.row.host == host]
    return local[0] if len(local) == 1 else None


def _requester() -> str:
    import getpass
    import os
    import socket

    try:
        user = getpass.getuser()
    except Exception:
        user = "?"
    return f"{user}@{socket.gethostname()}:{os.getpid()} (fabricjobs {__version__})"


def _created_at(row: Job, now: datetime) -> Job:
    """``row`` as created at ``now`` instead of when it was built (a job due at creation, one
    run at once or on an interval, is due then too)."""
    if row.next_run == row.creation_time:
        return row.replace(creation_time=now, next_run=now)
    return row.replace(creation_time=now)
