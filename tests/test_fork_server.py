"""A node's fork server and resource tracker are forks of the node (worker/zygote.py), not
fresh interpreters that import fabricjobs again, and they go when the node dies."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from fabricjobs.model import Status
from fabricjobs.worker.reaper import descendants
from harness import wait_for

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    return [p for p in descendants(pid) if _ppid(p) == pid]


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_the_fork_server_is_a_fork_of_the_node_runs_its_jobs_and_ends_with_it(cluster):
    node = cluster.start_node("node-a")
    cluster.fetch("startjob user_job name='Probe.echo' uid='z1' args='{\"value\": 1}';")
    job = cluster.wait_job("USER_JOB", "Probe.echo", "z1", lambda j: j.archived)
    assert job.status is Status.PROCESSED

    helpers = _children(node.pid)
    # A Python started afresh by multiprocessing would show its own command line
    # ("-c from multiprocessing.forkserver import main; ..."); a fork shows the node's.
    assert len(helpers) == 2, [(p, _cmdline(p)) for p in helpers]
    assert all(_cmdline(p) == _cmdline(node.pid) for p in helpers), [_cmdline(p) for p in helpers]
    server = [p for p in helpers if _children(p)]  # the fork server: the workers (idle for 60 s) are its children
    assert len(server) == 1 and set(descendants(node.pid)) - set(helpers) == set(descendants(server[0]))

    everything = descendants(node.pid)
    os.kill(node.pid, signal.SIGKILL)  # the node alone: its helpers and workers must see it go
    wait_for(lambda: not any(_cmdline(p) for p in everything), 15,
             lambda: f"the node's helpers and workers to exit: {[p for p in everything if _cmdline(p)]} still run")
