"""What a run may change in its worker for every later run of that worker to inherit.

A worker runs many runs, one after another (docs/guides/run-isolation.md). A run that changes
the process's environment, working directory, umask or ``sys.path`` would reach into runs that
are not its own (the next PROCESS job then finds no ``sort`` on its PATH, a umask of 0 makes
the next run's files world-writable). Such a worker retires once it has reported the run: the
node ends it, and the slot's next run gets a fresh worker.

Threads a run leaves going are not such a change: a module's thread pool or client started by
the first run serves the later ones, as a warm worker is meant to. They end with the worker,
which leaves without waiting for them (process.py).
"""

from __future__ import annotations

import os
import sys


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

    def of_run(self) -> str | None:
        """Why the worker must retire after the run that just ended, or None."""
        changed = [what for what, same in (("its environment", dict(os.environ) == self.environ),
                                           ("its working directory", _cwd() == self.cwd),
                                           ("its umask", _umask() == self.umask),
                                           ("sys.path", sys.path == self.path)) if not same]
        return "the run changed " + ", ".join(changed) if changed else None
