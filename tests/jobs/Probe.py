"""User jobs for the end-to-end tests. Each appends JSON lines to side files named in ARGS, so
a test can see what ran, where, under which epoch and when, independent of the store."""

import json
import os
import time
from pathlib import Path

from fabricjobs.jobs.context import current_job, fail_job_always_retry, fail_job_no_retry


def _append(path, record):
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _record(path, start, end, **extra):
    job = current_job()
    _append(path, dict(key=str(job.key), node=job.node, epoch=job.epoch, start=start, end=end, pid=os.getpid(), **extra))


def noop():
    return None


def echo(value=None):
    return {"value": value, "args": current_job().args}


def record(log: str, seconds: float = 0.0, step: float = 0.01, starts: str = "", talk: float = 0.0,
           seconds_on: dict[str, float] | None = None, until: str = ""):
    """Runs ``seconds`` while watching is_aborted(); appends one record when it ends, marked
    aborted if it ended early or its node can no longer vouch for it (so tests can check that
    runs of one key never overlap). With ``starts``, also appends a record when it starts.
    With ``talk``, logs a line every ``talk`` seconds (its live log). ``seconds_on`` maps node
    names to how long runs take there instead: a test can make one node's runs outlast any
    fault while the runs of the node that takes them over end soon. With ``until``, a run
    ends early once that file exists (the test makes it when it has seen the run going)."""
    job = current_job()
    seconds = (seconds_on or {}).get(job.node, seconds)
    start = said = time.time()
    if starts:
        _append(starts, dict(key=str(job.key), node=job.node, epoch=job.epoch, start=start, pid=os.getpid()))
    aborted = False
    while time.time() - start < seconds and not (until and os.path.exists(until)):
        if job.is_aborted():
            aborted = True
            break
        if talk and time.time() - said >= talk:
            said = time.time()
            job.logger.info("still running")
        time.sleep(step)
    aborted = aborted or job.is_aborted()  # a well-behaved job checks before it commits its effects
    _record(log, start, time.time(), aborted=aborted)
    if aborted:
        raise InterruptedError("aborted")
    return {"node": job.node, "epoch": job.epoch}


def overrun_first(log: str, first: float = 0.0):
    """Appends its start, end and due time (the fire it stands for); its first run takes
    ``first`` seconds, the others none: a recurring job whose first run overran."""
    job = current_job()
    start = time.time()
    if first and not os.path.exists(log):
        time.sleep(first)
    _append(log, dict(key=str(job.key), start=start, end=time.time(), due=job.due.timestamp() if job.due else None))


def record_again(log: str, seconds: float = 0.0, starts: str = ""):
    """``record`` under another name: a job the node has not seen run yet."""
    return record(log, seconds, starts=starts)


def progressing(done: float, total: float = 100, seconds: float = 60.0):
    """Reports ``done`` of ``total`` (and two bad reports, which must be ignored), then waits
    for STOPJOB."""
    job = current_job()
    job.progress(done, total)
    job.progress(float("nan"), 1)
    job.progress("lots", total)
    start = time.time()
    while time.time() - start < seconds and not job.is_aborted():
        time.sleep(0.01)
    return "stopped" if job.is_aborted() else "done"


def started(log: str, seconds: float = 3600.0):
    """Appends a 'started' record, then blocks in one sleep (ignores STOPJOB)."""
    job = current_job()
    _append(log, dict(key=str(job.key), node=job.node, epoch=job.epoch, start=time.time(), pid=os.getpid()))
    time.sleep(seconds)
    return "woke up"


def fail_times(counter: str, failures: int):
    """Fails the first ``failures`` runs, then succeeds."""
    path = Path(counter)
    n = int(path.read_text()) if path.exists() else 0
    path.write_text(str(n + 1))
    if n < failures:
        raise RuntimeError(f"planned failure {n + 1} of {failures}")
    return {"succeeded_after": n}


def always_fails():
    raise ValueError("this job always fails")


def fails_no_retry():
    fail_job_no_retry(RuntimeError("bad input, do not retry"))


def fails_saying(message: str):
    fail_job_no_retry(RuntimeError(message))


def fails_always_retry(counter: str):
    path = Path(counter)
    n = int(path.read_text()) if path.exists() else 0
    path.write_text(str(n + 1))
    fail_job_always_retry(RuntimeError(f"transient failure {n + 1}"))


def typed(count: int, ratio: float, flag: bool, name: str, items: list, opts: dict):
    return {"count": count, "ratio": ratio, "flag": flag, "name": name, "items": items, "opts": opts}


def not_json():
    return object()


def not_a_number():
    return {"ratio": float("nan")}  # json.dumps would write NaN, which is not JSON


def noisy(megabytes: int = 5):
    print("x" * (megabytes * 1024 * 1024))
    return "y" * (megabytes * 1024 * 1024)


def stamp(log: str):
    """Appends the start time and the due time of each run (interval and cron tests)."""
    job = current_job()
    _append(log, dict(key=str(job.key), node=job.node, epoch=job.epoch, start=time.time(), due=job.due.timestamp()))


def chatty(counter: str):
    """Logs through the job's logger; fails the first two attempts."""
    job = current_job()
    path = Path(counter)
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    job.logger.info("attempt %d begins", n)
    if n < 3:
        job.logger.warning("attempt %d fails", n)
        raise RuntimeError(f"attempt {n} failed")
    job.logger.info("attempt %d succeeds", n)
    return n


def many_lines(count: int):
    """Logs ``count`` numbered lines through the job's logger (JOBLOG's bound)."""
    job = current_job()
    for i in range(count):
        job.logger.info("line %04d of %d", i, count)
    return count


def fail_once_no_retry(counter: str):
    """Fails (without retry) the first time, succeeds afterwards (e.g. after RESUMEJOB)."""
    path = Path(counter)
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    if n == 1:
        fail_job_no_retry(RuntimeError("first attempt fails"))
    return n


def handle_file(file: str, name: str, listener: str, log: str):
    """Started by an INTERFACE_LISTENER: appends the file it was given."""
    job = current_job()
    _append(log, dict(key=str(job.key), node=job.node, epoch=job.epoch, file=name, start=time.time()))
    return name


def log_and_wait(gate: str, seconds: float = 60.0):
    """Logs a line, waits until the file ``gate`` exists (the test makes it), logs another
    (JOBLOG ... FOLLOW shows the first while the run goes on)."""
    job = current_job()
    job.logger.info("first line, before the gate")
    deadline = time.monotonic() + seconds
    while not os.path.exists(gate) and time.monotonic() < deadline and not job.is_aborted():
        time.sleep(0.02)
    job.logger.info("second line, after the gate")
    return "through"


def part(log: str, task_index: int, task_count: int, fail_index: int = -1, gate: str = "", gate_index: int = -1,
         mended: str = ""):
    """A task of a parallel job (PARALLELISM=n): records its index (as argument and as seen by
    current_job()) and node; task ``fail_index`` fails for good (until the file ``mended``
    exists); task ``gate_index`` waits for the file ``gate`` (or STOPJOB)."""
    job = current_job()
    start = time.time()
    if task_index == gate_index:
        while not Path(gate).exists():
            if job.is_aborted():
                raise InterruptedError("stopped")
            time.sleep(0.02)
    _record(log, start, time.time(), index=task_index, count=task_count, ctx_index=job.task_index,
            ctx_count=job.task_count)
    if task_index == fail_index and not (mended and Path(mended).exists()):
        fail_job_no_retry(f"part {task_index} broke")
    return {"index": task_index, "node": job.node}


def logs_then_sleeps(seconds: float = 3600.0):
    """Logs a line, then blocks in one sleep (ignores STOPJOB: its node kills it after the grace)."""
    current_job().logger.info("a line before the long sleep")
    time.sleep(seconds)
    return "woke up"


def logs(text: str, times: int = 1):
    """Logs ``text`` ``times`` times with its logger."""
    logger = current_job().logger
    for i in range(times):
        logger.info("%s", text)
    return times


def logs_own(text: str, times: int = 1):
    """Logs ``text`` ``times`` times with a Python logger of its own, as library code does."""
    import logging

    logger = logging.getLogger(__name__)
    for i in range(times):
        logger.warning("%s", text)
    return times


def logs_then_raises(text: str, times: int = 1):
    """Logs ``text`` ``times`` times, then raises (after its share of the node's log is used up)."""
    logs(text, times)
    raise ValueError("the end of a chatty run")
