"""The leader of a PROCESS job's process group: runs the job as its child and ends the whole
group when the node's lease runs out (docs/explanation/guarantees.md, guarantee 1).

A PROCESS job gets its own session so that STOPJOB and KILL can end everything it started.
That also puts it out of reach of whatever happens to the node's process group: a SIGSTOP of
the group (Ctrl-Z at the node's terminal) stops the worker that would end the job, and a
SIGKILL of the group (a supervisor killing the node) kills that worker outright; either way
the job ran on beside the run of the node that took it over. So the lease is also watched
from inside the job's own group, by this small process, which maps the same board as the
worker and kills its group (itself included), and what the job started elsewhere in the run's
cgroup, once the lease is gone or renewed under a new generation. Otherwise it waits for the
job and exits as the job did, so the worker sees the job's own exit code or signal.

It also applies the run's memory limit (limits.py) to the job alone, between fork and exec.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

from . import cgroups
from .board import Board

_PERIOD = 0.02  # how often the job is polled while the lease is far from its end
_LAPSE_GRACE = 0.1  # the moment a run gets to end by itself, as in the worker
JOB_ENV = "FABRICJOBS_GUARDED_JOB_ENV"
USAGE = "usage (by the worker): python -m fabricjobs.worker.guard BOARD SLOTS GENERATION [--memory-mb=N] -- ARGV..."
_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # for the job, not for the guard


def main(argv: list[str]) -> int:
    board_path, slots, generation, *rest = argv
    memory_mb = 0
    while rest and rest[0].startswith("--memory-mb="):
        memory_mb = int(rest.pop(0).partition("=")[2])
    if not rest or rest[0] != "--" or len(rest) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    command = rest[1:]
    # The job's environment (limits.py) comes as one variable: the guard itself needs the node's
    # (PYTHONPATH, a venv's), the job gets only its own.
    given = os.environ.pop(JOB_ENV, None)
    job_env = json.loads(given) if given else dict(os.environ)
    board = Board(board_path, int(slots))
    gen = int(generation)
    if not board.lease_valid(None, gen):
        return 128 + signal.SIGKILL  # claimed under a lease that is already gone: never start
    # Blocked, not ignored: a STOPJOB's SIGTERM that comes before the job has its own handlers
    # stays pending and reaches the job; the guard itself never acts on these.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    child = os.fork()
    if child == 0:
        # What Popen would have given the job: default dispositions (Python ignores SIGPIPE
        # and SIGXFSZ, and exec keeps ignored signals ignored), nothing blocked.
        for sig in (*_STOPS, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)
        try:
            if memory_mb:  # the job's, inherited by what it starts; never the guard's own
                limit = memory_mb * 1024 * 1024
                for current in resource.getrlimit(resource.RLIMIT_AS):  # never above the node's own
                    if current != resource.RLIM_INFINITY:
                        limit = min(limit, current)
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            os.execve(command[0], command, job_env)
        except (OSError, ValueError, OverflowError) as exc:
            print(f"cannot run {command[0]}: {exc}", file=sys.stderr)
            os._exit(127)
    status: int | None = None
    lapsed_at: float | None = None
    while True:
        if status is None:
            pid, st = os.waitpid(child, os.WNOHANG)
            if pid == child:
                status = st
                if lapsed_at is None:
                    return _exit_like(status)  # the job ended under a valid lease
        now = time.monotonic()
        if lapsed_at is None:
            if board.lease_valid(now, gen):
                time.sleep(min(max(board.lease_until() - now, 0.001), _PERIOD))
                continue
            lapsed_at = now
            os.killpg(0, signal.SIGTERM)  # the job's chance to end by itself
        elif now - lapsed_at >= _LAPSE_GRACE:
            # What the job started into sessions of its own (a daemon) is not in this group but
            # in the run's cgroup, where there is one: all of it but the worker, whose node may
            # be stopped with it (a SIGSTOP of the node's group) and sees the run end when it
            # wakes. Then the whole group, this process too: also what the job started, even if
            # the job itself has already ended on the SIGTERM.
            slot = cgroups.slot_of()
            if slot is not None:
                cgroups.kill_others(slot, spare=(os.getppid(),))
            os.killpg(0, signal.SIGKILL)
        time.sleep(0.005)


def _exit_like(status: int) -> int:
    """Exit as the job did, so the worker reports its exit code or signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV here must not dump the guard
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        time.sleep(1.0)  # the signal ends the process before this returns
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
