"""Issue #18, the local surface: a clear message instead of a raw traceback (input through the
Python API, a node that cannot serve its metrics), and files that may hold secrets created for
their owner only."""

from __future__ import annotations

import json
import os
import socket
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from backends import add_sections
from fabricjobs.client import Client
from fabricjobs.commands.statements import StartJob
from fabricjobs.config import load_config
from fabricjobs.errors import ValidationError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store


@pytest.fixture
def client(store_config):
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, owns_store=True)
    yield c
    c.close()


@pytest.mark.parametrize("call, why", [
    (lambda c: c.wait("user_job", "Probe.noop", "a\ud800", timeout=0.1), "UID must not contain .* \\(U\\+D800 at character 2\\)"),
    (lambda c: c.stop("user_job", "Probe\u202enoop", "a"), "NAME must not contain .* \\(U\\+202E at character 6\\)"),
    (lambda c: c.stop("user_job", "Probe.noop", "\u200ba"), "UID must not contain .* \\(U\\+200B at character 1\\)"),
    (lambda c: c.execute(StartJob("USER_JOB", "Probe.noop", "a", args='{"x": "\udc80"}')),
     "ARGS must not contain lone surrogates \\(U\\+DC80 at character 8\\)"),
])
def test_commands_built_in_code_are_held_to_the_same_rules_as_typed_ones(client, call, why):
    with pytest.raises(ValidationError, match=why):
        call(client)
    assert client.store.live_jobs() == []


@pytest.mark.parametrize("script, why", [
    ("startjob user_job name='Probe.noop' uid='a' args='{\"x\": \"a\ud800\"}';",
     "ARGS must not contain lone surrogates \\(U\\+D800 at character 9\\)"),
    ("startjob user_job name='Probe.noop' uid='a' depends_on='USER_JOB.Probe.noop.\udcff';",
     "DEPENDS_ON must not contain lone surrogates \\(U\\+DCFF at character 21\\)"),
    ("set k = 'v\ud800'; startjob user_job name='Probe.noop' uid='a';",
     "SET value must not contain lone surrogates \\(U\\+D800 at character 2\\)"),
    ("set k = v\ud800; startjob user_job name='Probe.noop' uid='a';",
     "SET value must not contain lone surrogates \\(U\\+D800 at character 2\\)"),
], ids=["args", "depends_on", "set-quoted", "set-bare"])
def test_a_lone_surrogate_in_free_text_is_refused_before_anything_is_stored(store_config, script, why):
    """No encoding can store one: it reached the store's insert as a raw UnicodeEncodeError."""
    from harness import TESTS

    cfg = load_config(add_sections(store_config, {"jobs": {"USER_JOBS_DIR": TESTS / "jobs"}}))
    client = Client(open_store(cfg), cfg, owns_store=True)
    try:
        _refused_then_nothing_stored(client, script, why)
    finally:
        client.close()


def _refused_then_nothing_stored(client, script, why):
    with pytest.raises(ValidationError, match=why):
        client.fetch(script)
    client.fetch("startjob user_job name='Probe.noop' uid='b';")  # the session holds nothing bad
    assert [j.key.uid for j in client.store.live_jobs()] == ["b"]


def test_a_node_whose_store_does_not_answer_exits_1_so_that_it_is_started_again(tmp_path):
    """Exit status 2 is for what waiting cannot change (the systemd unit leaves such a node
    down); a store that does not answer may answer in a minute: the node tries again for
    START_PATIENCE_SEC, one warning a try, then exits with status 1 and one line."""
    with socket.socket() as closed:  # a port with nobody behind it
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = tmp_path / "config.ini"
    config.write_text(f"[node]\nSTART_PATIENCE_SEC = 2\n[store]\nBACKEND = cassandra\n[cassandra]\n"
                      f"HOSTS = 127.0.0.1\nPORT = {port}\nCONNECT_TIMEOUT_SEC = 1\n")
    run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(config), "node", "--name", "n"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert "node n could not connect to its store yet (cannot connect to Cassandra" in run.stderr
    assert (f"fabricjobs: node 'n' cannot connect to its store: cannot connect to Cassandra at 127.0.0.1:{port}"
            in run.stderr), run.stderr
    assert "(tried for 2 s)" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_shell_that_cannot_reach_cassandra_says_so_in_one_line(tmp_path):
    """The user's terminal gets the command's own message, with each host's reason in words;
    the driver's lines about the hosts it tried go to the shell log."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = tmp_path / "config.ini"
    config.write_text(f"[store]\nBACKEND = cassandra\n[cassandra]\nHOSTS = 127.0.0.1\nPORT = {port}\n"
                      "CONNECT_TIMEOUT_SEC = 1\n")
    run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(config), "shell", "-e", "jobstatus;"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    assert run.returncode == 1
    assert run.stderr == f"fabricjobs: cannot connect to Cassandra at 127.0.0.1:{port}: connection refused\n"
    assert "cassandra.cluster" in (tmp_path / "fabricjobs" / "shell.log").read_text()


def test_a_store_setting_that_waiting_cannot_fix_still_exits_2(tmp_path):
    config = tmp_path / "config.ini"
    config.write_text("[store]\nBACKEND = cassandra\n[cassandra]\nREPLICATION = bogus\n")
    run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(config), "cassandra-schema"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "[cassandra] REPLICATION: expected SimpleStrategy:<n> or NetworkTopologyStrategy" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_metrics_port_in_use_stops_node_start_up_with_one_clear_line(store_config):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        add_sections(store_config, {"metrics": {"PORT": port}})
        run = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(store_config), "node", "--name", "n"],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"fabricjobs: [metrics] PORT = {port} (ADDRESS 127.0.0.1): cannot serve metrics there" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing-0644"])
def test_a_sqlite_store_and_its_wal_are_readable_by_their_owner_only(tmp_path, existing):
    """New ones are created 0600; one made before that rule (or copied with cp) kept 0644, and
    is tightened when opened."""
    import sqlite3

    from fabricjobs.store.sqlite import SqliteStore

    old = sqlite3.connect(tmp_path / "jobs.db") if existing else None
    if old is not None:
        old.execute("PRAGMA journal_mode=WAL")
        old.execute("CREATE TABLE t (x)")
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            os.chmod(tmp_path / name, 0o644)
    store = SqliteStore(str(tmp_path / "jobs.db"))
    try:
        store.insert(Job(JobKey("USER_JOB", "A.b", "secret"), Status.WAITING, datetime.now(timezone.utc),
                         arguments='{"password": "hunter2"}'))
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    finally:
        store.close()
        if old is not None:
            old.close()


def test_an_existing_shell_log_left_readable_by_others_is_made_owner_only(tmp_path, monkeypatch):
    import io

    from fabricjobs.shell.script import report_internal_error

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    log = tmp_path / "state" / "fabricjobs" / "shell.log"
    log.parent.mkdir(parents=True)
    log.write_text("an old line\n")
    log.chmod(0o644)
    report_internal_error(RuntimeError("a bug"), io.StringIO())
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "RuntimeError: a bug" in log.read_text()


def test_the_shell_log_is_readable_by_its_owner_only(tmp_path, monkeypatch):
    import io

    from fabricjobs.shell.script import report_internal_error

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    report_internal_error(RuntimeError("a bug"), io.StringIO())
    log = tmp_path / "state" / "fabricjobs" / "shell.log"
    assert "RuntimeError: a bug" in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(log.parent.stat().st_mode) == 0o700


@pytest.mark.slow
def test_a_node_restarts_when_its_recorded_pid_now_belongs_to_another_process(tmp_path):
    """The name check tells a live node from a reused pid by the process's start time."""
    import dataclasses
    import signal

    from harness import Cluster, wait_for

    (tmp_path / "c").mkdir()
    cluster = Cluster(tmp_path / "c")
    other = None
    store = open_store(load_config(cluster.config_path))
    try:
        node = cluster.start_node("a")
        twin = subprocess.run([sys.executable, "-m", "fabricjobs", "--config", str(cluster.config_path), "node",
                               "--name", "a"], capture_output=True, text=True, timeout=60)
        assert twin.returncode == 2 and f"node 'a' is already running (pid {node.pid}" in twin.stderr
        node.signal_group(signal.SIGKILL)
        wait_for(lambda: not node.alive(), 10, "the node to die")
        # Started after the node (a pid is reused later): start times have a 10 ms tick, and a
        # process started in the node's own tick would pass for it.
        other = subprocess.Popen(["sleep", "60"])
        row = next(r for r in store.nodes() if r.name == "a")
        store.write_node(dataclasses.replace(row, pid=other.pid))  # the pid now names a sleep
        again = cluster.start_node("a")  # waits until it has started
        assert again.alive() and "already running" not in again.log()
    finally:
        if other is not None:
            other.kill()
            other.wait()
        store.close()
        cluster.stop_all()


# -- hostile ARGS (item 7): one clear error on the job, no retry, never a dead worker -----------

HOSTILE_PROCESS_ARGS = [
    ('{"²": "x"}', "PROCESS ARGS key '²': argument positions are written in ASCII digits"),
    ('{"0": "a\\u0000b"}', "PROCESS argument 0 holds a NUL byte"),
    ('{"0": "' + "x" * 200_000 + '"}', "PROCESS argument 0 is 200,000 bytes; an argument must be under 131,072"),
]


PROCESS_LIMITS_THAT_CANNOT_BE = [
    ('{"time_limit_sec": 0}', "time_limit_sec must be a number of seconds above 0"),
    ('{"time_limit_sec": "soon"}', "time_limit_sec must be a number of seconds above 0"),
    ('{"memory_mb": 1}', "memory_mb must be a whole number of MiB from 16 to 1073741824, not 1"),
    ('{"memory_mb": 8796093022208}', "memory_mb must be a whole number of MiB from 16 to 1073741824"),
    ('{"memory_mb": 64.5}', "memory_mb must be a whole number of MiB"),
    ('{"memory_mb": true}', "memory_mb must be a whole number of MiB"),
]


@pytest.mark.parametrize("args, why", HOSTILE_PROCESS_ARGS + PROCESS_LIMITS_THAT_CANNOT_BE,
                         ids=["superscript-key", "nul", "e2big", "time-0", "time-text", "memory-1", "memory-huge",
                              "memory-float", "memory-bool"])
def test_startjob_refuses_process_args_no_program_could_receive(store_config, args, why):
    from harness import ROOT

    add_sections(store_config, {"jobs": {"PROCESS_JOBS_DIR": ROOT / "examples" / "process_jobs"}})
    cfg = load_config(store_config)
    with Client(open_store(cfg), cfg, owns_store=True) as c:
        with pytest.raises(ValidationError, match=why):
            c.fetch(f"startjob process name='echoArg.sh' uid='h' args='{args}';")
        assert c.store.live_jobs() == []


@pytest.mark.parametrize("job_type, name, args, why", [
    *[("PROCESS", "echoArg.sh", a, w) for a, w in HOSTILE_PROCESS_ARGS],
    ("USER_JOB", "Kinds.takes_dict", '{"d": ' + "[" * 100_000 + "]" * 100_000 + "}", "bad ARGS: nested too deeply"),
    ("USER_JOB", "Kinds.takes_dict", '{"d": "' + "[" * 100_000 + "]" * 100_000 + '"}', "nested too deeply"),
], ids=["superscript-key", "nul", "e2big", "deep-json", "deep-json-string"])
def test_a_worker_fails_a_row_with_hostile_args_cleanly_without_retry(tmp_path, job_type, name, args, why):
    """Rows that never met this STARTJOB (an older shell, UPDATEJOB, a store written by hand)."""
    import logging

    from fabricjobs.jobs.context import FailMode
    from fabricjobs.jobs.registry import JobCatalog
    from fabricjobs.worker.runner import ERROR, RunSpec, run_job
    from harness import ROOT

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "Kinds.py").write_text("def takes_dict(d: dict):\n    return len(d)\n")
    catalog = JobCatalog(str(jobs), (), str(ROOT / "examples" / "process_jobs"))
    spec = RunSpec(task=1, key=JobKey(job_type, name, "h"), epoch=1, node="n", arguments=args, slot=0,
                   output_max=4096, catalog=catalog, generation=1)
    outcome = run_job(spec, lambda: False, lambda pid: None, logging.getLogger("test"))
    assert outcome.kind == ERROR and outcome.mode is FailMode.NO_RETRY
    assert why in outcome.error and "Traceback" not in outcome.error


# -- the doorbell (item 15): coalesced, and only this user's rings ------------------------------

def _counting_listener(scope: str):
    import uuid

    from fabricjobs.wakeup import Doorbell

    bell = Doorbell(f"{scope}-{uuid.uuid4().hex}")
    rings = {"n": 0}
    stop = bell.listen("n1", lambda: rings.__setitem__("n", rings["n"] + 1))
    return bell, rings, stop


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the doorbell is Linux-only")
def test_a_flood_of_rings_is_answered_at_most_fifty_times_a_second():
    import time

    from fabricjobs.wakeup import RING_INTERVAL
    from harness import wait_for

    bell, rings, stop = _counting_listener("flood")
    try:
        bell.ring(["n1"])
        wait_for(lambda: rings["n"] == 1, 15, "a single ring to be answered")
        began, sent = time.monotonic(), 0
        while time.monotonic() - began < 0.5:
            bell.ring(["n1"])
            sent += 1
        wait_for(lambda: rings["n"] > 1, 15, "the flood to be answered")
        elapsed = time.monotonic() - began
        assert sent > 1000 and rings["n"] <= 1 + elapsed / RING_INTERVAL + 2, (sent, rings["n"])
    finally:
        stop()
        bell.close()


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                    reason="needs root, to ring as another user")
def test_rings_from_another_user_are_ignored():
    bell, rings, stop = _counting_listener("creds")
    try:
        child = os.fork()
        if child == 0:  # another local user (nobody) rings a thousand times
            try:
                os.setuid(65534)
                for _ in range(1000):
                    bell.ring(["n1"])
            finally:
                os._exit(0)
        os.waitpid(child, 0)
        # Then this user. Its ring may find the socket's queue still full of the flood (a ring
        # that does not fit is dropped: the node polls), so it rings until answered; every
        # answer must be one of its own rings, none of the flood's.
        ours = 0
        deadline = time.monotonic() + 10
        while rings["n"] == 0 and time.monotonic() < deadline:
            bell.ring(["n1"])
            ours += 1
            end = time.monotonic() + 0.2
            while rings["n"] == 0 and time.monotonic() < end:
                time.sleep(0.005)
        assert 1 <= rings["n"] <= ours, (rings["n"], ours)
    finally:
        stop()
        bell.close()


# -- what a run starts ends with it (docs/guides/writing-jobs.md) -----------------------------------------

def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (killed, not yet reaped by its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_a_process_job_that_leaves_a_background_process_ends_at_once_and_takes_it_along(cluster, tmp_path):
    from harness import wait_for

    cluster.start_node("a")
    pidfile = tmp_path / "bg.pid"
    cluster.fetch(f"startjob process name='background.sh' uid='bg' args='{{\"0\": \"{pidfile}\"}}';")
    job = cluster.wait_job("PROCESS", "background.sh", "bg", lambda j: j.archived, 20)
    assert job.status is Status.PROCESSED and json.loads(job.output).strip() == "started"
    assert (job.end_time - job.start_time).total_seconds() < 5  # it waited 10 s on the pipe
    wait_for(lambda: _gone(int(pidfile.read_text())), 15, "the background sleep to be ended")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["returns", "killed", "stopped"])
def test_a_user_jobs_child_process_ends_with_its_run(cluster, tmp_path, how):
    from harness import wait_for

    cluster.start_node("a")
    pidfile = tmp_path / "child.pid"
    wait = "false" if how == "returns" else "true"
    cluster.fetch(f"startjob user_job name='Hazard.spawn' uid='s' args='{{\"pidfile\": \"{pidfile}\", \"wait\": {wait}}}';")
    wait_for(pidfile.exists, 20, "the job to start its child")
    child = int(pidfile.read_text())
    if how == "killed":
        row = cluster.wait_job("USER_JOB", "Hazard.spawn", "s", lambda j: j.status is Status.IN_PROCESS)
        task = wait_for(lambda: next((r["task"] for r in cluster.fetch("ps;") if r["description"].endswith("Hazard.spawn")),
                                     None), 10, "the run in PS")  # PS shows what the node's beat published
        cluster.fetch(f"kill '{row.worker_id}' {task};")
    elif how == "stopped":
        cluster.fetch("stopjob user_job name='Hazard.spawn' uid='s';")
    # The run has ended: archived, or (KILL) its try counted. Not "WAITING": a killed run's
    # retry is claimed again within a reconcile pass, and a poll can miss that moment.
    cluster.wait_job("USER_JOB", "Hazard.spawn", "s", lambda j: j.archived or j.tries >= 1, 20)
    wait_for(lambda: _gone(child), 10, f"the job's child {child} to be ended ({how})")


# -- listener file handling (item 14) -----------------------------------------------------------

@pytest.mark.parametrize("extra, why", [
    ({"poll_sec": 0}, "poll_sec must be a number of seconds from 0.05 to 3600, not 0"),
    ({"poll_sec": "soon"}, "poll_sec must be a number of seconds from 0.05 to 3600, not \"soon\""),
    ({"settle_sec": -1}, "settle_sec must be a number of seconds from 0 to 3600, not -1"),
    ({"settle_sec": True}, "settle_sec must be a number of seconds"),
])
def test_startjob_refuses_listener_times_that_would_spin_or_crash_it(store_config, tmp_path, extra, why):
    (tmp_path / "root" / "inbox").mkdir(parents=True)
    from harness import ROOT

    add_sections(store_config, {"jobs": {"LISTENER_ROOT": tmp_path / "root", "USER_JOBS_DIR": ROOT / "tests" / "jobs"}})
    cfg = load_config(store_config)
    args = json.dumps({"path": "inbox", **extra})
    with Client(open_store(cfg), cfg, owns_store=True) as c:
        with pytest.raises(ValidationError, match=why.replace("(", r"\(")):
            c.fetch(f"startjob interface_listener name='Probe.handle_file' uid='l' args='{args}';")
        assert c.store.live_jobs() == []


@pytest.mark.slow
def test_a_listener_skips_symlinks_and_unfit_names_lives_on_and_takes_a_name_dropped_again(tmp_path, request, node_backend):
    from harness import Cluster, read_records, start_inbox_listener, wait_for

    root = tmp_path / "root"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    secret = tmp_path / "secret.csv"
    secret.write_text("not for the listener")
    log = tmp_path / "handled.jsonl"
    cluster = Cluster(tmp_path, backend=node_backend, request=request, settings={"jobs": {"LISTENER_ROOT": str(root)}})
    try:
        node = cluster.start_node("a")
        start_inbox_listener(cluster, log)
        (inbox / "link.csv").symlink_to(secret)
        fd = os.open(os.fsencode(inbox) + b"/bad\xff.csv", os.O_WRONLY | os.O_CREAT, 0o600)  # not UTF-8
        os.close(fd)
        (inbox / "forged\rINFO fake line.csv").write_text("x")
        (inbox / "good.csv").write_text("y")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"good.csv"}, 15, "good.csv handled")
        wait_for(lambda: node.log().count("skips the file") >= 2, 10, "the unfit names to be logged")
        assert "'bad\\udcff.csv'" in node.log() and "'forged\\rINFO fake line.csv'" in node.log()
        assert "link.csv" not in {r["file"] for r in read_records(log)}
        assert cluster.job("INTERFACE_LISTENER", "Probe.handle_file", "inbox").status is Status.IN_PROCESS
        (inbox / "later.csv").write_text("z")  # and it goes on
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"good.csv", "later.csv"}, 15, "later.csv handled")
        (inbox / "good.csv").unlink()  # a new file under a handled name is a new file
        (inbox / "good.csv").write_text("y, again")
        handled = wait_for(lambda: (lambda rs: rs if len(rs) == 3 else None)(read_records(log)), 15,
                           "good.csv dropped again to be handled")
        keys = [r["key"] for r in handled if r["file"] == "good.csv"]
        assert len(set(keys)) == 2 and keys[0].endswith("inbox/good.csv") and "inbox/good.csv/" in keys[1], keys
    finally:
        cluster.stop_all()


# -- deployment (docs/guides/writing-jobs.md): a run uses the code on disk when it starts -----------------

DEPLOY_V1 = '''\
import json
import time

from fabricjobs.jobs.context import current_job


def version(log: str = "", wait: bool = False):
    job = current_job()
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"uid": job.key.uid, "v": 1}) + "\\n")
    while wait and not job.is_aborted():
        time.sleep(0.05)
    return {"v": 1}
'''
DEPLOY_V2 = DEPLOY_V1.replace('"v": 1', '"v": 2, "deployed": "again"') + '''

def added():
    return {"added": True}
'''


@pytest.mark.slow
def test_new_job_code_is_picked_up_by_warm_workers_and_restartjob_moves_running_jobs_onto_it(tmp_path, request,
                                                                                            node_backend):
    from harness import Cluster, read_records, wait_for

    jobs = tmp_path / "deploy"
    jobs.mkdir()
    (jobs / "Deploy.py").write_text(DEPLOY_V1)
    log = tmp_path / "versions.jsonl"
    cluster = Cluster(tmp_path, backend=node_backend, request=request, settings={"jobs": {"USER_JOBS_DIR": str(jobs)}})
    try:
        cluster.start_node("a")
        cluster.fetch(f"startjob user_job name='Deploy.version' uid='long' args='{{\"log\": \"{log}\", \"wait\": true}}';")
        wait_for(lambda: any(r["uid"] == "long" for r in read_records(log)), 20, "the long run to start on v1")
        # A second worker (the first is busy with the long run) imports v1 and stays warm.
        cluster.fetch(f"startjob user_job name='Deploy.version' uid='one' args='{{\"log\": \"{log}\"}}';")
        first = cluster.wait_job("USER_JOB", "Deploy.version", "one", lambda j: j.archived, 20)
        assert json.loads(first.output) == {"v": 1}
        (jobs / "Deploy.py").write_text(DEPLOY_V2)  # the deployment
        # The first request after it names a function the warm worker's v1 module lacks.
        cluster.fetch("startjob user_job name='Deploy.added' uid='three';")
        added = cluster.wait_job("USER_JOB", "Deploy.added", "three", lambda j: j.archived, 20)
        assert (added.status, added.error_msg) == (Status.PROCESSED, "") and json.loads(added.output) == {"added": True}
        cluster.fetch("startjob user_job name='Deploy.version' uid='two';")
        second = cluster.wait_job("USER_JOB", "Deploy.version", "two", lambda j: j.archived, 20)
        assert json.loads(second.output) == {"v": 2, "deployed": "again"}  # same warm worker, new code
        cluster.fetch(f"startjob user_job name='Deploy.version' uid='later' args='{{\"log\": \"{log}\"}}' "
                      "exec_interval='01:00:00' ;")  # recurring: fires now, then in an hour
        wait_for(lambda: any(r["uid"] == "later" for r in read_records(log)), 20, "the recurring job's first fire")
        later = cluster.wait_job("USER_JOB", "Deploy.version", "later", lambda j: j.status is Status.SCHEDULED)
        restarted = cluster.fetch("restartjob user_job name='Deploy.version' running;")  # the deploy's restart
        assert [r["UID"] for r in restarted] == ["long"]
        wait_for(lambda: [r["v"] for r in read_records(log) if r["uid"] == "long"] == [1, 2], 20,
                 "the long job to run again on v2")
        # The idle recurring job keeps its schedule: no fire outside it.
        assert [r["v"] for r in read_records(log) if r["uid"] == "later"] == [2]
        again = cluster.job("USER_JOB", "Deploy.version", "later")
        assert (again.status, again.next_run, again.epoch) == (Status.SCHEDULED, later.next_run, later.epoch)
    finally:
        cluster.stop_all()


# -- a full disk at COMMIT (item 5) -------------------------------------------------------------

@pytest.mark.slow
def test_an_outcome_whose_commit_hits_a_full_disk_is_written_later_and_the_job_runs_once(tmp_path, small_disk):
    """The DB filled up while a 2 s job ran and was freed after it: the outcome's COMMIT failed,
    the run was forgotten with its row IN_PROCESS, and a takeover ran the job a second time."""
    from harness import Cluster, fill_up, read_records, wait_for

    (tmp_path / "c").mkdir()
    # A lease long enough to outlast the full disk: this test is about the outcome, not fencing
    # (a node that cannot beat for its whole lease rightly ends its runs).
    cluster = Cluster(tmp_path / "c", settings={"store": {"SQLITE_PATH": str(small_disk / "jobs.db")},
                                                "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 1000,
                                                              "FABRIC_HEARTBEAT_MISS": 20}})
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    filler = small_disk / "filler"
    try:
        node = cluster.start_node("a")
        args = json.dumps({"log": str(log), "starts": str(starts), "seconds": 2.0})
        cluster.fetch(f"startjob user_job name='Probe.record' uid='full' args='{args}';")
        wait_for(lambda: read_records(starts), 20, "the run to start")
        fill_up(filler)  # the disk is full now
        wait_for(lambda: read_records(log), 20, "the run to end")
        wait_for(lambda: "reconcile pass failed" in node.log() or "post-execution write" in node.log(), 20,
                 "the outcome's write to fail on the full disk")
        filler.unlink()  # space again
        done = cluster.wait_job("USER_JOB", "Probe.record", "full", lambda j: j.archived, 30)
        assert done.status is Status.PROCESSED and (done.epoch, done.tries) == (1, 0)
        assert len(read_records(starts)) == 1  # ran once
    finally:
        if filler.exists():
            filler.unlink()
        cluster.stop_all()


def test_a_startjob_whose_commit_hits_a_full_disk_shows_no_job_and_records_none(tmp_path, small_disk):
    """A script's STARTJOBs are written in one transaction: when its COMMIT failed on a full
    disk, the shell still printed the job as created (and --started-jobs recorded it), though
    the store had none. Nothing is shown or recorded now, and the shell says why."""
    from harness import Cluster, fill_up

    (tmp_path / "c").mkdir()
    cluster = Cluster(tmp_path / "c", settings={"store": {"SQLITE_PATH": str(small_disk / "jobs.db")}})
    filler, started = small_disk / "filler", tmp_path / "started.jsonl"
    try:
        cluster.start_node("a")  # (holds the store open: its -wal and -shm files stay)
        assert cluster.shell("-e", "startjob user_job name='Probe.noop' uid='before';").returncode == 0
        fill_up(filler)  # the disk is full now
        r = cluster.shell("--format", "json", "--started-jobs", str(started), "-e",
                          "startjob user_job name='Probe.noop' uid='lost' exec_interval='0 0 1 1 *';")
        assert r.returncode == 1 and "full" in r.stderr, (r.stdout, r.stderr)
        assert "lost" not in r.stdout and not (started.exists() and started.read_text()), (r.stdout, started)
        filler.unlink()
        assert cluster.client().store.get(JobKey("USER_JOB", "Probe.noop", "lost")) is None
    finally:
        if filler.exists():
            filler.unlink()
        cluster.stop_all()


@pytest.mark.slow
def test_an_outcome_whose_commit_fails_once_is_written_later_and_the_job_runs_once(tmp_path):
    """The tmpfs test above without root: the node (tests/helpers/failing_commit_node.py) fails
    the first COMMIT that holds a final outcome, as the full disk did, and rolls it back: the
    outcome counts as written only once a write of it committed."""
    from harness import Cluster, read_records, wait_for

    cluster = Cluster(tmp_path)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    try:
        node = cluster.start_helper_node("a", "failing_commit_node.py")
        args = json.dumps({"log": str(log), "starts": str(starts), "seconds": 0.5})
        cluster.fetch(f"startjob user_job name='Probe.record' uid='once' args='{args}';")
        wait_for(lambda: "injected: COMMIT failed" in node.log(), 20, "the outcome's COMMIT to fail")
        done = cluster.wait_job("USER_JOB", "Probe.record", "once", lambda j: j.archived, 30)
        assert done.status is Status.PROCESSED and (done.epoch, done.tries) == (1, 0)
        assert len(read_records(starts)) == 1 and len(read_records(log)) == 1  # ran once
    finally:
        cluster.stop_all()


@pytest.mark.slow
def test_a_node_whose_whole_read_of_the_nodes_keeps_failing_still_takes_a_dead_nodes_job_over(tmp_path):
    """The observer (tests/helpers/range_read_failing_node.py) cannot read the nodes table
    whole, as on Cassandra while a replica is cut off and not yet known to be down (a range
    read waits it out). It reads the rows of the nodes it knows one at a time instead, so a
    SIGKILLed node is still judged dead and its job runs again on the observer."""
    from harness import Cluster, read_records, wait_for

    cluster = Cluster(tmp_path)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    try:
        a = cluster.start_node("a")
        args = json.dumps({"log": str(log), "starts": str(starts), "seconds": 30})
        cluster.fetch(f"startjob user_job name='Probe.record' uid='orphan' args='{args}';")
        wait_for(lambda: [r["node"] for r in read_records(starts)] == ["a"], 20, "a to start the job")
        b = cluster.start_helper_node("b", "range_read_failing_node.py")
        wait_for(lambda: "judging the 1 known nodes by their rows" in b.log(), 20, "b to read the nodes row by row")
        a.signal_group(signal.SIGKILL)
        wait_for(lambda: [r["node"] for r in read_records(starts)] == ["a", "b"], 30,
                 lambda: f"b to take the job over; b's log ends:\n{b.log()[-3000:]}")
        assert "took over 'USER_JOB.Probe.record.orphan' from dead node a" in b.log()
    finally:
        cluster.stop_all()


# -- PROCESS runs: their time, memory and environment (Must show: the resource policy) --------

@pytest.mark.slow
def test_process_runs_keep_to_their_time_and_memory_limits_and_see_only_the_documented_environment(tmp_path, request,
                                                                                                   node_backend):
    from harness import Cluster

    cluster = Cluster(tmp_path, backend=node_backend, request=request, settings={
        "jobs": {"MAX_TRIES": 1, "PROCESS_MEMORY_MB": 128, "PROCESS_ENV": "KEEP_ME"}})
    try:
        cluster.start_node("a", extra_env={"KEEP_ME": "kept", "NODE_SECRET": "s3cret", "FABRICJOBS_CASSANDRA_PASSWORD": "pw"})
        trapped = tmp_path / "trapped"  # ignore_term.sh creates it once it ignores SIGTERM
        slow_args = {"0": str(trapped), "time_limit_sec": 2}
        cluster.fetch("startjob process name='env.sh' uid='env';"
                      "startjob process name='alloc.sh' uid='small' args='{\"0\": \"40\"}';"
                      "startjob process name='alloc.sh' uid='big' args='{\"0\": \"300\", \"memory_mb\": 4096}';"
                      f"startjob process name='ignore_term.sh' uid='slow' args='{json.dumps(slow_args)}';"
                      "startjob process name='term_ok.sh' uid='partial' args='{\"time_limit_sec\": 1}';")
        done = lambda j: j.archived  # noqa: E731

        env = cluster.wait_job("PROCESS", "env.sh", "env", done, 20)
        assert env.status is Status.PROCESSED, env.error_msg  # (a failed run has no output to read)
        seen = dict(line.split("=", 1) for line in json.loads(env.output).splitlines() if "=" in line)
        assert seen["KEEP_ME"] == "kept" and seen["FABRICJOBS_JOB_UID"] == "env" and "PATH" in seen
        assert "NODE_SECRET" not in seen and "FABRICJOBS_CASSANDRA_PASSWORD" not in seen

        small = cluster.wait_job("PROCESS", "alloc.sh", "small", done, 20)
        assert small.status is Status.PROCESSED, small.error_msg
        big = cluster.wait_job("PROCESS", "alloc.sh", "big", done, 20)  # asked for more than the node allows
        assert big.status is Status.FAILED
        assert "MemoryError" in big.error_msg and "under a memory limit of 128 MiB" in big.error_msg

        slow = cluster.wait_job("PROCESS", "ignore_term.sh", "slow", done, 30)  # it ignores SIGTERM: killed after the grace
        assert slow.status is Status.FAILED
        if trapped.exists():  # SIGTERM ignored: SIGKILL after the grace
            assert slow.error_msg.startswith("ran past its time limit of 2 s (killed by signal 9)"), slow.error_msg
        else:  # the real tier's niced node stalled the script past its limit before its trap (seen once)
            assert slow.error_msg.startswith("ran past its time limit of 2 s (killed by signal 15)"), slow.error_msg
        took = (slow.end_time - slow.start_time).total_seconds()
        assert 2 <= took < 20, took
        partial = cluster.wait_job("PROCESS", "term_ok.sh", "partial", done, 30)  # exit 0 on SIGTERM: still a failure
        assert partial.status is Status.FAILED
        assert partial.error_msg.startswith("ran past its time limit of 1 s (exit code 0)"), partial.error_msg
    finally:
        cluster.stop_all()


# -- a listener's store needs go through its node (workers hold no store: docs/guides/security.md) ----------

def test_a_listeners_requests_are_answered_for_its_own_marks_and_jobs_only(store_config, tmp_path):
    from fabricjobs.clock import SystemClock
    from fabricjobs.model import Event, advance
    from fabricjobs.node.listener_requests import ListenerRequests, RequestRefused
    from fabricjobs.service import CommandService
    from harness import ROOT

    # The node's own OS user could give no more than 3: the listener owner's ceiling (7) applies.
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "tests" / "jobs", "MAX_JOB_PRIORITY": 3,
                                         "MAX_JOB_PRIORITY_BY_USER": "alice=7"}})
    cfg = load_config(store_config)
    store = open_store(cfg)
    try:
        now = datetime.now(timezone.utc)
        listener = store.insert(advance(None, Event.START, Job(
            JobKey("INTERFACE_LISTENER", "Probe.handle_file", "inbox"), Status.WAITING, now, next_run=now,
            affinity="ANY", priority=7, owner="alice", requestor="imports"))).row
        answers = ListenerRequests(CommandService(store, cfg, SystemClock()))
        child = JobKey("USER_JOB", "Probe.handle_file", "inbox/a.csv")
        assert answers.answer(listener, "start", (child, '{"file": "/x/a.csv", "name": "a.csv"}')) is True
        row = answers.answer(listener, "get", (child,))
        assert row.status is Status.WAITING and row.priority == 7 and json.loads(row.arguments)["name"] == "a.csv"
        assert (row.owner, row.requestor) == ("alice", "imports")  # the listener's, whose file it is
        assert answers.answer(listener, "start", (child, "{}")) is False  # a live job has the key
        assert answers.answer(listener, "mark_file", ("a.csv/1-2-3", "started")) is True
        assert answers.answer(listener, "marked_files", ()) == {"a.csv/1-2-3"}
        for other in (JobKey("USER_JOB", "Probe.handle_file", "other/a.csv"), JobKey("USER_JOB", "Probe.echo", "inbox/a.csv"),
                      JobKey("PROCESS", "Probe.handle_file", "inbox/a.csv")):
            with pytest.raises(RequestRefused, match="may only touch its own files' jobs"):
                answers.answer(listener, "start", (other, "{}"))
        with pytest.raises(ValidationError):  # a STARTJOB like any other: NAME must resolve
            bad = listener.replace(key=JobKey("INTERFACE_LISTENER", "Probe.no_such_function", "inbox"))
            answers.answer(bad, "start", (JobKey("USER_JOB", "Probe.no_such_function", "inbox/b.csv"), "{}"))
        assert store.get(JobKey("USER_JOB", "Probe.no_such_function", "inbox/b.csv")) is None
    finally:
        store.close()


def test_a_bare_name_mark_from_before_versions_stands_only_for_the_file_it_marked(tmp_path):
    """Marks written before they carried versions name the file only: the file still there is
    taken as handled, a file dropped under that name since is a new one."""
    import time as _time
    from datetime import timedelta

    from fabricjobs.worker.listener import child_key, listen
    from fabricjobs.jobs.registry import JobCatalog
    from harness import ROOT

    root = tmp_path / "root"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    started = datetime.now(timezone.utc) - timedelta(hours=2)
    listener = Job(JobKey("INTERFACE_LISTENER", "Probe.handle_file", "in"), Status.IN_PROCESS, started,
                   arguments=json.dumps({"path": "inbox", "pattern": "*.csv", "settle_sec": 0, "poll_sec": 0.05}))
    for name, age in (("kept.csv", 3), ("again.csv", 0)):  # hours old
        (inbox / name).write_text(name)
        t = _time.time() - age * 3600
        os.utime(inbox / name, (t, t))

    class Link:  # the node's side, in memory
        def __init__(self):
            self.marks = {"kept.csv", "again.csv", f"/present at {started.isoformat()}"}
            self.jobs = {child_key(listener.key, "again.csv"): listener.replace(creation_time=started)}
            self.started = []

        def marked_files(self, key):
            return set(self.marks)

        def mark_file(self, key, file, note):
            self.marks.add(file)
            return True

        def get(self, key):
            return self.jobs.get(key)

        def start(self, key, arguments):
            self.started.append(key.uid)
            return True

    link = Link()
    polls = iter(range(40))
    catalog = JobCatalog(str(ROOT / "tests" / "jobs"), (), "", str(root))
    listen(listener, catalog, link, json.loads(listener.arguments), lambda: next(polls, None) is None)
    assert len(link.started) == 1 and link.started[0].startswith("in/again.csv/"), link.started
    assert any(m.startswith("kept.csv/") for m in link.marks)  # taken as the file its bare mark stood for
