"""STARTJOB ... PARALLELISM=n (DolphinDB's tasks of a job): the job and its n tasks, written in
one store transaction; STOPJOB of the job stops its tasks too (see fabricjobs/parallel.py)."""

from __future__ import annotations

from .. import parallel
from ..commands import statements
from ..errors import InsertInterrupted, JobAlreadyRunning, StoreError, ValidationError
from ..model import Job, JobKey, JobType
from ..store.base import CasResult
from .core import ServiceCore

_ALONE = (("exec_interval", "EXEC_INTERVAL"), ("depends_on", "DEPENDS_ON"), ("hold", "HOLD"),
          ("calendar", "CALENDAR"), ("if_not_exists", "IF NOT EXISTS"))


class ParallelCommands(ServiceCore):
    """The parallel part of STARTJOB and STOPJOB."""

    @staticmethod
    def _check_parallel(cmd: statements.StartJob) -> None:
        """Refused before anything is read or written: a parallel job is a one-time USER_JOB
        that runs now (its tasks are its runs)."""
        if cmd.type != JobType.USER_JOB:
            raise ValidationError(f"PARALLELISM is for USER_JOB jobs only (a {cmd.type} job runs as one)")
        for field, word in _ALONE:
            if getattr(cmd, field):
                raise ValidationError(f"PARALLELISM cannot be given with {word}: a parallel job is a one-time job that "
                                      "runs now, its tasks its runs")

    @staticmethod
    def _parallel_rows(job: Job, n: int) -> list[Job]:
        """The job (blocked on its tasks, which it DEPENDS_ON) and its n tasks, in that order."""
        keys = parallel.task_keys(job.key, n)
        parent = job.replace(parallelism=n, depends_on=",".join(str(k) for k in keys), blocked=True,
                             error_msg=f"tasks: 0 of {n} PROCESSED, {n} WAITING")
        # The job's ON_FAILURE and DELETE_ON_SUCCESS are its own (once, when it ends), not each task's.
        tasks = [job.replace(key=k, parallelism=n, task_of=str(job.key), on_failure="", delete_on_success="") for k in keys]
        return [parent, *tasks]

    def _insert_parallel(self, job: Job, n: int) -> tuple[Job, CasResult]:
        rows = self._parallel_rows(job, n)
        for row in rows[1:]:  # a task of an earlier run of the job that still goes on (its job FAILED)
            old = self.store.get(row.key)
            if old is not None and not old.archived:
                raise JobAlreadyRunning(f"Job is running {row.key.describe()} (a task of an earlier run of "
                                        f"{job.key}): STOPJOB it first")
        try:
            with self.store.transaction():
                results = self.store.insert_many(rows)
        except InsertInterrupted as exc:  # part of the job and its tasks written (a store without transactions)
            raise StoreError(f"STARTJOB of {job.key} (PARALLELISM={n}) failed partway: {exc}. STOPJOB {job.key.type} "
                             f"NAME='{job.key.name}' UID='{job.key.uid}' (its tasks stop with it), then start it again") from exc
        refused = next((k for k, r in enumerate(results) if not r.applied), None)
        if refused is not None or len(results) < len(rows):
            bad = rows[refused if refused is not None else len(results)]
            raise JobAlreadyRunning(f"Job is running {bad.key.describe()}")
        return rows[0], results[0]

    def _tasks_of(self, rows: list[Job]) -> list[JobKey]:
        """The tasks of the parallel jobs among ``rows`` (STOPJOB stops them with their job)."""
        return [k for r in rows if parallel.is_parent(r) for k in parallel.task_keys(r.key, r.parallelism)]
