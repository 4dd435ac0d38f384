"""What a running job sees of fabricjobs (docs/guides/writing-jobs.md): its context and the three failure modes.

    from fabricjobs.jobs.context import current_job, fail_job_always_retry

    def userJob1(loopsIterationCount: int):
        job = current_job()
        for i in range(loopsIterationCount):
            if job.is_aborted():          # STOPJOB, or this node lost its lease
                raise InterruptedError("stopped")
            job.logger.info("i=%d", i)
        return {"result": f"Loop executed {loopsIterationCount} times"}

Failure modes, as the seed's ``failJobRetryUntilMax / failJobAlwaysRetry / failJobNoRetry``:
an ordinary exception retries until MAX_TRIES; ``fail_job_always_retry(e)`` retries forever;
``fail_job_no_retry(e)`` fails the job at once.
"""

from __future__ import annotations

import contextvars
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Callable, NoReturn

from ..model import JobKey


class FailMode(StrEnum):
    RETRY_UNTIL_MAX = "retry_until_max"
    ALWAYS_RETRY = "always_retry"
    NO_RETRY = "no_retry"


class JobFailure(Exception):
    """Raised (through the fail_job_* functions) to end a run with a chosen retry mode."""

    def __init__(self, cause: BaseException | str | None, mode: FailMode) -> None:
        self.cause = cause
        self.mode = mode
        super().__init__(str(cause) if cause is not None else mode.value)


@dataclass
class JobContext:
    key: JobKey
    epoch: int
    node: str
    arguments: dict[str, Any]
    logger: logging.Logger
    _is_aborted: Callable[[], bool] = field(repr=False, default=lambda: False)
    _report_progress: Callable[[float, float], None] = field(repr=False, default=lambda done, total: None)
    # The due time this run stands for (a recurring job's fire time, a one-time job's start
    # request), even when it starts late or is a retry: a job that works on "the hour just
    # ended" uses it. (RESTARTJOB's run is due when the restart was asked for.)
    due: datetime | None = None
    # A task of a parallel job (STARTJOB ... PARALLELISM=n): its index (0..n-1) and n. A job
    # that is not one is its own only task: index 0 of 1.
    task_index: int = 0
    task_count: int = 1

    @property
    def args(self) -> dict[str, Any]:
        """The caller's ARGS (without the session scope)."""
        return {k: v for k, v in self.arguments.items() if k != "session_scope"}

    @property
    def session_scope(self) -> dict[str, Any]:
        given = self.arguments.get("session_scope")
        scope = given.get("scope") if isinstance(given, dict) else None
        return scope if isinstance(scope, dict) else {}

    def is_aborted(self) -> bool:
        """True once STOPJOB asked this run to end, or its node can no longer vouch for it
        (lease lost). A job that ignores it is killed after the stop grace period."""
        return self._is_aborted()

    def progress(self, done: float, total: float = 100) -> None:
        """Report how far the run is: ``done`` of ``total`` (a percentage by default). PS and
        JOBSTATUS show it as a percentage, the web console as a bar, within a heartbeat. Costs
        a memory write: call it as often as you like. Bad numbers are ignored, never raised:
        a progress report must not fail a job."""
        try:
            done, total = float(done), float(total)
        except (TypeError, ValueError):
            return
        if math.isfinite(done) and math.isfinite(total) and total > 0 and done >= 0:
            self._report_progress(min(done, total), total)

    # The seed's names, for people coming from Fabric.
    isAborted = is_aborted


class JobLogger(logging.LoggerAdapter):
    """Log lines of a job carry its key, as the seed's do: ``[USER_JOB.Customer.userJob1.u1] i=0``."""

    def process(self, msg, kwargs):
        kwargs.setdefault("extra", {}).update(job=self.extra["job"], epoch=self.extra.get("epoch"))
        return f"[{self.extra['job']}] {msg}", kwargs


_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("fabricjobs_job")


def current_job() -> JobContext:
    """The context of the job running in this thread; LookupError outside a job."""
    try:
        return _current.get()
    except LookupError:
        raise LookupError("current_job() called outside a running fabricjobs job") from None


def _bind(ctx: JobContext) -> contextvars.Token:
    return _current.set(ctx)


def _unbind(token: contextvars.Token) -> None:
    _current.reset(token)


def fail_job_retry_until_max(exc: BaseException | str | None = None) -> NoReturn:
    raise JobFailure(exc, FailMode.RETRY_UNTIL_MAX)


def fail_job_always_retry(exc: BaseException | str | None = None) -> NoReturn:
    raise JobFailure(exc, FailMode.ALWAYS_RETRY)


def fail_job_no_retry(exc: BaseException | str | None = None) -> NoReturn:
    raise JobFailure(exc, FailMode.NO_RETRY)


# The seed's spellings.
failJobRetryUntilMax = fail_job_retry_until_max
failJobAlwaysRetry = fail_job_always_retry
failJobNoRetry = fail_job_no_retry


JOB_MARK = "__fabricjobs_job__"


def job(fn: Callable) -> Callable:
    """Declare a function a job: with ``[jobs] REQUIRE_JOB_DECORATOR = true`` only functions
    declared so may be named in a STARTJOB, so a public helper in a job module is not a job
    by accident."""
    setattr(fn, JOB_MARK, True)
    return fn

