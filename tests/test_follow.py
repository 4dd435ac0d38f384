"""JOBLOG ... FOLLOW (docs/explanation/design-choices.md): a running job's log lines as they come, through
``fabricjobs shell`` on a real node process, on SQLite and on Cassandra (node_backend).

The job logs a line, then waits for a file the test makes, then logs another: the first line
must be printed while the run is still IN_PROCESS (before the gate exists), then the second,
then JOBLOG's line saying how the run ended, and the shell exits by itself."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from backends import SEED_BACKENDS
from harness import wait_for


@pytest.fixture(params=SEED_BACKENDS)
def node_backend(request):
    """SQLite and the CQL test server (tests/backends.py says why); the live log's store
    methods are in the contract suite, on Apache Cassandra too."""
    return request.param


class Follow:
    """``fabricjobs shell -e "<text>"`` with its stdout read line by line as it comes."""

    def __init__(self, cluster, text: str) -> None:
        # Ctrl-C as at a terminal: SIGINT at its default, whatever this test run inherited (a
        # shell's background job, as `./scripts/test &` is, ignores SIGINT, and so would the
        # shell under test, which then never sees the Ctrl-C this file sends it).
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fabricjobs", "--config", str(cluster.config_path), "shell", "-e", text],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cluster.tmp,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, text: str, timeout: float = 30.0) -> str:
        """The first line (from here on) that holds ``text``; fails at the deadline or the end."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {timeout} s; saw {self.seen}") from None
            if line is None:
                raise AssertionError(f"the shell ended without a line with {text!r}; saw {self.seen}; "
                                     f"stderr: {self.proc.stderr.read() if self.proc.stderr else ''}")
            self.seen.append(line)
            if text in line:
                return line

    def end(self, timeout: float = 20.0) -> tuple[int, str]:
        code = self.proc.wait(timeout)
        while (line := self.lines.get(timeout=5)) is not None:
            self.seen.append(line)
        return code, self.proc.stderr.read() if self.proc.stderr else ""


def _follow_through_the_gate(cluster, tmp_path, job_type, name, args, first, second):
    gate = tmp_path / "gate"
    r = cluster.shell("-e", f"startjob {job_type} name='{name}' uid='f1' args='{args}';")
    assert r.returncode == 0, r.stderr
    follow = Follow(cluster, f"joblog {job_type} '{name}' with uid='f1' follow timeout 60;")
    follow.until(first)
    job = cluster.job(job_type.upper(), name, "f1")
    assert job.status.name == "IN_PROCESS" and not gate.exists(), job  # the line came while the run went on
    assert not any(second in line for line in follow.seen)
    gate.touch()
    follow.until(second)
    end = follow.until(f"run 1 of {job_type.upper()}.{name}.f1 on n1: OK -> PROCESSED")
    code, err = follow.end()
    assert code == 0 and err == "", err
    assert follow.seen[0] == f"run 1 of {job_type.upper()}.{name}.f1 on n1: following (ends with the run)"
    assert follow.seen[-1] == end
    assert sum(second in line for line in follow.seen) == 1  # shown once, live or from the record
    return follow.seen


def test_joblog_follow_shows_a_user_jobs_lines_while_it_runs(cluster, tmp_path):
    cluster.start_node("n1")
    seen = _follow_through_the_gate(cluster, tmp_path, "user_job", "Probe.log_and_wait", f'{{"gate": "{tmp_path / "gate"}"}}',
                                    "INFO [USER_JOB.Probe.log_and_wait.f1] first line, before the gate",
                                    "INFO [USER_JOB.Probe.log_and_wait.f1] second line, after the gate")
    assert len(seen) == 4, seen
    # Once the run is over, FOLLOW shows the last run's log, as JOBLOG does, and returns.
    r = cluster.shell("-e", "joblog user_job 'Probe.log_and_wait' with uid='f1' follow;")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "run 1 of USER_JOB.Probe.log_and_wait.f1 on n1: OK -> PROCESSED"
    assert "second line, after the gate" in r.stdout


def test_joblog_follow_shows_a_process_jobs_output_while_it_runs(cluster, tmp_path):
    cluster.start_node("n1")
    seen = _follow_through_the_gate(cluster, tmp_path, "process", "log_and_wait.sh", f'{{"0": "{tmp_path / "gate"}"}}',
                                    "stdout: out: before the gate", "stdout: out: after the gate")
    assert "stderr: err: a line on stderr" in seen


def test_joblog_follow_of_a_job_that_does_not_run_ends_at_its_timeout(cluster, tmp_path):
    cluster.start_node("n1")
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='yearly' exec_interval='0 0 0 1 1 *';")
    assert r.returncode == 0, r.stderr
    began = time.monotonic()
    r = cluster.shell("-e", "joblog user_job 'Probe.noop' with uid='yearly' follow timeout 1;")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == "JOBLOG FOLLOW timed out: USER_JOB.Probe.noop.yearly is SCHEDULED, no run started"
    assert time.monotonic() - began < 15
    missing = cluster.shell("-e", "joblog user_job 'Probe.nothing' with uid='x' follow;")
    assert missing.returncode == 1 and "No such job" in missing.stderr


def test_joblog_follow_is_not_fooled_by_a_node_adopting_a_scheduled_job(cluster):
    """A node adopts a scheduled job nobody owns with a new epoch but no run: a FOLLOW begun
    before that still waits for a run (it once took the adoption for run 1 and followed it
    until its timeout, seen on a loaded machine)."""
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='adopted' exec_interval='0 0 0 1 1 *';")
    assert r.returncode == 0, r.stderr
    assert (cluster.job("USER_JOB", "Probe.noop", "adopted").epoch, cluster.job("USER_JOB", "Probe.noop", "adopted").worker_id) == (0, None)
    follow = subprocess.Popen([sys.executable, "-m", "fabricjobs", "--config", str(cluster.config_path), "shell", "-e",
                               "joblog user_job 'Probe.noop' with uid='adopted' follow timeout 6;"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cluster.tmp)
    try:
        cluster.start_node("n1")  # adopts it in its first full pass
        cluster.wait_job("USER_JOB", "Probe.noop", "adopted", lambda j: j.worker_id == "n1" and j.epoch == 1, timeout=15)
        out, err = follow.communicate(timeout=30)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 1 and out == "", (out, err)
    assert err.strip() == "JOBLOG FOLLOW timed out: USER_JOB.Probe.noop.adopted is SCHEDULED, no run started"


def test_joblog_follow_waits_for_the_next_run_of_a_waiting_job(cluster, tmp_path):
    """Started before any node runs: WAITING; the follow waits for its run, then shows it."""
    gate = tmp_path / "gate"
    gate.touch()
    r = cluster.shell("-e", f"startjob user_job name='Probe.log_and_wait' uid='w1' args='{{\"gate\": \"{gate}\"}}';")
    assert r.returncode == 0, r.stderr
    follow = Follow(cluster, "joblog user_job 'Probe.log_and_wait' follow timeout 60;")
    wait_for(lambda: cluster.job("USER_JOB", "Probe.log_and_wait", "w1").status.name == "WAITING", 15, "waiting")
    cluster.start_node("n1")
    follow.until("run 1 of USER_JOB.Probe.log_and_wait.w1 on n1: OK -> PROCESSED")
    code, err = follow.end()
    assert code == 0 and err == ""
    assert [line.split(" INFO ")[-1] for line in follow.seen[1:3]] == [
        "[USER_JOB.Probe.log_and_wait.w1] first line, before the gate",
        "[USER_JOB.Probe.log_and_wait.w1] second line, after the gate"]


def test_ctrl_c_ends_a_follow_cleanly(cluster, tmp_path):
    cluster.start_node("n1")
    r = cluster.shell("-e", f"startjob user_job name='Probe.log_and_wait' uid='cc' args='{{\"gate\": \"{tmp_path / 'gate'}\"}}';")
    assert r.returncode == 0, r.stderr
    follow = Follow(cluster, "joblog user_job 'Probe.log_and_wait' with uid='cc' follow;")
    follow.until("first line, before the gate")
    follow.proc.send_signal(signal.SIGINT)
    code, err = follow.end()
    assert code == 130 and "Traceback" not in err, err
    assert cluster.job("USER_JOB", "Probe.log_and_wait", "cc").status.name == "IN_PROCESS"  # the job is not touched
    cluster.shell("-e", "stopjob user_job name='Probe.log_and_wait' uid='cc' wait timeout 20;")


@pytest.mark.parametrize("cluster", [{"jobs": {"LIVE_LOG_FLUSH_MS": 0}}], indirect=True)
def test_with_live_lines_switched_off_a_follow_shows_the_run_once_it_has_ended(cluster, tmp_path):
    cluster.start_node("n1")
    gate = tmp_path / "gate"
    r = cluster.shell("-e", f"startjob user_job name='Probe.log_and_wait' uid='off' args='{{\"gate\": \"{gate}\"}}';")
    assert r.returncode == 0, r.stderr
    follow = Follow(cluster, "joblog user_job 'Probe.log_and_wait' with uid='off' follow timeout 60;")
    follow.until("following (ends with the run)")
    gate.touch()
    follow.until("OK -> PROCESSED")
    code, err = follow.end()
    assert code == 0 and err == ""
    assert [line.split("] ")[-1] for line in follow.seen[1:3]] == ["first line, before the gate", "second line, after the gate"]
    assert len(follow.seen) == 4, follow.seen
