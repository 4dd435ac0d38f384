"""Fabric's log lines (LOG_FORMAT = FABRIC): every line of a node's log in the seed's shape, one
[LID...] log id per run."""

from __future__ import annotations

import re

from harness import Cluster, wait_for

FABRIC_LINE = re.compile(r"^(INFO|WARNING|ERROR|DEBUG) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[(LID[0-9a-f]{16})\] \[([^\]]+)\] (\S+) - (.*)$")


def test_fabric_log_lines_carry_a_log_id_per_run(tmp_path):
    """Seed 001's lines (``INFO 2025-01-27 21:49:43,131 [LID...] [thread] logger - message``):
    a run's lines, on the node and in its worker, share one LID; other lines have the node's."""
    c = Cluster(tmp_path, settings={"node": {"LOG_FORMAT": "FABRIC"}})
    try:
        node = c.start_node("local-1")
        r = c.shell("-e", "startjob user_job name='Probe.noop' uid='lid'; waitjob user_job 'Probe.noop' with uid='lid' timeout 20;")
        assert r.returncode == 0, r.stderr
        done = "job USER_JOB.Probe.noop.lid status was updated to PROCESSED."
        text = wait_for(lambda: (lambda t: t if done in t else None)(node.log_path.read_text()), 10, "the run's last line")
        lines = [FABRIC_LINE.match(line) for line in text.splitlines() if line.startswith(("INFO ", "WARNING ", "ERROR "))]
        assert lines and all(lines), [line for line in text.splitlines() if not FABRIC_LINE.match(line)][:3]
        started = next(m for m in lines if "node local-1 started" in m[5])
        finished = next(m for m in lines if m[5] == done)
        run_lines = [m for m in lines if "Probe.noop.lid" in m[5]]
        assert len(run_lines) >= 2 and {m[2] for m in run_lines} == {finished[2]}  # one LID for the run
        assert finished[2] != started[2] and started[4] == "fabricjobs.node"
    finally:
        c.stop_all()
