"""Hosts whose clocks are off, for real: node and shell processes under libfaketime (Debian's
``faketime``), which shifts every clock the process reads (``time.time``, the driver's write
timestamps, the node's own clock), on Apache Cassandra. The app-clock tests (a node given
``--clock-offset``) are in tests/test_cluster.py.

What must hold whatever the clocks (docs/explanation/cassandra-queue.md): every job submitted
by any of them runs exactly once, nothing is stranded without its index entry, and a process
whose clock is beyond the stated bound refuses to write, with a message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from backends import BACKENDS
from harness import read_records, wait_for
from fabricjobs.model import JobKey, Status

LIBFAKETIME = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1") if os.path.exists(p)), None)

pytestmark = [
    pytest.mark.real_cassandra,  # (its tests run in ./scripts/test's real tier, beside that tier's)
    pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="clock skew is about Apache Cassandra (the real tier)"),
    pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime is not installed (Debian: apt-get install faketime)"),
]


def skewed(seconds: float) -> dict[str, str]:
    """The environment that puts a process ``seconds`` ahead (negative: behind) of this host."""
    return {"LD_PRELOAD": LIBFAKETIME or "", "FAKETIME": f"{seconds:+g}s", "FAKETIME_DONT_FAKE_MONOTONIC": "0"}


def shell(cluster, script: str, env: dict[str, str] | None = None, config: Path | None = None,
          timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(config or cluster.config_path), "shell"], input=script, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})), cwd=cluster.tmp)


def script_of(uids: list[str], log: Path) -> str:
    args = json.dumps({"log": str(log), "seconds": 0.05})
    return "".join(f"startjob user_job name='Probe.record' uid='{u}' args='{args}';\n" for u in uids)


@pytest.fixture
def node_backend():
    return "cassandra-real"


def test_faketime_moves_the_clock_of_the_processes_it_is_given_to():
    """(Else the tests below would pass whatever the product did.)"""
    for offset in (-30, +3):
        out = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], capture_output=True, text=True,
                             env=dict(os.environ, **skewed(offset)), check=True).stdout
        assert abs(float(out) - time.time() - offset) < 2.0, (offset, out)


@pytest.mark.parametrize("skew", [3, 30])
@pytest.mark.parametrize("cluster", [{"heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 20}}],
                         indirect=True)
def test_jobs_from_shells_and_nodes_whose_clocks_are_off_run_exactly_once(cluster, tmp_path, skew):
    log = tmp_path / "runs.jsonl"
    cluster.start_node("plain")
    cluster.start_node("behind", extra_env=skewed(-skew))
    cluster.start_node("ahead", extra_env=skewed(+skew))
    # Three shells, one per clock, each submitting while the others' jobs are being claimed: a
    # busy queue, whose partitions the nodes read and sweep as the entries arrive.
    shells = {name: subprocess.Popen(
        [sys.executable, "-m", "fabricjobs", "--config", str(cluster.config_path), "shell"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cluster.tmp,
        env=dict(os.environ, **(skewed(offset) if offset else {})))
        for name, offset in (("behind", -skew), ("plain", 0), ("ahead", +skew))}
    uids = {name: [f"{name}{i:03d}" for i in range(60)] for name in shells}
    for name, proc in shells.items():
        proc.stdin.write(script_of(uids[name], log))
        proc.stdin.close()
    for name, proc in shells.items():
        proc.wait(timeout=120)
        assert proc.returncode == 0, f"shell {name}: {proc.stderr.read()}"
    every = [u for name in shells for u in uids[name]]

    store = cluster.client().store

    def left() -> list[str]:
        """Jobs whose row is not PROCESSED (read by key: a row stranded without its index entry
        is missing from every listing)."""
        rows = store.get_many([JobKey("USER_JOB", "Probe.record", u) for u in every])
        return [u for u, row in zip(every, rows) if row is None or row.status is not Status.PROCESSED]

    wait_for(lambda: not left(), 60, lambda: f"every job to be processed; left: {left()[:10]}")
    runs = Counter(r["key"].rsplit(".", 1)[1] for r in read_records(log))
    assert {u for u in every if runs[u] != 1} == set(), "each job runs exactly once"
    for node in cluster.nodes.values():
        assert node.alive(), node.log()[-2000:]


def test_a_host_beyond_the_skew_bound_refuses_to_write_and_says_why(cluster, tmp_path):
    bounded = tmp_path / "bounded.ini"
    bounded.write_text(cluster.config_path.read_text().replace("[cassandra]\n", "[cassandra]\nMAX_CLOCK_SKEW_SEC = 10\n", 1))
    cluster.start_node("plain")
    for offset in (-30, +30):
        refused = shell(cluster, "startjob user_job name='Probe.noop' uid='far';", skewed(offset), bounded)
        assert refused.returncode != 0
        where = "behind" if offset < 0 else "ahead of"
        assert f"s {where} Cassandra's, beyond [cassandra] MAX_CLOCK_SKEW_SEC = 10" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr + refused.stdout
        assert cluster.job("USER_JOB", "Probe.noop", "far") is None  # nothing was written
    # Reading is harmless: the same shell still shows the jobs.
    shown = shell(cluster, "jobstatus;", skewed(+30), bounded)
    assert shown.returncode == 0, shown.stderr
    # A node there does not start; within the bound (the default, 60 s) the same host works.
    node = cluster.spawn("far", config=bounded, env=skewed(+30))
    wait_for(lambda: not node.alive(), 60, "the node beyond the bound to exit")
    assert "MAX_CLOCK_SKEW_SEC = 10" in node.log()
    assert shell(cluster, "startjob user_job name='Probe.noop' uid='near';", skewed(+30)).returncode == 0
    cluster.wait_job("USER_JOB", "Probe.noop", "near", lambda j: j.status is Status.PROCESSED, 30)
