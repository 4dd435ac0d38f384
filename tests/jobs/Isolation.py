"""Jobs that try to escape their run or flood their node (tests/test_run_isolation.py)."""

import os
import sys
import time

from fabricjobs.jobs.context import current_job


def _daemon(pidfile: str) -> None:
    """Fork twice, the grandchild in a session of its own (a daemon, which no process-group
    signal reaches and which inherits every descriptor the worker had), sleeping 300 s; its
    pid goes to ``pidfile`` once it runs."""
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                with open(pidfile + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(pidfile + ".tmp", pidfile)
                time.sleep(300)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    while not os.path.exists(pidfile):
        time.sleep(0.01)


def escape(pidfile: str, cooperative: bool = True):
    """Leaves a daemon behind, then waits: for the stop (``cooperative``), or without looking."""
    _daemon(pidfile)
    job = current_job()
    while not (cooperative and job.is_aborted()):
        time.sleep(0.02)


def chatter(lines: int, width: int = 1, linger: float = 0.0):
    """Prints ``lines`` short lines to stdout and one to stderr (output a node must cap), then
    waits ``linger`` seconds (its node passes the lines on meanwhile)."""
    line = ("y" * width + "\n").encode()
    block = line * max(1, 65536 // len(line))
    left = lines
    out = sys.stdout.buffer
    while left > 0:
        n = min(left, len(block) // len(line))
        out.write(block[: n * len(line)])
        left -= n
    out.flush()
    print("chatter done", file=sys.stderr, flush=True)
    time.sleep(linger)
    return {"lines": lines}
