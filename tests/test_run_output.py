"""A job's output is bounded (docs/guides/run-isolation.md): what a USER_JOB or a PROCESS job
prints goes to its run's log, not to the node's; [jobs] MAX_OUTPUT_BYTES of it is passed on
live and the rest is counted and dropped with a line that says so; a gigabyte of short lines
ends in about the time it takes to read it, and neither the node's log, nor the store, nor
the node's memory grows with it."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from fabricjobs.model import JobKey, Status
from fabricjobs.worker.reaper import descendants
from harness import Cluster

pytestmark = pytest.mark.slow

KEEP = 65536  # [jobs] MAX_OUTPUT_BYTES here
LOG_MAX = 65536  # RUN_LOG_MAX_BYTES (the default)
GIGABYTE = 1 << 30
RSS_MAX_KB = 150 * 1024


@pytest.fixture
def cluster(request, tmp_path):
    """One node on SQLite (what a run prints does not depend on the store)."""
    c = Cluster(tmp_path, settings={"jobs": {"MAX_OUTPUT_BYTES": KEEP}}, request=request)
    c.start_node("a")
    yield c
    c.stop_all()


def _store_bytes(cluster) -> int:
    path = Path(cluster._sqlite_path())
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _peak_rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))


def _printed(cluster, key: JobKey) -> tuple[int, int]:
    """Bytes the store keeps of the run's live lines, and of its record's log."""
    conn = sqlite3.connect(cluster._sqlite_path())
    try:
        live = conn.execute("SELECT COALESCE(SUM(LENGTH(CAST(line AS BLOB))), 0) FROM k2_live_log "
                            "WHERE type = ? AND name = ? AND uid = ?", (key.type, key.name, key.uid)).fetchone()[0]
    finally:
        conn.close()
    record = cluster.client().store.run(key, 1)
    return live, len(record.log.encode())


def _flood(cluster, key: JobKey, args: dict, tail: str) -> None:
    node = cluster.nodes["a"]
    log_before, store_before = node.log_path.stat().st_size, _store_bytes(cluster)
    cluster.fetch(f"startjob {key.type.lower()} name='{key.name}' uid='{key.uid}' args='{json.dumps(args)}';")
    # (a deadline, not a speed goal: scripts/bench.py isolation measures it; one write() a line took minutes)
    job = cluster.wait_job(key.type, key.name, key.uid, lambda j: j.archived, 60, "a gigabyte of output to be read")
    assert job.status is Status.PROCESSED, job.error_msg

    log = cluster.shell_ok(f"joblog {key.type.lower()} '{key.name}' with uid='{key.uid}';")
    lines = log.rstrip("\n").split("\n")
    assert lines[1] == "stdout: y", lines[:3]  # the head of what it printed, in its run's log
    assert re.fullmatch(r"\.\.\. 1,0\d\d MB more not kept", lines[-1]), lines[-3:]
    middle = next(i for i, line in enumerate(lines) if re.fullmatch(r"\.\.\. \[\d+ lines dropped\] \.\.\.", line))
    kept_tail = lines[middle + 1:-1]  # the tail: the last lines of stdout, and stderr's one line beside them
    assert tail in kept_tail and "stdout: y" in kept_tail, lines[-5:]

    assert node.log_path.stat().st_size - log_before < 16384, "the job's output went to the node's log"
    live, record = _printed(cluster, key)
    assert live <= KEEP + 200 and record <= LOG_MAX + 200, (live, record)
    grown = _store_bytes(cluster) - store_before
    assert grown < 2 * 1024 * 1024, f"the store grew by {grown:,} bytes"
    for pid in [node.pid, *descendants(node.pid)]:  # the node, its fork server and tracker, its workers
        assert _peak_rss_kb(pid) < RSS_MAX_KB, f"process {pid} of the node peaked at {_peak_rss_kb(pid)} kB"


def test_a_gigabyte_printed_by_a_user_job_is_its_runs_capped_output(cluster):
    key = JobKey("USER_JOB", "Isolation.chatter", "g")
    _flood(cluster, key, {"lines": GIGABYTE // 2}, "stderr: chatter done")


def test_a_gigabyte_of_short_lines_from_a_process_job_is_capped_and_copied_in_blocks(cluster):
    key = JobKey("PROCESS", "flood.sh", "g")
    _flood(cluster, key, {"0": str(GIGABYTE)}, "stderr: flood done")


def test_joblog_follow_shows_the_output_as_it_comes_and_says_what_was_not_kept(cluster):
    """The follow shows the run's lines live (at most LIVE_LOG_MAX_BYTES a flush of them) and
    ends with the record's word on what was dropped, then how the run ended."""
    cluster.fetch(f"startjob user_job name='Isolation.chatter' uid='f' args='{json.dumps({'lines': 200_000, 'linger': 2.5})}';")
    followed = cluster.shell_ok("joblog user_job 'Isolation.chatter' with uid='f' follow timeout 60;").rstrip("\n")
    lines = followed.split("\n")
    assert lines[0].endswith("following (ends with the run)") and lines[1] == "stdout: y", lines[:2]
    assert re.fullmatch(r"\.\.\. 3\d\d KB more not kept", lines[-2]), lines[-3:]  # 400 KB printed, 64 KiB kept
    assert lines[-1].endswith("OK -> PROCESSED"), lines[-1]


def test_a_line_of_a_megabyte_is_shown_by_its_start_not_dropped(cluster):
    """A 1 MB line: JOBLOG shows its first 2,000 characters, and the live lines keep their
    MAX_OUTPUT_BYTES (64 KiB here) of it, shown in pieces: what is said not kept is the rest.
    (The run's log showed an empty 'stdout: ', and none of it was kept live: '1 MB'.)"""
    cluster.fetch("startjob user_job name='Isolation.chatter' uid='wide' args='{\"lines\": 1, \"width\": 1000000}';")
    job = cluster.wait_job("USER_JOB", "Isolation.chatter", "wide", lambda j: j.archived, 60, "the run to end")
    assert job.status is Status.PROCESSED, job.error_msg
    lines = cluster.shell_ok("joblog user_job 'Isolation.chatter' with uid='wide';").rstrip("\n").split("\n")
    assert lines[1] == "stdout: " + "y" * 2000, lines[1][:80]
    assert re.fullmatch(r"\.\.\. 9\d\d KB more not kept", lines[-1]), lines[-1]  # 1 MB less the 64 KiB kept


def test_a_run_ended_by_stopjob_keeps_what_it_logged_and_its_exit_code(cluster, tmp_path):
    """The node says why it ended the run (STOPPED), and what the worker reported stays: a
    USER_JOB's log lines, a PROCESS job's output and exit code, as for a run that failed."""
    from harness import wait_for

    runs = tmp_path / "runs.jsonl"
    talks, prints = JobKey("USER_JOB", "Probe.record", "talks"), JobKey("PROCESS", "log_and_wait.sh", "prints")
    cluster.fetch(f"startjob user_job name='Probe.record' uid='talks' "
                  f"args='{json.dumps({'log': str(runs), 'seconds': 600, 'talk': 0.1})}';"
                  f"startjob process name='log_and_wait.sh' uid='prints' args='{json.dumps({'0': str(tmp_path / 'never')})}';")
    store = cluster.client().store
    for key in (talks, prints):  # each has said something while it runs
        wait_for(lambda: store.live_log(key, 1), 20, f"{key} to log a line")
    cluster.fetch("stopjob user_job name='Probe.record' uid='talks' wait timeout 30;"
                  "stopjob process name='log_and_wait.sh' uid='prints' wait timeout 30;")
    told = cluster.shell_ok("joblog user_job 'Probe.record' with uid='talks';")
    assert "STOPPED -> TERMINATED" in told and "still running" in told and "(no log lines)" not in told, told
    printed = cluster.shell_ok("joblog process 'log_and_wait.sh' with uid='prints';")
    assert "STOPPED -> TERMINATED" in printed and "stdout: out: before the gate" in printed, printed
    record = store.run(prints, 1)
    assert record.exit_code is not None and record.exit_code < 0, record  # ended by a signal


def test_a_run_killed_by_its_node_keeps_what_it_logged(cluster):
    """A run that ignores STOPJOB is killed at the end of the grace, as is one that KILL ends:
    its worker dies before it could report, and the node keeps the lines it had written."""
    from harness import wait_for

    store = cluster.client().store
    for uid in ("stopped", "killed"):
        key = JobKey("USER_JOB", "Probe.logs_then_sleeps", uid)
        cluster.fetch(f"startjob user_job name='Probe.logs_then_sleeps' uid='{uid}';")
        wait_for(lambda: store.live_log(key, 1), 20, f"{key} to log its line")
    cluster.fetch("stopjob user_job name='Probe.logs_then_sleeps' uid='stopped' wait timeout 30;")
    task = wait_for(lambda: next((r["task"] for r in cluster.fetch("ps;") if r["description"].endswith("Probe.logs_then_sleeps")),
                                 None), 10, "the run in PS")
    cluster.fetch(f"kill 'a' {task};")
    cluster.wait_job("USER_JOB", "Probe.logs_then_sleeps", "killed", lambda j: j.status is not Status.IN_PROCESS, 30)
    for uid, says in (("stopped", "STOPPED -> TERMINATED"), ("killed", "KILLED")):
        shown = cluster.shell_ok(f"joblog user_job 'Probe.logs_then_sleeps' with uid='{uid}' run 1;")
        assert says in shown and "a line before the long sleep" in shown and "(no log lines)" not in shown, shown


@pytest.mark.parametrize("job", ["Probe.logs", "Probe.logs_own"])
def test_a_jobs_log_lines_reach_the_node_log_one_line_each_and_a_run_log_worth_at_most(cluster, job):
    """A job's logger lines go to the node's log too (as Fabric's do), but a line break in one
    cannot forge a line of the node's own, and a run's share of the node's log is bounded
    (RUN_LOG_MAX_BYTES, 64 KiB here); JOBLOG has the run's lines. The same holds of a Python
    logger of the job's own (``logging.getLogger(__name__)``, ``Probe.logs_own``), whose lines
    once reached the node's log as they were."""
    forged = "x\nWARNING 2026-01-01 00:00:00,000 [MainThread] fabricjobs.node - FORGED: node a lost its lease"
    node = cluster.nodes["a"]
    before = node.log_path.stat().st_size
    cluster.fetch(f"startjob user_job name='{job}' uid='forge' args='{json.dumps({'text': forged})}';"
                  f"startjob user_job name='{job}' uid='flood' args='{json.dumps({'text': 'y' * 1000, 'times': 2000})}';")
    for uid in ("forge", "flood"):
        assert cluster.wait_job("USER_JOB", job, uid, lambda j: j.archived, 60).status is Status.PROCESSED
    grown = node.log_path.read_bytes()[before:].decode()
    assert "FORGED" in grown and not any(line.startswith("WARNING 2026-01-01") for line in grown.splitlines()), grown[-2000:]
    assert "x\u240aWARNING 2026-01-01" in grown  # (the line break shown as a character, not kept)
    assert "bytes of this run's log lines are in the node's log; the rest are in the run's log only" in grown
    assert len(grown) < 4 * LOG_MAX, f"the node's log grew by {len(grown):,} bytes for 2 MB of log lines"
    joblog = cluster.shell_ok(f"joblog user_job '{job}' with uid='forge';")
    assert "FORGED: node a lost its lease" in joblog
    if job != "Probe.logs":
        return
    # How a run ended is the node's own word: in its log whatever the run's share.
    cluster.fetch(f"startjob user_job name='Probe.logs_then_raises' uid='loud' "
                  f"args='{json.dumps({'text': 'z' * 1000, 'times': 200})}';")
    from harness import wait_for
    wait_for(lambda: "Probe.logs_then_raises.loud raised ValueError: the end of a chatty run" in node.log_path.read_text(),
             20, "the line saying the run raised, after its share was used up")
    cluster.fetch("stopjob user_job name='Probe.logs_then_raises' uid='loud';")
