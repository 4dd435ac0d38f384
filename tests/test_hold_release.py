"""RJM's unreleased jobs and priority-limited nodes (docs/explanation/design-choices.md), through ``fabricjobs shell`` on
real node processes, on SQLite and on the Cassandra backend: STARTJOB ... HOLD=true, RELEASEJOB
(which releases held children too, the "dummy parent" of RJM's graphs included), UPDATEJOB ...
HOLD=true; and node.id's PRIORITIES:low-high (rjmproc -p), which keeps a node off other jobs."""

from __future__ import annotations

import re

import pytest

from backends import SEED_BACKENDS
from harness import Cluster, read_records, table_row as row, two_nodes_on_each_backend, wait_for


cluster = two_nodes_on_each_backend("hold", backends=SEED_BACKENDS)


@pytest.fixture(params=SEED_BACKENDS)
def node_backend(request):
    return request.param


def _ok(cluster, text):
    return cluster.shell_ok(text)


def _processed(cluster, name, uid, timeout=20.0):
    return cluster.wait_job("USER_JOB", name, uid, lambda j: j.status.name == "PROCESSED", timeout)


def _settled(cluster, tmp_path, uid):
    """A job started now and seen PROCESSED: the nodes made claim passes after whatever was
    written before it (a held job they would have claimed was claimed by then)."""
    _ok(cluster, f"startjob user_job name='Probe.record' uid='{uid}' args='{{\"log\": \"{tmp_path / uid}.log\"}}';")
    _processed(cluster, "Probe.record", uid)


def test_a_held_job_runs_only_once_released(cluster, tmp_path):
    log = tmp_path / "held.log"
    out = _ok(cluster, f"startjob user_job name='Probe.record' uid='h1' hold=true args='{{\"log\": \"{log}\"}}';")
    assert row("USER_JOB", "Probe.record", "h1", "HELD").search(out), out
    _settled(cluster, tmp_path, "after-h1")
    assert cluster.job("USER_JOB", "Probe.record", "h1").status.name == "HELD" and not log.exists()
    status = _ok(cluster, "jobstatus user_job 'Probe.record' with uid='h1';")
    assert "HELD" in status and "Held: RELEASEJOB runs it" in status, status

    out = _ok(cluster, "releasejob user_job name='Probe.record' uid='h1';")
    assert row("USER_JOB", "Probe.record", "h1", "WAITING").search(out), out
    _processed(cluster, "Probe.record", "h1")
    assert len(read_records(log)) == 1


def test_a_held_recurring_job_never_fires_and_runs_on_its_schedule_once_released(cluster, tmp_path):
    log = tmp_path / "rate.log"
    out = _ok(cluster, f"startjob user_job name='Probe.record' uid='rate' hold=true exec_interval='00:00:01' "
                       f"args='{{\"log\": \"{log}\"}}';")
    assert row("USER_JOB", "Probe.record", "rate", "HELD").search(out), out
    _settled(cluster, tmp_path, "after-rate")
    assert not log.exists()
    _ok(cluster, "releasejob user_job name='Probe.record' uid='rate';")
    wait_for(lambda: len(read_records(log)) >= 2 or None, 20, "two fires of the released recurring job")
    job = cluster.job("USER_JOB", "Probe.record", "rate")
    assert job.status.name in ("SCHEDULED", "WAITING", "IN_PROCESS") and job.runs >= 1

    # Held again between its fires (UPDATEJOB ... HOLD=true), then stopped while held.
    held = wait_for(lambda: (lambda r: r if r.returncode == 0 else None)(
        cluster.shell("-e", "updatejob user_job name='Probe.record' uid='rate' hold=true;")), 20, "a hold between runs")
    assert row("USER_JOB", "Probe.record", "rate", "HELD", "held: RELEASEJOB runs it").search(held.stdout), held.stdout
    fired = len(read_records(log))
    _settled(cluster, tmp_path, "after-rehold")
    assert len(read_records(log)) == fired
    out = _ok(cluster, "stopjob user_job name='Probe.record' uid='rate';")
    assert row("USER_JOB", "Probe.record", "rate", "TERMINATED").search(out), out


def test_releasing_the_root_releases_the_held_graph_the_dummy_parent_included(cluster, tmp_path):
    """RJM: graphs are built before anything is released; a parent may be added to a held
    child (the dummy parent: here the real parent comes later and the child is made to depend
    on it), and releasing the root releases every held job below it."""
    log = tmp_path / "graph.log"
    args = f"args='{{\"log\": \"{log}\", \"seconds\": 0.3}}'"
    _ok(cluster, f"startjob user_job name='Probe.record' uid='child' hold=true {args};"
                 f"startjob user_job name='Probe.record' uid='grandchild' hold=true {args} "
                 "depends_on='USER_JOB.Probe.record.child';")
    _ok(cluster, f"startjob user_job name='Probe.record' uid='root' hold=true {args};"
                 "updatejob user_job name='Probe.record' uid='child' depends_on='USER_JOB.Probe.record.root';")
    _settled(cluster, tmp_path, "after-graph")
    assert not log.exists()

    out = _ok(cluster, "releasejob user_job name='Probe.record' uid='root';")
    assert row("USER_JOB", "Probe.record", "root", "WAITING").search(out), out
    assert row("USER_JOB", "Probe.record", "child", "WAITING",
               "released with USER_JOB.Probe.record.root; waiting for USER_JOB.Probe.record.root").search(out), out
    assert row("USER_JOB", "Probe.record", "grandchild", "WAITING", "released with USER_JOB.Probe.record.root").search(out), out
    _processed(cluster, "Probe.record", "grandchild", 30)
    runs = {r["key"].rsplit(".", 1)[1]: r for r in read_records(log)}
    assert runs["root"]["end"] <= runs["child"]["start"] and runs["child"]["end"] <= runs["grandchild"]["start"]


def test_releasejob_of_a_job_that_is_not_held_is_refused_and_changes_nothing(cluster, tmp_path):
    log = tmp_path / "started.log"
    _ok(cluster, f"startjob user_job name='Probe.started' uid='busy' args='{{\"log\": \"{log}\"}}';")
    cluster.wait_job("USER_JOB", "Probe.started", "busy", lambda j: j.status.name == "IN_PROCESS")
    before = cluster.job("USER_JOB", "Probe.started", "busy")
    r = cluster.shell("-e", "releasejob user_job name='Probe.started' uid='busy';")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == ("Job is not held: [type: USER_JOB, name: Probe.started, uid: busy] is IN_PROCESS. "
                                "RELEASEJOB releases a job started or updated with HOLD=true; nothing was changed")
    r = cluster.shell("-e", "updatejob user_job name='Probe.started' uid='busy' hold=true;")
    assert r.returncode == 1 and r.stdout == ""
    assert "Job is running [type: USER_JOB, name: Probe.started, uid: busy] (IN_PROCESS): HOLD=true holds a job with " \
           "no run going on" in r.stderr
    assert cluster.job("USER_JOB", "Probe.started", "busy").revision == before.revision
    r = cluster.shell("-e", "updatejob user_job name='Probe.started' uid='busy' hold=false;")
    assert r.returncode != 0 and "UPDATEJOB takes HOLD=true only: RELEASEJOB releases a held job" in r.stderr
    missing = cluster.shell("-e", "releasejob user_job name='Probe.nothing';")
    assert missing.returncode == 1 and missing.stderr.strip() == "No active job [type: USER_JOB, name: Probe.nothing]"
    _ok(cluster, "stopjob user_job name='Probe.started' uid='busy';")


# -- node.id's PRIORITIES (RJM's rjmproc -p) --------------------------------------------------------

@pytest.fixture
def ranged(tmp_path, node_backend, request):
    c = Cluster(tmp_path, backend=node_backend, request=request)
    try:
        c.start_node("low", node_id="PRIORITIES:0-4\n", wait=False)
        c.start_node("high", node_id="# rjmproc -p\nPRIORITIES: 5 - 8\n", wait=False)
        for node in c.nodes.values():
            c.wait_started(node)
        yield c
    finally:
        c.stop_all()


def test_each_job_runs_on_a_node_whose_priority_range_includes_it(ranged, tmp_path):
    log = tmp_path / "ran.log"
    script = "".join(f"startjob user_job name='Probe.record' uid='p{p}-{i}' priority={p} args='{{\"log\": \"{log}\"}}';"
                     for p in range(9) for i in range(2))
    _ok(ranged, script + f"startjob user_job name='Probe.record' uid='p9' priority=9 args='{{\"log\": \"{log}\"}}';")
    records = wait_for(lambda: (lambda r: r if len(r) >= 18 else None)(read_records(log)), 30, "18 runs")
    for rec in records:
        priority = int(rec["key"].rsplit(".", 1)[1][1])
        assert rec["node"] == ("low" if priority <= 4 else "high"), rec
    assert {r["node"] for r in records} == {"low", "high"}

    # Priority 9 is no live node's: it waits, with no candidate node, until it is one's.
    assert ranged.job("USER_JOB", "Probe.record", "p9").status.name == "WAITING"
    status = _ok(ranged, "jobstatus user_job 'Probe.record' with uid='p9';")
    assert re.search(r"\| Ready to be executed +\| 0 +\|", status), status  # Ownership Candidates Num
    details = _ok(ranged, "nodes details;")
    assert "| 0-4" in details and "| 5-8" in details, details
    _ok(ranged, "updatejob user_job name='Probe.record' uid='p9' priority=8;")
    _processed(ranged, "Probe.record", "p9")
    assert [r["node"] for r in read_records(log) if r["key"].endswith(".p9")] == ["high"]


@pytest.mark.slow
def test_a_dead_nodes_run_is_taken_over_only_by_a_node_whose_range_includes_it(tmp_path, node_backend, request):
    """A node limited to PRIORITIES:0-4 never runs a priority-8 job, a takeover included: of a
    dead node's two runs it takes over the priority-2 one, in the same pass leaves the other to
    a node whose range has 8, which takes it over once it starts."""
    import signal

    from fabricjobs.model import Status

    c = Cluster(tmp_path, backend=node_backend, request=request)
    try:
        wide = c.start_node("wide")
        starts = tmp_path / "starts.log"
        for p in (2, 8):
            _ok(c, f"startjob user_job name='Probe.record' uid='p{p}' priority={p} "
                   f"args='{{\"log\": \"{tmp_path / 'ran.log'}\", \"seconds\": 600, \"starts\": \"{starts}\"}}';")
            c.wait_job("USER_JOB", "Probe.record", f"p{p}", lambda j: j.status is Status.IN_PROCESS)
        c.start_node("low", node_id="PRIORITIES:0-4\n")
        wide.signal_group(signal.SIGKILL)
        c.wait_job("USER_JOB", "Probe.record", "p2", lambda j: j.status is Status.IN_PROCESS and j.worker_id == "low", 30)
        row = c.job("USER_JOB", "Probe.record", "p8")
        assert (row.status, row.worker_id, row.epoch) == (Status.IN_PROCESS, "wide", 1), row  # left alone
        c.start_node("high", node_id="PRIORITIES:5-9\n")
        c.wait_job("USER_JOB", "Probe.record", "p8", lambda j: j.status is Status.IN_PROCESS and j.worker_id == "high", 30)
        ran = wait_for(lambda: (lambda r: r if len(r) == 4 else None)(
            sorted((r["key"].rsplit(".", 1)[1], r["node"]) for r in read_records(starts))), 20, "high's run to start")
        assert ran == [("p2", "low"), ("p2", "wide"), ("p8", "high"), ("p8", "wide")], ran
        _ok(c, "stopjob user_job name='Probe.record';")
    finally:
        c.stop_all()


def test_a_bad_priorities_line_stops_the_node_with_its_line_number():
    from fabricjobs.config import parse_node_id
    from fabricjobs.errors import ConfigError

    assert parse_node_id("ANY:3\nPRIORITIES:2-6\n").priorities == (2, 6)
    assert parse_node_id("priorities: 7").priorities == (7, 7)
    assert parse_node_id("ANY:3").priorities == (0, 9)
    for bad in ("PRIORITIES:6-2", "PRIORITIES:0-10", "PRIORITIES:a-b", "PRIORITIES:", "PRIORITIES:1-2\nPRIORITIES:3"):
        with pytest.raises(ConfigError, match="line"):
            parse_node_id(bad)
