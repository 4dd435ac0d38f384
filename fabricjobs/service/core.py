"""The service's shared machinery: its collaborators, command dispatch, and what every
command family uses (the read-decide-CAS loop, waiting for a row, waking the nodes).

Every change of a job row is a compare-and-set through the store, checked against the
transition table by :func:`fabricjobs.model.advance`; a CAS that loses re-reads the row and
decides again. The command families (jobs.py, views.py, cluster.py) build on this class.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..affinity import parse_affinity
from ..clock import Clock
from ..commands import statements, values
from ..commands.table import STATEMENTS
from ..config import Config
from ..errors import CommandError, JobEnded, JobNotFound, PriorityAboveCeiling, ScheduleError, StoreError, ValidationError, WaitTimeout
from ..jobs.registry import JobCatalog
from ..model import DEFAULT_PRIORITY, Event, Job, JobKey, advance
from ..result import Result
from ..schedule import Schedule, parse_schedule
from ..store.base import JobStore
from ..wakeup import Doorbell
from .session import Session, owner_of, requester

log = logging.getLogger("fabricjobs.service")

_CAS_ATTEMPTS = 50


class ServiceCore:
    """What every command family stands on: the store, config, clock, catalog and doorbell."""

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
        self.check_size(command)
        command = values.checked(command)  # parsed commands passed this already; built ones may not have
        return self._handlers[type(command)](command, session)

    def check_size(self, command: statements.Command) -> None:
        """Refuse ARGS longer than [jobs] MAX_ARGS_BYTES, before anything reads them."""
        args = getattr(command, "args", None)
        if isinstance(args, str):
            limit = self.config.get("jobs", "MAX_ARGS_BYTES")
            size = len(args) if len(args) * 4 <= limit else len(args.encode("utf-8", "surrogatepass"))
            if size > limit:
                raise ValidationError(f"ARGS is {size:,} bytes long; at most {limit:,} are allowed "
                                      "([jobs] MAX_ARGS_BYTES): pass big data in a file and its name in ARGS")

    def _schedule(self, text: str | None, tz: str | None = None) -> Schedule:
        """The job's schedule in its own zone (TZ), else the configured one."""
        try:
            return parse_schedule(text or "", tz or self.zone)
        except ScheduleError as exc:
            raise ValidationError(str(exc)) from None

    def _priority(self, given: int | None, session: Session) -> int:
        """The PRIORITY a job of this session's user gets (DolphinDB's setMaxJobPriority): one
        above the user's ceiling is refused, nothing written; none given is min(4, ceiling)."""
        user = owner_of(session)
        ceiling = self.config.get("jobs", "MAX_JOB_PRIORITY_BY_USER").get(user, self.config.get("jobs", "MAX_JOB_PRIORITY"))
        if given is None:
            return min(DEFAULT_PRIORITY, ceiling)
        if given > ceiling:
            raise PriorityAboveCeiling(f"PRIORITY {given} refused: {user!r} may give at most {ceiling} "
                                       "([jobs] MAX_JOB_PRIORITY / MAX_JOB_PRIORITY_BY_USER)")
        return given

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
        if not self.doorbell.enabled or self.doorbell.ring_listening():
            return
        try:  # the host's sockets cannot be listed: ring every node by name
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

        Returns the row as this command left it (None if the row vanished).
        """
        row = self.store.get(key)
        for _ in range(_CAS_ATTEMPTS):
            if row is None:
                return None
            decision = decide(row)
            if decision is None:
                return row
            event, new = decision
            # (``row`` was read whole: the answer is the row this change left, not what a
            # node that acted on it at once has made of it since.)
            res = self.store.cas(row, advance(row, event, new), whole=True)
            if res.applied:
                return res.row
            row = self.store.get(key)
        raise CommandError(f"job {key} kept changing under this command; try again")

    def _matching(self, type: str, name: str | None, uid: str | None) -> list[Job]:
        """The live jobs a command names; none is an error, which says whether the one job
        named by its UID has ended (JobEnded) or never was (JobNotFound)."""
        jobs = self.store.live_jobs(type=type, name=name, uid=uid)
        if not jobs:
            what = f"[type: {type}, name: {name}" + (f", uid: {uid}]" if uid is not None else "]")
            ended = self.store.get(JobKey(type, name, uid)) if uid is not None and name is not None else None
            if ended is not None and ended.archived:
                raise JobEnded(f"Job has ended {what} ({ended.status.value}): RESUMEJOB runs it again")
            raise JobNotFound(f"No active job {what}")
        return jobs

    @staticmethod
    def _noted(row: Job, verb: str, session: Session) -> Job:
        """``row`` with who asked in its Notes, when the session names its actor (the HTTP
        API's token), as a KILL's request names its sender: a change leaves its author."""
        if session.actor is None or row.waits_for_parents:
            return row  # a blocked job's Notes say what it waits for
        return row.replace(error_msg=f"{verb} by {requester(session)}")

    @staticmethod
    def _change_row(job: Job, note: str = "") -> tuple:
        return (job.type, job.name, job.uid, job.status.value, note or job.error_msg)


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

