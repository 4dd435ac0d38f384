"""What a run may leave in its worker, for every later run of that worker to inherit.

A worker runs many runs, one after another (docs/guides/run-isolation.md). A run that leaves a
thread going (its output landing in the next run's log, or a worker that cannot exit because
it waits for that thread), or that changes the process's environment, working directory, umask
or ``sys.path`` (the next PROCESS job then finds no ``sort`` on its PATH) would reach into runs
that are not its own. Such a worker retires once it has reported the run: the node sends it
nothing more, and the slot's next run gets a fresh worker.
"""

from __future__ import annotations

import os
import sys
import threading

#: Threads a worker starts for a run itself (a PROCESS job's output readers): not the job's.
OWN = "fabricjobs_own"


def own(thread: threading.Thread) -> threading.Thread:
    """Mark ``thread`` as the worker's own (it may outlive its run by a moment)."""
    setattr(thread, OWN, True)
    return thread


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed by the run
        return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Leftovers:
    """The worker's state as it was before its first run, to compare each run's end with."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.cwd = _cwd()
        self.umask = _umask()
        self.path = list(sys.path)

    def of_run(self, before: set[threading.Thread]) -> str | None:
        """Why the worker must retire after a run that began with threads ``before``, or None."""
        threads = [t for t in threading.enumerate()
                   if t not in before and t.is_alive() and not getattr(t, OWN, False)]
        if threads:
            names = ", ".join(repr(t.name) for t in threads[:3]) + (", ..." if len(threads) > 3 else "")
            return f"the run left {len(threads)} thread(s) of its own going ({names})"
        changed = [what for what, same in (("its environment", dict(os.environ) == self.environ),
                                           ("its working directory", _cwd() == self.cwd),
                                           ("its umask", _umask() == self.umask),
                                           ("sys.path", sys.path == self.path)) if not same]
        return "the run changed " + ", ".join(changed) if changed else None
