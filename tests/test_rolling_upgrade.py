"""A rolling upgrade on SQLite, with a real previous release: the code of the last commit before
schema version 12, taken from this repository's history, runs a node beside a node of this
code (docs/guides/operations/upgrade.md).

The new node migrates the file to schema 12 while the old node runs: both go on claiming and
running jobs, none is lost or run twice; the old node, once stopped, refuses to start again on
the newer file with a message that says what to do, and changes nothing.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from fabricjobs.store.sqlite.schema import SCHEMA_VERSION
from harness import ROOT, TESTS, read_records
from testkit.rig import Rig, wait_for, write_config

#: The commit that brought SQLite schema version 12; its parent is the release before it.
SCHEMA_12 = "2410f77"


def _previous_release(into: Path) -> Path:
    """fabricjobs/ and grammar/ as they were before schema 12, from git; skip without them."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", f"{SCHEMA_12}^", "fabricjobs",
                                  "grammar"], capture_output=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the previous release comes from git history, not available here: {exc}")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    assert "SCHEMA_VERSION = 11" in (into / "fabricjobs" / "store" / "sqlite" / "schema.py").read_text()
    return into


def _file_version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def _shell(env: dict, config: Path, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(config), "shell", "-e", text],
                          capture_output=True, text=True, timeout=60, env=env)


def _start_jobs(env: dict, config: Path, prefix: str, count: int, log: Path) -> None:
    text = "".join(f"startjob user_job name='Probe.record' uid='{prefix}{i}' args='{{\"log\": \"{log}\", "
                   f"\"seconds\": 0.2}}';\n" for i in range(count))
    r = _shell(env, config, text)
    assert r.returncode == 0, r.stderr


def test_a_node_of_the_previous_schema_runs_beside_a_new_one_and_then_refuses_the_newer_file(tmp_path):
    old_code = _previous_release(tmp_path / "previous")
    db = tmp_path / "jobs.db"
    config = write_config(tmp_path / "config.ini", {
        "store": {"SQLITE_PATH": str(db)},
        "jobs": {"USER_JOBS_DIR": str(TESTS / "jobs"), "RECONCILE_INTERVAL_MS": 200, "LANE_PATIENCE_MS": 50},
        "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 8},
    })
    old_env = {**os.environ, "PYTHONPATH": str(old_code)}  # its own fabricjobs first on the path
    new_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "runs.log"
    rig = Rig(tmp_path, config)
    try:
        old = rig.spawn("old", env=old_env)
        rig.wait_started(old)
        assert _file_version(db) == SCHEMA_VERSION - 1
        _start_jobs(old_env, config, "before-", 20, log)  # written by the old shell, on schema 11

        new = rig.spawn("new", env=new_env)  # migrates the file under the running old node
        rig.wait_started(new)
        assert _file_version(db) == SCHEMA_VERSION
        _start_jobs(new_env, config, "after-", 40, log)

        wait_for(lambda: len(read_records(log)) >= 60, 60, "all 60 jobs to run")
        wait_for(lambda: "(0 rows)" in _shell(new_env, config, "jobstatus user_job 'Probe.record';").stdout, 30,
                 "every job to be archived")
        rig.check_nodes()
        records = read_records(log)
        runs = Counter(r["key"] for r in records)
        assert len(runs) == 60 and set(runs.values()) == {1}, runs  # none lost, none run twice
        ran_on = Counter(r["node"] for r in records)
        assert ran_on["old"] > 0 and ran_on["new"] > 0, ran_on  # side by side
        done = _shell(new_env, config, "jobstatus user_job 'Probe.record' 1 days ago;").stdout
        assert done.count("PROCESSED") == 60, done

        old.signal(15)
        assert old.proc.wait(timeout=30) == 0
        again = rig.spawn("old", env=old_env)
        assert again.proc.wait(timeout=60) == 2
        message = again.log()
        assert f"has schema version {SCHEMA_VERSION}, newer than this fabricjobs understands ({SCHEMA_VERSION - 1}); " \
               "upgrade fabricjobs" in message, message
        assert "Traceback" not in message
        assert _file_version(db) == SCHEMA_VERSION
    finally:
        rig.kill_all()
