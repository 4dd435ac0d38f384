"""A run's processes end with the run (docs/guides/run-isolation.md): a job that forks twice
and puts its grandchild in a session of its own (a daemon) cannot keep its run going, hold its
slot or outlive it, whether the run ends by STOPJOB, KILL, a time limit or its node's SIGKILL;
with run cgroups, and with them turned off ([jobs] RUN_CGROUPS = OFF)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from fabricjobs.model import Status
from fabricjobs.worker.reaper import descendants
from harness import Cluster, process_alive, wait_for

pytestmark = pytest.mark.slow

CGROUPS = pytest.param("AUTO", id="cgroups")
NO_CGROUPS = pytest.param("OFF", id="no-cgroups")


def _can_make_cgroups() -> bool:
    try:
        from fabricjobs.worker import cgroups
    except ImportError:  # a build without run cgroups: what the tests assert fails there
        return True

    made = cgroups.RunCgroups.make(cgroups.Limits())
    if isinstance(made, str):
        return False
    made.close()
    return True


needs_cgroups = pytest.mark.skipif(not _can_make_cgroups(), reason="no writable cgroup v2 hierarchy here (not root?)")


@pytest.fixture(params=[pytest.param("AUTO", id="cgroups", marks=needs_cgroups), NO_CGROUPS])
def cluster(request, tmp_path):
    """Node processes on SQLite (isolation is the node's, whatever its store) with run
    cgroups on or off."""
    c = Cluster(tmp_path, settings={"jobs": {"RUN_CGROUPS": request.param}}, request=request)
    c.mode = request.param
    yield c
    c.stop_all()


def _daemon(pidfile: Path) -> int:
    return int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 20, "the job's daemon to start"))


def _isolated_by(cluster, node) -> str:
    line = wait_for(lambda: next((ln for ln in node.log().splitlines() if "runs isolated by" in ln), None), 10,
                    "the node's start-up line")
    want = "cgroup v2 at" if cluster.mode == "AUTO" else "process groups ([jobs] RUN_CGROUPS = OFF)"
    assert want in line, line
    shown = cluster.fetch("nodes details;")  # and NODES DETAILS says it for every node
    column = shown.columns.index("isolation")
    assert [row[column] for row in shown.rows if row[0] == node.name][0] in line
    return line


def test_stopjob_ends_a_run_and_the_daemon_it_left(cluster, tmp_path):
    node = cluster.start_node("a")
    pidfile = tmp_path / "daemon.pid"
    cluster.fetch(f"startjob user_job name='Isolation.escape' uid='s' args='{json.dumps({'pidfile': str(pidfile)})}';")
    daemon = _daemon(pidfile)
    cluster.fetch("stopjob user_job name='Isolation.escape' uid='s';")
    job = cluster.wait_job("USER_JOB", "Isolation.escape", "s", lambda j: j.archived, 15, "the stopped run to end")
    assert job.status is Status.TERMINATED
    wait_for(lambda: not process_alive(daemon), 15, "the daemon the run left to be ended with it")
    _isolated_by(cluster, node)  # and the node said how


def test_a_run_that_leaves_a_thread_or_changes_its_process_does_not_reach_the_next_run(cluster, tmp_path):
    """One slot, so one worker would run all of these (docs/guides/run-isolation.md). A run that
    left a thread going (not a daemon, printing on) kept its idle worker from exiting, and the
    node sent the next run to it, unread for ever: the worker exits after its idle time anyway.
    A run that changed its process's environment, working directory or umask retires its
    worker; the next run finds the process as the node made it."""
    one = tmp_path / "one-slot.ini"
    one.write_text(cluster.config_path.read_text().replace("[jobs]\n", "[jobs]\nK2JOBS_POOL_SIZE = 1\nWORKER_IDLE_SEC = 1\n"))
    node = cluster.start_node("a", config=one)
    cluster.fetch("startjob user_job name='Hazard.reports_its_process' uid='r0';")
    first = cluster.wait_job("USER_JOB", "Hazard.reports_its_process", "r0", lambda j: j.archived, 20)
    cluster.fetch("startjob user_job name='Hazard.leaves_a_thread' uid='t';")
    left = cluster.wait_job("USER_JOB", "Hazard.leaves_a_thread", "t", lambda j: j.archived, 20)
    worker = json.loads(left.output)["worker"]
    wait_for(lambda: not process_alive(worker), 15, "the idle worker to exit, its job's thread still going")
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    args = json.dumps({"log": str(log), "seconds": 0.2, "starts": str(starts)})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='next' args='{args}';")
    after = cluster.wait_job("USER_JOB", "Probe.record", "next", lambda j: j.archived, 20, "the next run to end")
    assert after.status is Status.PROCESSED
    shown = cluster.shell("-e", "joblog user_job 'Probe.record' with uid='next';").stdout
    assert "run 1 of USER_JOB.Probe.record.next" in shown and "ghost line" not in shown, shown
    cluster.fetch("startjob user_job name='Hazard.changes_its_process' uid='c';")
    cluster.wait_job("USER_JOB", "Hazard.changes_its_process", "c", lambda j: j.archived, 20)
    cluster.fetch("startjob user_job name='Hazard.reports_its_process' uid='r1';")
    second = cluster.wait_job("USER_JOB", "Hazard.reports_its_process", "r1", lambda j: j.archived, 20)
    assert second.status is Status.PROCESSED and json.loads(second.output) == json.loads(first.output), \
        (first.output, second.output)
    assert "/nonexistent" not in first.output
    assert "retires after the run of USER_JOB.Hazard.changes_its_process.c: the run changed its environment, " \
           "its working directory, its umask, sys.path" in node.log()
    assert "retires" not in node.log().split("Hazard.changes_its_process")[0]  # (a thread is no reason)


def test_kill_ends_a_run_at_once_whatever_its_daemon_holds(cluster, tmp_path):
    """The job never looks at is_aborted(); its daemon holds the worker's pipe open, so a node
    that learnt of its worker's death from that pipe kept the run IN_PROCESS."""
    node = cluster.start_node("a")
    pidfile = tmp_path / "daemon.pid"
    args = json.dumps({"pidfile": str(pidfile), "cooperative": False})
    cluster.fetch(f"startjob user_job name='Isolation.escape' uid='k' args='{args}';")
    daemon = _daemon(pidfile)
    row = cluster.wait_job("USER_JOB", "Isolation.escape", "k", lambda j: j.status is Status.IN_PROCESS)
    task = wait_for(lambda: next((r["task"] for r in cluster.fetch("ps;") if r["description"].endswith("Isolation.escape")),
                                 None), 10, "the run in PS")
    cluster.fetch(f"kill '{row.worker_id}' {task};")
    cluster.wait_job("USER_JOB", "Isolation.escape", "k", lambda j: j.tries >= 1 and j.status is not Status.IN_PROCESS
                     or j.epoch > row.epoch, 10, "the killed run to end")
    wait_for(lambda: not process_alive(daemon), 15, "the daemon of the killed run to be ended with it")
    assert node.alive()


def test_a_time_limit_ends_a_process_run_and_its_daemon(cluster, tmp_path):
    cluster.start_node("a")
    pidfile = tmp_path / "daemon.pid"
    args = json.dumps({"0": str(pidfile), "time_limit_sec": 1})
    cluster.fetch(f"startjob process name='escape.sh' uid='t' args='{args}';")
    daemon = _daemon(pidfile)
    run = wait_for(lambda: next(iter(cluster.fetch("jobhistory process 'escape.sh' with uid='t';")), None), 20,
                   "the run past its time limit to end")
    assert "time limit" in (run["Error"] or ""), run
    wait_for(lambda: not process_alive(daemon), 15, "the daemon of the timed-out run to be ended with it")


@pytest.mark.timing  # (the run notices its lease gone within the threshold's last second)
def test_nothing_a_sigkilled_node_started_outlives_the_dead_node_threshold(cluster, tmp_path):
    node = cluster.start_node("a")
    pidfile = tmp_path / "daemon.pid"
    args = json.dumps({"pidfile": str(pidfile), "cooperative": False})
    cluster.fetch(f"startjob user_job name='Isolation.escape' uid='n' args='{args}';")
    daemon = _daemon(pidfile)
    started = [p for p in descendants(node.pid)] + [daemon]
    assert len(started) >= 4, started  # fork server, resource tracker, worker, daemon
    node.signal(signal.SIGKILL)  # the node alone: what it started must see it go
    dead_after = 0.5 * 8  # tests/harness.py FAST heartbeat: 500 ms x 8
    wait_for(lambda: not any(process_alive(p) for p in started), dead_after,
             lambda: f"everything the node started to end: {[p for p in started if process_alive(p)]} still run")
    if cluster.mode == "AUTO":
        assert not [d for d in os.listdir(_cgroup_root()) if d.startswith(f"fabricjobs-{node.pid}-")]


@pytest.mark.parametrize("cluster", [pytest.param("AUTO", id="cgroups", marks=needs_cgroups)], indirect=True)
def test_daemons_of_a_stopped_node_end_before_their_runs_are_taken_over(cluster, tmp_path):
    """A SIGSTOP of a node's whole process group (Ctrl-Z at its terminal) stops its workers,
    which cannot end what their runs started into sessions of their own. A PROCESS job's guard,
    in its own group, kills the rest of its run's cgroup when the lease runs out; a node of the
    same host that takes the runs over kills what is left in the stopped node's run cgroups
    first. No daemon of the stopped node runs beside the runs that took over (it ran on until
    the node was woken)."""
    frozen = cluster.start_node("frozen")
    pids = {"u": tmp_path / "user.pid", "p": tmp_path / "process.pid"}
    cluster.fetch(f"startjob user_job name='Isolation.escape' uid='u' "
                  f"args='{json.dumps({'pidfile': str(pids['u']), 'cooperative': False})}';"
                  f"startjob process name='escape.sh' uid='p' args='{json.dumps({'0': str(pids['p'])})}';")
    daemons = {uid: _daemon(path) for uid, path in pids.items()}
    cluster.pause(frozen, group=True)
    try:
        cluster.start_node("other")
        taken = {"u": ("USER_JOB", "Isolation.escape"), "p": ("PROCESS", "escape.sh")}
        for uid, (kind, name) in taken.items():
            cluster.wait_job(kind, name, uid, lambda j: j.worker_id == "other" and j.status is Status.IN_PROCESS, 20,
                             f"{name} to be taken over")
        alive = [uid for uid, pid in daemons.items() if process_alive(pid)]
        assert not alive, f"the stopped node's daemons of {alive} still run beside the takeover"
        assert "what was left in its run cgroups is killed" in cluster.nodes["other"].log()
    finally:
        frozen.signal_group(signal.SIGCONT)
    cluster.fetch("stopjob user_job name='Isolation.escape' uid='u'; stopjob process name='escape.sh' uid='p';")


def _cgroup_root() -> str:
    from fabricjobs.worker import cgroups

    root = cgroups.here()
    assert root is not None
    return root


# -- where the cgroup v2 hierarchy is, as /proc says (no processes) ------------------------------

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PURE_V2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_ONLY = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"


@pytest.mark.parametrize("mountinfo, mine, expected", [
    (HYBRID, "4:memory:/x\n0::/\n", "/sys/fs/cgroup/unified"),
    (PURE_V2, "0::/system.slice/fabricjobs.service\n", "/sys/fs/cgroup/system.slice/fabricjobs.service"),
    (PURE_V2.replace(" / /sys/fs/cgroup ", " /system.slice /mnt/cg "), "0::/system.slice/a.service\n", "/mnt/cg/a.service"),
    (V1_ONLY, "4:memory:/x\n", None),
    ("", "", None),
], ids=["hybrid", "pure-v2-systemd-unit", "bind-mounted-subtree", "v1-only", "none"])
def test_the_nodes_cgroup_is_found_from_mountinfo_on_every_kind_of_host(mountinfo, mine, expected):
    from fabricjobs.worker.cgroups import locate

    assert locate(mountinfo, mine) == expected


def test_a_peers_row_can_name_only_a_run_cgroup_home_of_this_hierarchy(tmp_path):
    """A dead peer's row (in the store, written by any node) names the run cgroup a taking-over
    node kills: a link, a '..', a path outside the cgroup v2 mount or a home of another pid is
    never taken for one."""
    from fabricjobs.worker import cgroups

    target = tmp_path / "victim"
    target.mkdir()
    (target / "cgroup.procs").write_text("")
    link = tmp_path / "fabricjobs-99999-1"
    link.symlink_to(target)
    assert not cgroups.is_home_of(str(link), 99999)  # a link (and outside the hierarchy)
    assert not cgroups.is_home_of(str(tmp_path / "victim" / ".." / "fabricjobs-99999-1"), 99999)
    real = tmp_path / "fabricjobs-99998-1"
    real.mkdir()
    (real / "cgroup.procs").write_text("")
    assert not cgroups.is_home_of(str(real), 99998)  # named right, but not in the cgroup v2 mount
    root = cgroups.here()
    if root is not None:
        assert not cgroups.is_home_of(os.path.join(root, "fabricjobs-99997-node"), 99997)  # a node's own, not runs
        assert not cgroups.is_home_of(os.path.join(root, "fabricjobs-1-1"), 2)  # another pid's


def test_a_listener_leaves_alone_a_file_whose_name_no_statement_could_write():
    """Its job's UID ends with the file's name: one ending in a backslash (or with one before a
    quote) is skipped with a warning, as a name with a control character is, instead of
    failing the listener when the job is refused."""
    from fabricjobs.worker.listener import _unfit

    assert "backslash" in (_unfit("report\\") or "") and "backslash" in (_unfit("it\\'s.csv") or "")
    assert _unfit("report.csv") is None
