"""Guarantee 1 (docs/explanation/guarantees.md) at the worst moments: a job key never runs on two nodes at once.

Each test is one of the interleavings a review found; real node processes on a real store.
The tests about paused and dead nodes are marked ``liveness``: dead after 1.0 s, a run's
lease 0.6 s (tests/harness.py); the others run on the harness's calm heartbeat.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fabricjobs.config import load_config
from fabricjobs.model import Status
from harness import (LOG_TIME, Cluster, NodeProcess, RunWatch, assert_no_overlap, fence_times, fill_up,
                     merge_runs, process_alive, read_records, unexplained_reruns, wait_for, worker_deaths)

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path, request):
    c = Cluster(tmp_path, settings=getattr(request, "param", None), request=request)
    yield c
    c.stop_all()


@pytest.mark.liveness
def test_a_node_paused_between_claim_and_dispatch_never_starts_the_stale_run(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    a = cluster.start_helper_node("a", "pausing_node.py")
    args = json.dumps({"log": str(log), "seconds": 2.0, "starts": str(starts)})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='j' args='{args}';")
    wait_for(lambda: open(f"/proc/{a.pid}/stat").read().split(")")[1].split()[0] == "T", 10,
             "node a to stop itself right after its claim")
    cluster.start_node("b")
    wait_for(lambda: [r["node"] for r in read_records(starts)] == ["b"], 10, "b to take the job over")
    a.signal(signal.SIGCONT)  # a wakes with a claimed-but-not-started run of epoch 1
    cluster.wait_job("USER_JOB", "Probe.record", "j", lambda j: j.status is Status.PROCESSED, 10)
    wait_for(lambda: "not started: this node's lease ran out" in a.log() or "no longer ours" in a.log(), 5,
             "a to drop its stale run")
    time.sleep(0.5)
    assert [r["node"] for r in read_records(starts)] == ["b"]  # a never ran it
    assert [r["node"] for r in read_records(log)] == ["b"]


@pytest.mark.liveness
def test_an_observer_that_stalls_after_reading_does_not_declare_a_live_node_dead(cluster, tmp_path):
    """Node b (in this process) stalls 1.6 s between reading the nodes and acting; a is alive
    all along and must keep its job."""
    from fabricjobs.node.node import Node

    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    cluster.start_node("a")
    args = json.dumps({"log": str(log), "seconds": 4.0, "starts": str(starts)})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='j1' args='{args}';")
    wait_for(lambda: len(read_records(starts)) == 1, 10, "the run on a")
    b = Node(load_config(cluster.config_path), name="b")
    stall = threading.Event()
    original = b.reconciler._control

    def control(now):
        if stall.is_set():
            stall.clear()
            time.sleep(1.6)  # a GC / VM pause after observe(), before the takeover step
        return original(now)

    b.reconciler._control = control
    thread = threading.Thread(target=b.run, daemon=True)
    thread.start()
    try:
        time.sleep(0.6)
        stall.set()
        cluster.wait_job("USER_JOB", "Probe.record", "j1", lambda j: j.status is Status.PROCESSED, 15)
        assert [r["node"] for r in read_records(starts)] == ["a"]
        assert [(r["node"], r["aborted"]) for r in read_records(log)] == [("a", False)]
    finally:
        b.stop()
        thread.join(timeout=15)


@pytest.mark.liveness
# The hog outlives its node's lease (0.6 s here) even while the node is well, so each of its
# runs is ended and retried; enough tries that it is still alive when b takes it over.
@pytest.mark.parametrize("cluster", [{"jobs": {"MAX_TRIES": 100}}], indirect=True)
def test_a_job_holding_the_gil_still_ends_before_its_paused_node_is_declared_dead(cluster, tmp_path):
    log = tmp_path / "hog.log"
    a = cluster.start_node("a")
    cluster.fetch(f"startjob user_job name='Hazard.hog' uid='h' args='{json.dumps({'log': str(log)})}';")
    wait_for(lambda: log.exists() and " start " in log.read_text(), 10, "the hog to start on a")
    cluster.start_node("b")
    time.sleep(0.5)
    paused_at = cluster.pause(a)  # the node only: its worker sits in a C call that never releases the GIL
    try:
        # the run going on when a stopped (a paused node starts nothing new)
        pid = int([line for line in log.read_text().splitlines() if line.startswith("a start")][-1].split()[2])
        wait_for(lambda: not process_alive(pid), 15, "the GIL-bound run to be ended by its lease")
        ended_after = time.time() - paused_at
        wait_for(lambda: "b start" in log.read_text(), 10, "b to take the job over")
        assert ended_after < 1.0, f"the stale run lived {ended_after:.2f} s; the dead threshold is 1.0 s"
        assert "a end" not in log.read_text()
    finally:
        a.signal(signal.SIGCONT)


def _outlived(runs: list[dict], fault: float, lease: float) -> list[dict]:
    """The runs going when a fault stopped every write at ``fault`` that were still going a
    lease later: their node's last beat was before the fault, so their lease had lapsed."""
    return [r for r in runs if r["start"] < fault and r.get("end", float("inf")) > fault + lease]


def _takeovers(runs: list[dict]) -> list[dict]:
    """The runs of a key whose run before was on another node."""
    out, last = [], {}
    for r in sorted(runs, key=lambda r: r["start"]):
        if r["key"] in last and last[r["key"]]["node"] != r["node"]:
            out.append(r)
        last[r["key"]] = r
    return out


# The SQLite counterpart of a slow or cut network (docs/explanation/guarantees.md): the
# nodes share one file on one host, so what stalls is the file. Another process holds its write
# lock (BEGIN IMMEDIATE): every write waits, beats included.
LOCK_HOLDER = """
import json, sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
for hold, gap in json.loads(sys.argv[2]):
    c.execute("BEGIN IMMEDIATE")
    print(json.dumps({"held": time.time()}), flush=True)
    time.sleep(hold)
    c.execute("ROLLBACK")
    print(json.dumps({"released": time.time()}), flush=True)
    time.sleep(gap)
"""


def test_a_shell_reads_the_sqlite_store_while_another_process_holds_its_write_lock(tmp_path, request):
    """What an operator looks at while a node (SIGSTOPped, say) holds the store's write lock:
    NODES and JOBSTATUS read, and reads need no lock in WAL mode. Opening the store took the
    write lock to check its schema, and they failed after the busy timeout
    (docs/explanation/stores.md)."""
    cluster = Cluster(tmp_path, backend="sqlite", request=request)
    try:
        cluster.fetch("startjob user_job name='Probe.noop' uid='seen' hold=true;")
        holder = sqlite3.connect(cluster._sqlite_path(), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            shown = cluster.shell("-e", "jobstatus; nodes;")
            assert shown.returncode == 0 and "seen" in shown.stdout and "HELD" in shown.stdout, shown.stderr
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        cluster.stop_all()


@pytest.mark.liveness
@pytest.mark.parametrize("cluster", [{"heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 8},
                                      "jobs": {"K2JOBS_POOL_SIZE": 2, "MAX_TRIES": 20}}], indirect=True)
def test_partition_sqlite_a_writer_holding_the_store_lock_from_outside_stalls_the_nodes_and_breaks_nothing(cluster, tmp_path):
    """Two nodes (500 ms x 8: a run's lease lapses 3 s after its node's last beat, a node is
    dead after 4 s) run 24 jobs of 1.5 s, two at a time each, while another process holds the
    store's write lock 1 s of every 2 s for 6 s (shorter than a lease: everything waits), then
    5 s at once (longer than the dead threshold). No run lasts through the long hold (its lease
    ran out), no two runs of a key overlap, every re-run follows a self-fence of the node that
    ran it before, and every job is PROCESSED."""
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    nodes = {name: cluster.start_node(name) for name in ("a", "b")}
    args = json.dumps({"log": str(log), "seconds": 1.5, "starts": str(starts)})
    uids = [f"w{i:02d}" for i in range(24)]
    with RunWatch(starts) as workers:
        cluster.fetch("".join(f"startjob user_job name='Probe.record' uid='{u}' args='{args}';" for u in uids))
        wait_for(lambda: len(read_records(starts)) >= 4, 15, "the first runs")
        holds = [(1.0, 1.0)] * 3 + [(5.0, 0.0)]
        holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, cluster._sqlite_path(), json.dumps(holds)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            out, _ = holder.communicate(timeout=60)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        events = [json.loads(line) for line in out.splitlines()]
        held, released = events[-2]["held"], events[-1]["released"]
        assert released - held >= 5.0 and holder.returncode == 0
        wait_for(lambda: all(cluster.job("USER_JOB", "Probe.record", u).status is Status.PROCESSED for u in uids),
                 60, "every job to be PROCESSED", check=cluster.check_nodes)
    started, ended = read_records(starts), read_records(log)
    runs = merge_runs(started, ended, workers.gone, worker_deaths(nodes))
    assert_no_overlap(runs)
    assert {r["key"] for r in ended if not r["aborted"]} == {f"USER_JOB.Probe.record.{u}" for u in uids}
    lease, dead = 3.0, 4.0  # 500 ms x 8
    assert _outlived(runs, held, lease) == [], "runs that outlived their lease in the long hold"
    assert [r for r in runs if held + lease < r["start"] < released] == [], "runs started while the lock was held"
    assert [r for r in _takeovers(runs) if r["start"] < held + dead] == [], "taken over before the dead threshold"
    fences = {name: fence_times(node) for name, node in nodes.items()}
    assert unexplained_reruns(runs, fences) == []
    assert all(any(held <= t <= released + 2 for t in times) for times in fences.values()), fences


def test_a_process_job_dies_with_its_worker(cluster, tmp_path):
    cluster.start_node("a")
    cluster.fetch("startjob process name='ignore_term.sh' uid='p';")
    def job_group():
        """PS's thread once it is the PROCESS job's own process group (not yet its worker's pid)."""
        row = cluster.fetch("ps;").first_row()
        pid = row and row["thread"]
        try:
            return pid if pid and os.getpgid(pid) == pid else None
        except ProcessLookupError:
            return None

    group = wait_for(job_group, 10, "the PROCESS job's process group in PS")
    worker = [p for p in cluster.client().store.nodes() if p.name == "a"][0]
    # Find the worker (the process group leader's parent) and SIGKILL it, as the OOM killer would.
    ppid = int(open(f"/proc/{group}/stat").read().split(") ", 1)[1].split()[1])
    os.kill(ppid, signal.SIGKILL)

    def group_gone():
        out = subprocess.run(["ps", "-o", "pid=", "-g", str(group)], capture_output=True, text=True).stdout
        return not out.strip()

    wait_for(group_gone, 15, "the job's whole process group to be gone with its worker")
    job = cluster.wait_job("PROCESS", "ignore_term.sh", "p", lambda j: j.tries == 1, 10)
    assert "worker process died (killed by signal 9 (SIGKILL))" in job.error_msg, job.error_msg
    assert worker.name == "a"


def test_jobs_this_node_cannot_run_do_not_hide_the_ones_it_can(cluster, tmp_path):
    cluster.start_node("a")
    client = cluster.client()
    client.fetch("".join(f"startjob user_job name='Probe.noop' uid='elsewhere{i}' affinity='ELSEWHERE';" for i in range(150)))
    client.fetch("startjob user_job name='Probe.noop' uid='plain';")
    cluster.wait_job("USER_JOB", "Probe.noop", "plain", lambda j: j.status is Status.PROCESSED, 10)


def test_an_error_text_that_is_not_valid_utf8_fails_that_job_only(cluster, tmp_path):
    counter = tmp_path / "n"
    cluster.start_node("a")
    client = cluster.client()
    client.fetch("startjob user_job name='Hazard.surrogate' uid='bad';" +
                 "".join(f"startjob user_job name='Probe.fail_times' uid='ok{i}' args='{json.dumps({'counter': str(counter) + str(i), 'failures': 0})}';"
                         for i in range(5)))
    bad = cluster.wait_job("USER_JOB", "Hazard.surrogate", "bad", lambda j: j.archived, 15)
    assert bad.status is Status.FAILED and bad.tries == 3 and "bad byte" in bad.error_msg
    for i in range(5):
        ok = cluster.wait_job("USER_JOB", "Probe.fail_times", f"ok{i}", lambda j: j.archived, 10)
        assert ok.status is Status.PROCESSED and ok.tries == 0
        assert Path(str(counter) + str(i)).read_text() == "1"  # ran once


@pytest.mark.liveness
def test_a_name_alive_on_another_host_is_refused_and_a_dead_one_is_taken_after_its_threshold(cluster, tmp_path):
    from fabricjobs.node.node import Node, NodeStartError
    from fabricjobs.store import open_store
    from fabricjobs.store.base import NodeRow
    from datetime import datetime, timezone

    config = load_config(cluster.config_path)
    store = open_store(config)
    info = json.dumps({"heartbeat_ms": 200, "miss": 5})
    beat = {"n": 1}
    stop = threading.Event()

    def other_host_beats():
        while not stop.wait(0.1):
            beat["n"] += 1
            store.write_node(NodeRow("twin", "other-incarnation", "DC1", "other-host", 4242,
                                     datetime.now(timezone.utc), "x", beat["n"], info=info))

    store.write_node(NodeRow("twin", "other-incarnation", "DC1", "other-host", 4242, datetime.now(timezone.utc), "x", 1, info=info))
    t = threading.Thread(target=other_host_beats, daemon=True)
    t.start()
    try:
        with pytest.raises(NodeStartError, match="alive on host other-host"):
            Node(config, name="twin", store=store).start()
    finally:
        stop.set()
        t.join()
    began = time.monotonic()
    node = Node(config, name="twin", store=store)
    node.start()  # the beat stood still: taken, but only after the old node's own dead threshold
    try:
        assert time.monotonic() - began >= 1.0
    finally:
        node.stop()
        node.run()


# The other SQLite counterpart (docs/explanation/guarantees.md): the disk under the store fills up. Every write
# fails (SQLITE_FULL), beats included, while reads go on. The fast heartbeat (liveness):
LEASE, DEAD = 0.6, 1.0  # a run's lease lapses 0.6 s after its node's last beat; dead after 1 s
FULL_FOR = 2.5  # longer than the dead threshold, twice over


def _seconds(uid: str) -> float:
    """Runs of 0.5 to 1.0 s, so that some always end while the disk is full."""
    return 0.5 + int(uid[1:]) % 6 * 0.1


def _fill_time(starts: Path, log: Path) -> float:
    """Just before the first of the runs going now ends: that run ends on a full disk while
    its node's lease still holds, so its outcome is one the node must keep."""
    done = {(r["key"], r["epoch"]) for r in read_records(log)}
    ends = [r["start"] + _seconds(r["key"].rsplit(".", 1)[1]) for r in read_records(starts)
            if (r["key"], r["epoch"]) not in done]
    return min([e - 0.15 for e in ends if e - 0.15 > time.time() + 0.05], default=time.time())


def _stray_tracebacks(node: NodeProcess) -> list[str]:
    """The log lines that a Traceback in ``node``'s log follows, unless they name a job: a
    node's own error that no job explains (a crash, an uncaught failure of its loops)."""
    out, last = [], ""
    for line in node.log().splitlines():
        if LOG_TIME.match(line) or line.startswith(("Exception in thread", "Exception ignored")):
            last = line  # (Python's report of an exception nothing caught names no job)
        elif line.startswith("Traceback") and "'USER_JOB.Probe.record." not in last:
            out.append(last)
    return out


@pytest.mark.liveness
def test_partition_sqlite_a_store_whose_disk_fills_up_fences_the_nodes_and_loses_nothing(tmp_path, small_disk, request):
    """Two nodes (200 ms x 5) run 30 jobs of 0.5-1 s, three at a time each, on a store whose
    tmpfs fills up for 2.5 s. Runs going then end on their lease, before the dead threshold;
    nothing starts while the disk is full; outcomes of runs that ended first are kept and
    written once there is space again; each node fences itself and neither exits; no two runs
    of a key overlap, every re-run follows a self-fence, every job is PROCESSED."""
    (tmp_path / "c").mkdir()
    cluster = Cluster(tmp_path / "c", request=request, settings={
        "store": {"SQLITE_PATH": str(small_disk / "jobs.db")},
        "jobs": {"K2JOBS_POOL_SIZE": 3, "MAX_TRIES": 20, "LIVE_LOG_FLUSH_MS": 200}})
    log, starts, filler = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl", small_disk / "filler"
    uids = [f"f{i:02d}" for i in range(30)]
    try:
        nodes = {name: cluster.start_node(name) for name in ("a", "b")}
        with RunWatch(starts) as workers:
            args = {u: json.dumps({"log": str(log), "starts": str(starts), "seconds": _seconds(u), "talk": 0.1})
                    for u in uids}  # talk: lines for the live log, which the node passes on every 200 ms
            cluster.fetch("".join(f"startjob user_job name='Probe.record' uid='{u}' args='{args[u]}';" for u in uids))
            wait_for(lambda: len(read_records(starts)) >= 6, 15, "the first runs")
            time.sleep(max(0.0, _fill_time(starts, log) - time.time()))
            with sqlite3.connect(cluster._sqlite_path(), timeout=10) as db:  # the WAL back to 0 bytes:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # each commit now needs a new block
            fill_up(filler)
            full = time.time()
            wait_for(lambda: all(fence_times(n) for n in nodes.values()), 10, "both nodes to fence themselves")
            time.sleep(max(0.0, full + FULL_FOR - time.time()))  # the fault's length, not a wait for an effect
            filler.unlink()
            freed = time.time()
            wait_for(lambda: all(cluster.job("USER_JOB", "Probe.record", u).status is Status.PROCESSED for u in uids),
                     30, "every job to be PROCESSED", check=cluster.check_nodes)
        runs = merge_runs(read_records(starts), read_records(log), workers.gone, worker_deaths(nodes))
        assert_no_overlap(runs)
        # Their lease lapsed by then; ended (their worker killed) within 0.2 s, all before any
        # other node could take them over.
        assert _outlived(runs, full, DEAD) == [], "runs that outlived the dead threshold on a full disk"
        assert [r for r in runs if full + LEASE < r["start"] < freed] == [], "runs started on a full disk"
        assert [r for r in _takeovers(runs) if r["start"] < freed] == [], "taken over on a full disk"
        fences = {name: fence_times(node) for name, node in nodes.items()}
        assert all(any(full - LEASE <= t <= freed for t in ts) for ts in fences.values()), fences
        assert unexplained_reruns(runs, fences) == []
        last = {r["key"]: r for r in sorted(runs, key=lambda r: r["start"])}
        for u in uids:  # the outcome written is its last run's (nothing lost, nothing stale)
            job = cluster.job("USER_JOB", "Probe.record", u)
            run = last[f"USER_JOB.Probe.record.{u}"]
            assert json.loads(job.output) == {"node": run["node"], "epoch": run["epoch"]} == \
                {"node": run["node"], "epoch": job.epoch}
        kept = [r for r in runs if full < r.get("end", 0) < freed and not r["aborted"] and last[r["key"]] is r]
        assert kept, "no outcome was kept through the full disk"
        assert all(node.alive() for node in nodes.values())
        assert {name: _stray_tracebacks(node) for name, node in nodes.items()} == {"a": [], "b": []}
    finally:
        if filler.exists():
            filler.unlink()
        cluster.stop_all()


def test_a_dead_workers_end_is_told_as_a_process_jobs_is():
    """A worker ended by a signal (the dead-man timer's SIGALRM, an OOM kill) is named by the
    signal, not by a negative exit code (docs/guides/run-isolation.md)."""
    from fabricjobs.node.collector import _ended_by

    assert _ended_by(-signal.SIGALRM) == (
        "killed by signal 14 (SIGALRM): the dead-man timer, the run held on past its node's lease")
    assert _ended_by(-signal.SIGKILL) == "killed by signal 9 (SIGKILL)"
    assert _ended_by(3) == "exit code 3"
