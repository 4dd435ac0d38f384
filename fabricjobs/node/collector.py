"""The collector thread: waits on every worker's pipe and acts on what the workers say.

A worker reports each run as it ends (DONE), a PROCESS job's process group (SPAWNED), the
rest of a train it will not run (BOUNCED), and a listener's store requests (REQUEST). Each
becomes a change in the run table (runs.py) and, for a run that ended, an outcome queued for
the node's loop to write (writeback.py). The messages themselves are listed in
worker/protocol.py.

A worker's death is seen from its exit, as the fork server reports it (the process's
sentinel), never from its pipe closing: a process the run started inherits the pipe and may
hold it open long after the worker is gone (docs/guides/run-isolation.md). What the worker
wrote before it died is read first.
"""

from __future__ import annotations

import logging
import os
import select
import selectors
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..errors import FabricJobsError, StoreError
from ..worker.protocol import (ANSWER as LINK_ANSWER, BOUNCED, DONE, ERROR, REQUEST as LINK_REQUEST, SPAWNED,
                              Outcome)
from ..logs import job_extra
from ..model import Job, JobType
from .decisions import RELEASED
from .runs import Run, RunTable
from .trains import ShortJobs
from ..worker.pool import Worker, WorkerPool
from ..worker.runlog import clean_text
from ..worker.spool import spool_path

log = logging.getLogger("fabricjobs.node.executor")

NOT_STARTED = "not started: the worker of its train ended before reaching it"
_PIPE, _EXIT = "pipe", "exit"  # what the collector waits on for each worker
REQUEST_THREADS = 4  # listeners' store requests answered at once (one at a time per listener run)


def _log_failure(future) -> None:
    """(An error in answering a request would otherwise stay in its future, unseen.)"""
    exc = future.exception() if not future.cancelled() else None
    if exc is not None:
        log.error("answering a listener's store request failed", exc_info=exc)


class Collector:
    def __init__(
        self,
        table: RunTable,
        pool: WorkerPool,
        short_jobs: ShortJobs,
        *,
        finish: Callable[[Run, Outcome], None],
        on_tasks_changed: Callable[[], None],
        on_outcome: Callable[[], None],
        answer_listener: Callable[[Job, str, tuple], object] | None,
        log_max: int = 65536,
    ) -> None:
        self.table = table
        self.log_max = log_max  # bytes of a run's log kept for its history (RUN_LOG_MAX_BYTES)
        self.pool = pool
        self.short_jobs = short_jobs
        self.finish = finish  # a run ended: explain it and queue its outcome (Executor)
        self.on_tasks_changed = on_tasks_changed
        self.on_outcome = on_outcome  # wakes the node's loop
        self.answer_listener = answer_listener  # a listener run's store requests (listener_requests.py)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector: selectors.BaseSelector | None = None  # used by the collector thread only
        self._stop = False
        self._thread: threading.Thread | None = None
        self._requests = ThreadPoolExecutor(max_workers=REQUEST_THREADS, thread_name_prefix="listener-requests")

    # -- the thread --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="JobExecutor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._requests.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        """Look at the workers' pipes again now (a worker it does not watch yet was just given work)."""
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def _loop(self) -> None:
        while not self._stop:
            try:
                self.collect_once(0.5)
            except Exception:
                log.exception("executor loop error (continuing)")
                time.sleep(0.05)

    def _watched(self) -> selectors.BaseSelector:
        """The selector over the wake-up socket and every worker's pipe and exit, kept from one
        wait to the next (``multiprocessing.connection.wait`` builds one per call: a
        registration per worker each time a run ends)."""
        if self._selector is None:
            self._selector = selectors.DefaultSelector()
            self._selector.register(self._wake_r, selectors.EVENT_READ)
        workers = set(self.pool.workers())
        for key in list(self._selector.get_map().values()):
            if key.fileobj is self._wake_r:
                continue
            worker, kind = key.data
            if worker not in workers or worker.gone or (kind == _PIPE and worker.reader.closed):
                self._selector.unregister(key.fd)  # forgotten (its pipe may be closed: by number)
        for worker in workers:
            if not worker.watched and not worker.gone:
                try:
                    self._selector.register(worker.conn, selectors.EVENT_READ, (worker, _PIPE))
                    self._selector.register(worker.process.sentinel, selectors.EVENT_READ, (worker, _EXIT))
                    worker.watched = True
                except (OSError, ValueError, KeyError):  # closed meanwhile by the loop: gone from the pool next time
                    pass
        return self._selector

    def collect_once(self, timeout: float) -> None:
        for key, _ in self._watched().select(timeout):
            if key.fileobj is self._wake_r:
                self._drain_wake()
                continue
            worker, kind = key.data
            if worker.gone:
                continue  # its death was dealt with earlier in this batch
            if kind == _PIPE:
                self._read(worker)
            else:  # it exited: what it said before it died first
                while not worker.gone and not worker.reader.closed and _readable(worker.reader.fd):
                    self._read(worker)
                if not worker.gone:
                    self.on_worker_death(worker)

    def _read(self, worker: Worker) -> None:
        """The messages that have arrived from ``worker``. Its pipe's end says nothing of the
        worker (see the module docstring): only what it wrote counts."""
        try:
            for message in worker.reader.read():
                self.on_message(worker, message)
        except (EOFError, OSError):
            worker.reader.closed = True  # no longer waited on; its exit is
        except Exception:  # a garbled message from one worker: drop that worker only
            log.exception("bad message from worker %s; replacing it", worker.slot)
            self.pool.kill(worker)
            self.on_worker_death(worker)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    # -- messages ----------------------------------------------------------------------------------

    def on_message(self, worker: Worker, msg) -> None:
        kind = msg[0]
        if kind == BOUNCED:
            self.on_bounced(worker, msg[1], msg[2] if len(msg) > 2 else None)
            return
        task = msg[1]
        run = self.table.get(task)
        if kind == LINK_REQUEST:
            self._on_link_request(worker, run, msg[2], msg[3], msg[4])
        elif kind == SPAWNED:
            worker.child_pid = msg[2]
            if run is None or run.outcome is not None or (run.end_reason is not None and run.stop_deadline is None):
                self.pool.kill(worker)  # it was already being ended: its new process group too
            self.on_tasks_changed()
        elif kind == DONE:
            if run is not None:
                self.table.detach(run, worker)
            if len(msg) > 3:  # the worker retires after this run (worker/leftovers.py)
                self._retire(worker, run, task, msg[3])
            else:
                self.pool.release(worker, task)
            if run is not None and run.outcome is None:
                if msg[2].kind in ("ok", "error"):  # it ran its course (not cut short, not skipped)
                    self.short_jobs.observe(run.row, msg[2].elapsed)
                self.finish(run, msg[2])

    def _retire(self, worker: Worker, run: Run | None, task: int, why: str) -> None:
        """End a worker whose last run changed what later runs would inherit. Here, on the
        thread that watches its pipe: it leaves the pool before its run counts as reported
        (until then its task keeps it busy), so the node's loop never hands it another run, and
        no other thread closes a pipe this one may be reading."""
        log.info("the worker of slot %d retires after the run of %s: %s", worker.slot,
                 run.key if run is not None else f"task {task}", why,
                 extra=job_extra(run.key, run.facts.epoch) if run is not None else None)
        self.pool.kill(worker)
        self._drop(worker)

    def _drop(self, worker: Worker) -> None:
        """A worker ended (dead, or killed here): out of the pool, and what its run left
        running, now the fork server's, killed (a worker the kernel ended could not)."""
        self.pool.forget(worker)
        left = self.pool.kill_orphans(worker)
        if left:
            log.info("a dead worker left %d process(es) running; killed", left)

    def _on_link_request(self, worker: Worker, run: Run | None, op: str, args: tuple, seq: int) -> None:
        """Answer a listener run's store request (worker/node_link.py); anything else is refused.
        Answered on a thread of its own: a store request may wait seconds (an LWT whose outcome
        is settled by a SERIAL read), and every other run's end waits for this thread."""
        if run is None or run.worker is not worker or run.key.type != JobType.INTERFACE_LISTENER \
                or self.answer_listener is None:
            self._send_answer(worker, seq, False, "store requests are answered for a listener run on this worker only")
            return
        try:
            self._requests.submit(self._answer, worker, run, op, args, seq).add_done_callback(_log_failure)
        except RuntimeError:  # shutting down: the run is being ended
            self._send_answer(worker, seq, False, "the node is stopping")

    def _answer(self, worker: Worker, run: Run, op: str, args: tuple, seq: int) -> None:
        assert self.answer_listener is not None
        value: object
        try:
            ok, value = True, self.answer_listener(run.row, op, args)
        except Exception as exc:  # the listener's run reports it; the node goes on
            log.warning("store request %s of listener %s failed: %s", op, run.key, exc,
                        extra=job_extra(run.key, run.facts.epoch))
            text = str(exc) if isinstance(exc, FabricJobsError) else f"{type(exc).__name__}: {exc}"
            # (whether asking again may help: the store out for now, or a refusal, worker/node_link.py)
            ok, value = False, (text, isinstance(exc, StoreError))
        if run.worker is worker and run.outcome is None:  # (else it ended meanwhile: nobody asks any more)
            self._send_answer(worker, seq, ok, value)

    @staticmethod
    def _send_answer(worker: Worker, seq: int, ok: bool, value: object) -> None:
        try:
            with worker.send_lock:
                worker.conn.send((LINK_ANSWER, ok, value, seq))
        except (OSError, ValueError) as exc:  # the worker ended while the request was answered
            log.debug("the answer to a listener's store request found its worker gone (%s)", exc)

    def on_bounced(self, worker: Worker, tasks: list[int], slow: int | None) -> None:
        """A train's runs sent back unstarted (the run ahead of them is taking long): the node's
        loop gives each that holds a slot a worker of its own, passengers go back to the store,
        and the slow job is no longer taken for a short one."""
        ahead = self.table.get(slow) if slow is not None else None
        if ahead is not None:
            self.short_jobs.ran_long(ahead.row)
        for task in tasks:
            self.pool.release(worker, task)
            with self.table.lock:
                run = self.table.get(task)
                passenger = self.table.send_back(run, worker, ahead) if run is not None else None
            if passenger:  # no slot to run in: back to the store for any node (no try counted)
                assert run is not None
                self.finish(run, Outcome(RELEASED, error=NOT_STARTED))
        self.on_outcome()  # wake the node's loop

    def on_worker_death(self, worker: Worker) -> None:
        tasks = list(worker.tasks)  # [0] was running; the rest of a train never began
        self.pool.kill_children(worker)  # whatever it started (a PROCESS job's group) goes with it
        self._drop(worker)
        # What the run going on had logged, read before the table is locked (the spool file
        # stays until the run leaves the table): the worker that would have sent it is gone.
        spooled = self._spooled(tasks[0]) if tasks and worker.killed_for in (None, tasks[0]) else ""
        for i, task in enumerate(tasks):
            with self.table.lock:  # nothing ends the run between this look and its outcome
                run = self.table.get(task)
                if run is None or run.outcome is not None or run.worker is not worker:
                    continue
                if i == 0 and worker.killed_for in (None, task):
                    outcome = Outcome(ERROR, error=f"worker process died ({_ended_by(worker.process.exitcode)})",
                                      log=spooled)
                elif i == 0:  # killed to end a train-mate that had just ended: this one is innocent
                    outcome = Outcome(RELEASED, error="its worker was killed to end the run before it")
                else:
                    outcome = Outcome(RELEASED, error=NOT_STARTED)
                self.finish(run, outcome)

    def _spooled(self, task: int) -> str:
        """The log of a run whose worker died (killed at the end of a stop's grace, by KILL, a
        crash): what it wrote to its spool file (worker/spool.py), its head and its tail as a
        run's log keeps them, whatever the file's size (only those are read)."""
        board = getattr(self.pool, "board", None)
        if board is None:
            return ""
        half = max(self.log_max // 2, 1)
        try:
            with open(spool_path(board.path, task), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= 2 * half:
                    text = f.read().decode("utf-8", "replace").rstrip("\n")
                else:
                    head = f.read(half)
                    head = head[:head.rfind(b"\n") + 1]
                    f.seek(size - half)
                    tail = f.read(half)
                    tail = tail[tail.find(b"\n") + 1:]
                    dropped = size - len(head) - len(tail)
                    text = (head.decode("utf-8", "replace") + f"... [{dropped:,} bytes of lines dropped] ...\n"
                            + tail.decode("utf-8", "replace")).rstrip("\n")
        except OSError:  # (it logged nothing: no file was made)
            return ""
        return clean_text(text, self.log_max + 200)


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (data, or its end)."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _ended_by(code: int | None) -> str:
    """How a worker process ended, as a PROCESS job's end is told: a negative exit code is the
    signal that ended it (SIGALRM: the dead-man timer of a run that held on past its lease)."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = ": the dead-man timer, the run held on past its node's lease" if -code == signal.SIGALRM else ""
    return f"killed by signal {-code} ({name}){why}"
