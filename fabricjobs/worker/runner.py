"""Running one job body and turning whatever happened into an :class:`Outcome`.

Used inside a worker process (:mod:`.process`). Nothing a job does (raise, hang until killed,
print megabytes, return something odd) escapes this module as anything but an Outcome.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from ..clock import utc_from_timestamp
from ..logs import job_extra
from ..model import JobType
from ..jobs.binding import BindError, bind_arguments
from ..jobs.context import FailMode, JobContext, JobFailure, JobLogger, _bind, _unbind
from .guard import JOB_ENV as GUARDED_JOB_ENV
from ..jobs.limits import TERM_GRACE_SEC, LimitError, ProcessLimits
from .node_link import NodeLink
from .output import ProcessStream, RunOutput, StdCapture
from .runlog import ALWAYS, ForeignLines, NodeLogShare, RunLog, clean_text
from .spool import Spool
from .protocol import ERROR, INTERRUPTED, KILLED, LEASE_LOST, NOT_BEGUN, OK, Outcome, OutcomeKind, RunSpec  # noqa: F401 (re-exported)
from ..jobs.registry import JobResolutionError, process_argv

_run_log: RunLog | None = None  # this worker's (one run at a time)
_node_share = NodeLogShare()  # what of a run's log lines also goes to the node's log
#: On the worker's handlers (process.py): a job's own Python loggers' lines go where its
#: ``current_job().logger``'s go.
FOREIGN_LINES = ForeignLines()


def run_job(spec: RunSpec, is_aborted: Callable[[], bool], on_spawn: Callable[[int], None], log: logging.Logger,
            link: NodeLink | None = None,
            progress: Callable[[float, float], None] = lambda done, total: None, spool: str | None = None, *,
            std: StdCapture | None = None, end_leftovers: Callable[[], int] = lambda: 0) -> Outcome:
    """Run one job in this worker. ``link``: the node, for an INTERFACE_LISTENER's store needs;
    ``progress``: where a USER_JOB's ``current_job().progress`` goes (the node's board);
    ``spool``: the file its log lines go to as they come (spool.py), for its node; ``std``: the
    worker's captured stdout and stderr (a USER_JOB's output); ``end_leftovers``: kills what
    the run left running (a PROCESS job's pipes close only then)."""
    try:
        arguments = json.loads(spec.arguments or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("ARGS is not a JSON object")
    except (ValueError, RecursionError) as exc:
        return Outcome(ERROR, error=f"bad ARGS: {exc if isinstance(exc, ValueError) else 'nested too deeply'}",
                       mode=FailMode.NO_RETRY)
    global _run_log
    if _run_log is None:
        _run_log = RunLog(spec.log_max)
    run_log = _run_log.reset(spec.log_max, Spool(spool, spec.printed_max))
    output = RunOutput(run_log.spool, run_log)
    job_log = logging.getLogger(f"{log.name}.run")  # one run at a time per worker: one logger
    job_log.propagate = False  # to the node's log only through its share (NodeLogShare)
    job_log.addHandler(run_log)
    job_log.addHandler(_node_share.reset(spec.log_max))
    FOREIGN_LINES.run = (run_log, _node_share)
    try:
        if spec.key.type == JobType.PROCESS:
            outcome = _run_process(spec, arguments, is_aborted, on_spawn, output, end_leftovers)
        elif spec.key.type == JobType.USER_JOB:
            if std is not None:
                std.begin(output)
            try:
                outcome = _run_user_job(spec, arguments, is_aborted, job_log, progress)
            finally:
                if std is not None:
                    std.end()
        elif spec.key.type == JobType.INTERFACE_LISTENER:
            outcome = _run_listener(spec, arguments, is_aborted, link)
        else:
            outcome = Outcome(ERROR, error=f"job type {spec.key.type} cannot run on this node", mode=FailMode.NO_RETRY)
    except (JobResolutionError, LimitError) as exc:
        outcome = Outcome(ERROR, error=str(exc), mode=FailMode.NO_RETRY)
    except Exception as exc:  # noqa: BLE001 - our own code failed on this run: the run fails, not the worker
        log.error("run of %s failed before or after its job code", spec.key, exc_info=True,
                  extra=job_extra(spec.key, spec.epoch))
        outcome = Outcome(ERROR, error=f"could not run: {_describe(exc)}", mode=FailMode.NO_RETRY)
    finally:
        FOREIGN_LINES.run = ()
        job_log.removeHandler(run_log)
        job_log.removeHandler(_node_share)
        output.finish()
        run_log.spool.close()
    if outcome.kind != OK and outcome.error:
        run_log.add(f"run ended: {outcome.error}")
    return outcome.with_log(run_log.text())


# -- USER_JOB -------------------------------------------------------------------------------------

def _run_user_job(spec: RunSpec, arguments: dict, is_aborted: Callable[[], bool], log: logging.Logger,
                  progress: Callable[[float, float], None]) -> Outcome:
    from .listener import changed_since_seen

    changed = changed_since_seen(arguments, first=spec.epoch == 1)  # (a job's first claim makes epoch 1)
    if changed is not None:  # (a listener's file job: the file it was started for, or none)
        return Outcome(ERROR, error=changed, mode=FailMode.NO_RETRY)
    fn = spec.catalog.load_user_job(spec.key.name)
    ctx = JobContext(
        key=spec.key,
        epoch=spec.epoch,
        node=spec.node,
        arguments=arguments,
        logger=JobLogger(log, {"job": str(spec.key), "epoch": spec.epoch}),  # type: ignore[arg-type]
        _is_aborted=is_aborted,
        _report_progress=progress,
        due=utc_from_timestamp(spec.due) if spec.due is not None else None,
        task_index=spec.task_index or 0,
        task_count=spec.task_count or 1,
    )
    token = _bind(ctx)
    try:
        try:
            args, kwargs = bind_arguments(fn, ctx.args, _task_arguments(spec, ctx))
        except BindError as exc:
            return Outcome(ERROR, error=str(exc), mode=FailMode.NO_RETRY)
        except RecursionError:
            return Outcome(ERROR, error="bad ARGS: nested too deeply", mode=FailMode.NO_RETRY)
        try:
            value = fn(*args, **kwargs)
        except JobFailure as exc:
            return Outcome(ERROR, error=_describe(exc.cause) if exc.cause is not None else "failed", mode=exc.mode)
        except BaseException as exc:  # noqa: BLE001 - a job may raise anything, even SystemExit
            log.info("job %s raised %s", spec.key, _describe(exc), extra={ALWAYS: True})
            log.debug("job %s traceback:\n%s", spec.key, traceback.format_exc())
            if is_aborted():
                return Outcome(INTERRUPTED, error=_describe(exc))
            return Outcome(ERROR, error=_describe(exc))
    finally:
        _unbind(token)
    try:
        output = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8").decode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeError) as exc:
        return Outcome(ERROR, error=_describe(f"return value is not JSON-serialisable: {exc}"), mode=FailMode.NO_RETRY)
    return Outcome(OK, output=_cap_json(output, spec.output_max))


_ERROR_MAX = 4000


def _task_arguments(spec: RunSpec, ctx: JobContext) -> dict[str, int]:
    """A parallel job's task gets its index and count as the parameters so named (ARGS, the
    same for every task, cannot give them); another job gets 0 of 1 unless its ARGS say."""
    given = {"task_index": ctx.task_index, "task_count": ctx.task_count}
    return given if spec.task_count else {k: v for k, v in given.items() if k not in ctx.args}


# -- INTERFACE_LISTENER -----------------------------------------------------------------------------

def _run_listener(spec: RunSpec, arguments: dict, is_aborted: Callable[[], bool], link: NodeLink | None) -> Outcome:
    from .listener import listen

    assert spec.job is not None and link is not None  # set for every listener run (executor._spec, worker)
    started = listen(spec.job, spec.catalog, link, arguments, is_aborted)
    return Outcome(OK, output=json.dumps({"files": started}))


def _describe(exc: BaseException | str) -> str:
    """An exception as one bounded line of valid text (it becomes error_msg / Notes)."""
    if isinstance(exc, str):
        text = exc
    else:
        try:
            body = str(exc)
        except Exception:  # a job's exception may fail even at this
            body = ""
        text = f"{type(exc).__name__}: {body}" if body else type(exc).__name__
    return clean_text(text, _ERROR_MAX)


def _cap_json(output: str, limit: int) -> str:
    if len(output.encode("utf-8")) <= limit:
        return output
    head = output.encode("utf-8")[: max(0, limit - 100)].decode("utf-8", "ignore")
    return json.dumps(head + f"... [truncated: output was {len(output.encode('utf-8'))} bytes]", ensure_ascii=False)


# -- PROCESS --------------------------------------------------------------------------------------

def _run_process(spec: RunSpec, arguments: dict, is_aborted: Callable[[], bool], on_spawn: Callable[[int], None],
                 output: RunOutput, end_leftovers: Callable[[], int]) -> Outcome:
    path = spec.catalog.process_path(spec.key.name)
    limits = spec.catalog.process_limits.for_job(arguments)
    argv, env = _process_command(spec, path, arguments, limits)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(path.parent),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: stop and kill end everything it started
            shell=False,
        )
    except (ValueError, OSError) as exc:  # a NUL byte in an argument, argv too long (E2BIG), ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return Outcome(ERROR, error=f"cannot start {path.name}: {reason}", mode=FailMode.NO_RETRY)
    on_spawn(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None  # (PIPE)
    out = ProcessStream(proc.stdout, spec.output_max, output, b"stdout: ")
    err = ProcessStream(proc.stderr, spec.output_max, output, b"stderr: ")
    code, signalled, timed_out = _wait_for_process(proc, is_aborted, limits.time_limit_sec)
    # The job's process has ended: so does everything it started, in its group or not (a
    # 'sleep 40 &', or a daemon, held the output pipes open, and the capture waited on it;
    # docs/guides/run-isolation.md).
    _signal_group(proc.pid, signal.SIGKILL)
    end_leftovers()
    stdout, stderr = out.text(), err.text()
    if code == 0 and not timed_out:  # a job that exits 0 on the limit's SIGTERM did not finish
        return Outcome(OK, output=json.dumps(stdout, ensure_ascii=False), exit_code=0)
    tail = clean_text(stderr.strip()[-2000:], 2000)
    reason = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if signalled:
        return Outcome(INTERRUPTED, error=f"{reason} after stop" + (f": {tail}" if tail else ""), exit_code=code)
    if timed_out:
        reason = f"ran past its time limit of {limits.time_limit_sec:g} s ({reason})"
    elif limits.memory_mb:
        reason += f" (under a memory limit of {limits.memory_mb} MiB)"
    return Outcome(ERROR, error=reason + (f": {tail}" if tail else ""), exit_code=code,
                   output=json.dumps(stdout, ensure_ascii=False) if stdout else None)


def _process_command(spec: RunSpec, path: Path, arguments: dict, limits: ProcessLimits) -> tuple[list[str], dict[str, str]]:
    """The argv and environment the PROCESS job at ``path`` is started with."""
    env = limits.environment(os.environ, {
        "FABRICJOBS_JOB_KEY": str(spec.key), "FABRICJOBS_JOB_UID": spec.key.uid,
        "FABRICJOBS_EPOCH": str(spec.epoch), "FABRICJOBS_NODE": spec.node,
    })
    argv = process_argv(str(path), arguments)
    if spec.board is not None:  # led by a guard that ends the group with the lease (guard.py)
        argv = [sys.executable, "-P", "-m", "fabricjobs.worker.guard", spec.board[0], str(spec.board[1]),
                str(spec.generation), f"--memory-mb={limits.memory_mb}", "--", *argv]
        env = {**os.environ, GUARDED_JOB_ENV: json.dumps(env)}  # the guard runs on the node's, the job on its own
    return argv, env


def _wait_for_process(proc: subprocess.Popen, is_aborted: Callable[[], bool],
                      time_limit_sec: float) -> tuple[int, bool, bool]:
    """Wait for the job's process to exit: SIGTERM to its group when the run is aborted or
    its time limit is up, SIGKILL TERM_GRACE_SEC after the latter. Returns its exit code,
    whether it was stopped (aborted) and whether it ran past its time limit."""
    signalled = False
    started = time.monotonic()
    timed_out_at: float | None = None  # when the time limit's SIGTERM went out
    while True:
        try:
            return proc.wait(timeout=0.05), signalled, timed_out_at is not None
        except subprocess.TimeoutExpired:
            if is_aborted() and not signalled:
                signalled = True
                _signal_group(proc.pid, signal.SIGTERM)
            elapsed = time.monotonic() - started
            if time_limit_sec and timed_out_at is None and elapsed >= time_limit_sec and not signalled:
                timed_out_at = elapsed
                _signal_group(proc.pid, signal.SIGTERM)
            elif timed_out_at is not None and elapsed - timed_out_at >= TERM_GRACE_SEC:
                _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
