"""multiprocessing's helper processes as forks of the node, not fresh interpreters.

The fork server that workers are forked from (worker/pool.py) and its resource tracker are
each started by multiprocessing as a new Python that imports again what the node has already
imported: about 0.25 s of CPU per node start (0.2 s the fork server, 0.05 s the tracker), and
the node's first worker waits for it. On a host whose nodes start together (four nodes on two
cores) that was a fifth of the CPU the start-up took. Forked from the node while it still has
one thread, each helper begins with the node's modules in memory and runs the very command
multiprocessing would have given the new interpreter; the rest (the preload, the listener,
how workers are forked and reaped) is multiprocessing's own.

The seam is ``multiprocessing.util.spawnv_passfds``, which both helpers are started through
with ``-c COMMAND`` among the arguments (CPython 3.8 to 3.14; 3.14 appends the parent's argv
after the command, which becomes the child's ``sys.argv`` here as it would there). Anything
else passed through it is spawned as multiprocessing would; tests/test_fork_server.py fails if
a Python upgrade moves the seam.

What a fork keeps that a fresh interpreter would not have is put back as it would be there:
multiprocessing's own state about these helpers (the fork server's start lock, held by the
``ensure_running`` that forks it, and the tracker's descriptor and pid), or every worker's job
that starts a process the forkserver way would wait on that lock for ever. Descriptors other
than the ones passed are closed. ``__main__`` stays the node's, which is why this is for the
node's start only: what workers are given is pickled by module path.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import traceback
from multiprocessing import util
from typing import Any, Callable, Iterator, NoReturn


def run_forking(start: Callable[[], object]) -> bool:
    """Call ``start`` (e.g. ``forkserver.ensure_running``) with the helpers it starts forked
    from this process. False (nothing called) where this process already runs other threads:
    a fork would copy locks they may hold."""
    if threading.active_count() > 1:
        return False
    for stream in (sys.stdout, sys.stderr):  # or a helper that closes it writes the rest again
        stream.flush()
    with _forking():
        start()
    return True


@contextlib.contextmanager
def _forking() -> Iterator[None]:
    spawn = util.spawnv_passfds

    def fork_instead(path, args, passfds):
        at = args.index("-c") if "-c" in args[:-1] else None
        if at is None:
            return spawn(path, args, passfds)
        pid = os.fork()
        if pid == 0:
            _become(args[at + 1], args[at + 2:], passfds)
        return pid

    util.spawnv_passfds = fork_instead
    try:
        yield
    finally:
        util.spawnv_passfds = spawn


def _become(command: str, argv: list[str], passfds) -> NoReturn:
    """In the child: keep only the descriptors a spawned helper would have, run its command
    with its argv, and exit as its interpreter would (never returning into the node's stack)."""
    code = 1
    try:
        _as_if_fresh()
        sys.argv = ["-c", *argv]
        keep = sorted({0, 1, 2, *passfds})
        low = 0
        for fd in [*keep, os.sysconf("SC_OPEN_MAX")]:
            if fd > low:  # never an empty range: closerange(0, 0) closes every descriptor
                os.closerange(low, fd)
            low = fd + 1
        exec(command, {"__name__": "__main__"})  # noqa: S102 - multiprocessing's own command
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            _join_threads()  # as an interpreter does on its way out (node_watch.py needs it)
            sys.stderr.flush()
        finally:
            os._exit(code)


def _join_threads() -> None:
    """Wait for the threads that are not daemons, as a Python interpreter does at its exit."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def _as_if_fresh() -> None:
    """multiprocessing's state about its helpers, as a new interpreter has it: the start lock
    of the fork server unheld (the parent forked this child while holding it), no resource
    tracker known (the tracker's pipe end was the parent's, and is closed here)."""
    from multiprocessing import forkserver, resource_tracker

    server: Any = forkserver._forkserver  # private, and not in the type stubs
    tracker: Any = resource_tracker._resource_tracker
    server._lock = threading.Lock()
    tracker._lock = type(tracker._lock)()
    tracker._fd = tracker._pid = None
