"""The job of the chaos soak (scripts/chaos.py): it leaves a record of every run in a side log.

    startjob user_job name='Chaos.work' uid='o000001' args='{"log": "/tmp/chaos/runs.jsonl", "seconds": 1.5}';

Each run appends JSON lines to ``log`` (one ``os.write`` of one line on a file opened with
O_APPEND, so lines of concurrent runs never mix):

    {"ev": "start", "run": R, "key": "USER_JOB.Chaos.work.o000001", "uid": ..., "node": ..., "epoch": E,
     "pid": P, "start": T0, "due": D}
    {"ev": "end",   "run": R, ..., "start": T0, "end": T1}     it worked ``seconds`` and was not aborted
    {"ev": "abort", "run": R, ..., "start": T0, "end": T1}     it saw is_aborted() and stopped at T1

Times are ``time.time()`` of this host; ``due`` is the due time the run stands for
(``current_job().due``: a recurring job's fire time, even when the run starts late). While it works (in steps of at most 20 ms) and again
right before it writes its end record, the run checks ``current_job().is_aborted()`` (STOPJOB,
or its node can no longer vouch for it: lease lost). An aborted run writes an ``abort`` record
and raises; it never writes an ``end`` record. A run that was killed (its node's process group
SIGKILLed, or ended by the lease watchdog before it noticed) leaves only its start record; the
checker of scripts/chaos.py bounds how long such a run can have lasted.
"""

import json
import os
import time
import uuid

from fabricjobs.jobs.context import current_job

_STEP = 0.02


def _append(path: str, record: dict) -> None:
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def work(log: str, seconds: float = 0.1):
    """Works ``seconds`` (sleeping in short steps), recording its start and its end in ``log``."""
    job = current_job()
    start = time.time()
    base = {
        "run": uuid.uuid4().hex, "key": str(job.key), "uid": job.key.uid, "node": job.node,
        "epoch": job.epoch, "pid": os.getpid(), "start": start,
        "due": job.due.timestamp() if job.due is not None else None,
    }
    _append(log, dict(base, ev="start"))
    deadline = start + max(0.0, float(seconds))
    while True:
        if job.is_aborted():
            _append(log, dict(base, ev="abort", end=time.time()))
            raise InterruptedError("aborted")
        left = deadline - time.time()
        if left <= 0:
            break
        time.sleep(min(_STEP, left))
    if job.is_aborted():  # the last look before claiming success
        _append(log, dict(base, ev="abort", end=time.time()))
        raise InterruptedError("aborted")
    end = time.time()
    _append(log, dict(base, ev="end", end=end))
    return {"run": base["run"], "seconds": round(end - start, 3)}
