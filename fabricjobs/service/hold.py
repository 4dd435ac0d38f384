"""RJM's unreleased jobs: STARTJOB ... HOLD=true, UPDATEJOB ... HOLD=true and RELEASEJOB.

A HELD job (model.Status.HELD) is never fired or claimed: it has no owner and no due time, so
no node's scheduler or claim query sees it, whatever its schedule or parents. RELEASEJOB makes
it as if started now (WAITING, blocked while a parent is not PROCESSED, or SCHEDULED by its
schedule) and releases, the same way, every held job below it in the DEPENDS_ON graph: a whole
graph is built held, leaves first or roots first, parents added to held children by UPDATEJOB
... DEPENDS_ON (RJM's "dummy parent"), and releasing the root starts it all.
"""

from __future__ import annotations

from collections import defaultdict, deque

from .. import dependencies
from ..commands import statements
from ..errors import CommandError, JobAlreadyRunning
from ..model import RUNNING_STATUSES, Event, Job, JobKey, Status
from ..result import Result
from .core import ServiceCore
from .session import Session

HELD_COLUMNS = ("Type", "Name", "UID", "Status", "Notes")
HOLD_RUNNING_NOTE = "a run is going on: not held"


class HoldCommands(ServiceCore):
    """RELEASEJOB, and the HOLD=true of STARTJOB and UPDATEJOB."""

    @staticmethod
    def _held(job: Job) -> Job:
        """A new row (STARTJOB's, WAITING or SCHEDULED) as created HELD instead."""
        return job.replace(status=Status.HELD, next_run=None, blocked=False,
                           error_msg="" if job.blocked else job.error_msg)

    def _hold(self, row: Job, new: Job, notes: dict[JobKey, str], session: Session) -> tuple[Event, Job] | None:
        """UPDATEJOB ... HOLD=true on ``row`` (``new``: with the statement's other changes). A
        job with no run going (WAITING, blocked or not, or SCHEDULED) is HELD: its owner's
        scheduler entry is fenced (epoch + 1) and its due time dropped. A job with a run going
        on is left as it is, other changes too (see :meth:`_refuse_running_hold`)."""
        if row.status in RUNNING_STATUSES:
            notes[row.key] = HOLD_RUNNING_NOTE
            return None
        held = new.replace(status=Status.HELD, next_run=None, worker_id=None, epoch=row.epoch + 1, blocked=False,
                           hold_until=None, resume_at=None, error_msg="" if row.blocked else new.error_msg)
        notes[row.key] = "held: RELEASEJOB runs it"
        return Event.HOLD, self._noted(held, "UPDATEJOB", session)

    @staticmethod
    def _refuse_running_hold(rows: list[Job], notes: dict[JobKey, str]) -> None:
        """Every job UPDATEJOB ... HOLD=true matched has a run going on: refused (nothing changed)."""
        if rows and all(notes.get(r.key) == HOLD_RUNNING_NOTE for r in rows):
            raise JobAlreadyRunning(f"Job is running {rows[0].key.describe()} ({rows[0].status.value}): HOLD=true "
                                    "holds a job with no run going on (STOPJOB ... WAIT first, or hold it between runs)")

    # -- RELEASEJOB ----------------------------------------------------------------------------

    def release_job(self, cmd: statements.ReleaseJob, session: Session) -> Result:
        """RJM's rjmgo: each matching HELD job, then every HELD job below it in the DEPENDS_ON
        graph (through jobs that are not held too), parents before children, is as if started
        now. A NAME (or UID) with no held job is refused and nothing changes."""
        matching = self._matching(cmd.type, cmd.name, cmd.uid)
        roots = [j for j in matching if j.status is Status.HELD]
        if not roots:
            what = f"{matching[0].key.describe()} is {matching[0].status.value}" if len(matching) == 1 else \
                f"None of the {len(matching)} live jobs [type: {cmd.type}, name: {cmd.name}] is HELD"
            raise CommandError(f"Job is not held: {what}. RELEASEJOB releases a job started or updated with "
                               "HOLD=true; nothing was changed")
        order = self._release_order([j.key for j in roots])
        rows: list[tuple[Job, str]] = []
        for key, via in order:
            row = self._change(key, lambda r: self._unhold(r, session))
            if row is not None:
                note = f"released with {via}" if via is not None else ""
                rows.append((row, "; ".join(n for n in (note, row.error_msg) if n)))
        self._ring()
        return Result(HELD_COLUMNS, tuple(self._change_row(r, note) for r, note in rows))

    def _release_order(self, roots: list[JobKey]) -> list[tuple[JobKey, JobKey | None]]:
        """The roots, then the held jobs below them (breadth first: parents before children),
        each with the root it is released with (None: a root)."""
        children: dict[JobKey, list[Job]] = defaultdict(list)  # the jobs with parents only
        for job in self.store.each_live():
            for parent in dependencies.parents_of(job):
                children[parent].append(job)
        order: list[tuple[JobKey, JobKey | None]] = [(k, None) for k in roots]
        seen = set(roots)
        queue = deque((k, k) for k in roots)
        while queue:
            key, root = queue.popleft()
            for child in sorted(children.get(key, ()), key=lambda j: j.key):
                if child.key in seen:
                    continue
                seen.add(child.key)
                if child.status is Status.HELD:
                    order.append((child.key, root))
                queue.append((child.key, root))
        return order

    def _unhold(self, row: Job, session: Session) -> tuple[Event, Job] | None:
        """A HELD row as started now: its schedule's first status and due time, blocked while a
        parent is not PROCESSED (read now: a parent released just before is WAITING)."""
        if row.archived or row.status is not Status.HELD:
            return None
        now = self.clock.now()
        schedule = self._schedule(row.execution_interval, row.time_zone)
        blockers = dependencies.blocking(self.store, dependencies.parents_of(row))
        new = row.replace(status=schedule.start_status(row.calendar), next_run=schedule.first_due(now), blocked=bool(blockers),
                          error_msg=dependencies.note(blockers), worker_id=None, epoch=row.epoch + 1, tries=0,
                          hold_until=None)
        return Event.UNHOLD, self._noted(new, "RELEASEJOB", session)
