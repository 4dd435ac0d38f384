"""``fabricjobs init DIR`` on a fresh host, and ``fabricjobs --version``: what an operator
meets before anything runs (docs/get-started/install.md)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys

from fabricjobs import __version__
from fabricjobs.config import KEYS, load_config
from fabricjobs.store.sqlite.schema import SCHEMA_VERSION
from testkit.rig import Rig, wait_for


def fabricjobs(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabricjobs", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def test_init_writes_a_node_directory_a_node_runs_on_as_it_is(tmp_path):
    home = tmp_path / "srv" / "fj"
    made = fabricjobs("init", str(home))
    assert made.returncode == 0, made.stderr
    assert f"--config {home / 'config.ini'} node" in made.stdout
    config = home / "config.ini"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it will hold the store's password
    for d in ("jobs", "process_jobs"):  # a node refuses job directories others may write to
        assert not stat.S_IMODE((home / d).stat().st_mode) & 0o022
    text = config.read_text()
    for key in KEYS:  # every key, documented
        assert f"{key.name} =" in text, key.name
    cfg = load_config(config)
    assert cfg.warnings == ()
    assert cfg.get("store", "SQLITE_PATH") == str(home / "fabricjobs.db")
    assert cfg.get("jobs", "USER_JOBS_DIR") == str(home / "jobs")

    rig = Rig(tmp_path, config)
    try:
        node = rig.spawn("n1")
        rig.wait_started(node)
        started = rig.cli("shell", "-e", "startjob user_job name='Hello.hello' uid='h1' args='{\"who\": \"you\", \"times\": 2}';")
        assert started.returncode == 0, started.stderr
        wait_for(lambda: "PROCESSED" in rig.cli("shell", "-e", "jobstatus user_job 'Hello.hello' with uid='h1';").stdout,
                 30, "Hello.hello to run")
        log = rig.cli("shell", "-e", "joblog user_job 'Hello.hello' with uid='h1';").stdout
        assert "hello, you (2 of 2)" in log
    finally:
        rig.kill_all()


def test_init_never_overwrites_and_changes_nothing_when_a_file_is_there(tmp_path):
    home = tmp_path / "fj"
    home.mkdir()
    (home / "node.id").write_text("ANY:3\n")
    refused = fabricjobs("init", str(home))
    assert refused.returncode == 2
    assert "already holds node.id" in refused.stderr and "Traceback" not in refused.stderr
    assert sorted(p.name for p in home.iterdir()) == ["node.id"]
    assert (home / "node.id").read_text() == "ANY:3\n"


def test_a_directory_init_cannot_write_and_a_config_that_is_not_text_are_one_line_each(tmp_path):
    """What an operator gets wrong on a fresh host: one line naming the file, exit status 2,
    never an "internal error"."""
    refused = fabricjobs("init", "/proc/fabricjobs-here")  # (no one may make a directory in /proc)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("fabricjobs: cannot write /proc/fabricjobs-here") and "internal" not in refused.stderr
    binary = tmp_path / "config.ini"
    binary.write_bytes(b"[node]\nNAME = \xff\xfe\n")
    read = fabricjobs("--config", str(binary), "config")
    assert read.returncode == 2, read.stderr
    assert read.stderr == f"fabricjobs: cannot read config file '{binary}': it is not UTF-8 text (byte 0xff at offset 14)\n"
    schema = tmp_path / "cassandra.ini"
    schema.write_text("[store]\nBACKEND = cassandra\n")
    printed = fabricjobs("--config", str(schema), "cassandra-schema")
    assert printed.returncode == 2 and "needs [cassandra] REPLICATION" in printed.stderr, printed.stderr
    # Each of these once started a node under a name no AFFINITY could name, or ran a node on
    # ANY alone, or printed a traceback or an "internal error".
    fabricjobs("init", str(tmp_path / "home"))
    config = str(tmp_path / "home" / "config.ini")
    for args, says in ((("--name", "bad name/!"), "fabricjobs: --name: node names may use letters, digits and _ . : @ - only"),
                       (("--name", ""), "fabricjobs: --name: it is empty"),
                       (("--node-id", str(tmp_path / "no-such.id")), "fabricjobs: --node-id: no such file"),
                       (("--node-id", str(binary)), f"fabricjobs: cannot read node.id file {str(binary)!r}: it is not UTF-8")):
        node = fabricjobs("--config", config, "node", *args)
        assert node.returncode == 2 and node.stderr.startswith(says) and "Traceback" not in node.stderr, (args, node.stderr)
    script = fabricjobs("--config", config, "shell", "-f", str(binary))
    assert script.returncode == 2 and script.stderr == (f"fabricjobs: cannot read {binary}: it is not UTF-8 text "
                                                        "(byte 0xff at offset 14)\n"), script.stderr
    empty = tmp_path / "empty.ini"
    empty.write_text("[store]\nSQLITE_PATH =\n")
    shown = fabricjobs("--config", str(empty), "config")
    assert shown.returncode == 2 and "[store] SQLITE_PATH is empty" in shown.stderr, shown.stderr
    # A directory to paste: quoted where it holds a space or a quote.
    odd = tmp_path / "my dir's"
    assert f"fabricjobs --config '{tmp_path}/my dir'\"'\"'s/config.ini' node" in fabricjobs("init", str(odd)).stdout


def test_version_names_the_release_python_store_and_schema_versions(tmp_path):
    cfg = tmp_path / "config.ini"
    db = tmp_path / "jobs.db"
    cfg.write_text(f"[store]\nSQLITE_PATH = {db}\n")
    before = fabricjobs("--config", str(cfg), "--version")
    assert before.returncode == 0, before.stderr
    lines = before.stdout.splitlines()
    assert lines[0] == f"fabricjobs {__version__}"
    assert lines[1].startswith(f"Python {sys.version_info.major}.{sys.version_info.minor}.")
    assert f"store: sqlite, schema version {SCHEMA_VERSION}" in lines[2] and "not created yet" in lines[2]
    assert not db.exists()  # a version query creates no store
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()
    after = fabricjobs("--config", str(cfg), "--version")
    assert f"{db}: schema version {SCHEMA_VERSION - 1}" in after.stdout
    db.write_bytes(b"not a database, though a file is there")
    damaged = fabricjobs("--config", str(cfg), "--version")
    assert damaged.returncode == 0 and f"{db}: exists, cannot be read: file is not a database" in damaged.stdout
    cassandra = tmp_path / "c.ini"
    cassandra.write_text("[store]\nBACKEND = cassandra\n[cassandra]\nHOSTS = c1, c2\nKEYSPACE = jobs\n")
    named = fabricjobs("--config", str(cassandra), "--version", env={**os.environ})
    assert "store: cassandra, schema version" in named.stdout and "keyspace jobs on c1, c2" in named.stdout
