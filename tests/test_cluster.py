"""The cluster (docs/explanation/guarantees.md): several node processes sharing one store, killed and paused for real.

Timings (tests/harness.py): reconcile passes every 200 ms. Tests marked ``liveness`` get a
heartbeat of 200 ms x 5 misses, so a node is dead 1.0 s after its last visible beat and its
runs end themselves 0.6 s after its last successful beat; the others a calm 500 ms x 8.
"""

from __future__ import annotations

import json
import signal
import time
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from fabricjobs.model import Status
from harness import assert_no_overlap, free_port, process_alive, read_records, scrape_metrics, wait_for

pytestmark = pytest.mark.slow

DEAD_AFTER = 0.2 * 5
POLL = 0.2


def start_records(client, uids, log, seconds, starts=None, name="Probe.record", affinity=None):
    """One STARTJOB per uid in one script (one round trip)."""
    extra = {"log": str(log), "seconds": seconds}
    if starts:
        extra["starts"] = str(starts)
    args = json.dumps(extra)
    aff = f" affinity='{affinity}'" if affinity else ""
    client.fetch("".join(f"startjob user_job name='{name}' uid='{u}' args='{args}'{aff};" for u in uids))


def processed(cluster, uids, name="Probe.record"):
    return all((lambda j: j is not None and j.status is Status.PROCESSED)(cluster.job("USER_JOB", name, u)) for u in uids)


# Not a failover test: a heartbeat that tolerates a loaded machine (a node judged dead would
# rightly have its jobs re-run, which is not what this test is about). A lease of 9 s (500 ms x
# 20, less two beats): on the real tier these niced nodes stalled for 5 s while the JVM, at
# normal priority, created another test's keyspace, and a 3 s lease lapsed and ended 25 runs.
@pytest.mark.parametrize("cluster", [{"heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 20}}],
                         indirect=True)
def test_three_nodes_run_300_jobs_each_exactly_once_spread_over_all_nodes(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    for name in ("n1", "n2", "n3"):
        cluster.start_node(name)
    # On Apache Cassandra 150 (every claim and outcome is a Paxos round on a JVM that shares two
    # cores with the rest of the real tier: 300 took 67 s there, against 7 s on SQLite).
    count = 150 if cluster.backend == "cassandra-real" else 300
    uids = [f"j{i:03d}" for i in range(count)]
    client = cluster.client()
    # 0.25 s each: 75 s of work, 1 s for three pools of 25 and 3 s for one, so every node has
    # a share to take even when one of them is slow to start its first workers.
    for chunk in range(0, count, 50):
        start_records(client, uids[chunk:chunk + 50], log, 0.25)
    wait_for(lambda: processed(cluster, uids), 60, f"{count} jobs to be PROCESSED")
    records = read_records(log)
    assert len(records) == count and len({r["key"] for r in records}) == count  # each exactly once
    assert all(not r["aborted"] for r in records)
    per_node = defaultdict(int)
    for r in records:
        per_node[r["node"]] += 1
    assert set(per_node) == {"n1", "n2", "n3"}, per_node
    assert min(per_node.values()) >= count // 10, per_node  # every node did a real share
    assert_no_overlap(records)
    rows = [cluster.job("USER_JOB", "Probe.record", u) for u in uids]
    again = [(r.key.uid, r.epoch, r.tries, r.error_msg) for r in rows if (r.epoch, r.tries) != (1, 0)]
    assert not again, again  # one claim each, no retries


LANES_PORT = free_port()


# "timing": how often a lane's wait runs out depends on how long the store takes a claim round
# and on how long a niced node stalls. Run beside the rest of the real tier (other tests'
# keyspaces being created), two nodes lost 23.5 % of their claims (CI, stop 25); run alone,
# 0-6 % (0-6 % too beside two busy loops). Without lanes they lose about 60 % on Cassandra.
@pytest.mark.timing
@pytest.mark.alone  # on Apache Cassandra beside phase 1's niced workers: 34 % lost (a fresh clone, stop 28)
@pytest.mark.parametrize("cluster", [{"metrics": {"PORT": LANES_PORT}}], indirect=True)
def test_two_nodes_woken_by_the_same_bursts_claim_different_rows_not_the_same_ones(cluster):
    """Claim lanes (node/lanes.py): both nodes are rung by every script and read the same head
    of the queue; each claims its own lane's rows, so few claims are lost to the other. Without
    lanes 25-50 % were lost on the CQL test server (on Cassandra each a wasted LWT), 6-8 % on
    SQLite (whose write lock lets one node claim a whole burst first); with them, 0-3 %, and up
    to 5 % on a machine loaded by other work."""
    port_b = cluster.start_pair(LANES_PORT)
    uids = [f"l{i:03d}" for i in range(400)]
    client = cluster.client()
    for chunk in range(0, 400, 100):
        client.fetch("".join(f"startjob user_job name='Probe.noop' uid='{u}';" for u in uids[chunk:chunk + 100]))
    wait_for(lambda: all((lambda j: j is not None and j.status is Status.PROCESSED)(cluster.job("USER_JOB", "Probe.noop", u))
                         for u in uids), 60, "400 jobs to be PROCESSED")
    metrics = [scrape_metrics(port) for port in (LANES_PORT, port_b)]
    attempts = sum(m["fabricjobs_claim_attempts_total"] for m in metrics)
    lost = sum(m.get("fabricjobs_claim_conflicts_total", 0) for m in metrics)
    # Not lanes' business: claims of rows whose insert was not written yet (on Cassandra an
    # insert's index entry precedes its row; index.py offers such an entry again only once a
    # read shows its row, tests/store/test_cassandra_index.py). Counted apart since stop 35:
    # before, each was tried pass after pass and counted here (22.4 % in a fresh clone).
    unwritten = sum(m.get("fabricjobs_claim_unwritten_total", 0) for m in metrics)
    assert attempts >= 400, attempts
    # The share of lost claims tells lanes from no lanes only on Cassandra. On SQLite the write
    # lock already lets one node claim a whole burst first: 6-8 % lost without lanes, and up to
    # 10.05 % with them when CI's two cores stall a node past its lane's wait (stop 26), so a
    # bound there would measure the machine, not lanes (tests/test_lanes.py checks their rules).
    # On a real Cassandra a claim round takes long enough that a lane's wait runs out more
    # often: 10.1 % was seen once there (without lanes, two nodes lost ~60 % of their claims on
    # it: bench.py throughput, 616 repairs per 1,000 jobs). On the CQL test server, which runs in
    # this test's process beside the suite's niced xdist half, 12.5 % was seen once in a
    # fresh-clone run (stop 27; 0-5 % usually, 25-50 % without lanes): 20 % on both still tells
    # lanes from no lanes.
    if cluster.backend != "sqlite":
        assert lost <= 0.2 * attempts, (attempts, lost, unwritten)
    per_node = defaultdict(int)
    for u in uids:
        per_node[cluster.job("USER_JOB", "Probe.noop", u).worker_id] += 1
    assert min(per_node.get("a", 0), per_node.get("b", 0)) >= 100, per_node  # each took a real share


# timing: the peer's rows must be taken well before 6 s of this node's own work is done.
# SQLite only: what is checked is which rows a node reads when (claims.py), the same on every
# backend; each store's read of one lane is checked by the store contract suite.
@pytest.mark.timing
def test_a_node_busy_with_its_own_lane_still_takes_a_stalled_peers_rows(tmp_path):
    """A claim pass reads the node's own lane only (claims.py), but once per lane wait (200 ms
    here) it reads every lane: the rows left in the lane of a peer that stopped claiming are
    taken once they have waited OVERDUE lane waits (1 s), not when this node's own lane (40
    runs of 0.3 s on 2 slots: 6 s) runs dry."""
    from harness import Cluster

    from fabricjobs.model import JobKey

    port = free_port()
    cluster = Cluster(tmp_path, backend="sqlite", settings={  # b stays alive, paused, for 30 s
        "jobs": {"K2JOBS_POOL_SIZE": 2}, "metrics": {"PORT": port},
        "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500, "FABRIC_HEARTBEAT_MISS": 60}})
    try:
        other = cluster.tmp / "b.ini"  # b serves no metrics: only a's view of b is read
        other.write_text(cluster.config_path.read_text().replace(f"PORT = {port}", "PORT = 0"))
        cluster.start_node("a")
        b = cluster.start_node("b", config=other)
        wait_for(lambda: 'fabricjobs_peer_heartbeat_age_seconds{node="b"}' in scrape_metrics(port), 10, "a to see b alive")
        cluster.pause(b, group=True)

        def lane(uid: str) -> int:  # the lanes of the live nodes ["a", "b"]
            return JobKey("USER_JOB", "Probe.record", uid).lane(2)

        uids = [f"s{i:03d}" for i in range(200)]
        mine, theirs = [u for u in uids if lane(u) == 0][:40], [u for u in uids if lane(u) == 1][:4]
        log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
        start_records(cluster.client(), theirs + mine, log, 0.3, starts)
        wait_for(lambda: processed(cluster, theirs), 10, "the stalled peer's rows to be taken")
        started = {r["key"].rsplit(".", 1)[1] for r in read_records(starts)}
        assert len(started & set(mine)) <= len(mine) - 10, "the peer's rows waited for this node's own lane to run dry"
        assert {r["node"] for r in read_records(log)} == {"a"}
    finally:
        cluster.stop_all()


@pytest.mark.liveness
@pytest.mark.timing
@pytest.mark.alone  # on Apache Cassandra beside phase 1's niced workers: 2.15 s against 2.0 s once (stop 28)
def test_sigkill_of_a_node_running_20_jobs_reruns_them_on_the_survivors_within_the_dead_threshold(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    victim = cluster.start_node("victim")
    uids = [f"k{i:02d}" for i in range(20)]
    start_records(cluster.client(), uids, log, 4.0, starts)
    wait_for(lambda: len(read_records(starts)) == 20, 15, "20 runs to start on the victim")
    assert {r["node"] for r in read_records(starts)} == {"victim"}
    cluster.start_node("s1")
    cluster.start_node("s2")
    time.sleep(0.5)  # the survivors have seen the victim beat
    killed_at = time.time()
    victim.signal_group(signal.SIGKILL)  # the node and its workers: a crashed host
    bound = DEAD_AFTER + 2 * POLL

    def rerun():
        again = [r for r in read_records(starts) if r["node"] != "victim"]
        return len({r["key"] for r in again}) == 20 and again

    again = wait_for(rerun, bound + 5, "all 20 jobs to start again on the survivors")
    latest = max(r["start"] for r in again) - killed_at
    # Slack to start the runs: 20 takeover writes and starts. On the CQL test server (a Python
    # process sharing the two cores with the suite) those take up to ~0.4 s more under load:
    # there the bound is the failover goal itself, dead threshold + 1 s.
    slack = 0.25 if cluster.backend == "sqlite" else 0.6
    assert latest <= bound + slack, f"took {latest:.2f} s; the bound is {bound:.2f} s (+{slack} s to start the runs)"
    victim_state = lambda: next(r["state"] for r in cluster.fetch("nodes;") if r["node"] == "victim")  # noqa: E731
    wait_for(lambda: victim_state() == "dead", 15, "NODES to show the killed node dead")
    # A dead node runs nothing: not the 20 runs of its last beat (those are the survivors' now).
    shown = next(r for r in cluster.fetch("nodes details;") if r["node"] == "victim")
    assert shown["running"] == 0 and shown["tasks"] == "-" and " 0/" in shown["capacity"], shown
    assert min(r["start"] for r in again) > killed_at
    wait_for(lambda: processed(cluster, uids), 20, "the re-runs to finish")
    rows = [cluster.job("USER_JOB", "Probe.record", u) for u in uids]
    assert all(r.worker_id in ("s1", "s2") and r.tries == 1 for r in rows)  # the crash counted as a try
    # The takeover itself (each row's new start time, stamped by the survivor that took it):
    # on SQLite within the bound with no slack (0.9-1.1 s of 1.4 s seen); on the CQL test server,
    # whose reads of the nodes table are slower (1.1-1.3 s seen), within the failover goal.
    taken = max(r.start_time.timestamp() for r in rows) - killed_at
    limit = bound if cluster.backend == "sqlite" else DEAD_AFTER + 1.0
    assert taken <= limit, f"taken over {taken:.2f} s after the kill; the bound is {limit:.2f} s"
    assert "lost while running" in rows[0].error_msg
    assert all(r.retries_lost == 1 and r.retries_error == 0 for r in rows)  # JOBSTATUS DETAILS' counters
    finished = read_records(log)
    assert len(finished) == 20 and all(r["node"] != "victim" for r in finished)


@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOBS_POOL_SIZE": 2}}], indirect=True)
def test_a_dead_nodes_runs_are_taken_over_at_the_next_free_slot_not_after_the_waiting_backlog(cluster, tmp_path):
    """A survivor whose slots are all busy with a backlog of WAITING jobs takes a dead node's
    interrupted runs at its next free slot: the runs were claimed before the backlog's rows,
    and their jobs are down until taken (docs/explanation/nodes.md, "Heartbeat and takeover").
    The survivor's metrics count them as LOST runs (docs/reference/metrics.md)."""
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    victim = cluster.start_node("victim")
    start_records(cluster.client(), ["v0", "v1"], log, 6.0, starts)
    wait_for(lambda: len(read_records(starts)) == 2, 15, "the victim to start its 2 runs")
    port = free_port()
    metrics = cluster.tmp / "s1.ini"  # (the survivor alone serves metrics)
    metrics.write_text(cluster.config_path.read_text() + f"\n[metrics]\nPORT = {port}\n")
    survivor = cluster.start_node("s1", config=metrics)
    backlog = [f"b{i:02d}" for i in range(40)]  # 2 slots, 0.5 s each: 10 s of work
    start_records(cluster.client(), backlog, log, 0.5, starts)
    wait_for(lambda: sum(r["node"] == "s1" for r in read_records(starts)) >= 2, 15, "the survivor to work the backlog")
    killed_at = time.time()
    victim.signal_group(signal.SIGKILL)

    def taken():
        again = [r for r in read_records(starts) if r["key"].endswith((".v0", ".v1")) and r["node"] == "s1"]
        return len(again) == 2 and again

    again = wait_for(taken, 30, "the survivor to take over the victim's 2 runs")
    took = max(r["start"] for r in again)
    before = [r for r in read_records(starts) if r["key"].rsplit(".", 1)[1] in backlog and r["start"] < took]
    assert len(before) <= 30, (f"the dead node's runs were taken {took - killed_at:.1f} s after the kill, once "
                               f"{len(before)} of the backlog's 40 jobs had started: they waited for the backlog")
    assert survivor.alive()
    # Each run lost with its node is counted once, by the node that wrote its LOST line.
    assert scrape_metrics(port).get('fabricjobs_executions_total{result="LOST",type="USER_JOB"}') == 2
    wait_for(lambda: processed(cluster, backlog + ["v0", "v1"]), 40,
             "every job to finish")


@pytest.mark.liveness
def test_a_paused_node_process_ends_its_runs_before_anyone_takes_them_over(cluster, tmp_path):
    """SIGSTOP only the node process; its workers keep going, see the lease run out and end
    the runs themselves, before the dead threshold; after SIGCONT its late writes are rejected."""
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    paused = cluster.start_node("paused")
    uids = [f"p{i}" for i in range(6)]
    # 6 s each: on a loaded machine the six starts spread over seconds, and a 3 s run that
    # began first had ended (not aborted, its lease still valid) by the time of the pause.
    start_records(cluster.client(), uids, log, 6.0, starts)
    wait_for(lambda: len(read_records(starts)) == 6, 15, "6 runs to start")
    workers = {r["key"]: r["pid"] for r in read_records(starts)}
    stopped_at = cluster.pause(paused)  # while its runs are surely going
    try:
        # A run ends itself once the lease is gone: it sees is_aborted() and writes its end
        # record, or, on a machine too busy to let it look within 0.1 s, its worker ends it
        # by exiting (the worker's dead-man; docs/explanation/nodes.md). Either way before the dead threshold.
        def all_ended():
            recorded = {r["key"] for r in read_records(log)}
            return all(key in recorded or not process_alive(pid) for key, pid in workers.items())

        wait_for(all_ended, 10, "the paused node's runs to end", interval=0.01)
        seen_ended_at = time.time()
        # The other node starts only now, so however slowly it starts, it finds the paused
        # node's beat standing still.
        cluster.start_node("other")
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "other"}) == 6, 10,
                 "the other node to take all 6 over")
        time.sleep(0.5)
    finally:
        resumed_at = time.time()
        paused.signal(signal.SIGCONT)
    wait_for(lambda: processed(cluster, uids), 20, "the takeover runs to finish")
    records = read_records(log)
    stale = [r for r in records if r["node"] == "paused"]
    fresh = [r for r in records if r["node"] == "other"]
    assert all(r["aborted"] for r in stale)  # the ones that saw is_aborted() ...
    assert all(r["end"] < resumed_at for r in stale)  # ... ended while the node was still paused
    assert all(r["end"] - stopped_at < DEAD_AFTER for r in stale)  # before it could be judged dead
    killed = set(workers) - {r["key"] for r in stale}  # (a worker that exited: seen gone, a poll late at most)
    assert not killed or seen_ended_at - stopped_at < DEAD_AFTER + 0.3, f"{sorted(killed)} seen ended after {seen_ended_at - stopped_at:.2f} s"
    assert len(fresh) == 6 and not any(r["aborted"] for r in fresh)
    assert_no_overlap(records)
    wait_for(lambda: paused.log().count("no longer ours") >= 1, 15, "the resumed node to log its rejected writes")
    rows = [cluster.job("USER_JOB", "Probe.record", u) for u in uids]
    assert all(r.worker_id == "other" and r.status is Status.PROCESSED for r in rows)


@pytest.mark.liveness
def test_pausing_the_whole_process_group_ends_stale_runs_on_resume_before_they_report_success(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    frozen = cluster.start_node("frozen")
    uids = [f"g{i}" for i in range(4)]
    start_records(cluster.client(), uids, log, 2.0, starts)
    wait_for(lambda: len(read_records(starts)) == 4, 15, "4 runs to start")
    cluster.pause(frozen, group=True)  # node, fork server and workers all stop, mid-run
    try:
        cluster.start_node("other")  # after the freeze: however slowly it starts
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "other"}) == 4, 10,
                 "the other node to take all 4 over")
        time.sleep(2.5)  # long enough that the stale runs' 2 s of work is "done" when they wake
    finally:
        frozen.signal_group(signal.SIGCONT)
    wait_for(lambda: processed(cluster, uids), 20, "the takeover runs to finish")
    time.sleep(0.5)
    records = read_records(log)
    successes = defaultdict(list)
    for r in records:
        if not r["aborted"]:
            successes[r["key"]].append(r["node"])
    assert all(nodes == ["other"] for nodes in successes.values()) and len(successes) == 4
    rows = [cluster.job("USER_JOB", "Probe.record", u) for u in uids]
    assert all(r.worker_id == "other" and r.status is Status.PROCESSED for r in rows)
    assert "status was updated to PROCESSED" not in frozen.log()


# A dead threshold (200 ms x 10) that a node restart beats on a busy machine: this test is
# about who owns the jobs after the restart, not about how fast a node starts.
@pytest.mark.timing
@pytest.mark.parametrize("cluster", [{"heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 200, "FABRIC_HEARTBEAT_MISS": 10}}],
                         indirect=True)
def test_a_run_a_node_lost_and_took_back_after_its_restart_ended_when_its_last_life_was_seen(cluster, tmp_path):
    """A node SIGKILLed during a run and started again takes the run back. Its LOST history
    line ended at the restart (its duration grew with the time the node was down), not when
    the node was last seen, as when another node takes a run over (docs/guides/watching-jobs.md)."""
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    node = cluster.start_node("a")
    args = json.dumps({"log": str(log), "starts": str(starts), "seconds": 600})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='back' args='{args}';")
    wait_for(lambda: read_records(starts), 20, "the run to start")
    node.signal_group(signal.SIGKILL)
    killed_at = time.time()
    wait_for(lambda: time.time() > killed_at + 3, 5, "the node to have been down for 3 s")
    cluster.start_node("a")
    wait_for(lambda: len(read_records(starts)) == 2, 20, "the run taken back and started again")
    [lost] = [h for h in cluster.fetch("jobhistory user_job 'Probe.record' with uid='back';") if h["Result"] == "LOST"]
    assert lost["End"].timestamp() <= killed_at + 0.05, (lost["End"], killed_at)  # (its last beat: before the kill)
    cluster.fetch("stopjob user_job name='Probe.record' uid='back';")


def test_a_node_restarted_with_the_same_id_takes_its_scheduled_jobs_back(cluster, tmp_path):
    log = tmp_path / "fires.jsonl"
    cluster.start_node("a")
    cluster.start_node("b")
    # Recurring jobs (every 3 s) owned by one node; the other would only get them if the owner
    # were judged dead. After the owner's restart they must keep firing: only a node that took
    # its SCHEDULED rows back into its scheduler fires them (the survivor leaves a live owner's
    # rows alone).
    args = json.dumps({"log": str(log)})
    for i in range(5):
        cluster.fetch(f"startjob user_job name='Probe.stamp' uid='s{i}' exec_interval='00:00:03' args='{args}';")
    wait_for(lambda: all(cluster.job("USER_JOB", "Probe.stamp", f"s{i}").worker_id for i in range(5)), 10,
             "the scheduled jobs to be owned")
    name = cluster.job("USER_JOB", "Probe.stamp", "s0").worker_id
    mine = [f"s{i}" for i in range(5) if cluster.job("USER_JOB", "Probe.stamp", f"s{i}").worker_id == name]
    survivor = "b" if name == "a" else "a"
    cluster.nodes[name].signal_group(signal.SIGKILL)
    cluster.start_node(name)  # back well within the dead threshold
    restarted_at = time.time()

    def fired_on_survivor(uid: str) -> bool:
        return any(r["key"].endswith(f".{uid}") and r["node"] == survivor and r["start"] > restarted_at
                   for r in read_records(log))

    deadline = time.monotonic() + 3 * 2.0
    while time.monotonic() < deadline:  # the survivor never takes them over
        for uid in mine:
            # It may claim a fire the owner's scheduler made WAITING, like any node, and then
            # holds the schedule; it must never hold one it did not fire.
            job = cluster.job("USER_JOB", "Probe.stamp", uid)
            assert job.worker_id == name or job.status is not Status.SCHEDULED or fired_on_survivor(uid), job
        time.sleep(0.05)
    fired = {r["key"].rsplit(".", 1)[1] for r in read_records(log) if r["start"] > restarted_at}
    assert fired >= set(mine), f"not fired since the restart: {sorted(set(mine) - fired)}"
    assert f"from dead node {name}" not in cluster.nodes[survivor].log()


@pytest.mark.liveness
@pytest.mark.timing
@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOBS_POOL_SIZE": 10}}], indirect=True)
def test_a_node_whose_clock_is_30_s_ahead_judges_liveness_and_takes_over_correctly(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    a = cluster.start_node("plain")
    cluster.start_node("ahead", clock_offset=30.0)
    uids = [f"c{i}" for i in range(12)]
    start_records(cluster.client(), uids, log, 1.5, starts)
    wait_for(lambda: processed(cluster, uids), 20, "12 jobs processed by both nodes")
    records = read_records(log)
    assert {r["node"] for r in records} == {"plain", "ahead"}
    assert len(records) == 12  # nobody judged the other dead and took its runs over
    assert "dead node" not in cluster.nodes["ahead"].log() + a.log()
    # Now crash the node with the right clock: the skewed one takes over in time. (The skewed
    # node is paused for a moment, shorter than the dead threshold, so that the right-clock
    # node claims all five.)
    more = [f"d{i}" for i in range(5)]
    cluster.pause(cluster.nodes["ahead"])
    try:
        start_records(cluster.client(), more, log, 5.0, starts)
        wait_for(lambda: len([r for r in read_records(starts) if r["key"].rsplit(".", 1)[1] in more]) == 5, 15, "5 runs to start")
    finally:
        cluster.nodes["ahead"].signal(signal.SIGCONT)
    on_plain = {r["key"] for r in read_records(starts) if r["node"] == "plain" and r["key"].rsplit(".", 1)[1] in more}
    assert len(on_plain) == 5
    killed_at = time.time()
    a.signal_group(signal.SIGKILL)
    wait_for(lambda: {r["key"] for r in read_records(starts) if r["node"] == "ahead"} >= on_plain,
             DEAD_AFTER + 2 * POLL + 5, "the skewed node to take the crashed node's runs over")
    took = max(r["start"] for r in read_records(starts) if r["node"] == "ahead" and r["key"] in on_plain) - killed_at
    assert took <= DEAD_AFTER + 2 * POLL + 0.25, took


@pytest.mark.parametrize("cluster", [{"jobs": {"CLAIM_EXCEPTIONAL_INTERVAL_SEC": 3600}}], indirect=True)
def test_affinity_limits_recommended_counts_and_any_0(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    cluster.start_node("m1", node_id="HANDLE_MSG:5\n")
    cluster.start_node("m2", node_id="HANDLE_MSG:5\n")
    cluster.start_node("plain-off", node_id="ANY:0\n")
    uids = [f"h{i:02d}" for i in range(12)]
    start_records(cluster.client(), uids, log, 60, starts, affinity='{"Affinity":["HANDLE_MSG"]}')
    wait_for(lambda: len(read_records(starts)) == 10, 15, "10 HANDLE_MSG runs")
    time.sleep(1.0)  # nothing more starts: both nodes are at their limit
    runs = read_records(starts)
    assert len(runs) == 10
    per = defaultdict(int)
    for r in runs:
        per[r["node"]] += 1
    assert per == {"m1": 5, "m2": 5}
    waiting = [u for u in uids if cluster.job("USER_JOB", "Probe.record", u).status is Status.WAITING]
    assert len(waiting) == 2
    status = cluster.fetch(f"jobstatus user_job 'Probe.record' with uid='{waiting[0]}';").first_row()
    assert status["Ownership Candidates Num"] == 2  # m1 and m2, not plain-off
    # a slot frees: one of the waiting jobs runs
    cluster.fetch(f"stopjob user_job name='Probe.record' uid='{runs[0]['key'].rsplit('.', 1)[1]}';")
    wait_for(lambda: len(read_records(starts)) == 11, 10, "a waiting job to take the freed slot")
    # plain jobs never run on the ANY:0 node
    plain = [f"any{i}" for i in range(4)]
    start_records(cluster.client(), plain, log, 0.05)
    assert cluster.fetch("jobstatus user_job 'Probe.record' with uid='any0';").first_row()["Ownership Candidates Num"] == 2
    wait_for(lambda: processed(cluster, plain), 15, "plain jobs on m1/m2")
    assert {r["node"] for r in read_records(log) if "any" in r["key"]} <= {"m1", "m2"}


@pytest.mark.parametrize("cluster", [{"jobs": {
    "CLAIM_EXCEPTIONAL_INTERVAL_SEC": 1.0, "MIN_GIVE_UP_EXCEPTIONAL_MINUTES": 0.01, "MAX_GIVE_UP_EXCEPTIONAL_MINUTES": 0.02,
}}], indirect=True)
def test_exceptional_claims_beyond_recommended_and_giving_them_back(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    cluster.start_node("x1", node_id="HANDLE_MSG:2 4\n")
    uids = [f"e{i}" for i in range(4)]
    start_records(cluster.client(), uids, log, 60, starts, affinity="HANDLE_MSG")
    wait_for(lambda: len(read_records(starts)) == 2, 10, "the recommended 2 runs")
    # The other two are claimed exceptionally, only once they have waited 1 s since they were due.
    wait_for(lambda: len(read_records(starts)) == 4, 10, "2 exceptional claims")
    for r in sorted(read_records(starts), key=lambda r: r["start"])[2:]:
        due = cluster.job("USER_JOB", "Probe.record", r["key"].rsplit(".", 1)[1]).next_run.timestamp()
        assert r["start"] - due >= 1.0 - 0.002, (r, due)  # (due times in whole ms)
    # A node with free recommended slots appears: x1 gives its extra runs back to it.
    cluster.start_node("x2", node_id="HANDLE_MSG:2\n")
    wait_for(lambda: {r["node"] for r in read_records(starts)} == {"x1", "x2"}
             and sum(1 for r in read_records(starts) if r["node"] == "x2") == 2, 20, "x2 to take the 2 extra runs")
    assert "giving 'USER_JOB.Probe.record." in cluster.nodes["x1"].log()
    # (If x2 is slow to claim a run x1 gave back, x1 may take it again once its hold is over,
    # at least 1 s after it gave it back, and give it back again: correct, so the same key may
    # appear twice. tests/test_give_back.py: with a run slow to stop, it never comes back at once.)
    given_back = [r for r in read_records(log) if r["node"] == "x1"]
    assert len({r["key"] for r in given_back}) == 2 and all(r["aborted"] for r in given_back)
    taken = {r["key"]: r["start"] for r in read_records(starts) if r["node"] == "x2"}
    assert set(taken) == {r["key"] for r in given_back}  # x2 runs exactly the runs x1 gave back ...
    assert all(taken[r["key"]] >= r["end"] for r in given_back)  # ... after x1's runs of them ended
    rows = [cluster.job("USER_JOB", "Probe.record", u) for u in uids]
    assert sorted(r.worker_id for r in rows) == ["x1", "x1", "x2", "x2"]
    assert all(r.tries == 0 for r in rows)  # giving back is not a failure


@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOBS_POOL_SIZE": 1, "OWNER_PRECEDENCE_MS": 2500}}], indirect=True)
def test_a_due_job_is_left_to_its_live_owner_for_the_precedence_window(cluster, tmp_path):
    """docs/explanation/nodes.md: a's scheduler fires its job at the due time, but a's one slot is busy; b, idle,
    may take the job only once OWNER_PRECEDENCE_MS has passed since the due time."""
    from datetime import timezone

    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    cluster.start_node("a")
    start_records(cluster.client(), ["busy"], log, 60, starts)  # a's only slot
    wait_for(lambda: read_records(starts), 10, "a's slot to be taken")
    due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=4)
    args = json.dumps({"log": str(log), "seconds": 0.05, "starts": str(starts)})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='due' exec_interval='{due:%Y-%m-%d %H:%M:%S}' tz='UTC' "
                  f"args='{args}';")
    cluster.wait_job("USER_JOB", "Probe.record", "due", lambda j: j.worker_id == "a", 10, "a to own the schedule")
    cluster.start_node("b")
    run = wait_for(lambda: next((r for r in read_records(starts) if r["key"].endswith(".due")), None), 15,
                   "the due job to run")
    assert run["node"] == "b"
    assert 2.5 - 0.01 <= run["start"] - due.timestamp() < 2.5 + 5, run["start"] - due.timestamp()


def test_a_running_jobs_reported_progress_shows_in_jobstatus_and_ps_and_goes_with_the_run(cluster):
    """current_job().progress(done, total): the node publishes it with its tasks, so JOBSTATUS
    shows a percentage within a heartbeat, on any shell, and PS ALL the same; bad reports
    (NaN, text) are ignored without failing the job."""
    cluster.start_node("p1")
    cluster.fetch("startjob user_job name='Probe.progressing' uid='p' args='{\"done\": 3, \"total\": 4}';")
    status = wait_for(lambda: (lambda r: r["Progress"] == "75%" and r)(
        cluster.fetch("jobstatus user_job 'Probe.progressing' with uid='p';").first_row()), 10,
        "JOBSTATUS to show 75 %")
    assert status["Status"] == "IN_PROCESS"
    ps = wait_for(lambda: (lambda r: len(r) == 1 and r)(cluster.fetch("ps all;")), 15, "the run in PS ALL")
    assert ps.first_row()["progress"] == "75%"
    cluster.fetch("stopjob user_job name='Probe.progressing' uid='p' wait timeout 10;")
    done = cluster.fetch("jobstatus user_job 'Probe.progressing' with uid='p';").first_row()
    assert done["Status"] == "TERMINATED" and done["Progress"] == ""  # a final job has none


def test_ps_all_lists_every_nodes_tasks_and_kill_ends_a_stuck_job_on_another_node(cluster, tmp_path):
    started = tmp_path / "started.jsonl"
    cluster.start_node("w1")
    cluster.start_node("w2")
    args = json.dumps({"log": str(started)})
    # two pinned to each node (AFFINITY = a node's name), so PS ALL must gather both nodes' tasks
    cluster.fetch("".join(f"startjob user_job name='Probe.started' uid='stuck{i}' affinity='w{i % 2 + 1}' args='{args}';"
                          for i in range(4)))
    wait_for(lambda: len(read_records(started)) == 4, 10, "4 stuck jobs")
    ps = wait_for(lambda: (lambda r: len(r) == 4 and r)(cluster.fetch("ps all;")), 15, "4 tasks in PS ALL")
    assert sorted(r["node"] for r in ps) == ["w1", "w1", "w2", "w2"]
    assert all(r["description"] == "UserJob - Probe.started" and r["duration (ms)"] >= 0 for r in ps)
    shown = cluster.shell("-e", "ps all;").stdout  # the operator's view: every node's tasks with durations
    assert "| w1 " in shown and "| w2 " in shown and "duration (ms)" in shown and shown.rstrip().endswith("(4 rows)")
    victim = ps.first_row()
    shell = cluster.shell("-e", f"kill '{victim['node']}' {victim['task']};")
    assert shell.returncode == 0 and "KILL sent" in shell.stdout, shell.stderr

    def retried():
        rows = [cluster.job("USER_JOB", "Probe.started", f"stuck{i}") for i in range(4)]
        hit = [r for r in rows if r.tries == 1]
        return hit[0] if len(hit) == 1 else None

    row = wait_for(retried, 30, "the killed job to show a retry")
    assert "killed by KILL" in row.error_msg
    assert row.status in (Status.WAITING, Status.IN_PROCESS)
    killed = next(r for r in read_records(started) if r["key"] == str(row.key))  # its first run
    assert killed["node"] == victim["node"] and not process_alive(killed["pid"])
    details = cluster.fetch(f"jobstatus user_job 'Probe.started' with uid='{row.key.uid}' details;").first_row()
    assert details["Kills"] == 1 and details["Runs"] >= 1
    bad = cluster.shell("-e", f"kill '{victim['node']}' 1;")
    assert bad.returncode == 1 and "has no task 1" in bad.stderr
    nodes = cluster.shell("-e", "nodes;")
    assert "| w1 " in nodes.stdout and "alive" in nodes.stdout
    # The same through the console script's sub-commands.
    listed = wait_for(lambda: (lambda p: p.returncode == 0 and len(json.loads(p.stdout)) == 4 and json.loads(p.stdout))(
        cluster.cli("ps", "--all", "--format", "json")), 5, "4 tasks in `fabricjobs ps --all`")
    assert {r["node"] for r in listed} <= {"w1", "w2"}
    assert all(r["description"] == "UserJob - Probe.started" for r in listed)
    bad = cluster.cli("kill", victim["node"], "1")
    assert bad.returncode == 1 and "has no task 1" in bad.stderr
    assert "alive" in cluster.cli("nodes").stdout


def test_nodes_judges_a_silent_node_suspect_after_two_beats_and_dead_at_the_threshold():
    """NODES' state column (an operator's view; takeover uses liveness.py's own-clock judgment):
    alive within two beat intervals, suspect until the node's dead threshold, then dead; a node
    that stopped cleanly says so."""
    import dataclasses
    import json as _json
    from datetime import datetime, timezone

    from fabricjobs.cluster import judge
    from fabricjobs.store.base import NodeRow

    row = NodeRow("n1", "inc", "DC1", "host", 1, datetime(2026, 1, 1, tzinfo=timezone.utc), "1", 7,
                  info=_json.dumps({"heartbeat_ms": 200, "miss": 5}))
    assert [judge(row, age) for age in (0.1, 0.4, 0.41, 0.99, 1.0, 60.0)] == [
        "alive", "alive", "suspect", "suspect", "dead", "dead"]
    assert judge(dataclasses.replace(row, state="stopped"), 0.1) == "stopped"
