"""JOBLOG ... FOLLOW of a job that has ended (docs/guides/scripts-and-code.md,
docs/guides/watching-jobs.md): it shows the last run's log as JOBLOG does, and still as
lines, so that a program's ``for line in client.fetch(...).lines`` and the shell's
``--format json`` (``{"line": ...}`` a line) work whether the run is going on or over."""

from __future__ import annotations

import json

import pytest

from harness import wait_for


@pytest.fixture
def node_backend():
    """SQLite: the choice is the service's, the same on every store."""
    return "sqlite"


def _ended_job(cluster, tmp_path) -> None:
    cluster.start_node("n1")
    gate = tmp_path / "gate"
    gate.touch()
    r = cluster.shell("-e", f"startjob user_job name='Probe.log_and_wait' uid='done' args='{{\"gate\": \"{gate}\"}}';")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: cluster.job("USER_JOB", "Probe.log_and_wait", "done").status.name == "PROCESSED", 20, "processed")


def test_a_program_iterates_the_lines_of_a_follow_of_an_ended_job(cluster, tmp_path):
    _ended_job(cluster, tmp_path)
    with cluster.client() as client:
        result = client.fetch("joblog user_job 'Probe.log_and_wait' with uid='done' follow timeout 10;")
        lines = list(result.lines)
    assert lines[0] == "run 1 of USER_JOB.Probe.log_and_wait.done on n1: OK -> PROCESSED"
    assert [line.split("] ")[-1] for line in lines[1:]] == ["first line, before the gate", "second line, after the gate"]


def test_the_shell_prints_a_follow_of_an_ended_job_a_line_at_a_time(cluster, tmp_path):
    _ended_job(cluster, tmp_path)
    follow = "joblog user_job 'Probe.log_and_wait' with uid='done' follow;"
    as_json = cluster.shell("--format", "json", "-e", follow)
    assert as_json.returncode == 0, as_json.stderr
    lines = [json.loads(text)["line"] for text in as_json.stdout.splitlines()]
    assert lines[0] == "run 1 of USER_JOB.Probe.log_and_wait.done on n1: OK -> PROCESSED" and len(lines) == 3, lines
    # The table format shows the same text as JOBLOG without FOLLOW.
    plain = cluster.shell("-e", "joblog user_job 'Probe.log_and_wait' with uid='done';")
    assert cluster.shell("-e", follow).stdout == plain.stdout != ""
