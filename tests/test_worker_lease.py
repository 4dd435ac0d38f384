"""A worker process ends its run when its node's lease runs out (docs/explanation/guarantees.md, guarantee 1), at the
worst moments a review found: a PROCESS job that ignores SIGTERM, and a worker paused right
after it checked the lease. Real worker processes, a real board, no node: the lease is set
once and never renewed, as if the node had been paused."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from fabricjobs.worker import process as worker_module
from fabricjobs.worker.board import Board
from fabricjobs.jobs.registry import JobCatalog
from fabricjobs.worker.runner import LEASE_LOST, RunSpec
from fabricjobs.model import JobKey
from harness import process_alive, wait_for

LEASE = 0.3


@pytest.fixture
def board():
    b = Board.create(1)
    yield b
    b.close(unlink=True)


def _script(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def _start(board: Board, tmp_path: Path, job: str, target=worker_module.worker_main, lease: float = LEASE):
    ctx = mp.get_context("fork")
    ours, theirs = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=target, args=(theirs, board.path, 1, 0, 30, 30, "n1"), daemon=True)
    board.set_lease(time.monotonic() + lease, time.monotonic())  # the last renewal there will be
    proc.start()
    ours.send(RunSpec(1, JobKey("PROCESS", job, "u1"), 1, "n1", "{}", 0, 65536,
                      JobCatalog("", (), str(tmp_path)), board.generation()))
    return proc, ours


def _start_stubborn(board: Board, tmp_path: Path):
    """A PROCESS job that ignores SIGTERM and would run 5 s; once it runs, its lease is set to
    end LEASE from now (the last renewal there will be). Returns its log, that moment, the
    worker, its pipe and the job's pid.

    The lease is cut short only once the job runs: on a loaded machine a worker, its guard and
    the script took over 0.3 s to start, and a run whose lease is gone is rightly never
    started. The loop is bash arithmetic: a TERM that killed `seq` in `$(seq 1 50)` left an
    empty loop, and the job ended on its own, "end" written, before its guard could kill it."""
    log = tmp_path / "log"
    _script(tmp_path, "stubborn.sh", f"trap 'echo term >> {log}' TERM\necho \"start $$\" >> {log}\n"
                                     f"for ((i = 0; i < 50; i++)); do sleep 0.1; done\necho end >> {log}\n")
    proc, conn = _start(board, tmp_path, "stubborn.sh", lease=30.0)
    pid = int(wait_for(lambda: log.exists() and log.read_text().split()[1:2], 10, "the job to start")[0])
    began = time.monotonic()
    board.set_lease(began + LEASE, began)
    return log, began, proc, conn, pid


# timing: each asserts a deadline (the lease + 0.35 s) that the watchdog and the guard meet
# on time only on a machine not loaded at lower priority by the rest of the suite: beside phase
# 1's niced workers a fresh clone saw the job gone 0.85 s after its lease.
@pytest.mark.timing
def test_a_process_job_that_ignores_sigterm_dies_with_the_lease_not_after_its_worker(board, tmp_path):
    """The watchdog must kill the job's own process group before the kernel's dead-man timer
    ends the worker: a PROCESS job lives in its own session and would outlive its worker."""
    log, began, proc, conn, pid = _start_stubborn(board, tmp_path)
    proc.join(5)
    wait_for(lambda: not process_alive(pid), 1.0, "the job's process to be gone")
    gone_after = time.monotonic() - began
    assert gone_after < LEASE + 0.35, f"the job outlived its lease by {gone_after - LEASE:.2f} s"
    assert proc.exitcode == 3, f"the worker ended by {proc.exitcode} (-14: the kernel timer beat the watchdog)"
    msgs = []
    try:
        while conn.poll(0.2):
            msgs.append(conn.recv())
    except EOFError:  # the worker is gone; what it sent before is in msgs
        pass
    assert any(m[0] == "done" and m[2].kind == LEASE_LOST for m in msgs), msgs
    time.sleep(0.3)
    assert "end" not in log.read_text()


def _paused_after_its_lease_check(*args):
    """worker_main, but its main thread stalls 1 s right after its first lease check said yes
    (a SIGSTOP at that instant)."""
    original, state = Board.lease_valid, {"paused": False}

    def lease_valid(self, now=None, generation=None):
        ok = original(self, now, generation)
        if threading.current_thread() is threading.main_thread() and not state["paused"]:
            state["paused"] = True
            time.sleep(1.0)
        return ok

    Board.lease_valid = lease_valid
    worker_module.worker_main(*args)


def test_a_worker_paused_after_its_lease_check_never_starts_the_job(board, tmp_path):
    mark = tmp_path / "started"
    _script(tmp_path, "mark.sh", f"echo started > {mark}\nsleep 2\n")
    proc, conn = _start(board, tmp_path, "mark.sh", target=_paused_after_its_lease_check)
    try:
        # Either the worker saw the lapse and said so, or its dead-man timer ended it.
        reply = conn.recv() if conn.poll(5) else None
        assert reply is None or (reply[0], reply[2].kind) == ("done", LEASE_LOST), reply
    except EOFError:
        assert not proc.is_alive() or proc.join(1) is None
    time.sleep(0.3)
    assert not mark.exists(), "the job started after its lease had run out"
    if proc.is_alive():
        conn.send(None)
    proc.join(5)


@pytest.mark.timing  # the same deadline
@pytest.mark.parametrize("blow", ["SIGSTOP", "SIGKILL"])
def test_a_process_job_ends_with_the_lease_whatever_happens_to_its_worker(board, tmp_path, blow):
    """The node's process group stopped (Ctrl-Z) or killed (a supervisor): the worker can do
    nothing, but the PROCESS job lives in its own session and must still end with the lease,
    before another node may take it over. Its guard, in the job's own group, ends it."""
    log, began, proc, conn, pid = _start_stubborn(board, tmp_path)
    os.kill(proc.pid, getattr(signal, blow))
    try:
        wait_for(lambda: not process_alive(pid), LEASE + 1.0, f"the job to end with the lease after {blow} of its worker")
        gone_after = time.monotonic() - began
        assert gone_after < LEASE + 0.35, f"the job outlived its lease by {gone_after - LEASE:.2f} s"
        time.sleep(0.2)
        assert "end" not in log.read_text()
    finally:
        if blow == "SIGSTOP":
            os.kill(proc.pid, signal.SIGCONT)
        proc.join(5)


@pytest.mark.parametrize("body, exit_code, error", [
    ("exit 3\n", 3, "exit code 3"),
    ("kill -KILL $$\n", -9, "killed by signal 9"),
    ("kill -SEGV $$\n", -11, "killed by signal 11"),
    # SIGPIPE at its default (as without a guard): `yes` dies of it (141), not of EPIPE (1)
    ("yes | head -n 1 > /dev/null\nexit ${PIPESTATUS[0]}\n", 141, "exit code 141"),
])
def test_a_guarded_process_job_reports_its_own_exit_code_or_signal(board, tmp_path, body, exit_code, error):
    _script(tmp_path, "ends.sh", body)
    proc, conn = _start(board, tmp_path, "ends.sh", lease=30.0)
    try:
        msg = conn.recv()
        while msg[0] != "done":
            msg = conn.recv()
        outcome = msg[2]
        assert (outcome.exit_code, outcome.error.split(":")[0]) == (exit_code, error), outcome
        assert not list(tmp_path.glob("core*"))
    finally:
        conn.send(None)
        proc.join(5)
