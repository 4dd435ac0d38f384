"""Network partitions between real hosts (docs/explanation/guarantees.md): fabricjobs nodes and Apache Cassandra
each in a network namespace of their own (testkit/netns.py), the faults cut between
them, slowed or lossy (delay and loss: the user-space link, testkit/tunlink.py) while
jobs run, and the guarantees (docs/explanation/guarantees.md) checked on what the jobs themselves recorded: never two
runs of a key at once, no job lost, every re-run explained by a self-fence, and no write of a
fenced run accepted.

The tests start a three-node Cassandra 5.0 of their own (each node in its own namespace),
shared by all of them, next to the one ./scripts/test runs for the real tier: the faults here
must not reach that one.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime

import pytest
from testkit.realcassandra import C1_ONLY_JIT_FLAG, CassandraCluster, available

from fabricjobs.client import Client
from fabricjobs.errors import StoreError
from fabricjobs.model import JobKey, Status
from fabricjobs.store.cassandra.session import LWT_TIMEOUT
from testkit import netns
from testkit.rig import Rig, wait_for, write_config
from harness import (FAST, LOG_TIME, RunWatch, assert_finished_by_newest_runs, assert_no_overlap, fence_times,
                     log_time, merge_runs, read_records, unexplained_reruns, worker_deaths)

_why = netns.unavailable() or available()
pytestmark = [pytest.mark.partition, pytest.mark.soak, pytest.mark.skipif(_why is not None, reason=f"partition tests: {_why}")]

HEARTBEAT_MS, MISS = 200, 5  # dead after 1 s; a run's lease lapses 0.6 s after its last renewal
JOBS = 6
SECONDS = 8.0
#: Scenarios 1 and 2: n1's runs take this long, so that each is still running when its lease
#: lapses however slowly n2 starts before the cut (a fresh run once saw two of them end on
#: their own 2.5 s after it); n2's, which take the jobs over, take SECONDS.
N1_RUN_SECONDS = 60.0


def _kill(cassandra: CassandraCluster, nodes: int) -> None:
    """SIGKILL every node of a test's own Cassandra and wait until they are gone: nothing of
    its data is kept, and a clean stop (drain) costs 5-14 s a cluster."""
    for i in range(nodes):
        if cassandra.pid(i) is not None:
            cassandra.kill_node(i)


def _config(tmp_path, dbs: list[netns.Host], heartbeat: tuple[int, int] = (HEARTBEAT_MS, MISS),
            request_timeout: float = 2, jobs: dict | None = None, keyspace: str | None = None):
    sections = {s: dict(v) for s, v in FAST.items()}
    sections["heartbeat"] = {"FABRIC_HEARTBEAT_INTERVAL_MS": heartbeat[0], "FABRIC_HEARTBEAT_MISS": heartbeat[1]}
    sections["jobs"].update(jobs or {})
    sections["store"] = {"BACKEND": "cassandra"}
    sections["cassandra"] = {"HOSTS": ",".join(db.address for db in dbs), "PORT": 9042,
                             "KEYSPACE": keyspace or "fj_" + uuid.uuid4().hex[:12],
                             "REPLICATION": f"SimpleStrategy:{len(dbs)}",
                             "PROTOCOL_VERSION": 5, "CONSISTENCY": "QUORUM", "TOKEN_AWARE": "false",
                             "REQUEST_TIMEOUT_SEC": request_timeout}
    return write_config(tmp_path / "config.ini", sections)


def _start_nodes(rig: Rig, net: netns.Network, names: list[str]) -> dict:
    """Start ``names`` on their test hosts; return once each has finished its start-up (a node
    that meets a store error while it starts exits, for its supervisor to start it again)."""
    nodes = {name: rig.spawn(name, prefix=net.host(name).command([])) for name in names}
    for node in nodes.values():
        rig.wait_started(node, 90)
    return nodes


def _all_processed(client: Client, keys: list[JobKey]) -> bool:
    return all((lambda j: j is not None and j.status is Status.PROCESSED)(client.store.get(k)) for k in keys)


def _warnings_after(nodes: dict, since: float) -> str:
    """The WARNING and ERROR lines the nodes logged after ``since`` (epoch seconds), for a
    failure's message: which requests timed out, on which host, on which thread."""
    out = []
    for name, node in nodes.items():
        for line in node.log().splitlines():
            m = LOG_TIME.match(line)
            if m and line.startswith(("WARNING", "ERROR")) and log_time(m) >= since:
                out.append(f"{name}: {line[:300]}")
    return "\n".join(out[:60])


def _runs_by_key(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["key"]].append(r)
    return out


THREE_NODE_TESTS = 6  # the tests below that use `three` with a keyspace made for them (one each)


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Test hosts c1-c3 (a three-node Cassandra, every keyspace RF 3, QUORUM / SERIAL) and n1-n3
    (fabricjobs nodes), shared by the tests below; each heals what it cut. With them, the
    keyspaces of those tests, one each, made before any of them runs.

    Each test has a keyspace of its own. Sharing one was tried to save its schema changes and
    given up: a replica healed by the test before kept its peers waiting for seconds (a node
    starting 1 s after the heal exited, unable to read the schema version), and even with a
    wait for every replica to answer every coordinator at consistency ALL, scenario 3's
    longest pause grew from 1.0-1.8 s to 1.6-5.9 s. Made one after another, the keyspaces cost
    15-20 s each (a dozen schema changes, each waiting for the three replicas to agree); made
    side by side, on a healthy network, their waits overlap."""
    with netns.Network(["c1", "c2", "c3", "n1", "n2", "n3"]) as net:
        dbs = [net.host(f"c{i}") for i in (1, 2, 3)]
        tmp = tmp_path_factory.mktemp("cassandra3")
        # C1 only and no flush of the schema tables after each change: on a 2-core VM of
        # 2026-11-27 the five keyspaces took 100 s to make without them (each a dozen schema
        # changes; the JVMs' C2 compiles competing with them), and the nodes' 0.25 s beats then
        # timed out often enough for n2 to self-fence again and again. No test here restarts a
        # Cassandra node, which is when unsafe_system would lose schema.
        cassandra = CassandraCluster(tmp / "cassandra", 3, heap="512m", jvm_options=[C1_ONLY_JIT_FLAG],
                                     unsafe_system=True, namespaces=[(h.namespace, h.address) for h in dbs])
        cassandra.start()
        try:
            yield net, dbs, _make_keyspaces(tmp, dbs, THREE_NODE_TESTS)
        finally:
            net.heal()
            _kill(cassandra, 3)


def _make_keyspaces(tmp, dbs: list[netns.Host], count: int) -> list[str]:
    """``count`` keyspaces with the fabricjobs schema, made at once (a store opened on each)."""
    names = ["fj_" + uuid.uuid4().hex[:12] for _ in range(count)]
    errors: list[BaseException] = []

    def make(name: str) -> None:
        try:
            where = tmp / name
            where.mkdir()
            Client.from_config(_config(where, dbs, keyspace=name, request_timeout=10)).close()
        except BaseException as exc:  # reported below, in the fixture's thread
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return names


def test_three_nodes_started_at_the_same_instant_on_an_empty_keyspace_all_come_up_with_one_schema(three, tmp_path):
    """Any number of nodes may start at once on an empty keyspace (docs/explanation/cassandra-queue.md,
    "Starting together"): n1-n3 launched together against a keyspace that does not exist yet,
    on the three-node Cassandra, all come up; every Cassandra node has the same schema, each
    table with its one fixed id; and jobs run once each. (scripts/start_together.py runs
    such rounds back to back.)"""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    from fabricjobs.store.cassandra.schema import table_id

    net, dbs, _ = three
    keyspace = "fj_" + uuid.uuid4().hex[:12]
    config = _config(tmp_path, dbs, heartbeat=(500, 8), keyspace=keyspace, request_timeout=10)
    rig = Rig(tmp_path, config)
    log = tmp_path / "runs.jsonl"
    try:
        _start_nodes(rig, net, ["n1", "n2", "n3"])  # launched together, then each waited for
        seen = {}
        for db in dbs:
            profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([db.address]))
            with Cluster([db.address], port=9042, protocol_version=5, schema_metadata_enabled=False,
                         token_metadata_enabled=False, execution_profiles={EXEC_PROFILE_DEFAULT: profile}) as c:
                session = c.connect()
                version = session.execute("SELECT schema_version FROM system.local").one().schema_version
                ids = {r.table_name: r.id for r in session.execute(
                    "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))}
                seen[db.name] = (version, ids)
        versions = {v for v, _ in seen.values()}
        assert len(versions) == 1, f"the Cassandra nodes disagree on the schema: {seen}"
        ids = next(iter(seen.values()))[1]
        assert all(i == ids for _, i in seen.values())
        assert "k2_jobs" in ids and all(ids[t] == table_id(keyspace, t) for t in ids), ids
        with Client.from_config(config) as client:
            args = json.dumps({"log": str(log)})
            keys = [JobKey("USER_JOB", "Probe.record", f"t{i:02d}") for i in range(30)]
            client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
            wait_for(lambda: _all_processed(client, keys), 60, "every job to be PROCESSED", check=rig.check_nodes)
        assert sorted(r["key"] for r in read_records(log)) == sorted(str(k) for k in keys)
    finally:
        rig.kill_all()


def test_partition_a_node_cut_from_the_store_ends_its_runs_before_another_takes_them_over(three, tmp_path):
    """Scenario 1: n1 runs jobs and loses every path to the three Cassandra nodes (and to n2).
    Its runs end themselves when its lease lapses; n2 takes them over once n1's beat has stood
    still for the dead threshold, never while n1's runs still run; healed, n1's late outcome
    writes are refused (its epoch is gone) and it beats and takes work again."""
    net, dbs, keyspaces = three
    threshold = HEARTBEAT_MS * MISS / 1000.0
    config = _config(tmp_path, dbs, keyspace=keyspaces.pop())
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    watch = _BeatWatch(config, "n1")
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    workers = RunWatch(starts)  # a run killed by its lease's end leaves no end record
    try:
        workers.start()
        nodes = _start_nodes(rig, net, ["n1"])
        n1 = nodes["n1"]
        args = json.dumps({"log": str(log), "seconds": SECONDS, "seconds_on": {"n1": N1_RUN_SECONDS},
                           "starts": str(starts)})
        keys = _submit(client, "p", JOBS, args)
        wait_for(lambda: len({r["key"] for r in read_records(starts)}) == JOBS, 30, "n1 to start every job",
                 check=rig.check_nodes)
        nodes.update(_start_nodes(rig, net, ["n2"]))
        watch.start()

        cut_at = time.time()
        net.isolate("n1")
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "n2"}) == JOBS, 30,
                 lambda: f"n2 to take over every job; starts: {read_records(starts)}", check=rig.check_nodes)
        wait_for(lambda: _all_processed(client, keys), SECONDS + 30, "n2 to finish every job",
                 check=rig.check_nodes, not_yet=(StoreError,))
        watch.stop.set()
        watch.join(10)
        watch.dump(tmp_path / "beats-n1.jsonl")
        workers.finish()

        started = read_records(starts)
        runs = merge_runs(started, read_records(log), workers.gone, worker_deaths(nodes))
        # n1's runs ended, aborted (or killed), before n2 began the same key; no two runs of a
        # key overlap, and each run again follows n1's self-fence.
        ended_on_n1 = {r["key"]: r for r in runs if r["node"] == "n1" and "end" in r}
        assert set(ended_on_n1) == {str(k) for k in keys}, runs
        assert all(r["aborted"] for r in ended_on_n1.values())
        for key, of_key in _runs_by_key(started).items():
            second = min(r["start"] for r in of_key if r["node"] == "n2")
            assert ended_on_n1[key]["end"] <= second, (key, ended_on_n1[key], of_key)
            assert ended_on_n1[key]["end"] - cut_at < 3.0  # the lease (0.6 s) and a request timeout
        assert_no_overlap(runs)
        assert unexplained_reruns(runs, {name: fence_times(node) for name, node in nodes.items()}) == []
        # n2 judged n1 dead only once no beat of n1 can have landed for the dead threshold.
        assert _early_takeovers(watch, _takeovers(nodes["n2"], "n1"), threshold) == []
        # Every row was finished by n2 under a newer epoch: nothing n1 wrote after the cut won.
        rows = [client.store.get(k) for k in keys]
        assert all(j.worker_id == "n2" and j.epoch >= 2 for j in rows), rows
        assert "could not renew its lease" in n1.log()

        net.heal()
        beat = next(r.beat for r in client.store.nodes() if r.name == "n1")
        wait_for(lambda: next(r.beat for r in client.store.nodes() if r.name == "n1") > beat + 3, 30,
                 "n1 to beat again after the heal", check=rig.check_nodes, not_yet=(StoreError,))
        # Its runs' outcomes, kept through the cut, were tried once it could reach the store
        # again, and refused: the rows are unchanged.
        wait_for(lambda: n1.log().count("is no longer ours") >= JOBS, 30,
                 "n1 to be refused the outcome of each run it lost", check=rig.check_nodes)
        assert [client.store.get(k) for k in keys] == rows
        # And it takes work again: a job pinned to it runs there.
        client.fetch("startjob user_job name='Probe.noop' uid='after' affinity='n1';")
        wait_for(lambda: (lambda j: j is not None and j.status is Status.PROCESSED and j.worker_id == "n1")(
            client.store.get(JobKey("USER_JOB", "Probe.noop", "after"))), 30, "n1 to run a job after the heal",
            not_yet=(StoreError,))
    finally:
        watch.stop.set()
        workers.finish()
        net.heal()
        client.close()
        rig.kill_all()


def test_partition_one_isolated_replica_of_three_does_not_stop_the_cluster(three, tmp_path):
    """Scenario 3: with c3 cut off from everyone, the nodes keep claiming and finishing jobs
    through c1 and c2 (a quorum of RF 3): no gap between run starts longer than three request
    timeouts (and a second for the work between), no node fences itself, nothing runs twice at
    once, nothing is lost.

    Three timeouts, not two: one for a request in flight to c3 at the cut, one for a request
    to c3 sent in the same moment by another of the node's threads before the first one's
    timeout demoted c3 (session.Unanswered), and one for a surviving replica. With c3 cut,
    every quorum needs both c1 and c2, so the cluster has no slack left: when one of them
    stalls past the 2 s request timeout (three JVMs on two cores beside the test), so does
    every LWT. CI saw 5.9 s that way, with c1 timing out once; quiet runs see 1-2 s.

    Such a stall stops the heartbeats too (a beat is a quorum write), so the lease must outlast
    the pause the test allows, or a node fences itself for want of c1 alone: beats every 1 s,
    dead after 8 s, a 6 s lease (heartbeat.lease_seconds). On 0.5 s beats (a 3 s lease) a fresh
    run saw n1 fence itself when c1 left a request unanswered: the test's own slack (7 s
    between run starts) was more than the lease it gave the nodes."""
    net, dbs, keyspaces = three
    config = _config(tmp_path, dbs, heartbeat=(1000, 8), keyspace=keyspaces.pop())
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    try:
        nodes = _start_nodes(rig, net, ["n1", "n2"])
        args = json.dumps({"log": str(log), "seconds": 0.4, "starts": str(starts)})
        keys = [JobKey("USER_JOB", "Probe.record", f"q{i:03d}") for i in range(120)]
        client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
        wait_for(lambda: len(read_records(starts)) >= 16, 30, "the first runs", check=rig.check_nodes)
        cut_at = time.time()
        net.isolate("c3")
        try:
            wait_for(lambda: _all_processed(client, keys), 120, "every job to be PROCESSED", interval=0.2,
                     check=rig.check_nodes, not_yet=(StoreError,))  # this test's reads go through c3 too
        finally:
            net.heal()
        started, ended = read_records(starts), read_records(log)
        assert {r["key"] for r in ended if not r["aborted"]} == {str(k) for k in keys}
        assert_no_overlap(merge_runs(started, ended))
        assert_finished_by_newest_runs(client.store, keys, started)
        after = sorted(r["start"] for r in started if r["start"] >= cut_at)
        gaps = [b - a for a, b in zip([cut_at] + after, after)]
        print(f"scenario 3: longest pause in run starts after the cut {max(gaps, default=0):.2f} s")
        assert after and max(gaps) < 3 * 2 + 1.0, \
            f"longest pause in run starts after the cut: {max(gaps):.2f} s\n{_warnings_after(nodes, cut_at)}"
        for name, node in nodes.items():
            assert "could not renew its lease" not in node.log(), f"{name} fenced itself:\n{node.log()[-3000:]}"
    finally:
        client.close()
        rig.kill_all()


def test_partition_an_lwt_sent_to_a_cut_off_coordinator_is_settled_through_another_host(three, tmp_path):
    """A coordinator cut off (or paused) after an LWT reached it never answers, and the driver
    never sends an LWT twice: the sender waited out the whole request timeout (10 s here, the
    default), and a node's claim pass with it (the chaos soak saw 5.5 s behind a SIGSTOPped
    Cassandra node). An LWT is waited for LWT_TIMEOUT (4 s) at most; its outcome is then
    settled by a SERIAL read through another host. The LWTs here are a listener's file marks,
    which send no plain write first (a plain write to the silent host would have it tried last
    before any LWT got there): a dozen at once, a third of them to c3, each answered well
    before the request timeout, and each answer the truth about its mark."""
    net, dbs, keyspaces = three
    config = _config(tmp_path, dbs, request_timeout=10, keyspace=keyspaces.pop())
    client = Client.from_config(config)
    listener = JobKey("INTERFACE_LISTENER", "Inbox.watch", "cut")
    try:
        store = client.store
        assert store.mark_file(listener, "warm-up.csv", "seen")  # the statements are prepared before the cut

        def c3_takes_its_turn() -> bool:
            """The driver has every host up, and none is tried last (a host that answered a
            request late lately is, for a while): else no LWT would go to c3. The test before
            this one cut c3 off and healed it; a fresh run once saw every mark go elsewhere."""
            hosts = store._cluster.metadata.all_hosts()
            now = time.monotonic()
            return len(hosts) == 3 and all(h.is_up and store._session._unanswered._rank(h, now) == 0 for h in hosts)

        wait_for(c3_takes_its_turn, 30, "the driver to use every host")
        unknown = store.stats.unknown_outcomes
        answers: dict[str, tuple[bool, float]] = {}

        def mark(file: str) -> None:
            began = time.monotonic()
            answers[file] = (store.mark_file(listener, file, "seen"), time.monotonic() - began)

        net.isolate("c3")
        try:
            # TOKEN_AWARE false: the hosts take turns as coordinators, so c3 gets about a third.
            threads = [threading.Thread(target=mark, args=(f"f{i:02d}.csv",)) for i in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        finally:
            net.heal()
        assert len(answers) == 12, answers
        slowest = max(took for _, took in answers.values())
        assert store.stats.unknown_outcomes > unknown  # some went to c3 and were settled elsewhere
        assert slowest < LWT_TIMEOUT + 3.0, f"a mark took {slowest:.1f} s (the request timeout is 10 s)"
        marked = store.marked_files(listener)
        assert {f for f, (ok, _) in answers.items() if ok} == marked - {"warm-up.csv"}  # each answer is the truth
    finally:
        client.close()


def test_partition_a_node_with_a_minority_of_replicas_fences_itself_and_nothing_is_lost(three, tmp_path):
    """Scenario 2: n1 and c1 on one side, n2, c2 and c3 on the other. n1 still reaches one
    replica, but no quorum: its compare-and-sets fail, its lease lapses and its runs end; n2
    takes their jobs over on the majority side. Healed, n1 beats again; every job ends once."""
    net, dbs, keyspaces = three
    # Beats every 0.5 s (a 0.5 s timeout each, a 3 s lease), not 0.2 s: right after scenario 3
    # healed c3, CI saw n1 lose its 0.6 s lease twice before the cut, on a whole cluster.
    config = _config(tmp_path, dbs, heartbeat=(500, 8), keyspace=keyspaces.pop())
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    workers = RunWatch(starts)  # a run killed by its lease's end leaves no end record
    try:
        workers.start()
        nodes = _start_nodes(rig, net, ["n1"])
        args = json.dumps({"log": str(log), "seconds": SECONDS, "seconds_on": {"n1": N1_RUN_SECONDS},
                           "starts": str(starts)})
        keys = [JobKey("USER_JOB", "Probe.record", f"m{i}") for i in range(JOBS)]
        client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
        wait_for(lambda: len({r["key"] for r in read_records(starts)}) == JOBS, 30, "n1 to start every job",
                 check=rig.check_nodes)
        nodes.update(_start_nodes(rig, net, ["n2"]))
        cut_at = time.time()
        net.isolate_group(["n1", "c1"])
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "n2"}) == JOBS, 60,
                 lambda: f"n2 to take over every job; starts: {read_records(starts)}; n2's log ends:\n"
                         f"{nodes['n2'].log()[-4000:]}", check=rig.check_nodes)
        took = max(r["start"] for r in read_records(starts) if r["node"] == "n2") - cut_at
        print(f"scenario 2: n2 started every job again {took:.1f} s after the cut")
        wait_for(lambda: _all_processed(client, keys), SECONDS + 60, "n2 to finish every job", check=rig.check_nodes,
                 not_yet=(StoreError,))
        workers.finish()
        started = read_records(starts)
        runs = merge_runs(started, read_records(log), workers.gone, worker_deaths(nodes))
        assert_no_overlap(runs)
        # Each ended on its own (aborted) or was killed with its worker (CI: 3 of 6 once).
        on_n1 = [r for r in runs if r["node"] == "n1"]
        assert len(on_n1) == JOBS and all("end" in r and r["aborted"] and r["end"] - cut_at < 5.0 for r in on_n1), \
            f"cut at {cut_at:.3f}; n1's runs: {json.dumps(on_n1)}"  # a string: shown in full
        assert "could not renew its lease" in nodes["n1"].log()
        # Why: its beats' writes failed for want of a quorum (or timed out waiting for one).
        assert re.search(r"heartbeat of n1 failed: Cassandra: (Unavailable|WriteTimeout|OperationTimedOut)",
                         nodes["n1"].log()), nodes["n1"].log()[-3000:]
        fences = {name: fence_times(node) for name, node in nodes.items()}
        assert unexplained_reruns(runs, fences) == []
        rows = [client.store.get(k) for k in keys]
        # Finished on the majority side. (n2 may have lost its own lease for a moment at the
        # cut, while its driver still tried c1: then a job ran there once more, epoch 3.)
        assert all(j.worker_id == "n2" and j.epoch >= 2 for j in rows), rows
        net.heal()
        beat = next(r.beat for r in client.store.nodes() if r.name == "n1")
        wait_for(lambda: next(r.beat for r in client.store.nodes() if r.name == "n1") > beat + 3, 60,
                 "n1 to beat again after the heal", check=rig.check_nodes)
        assert [client.store.get(k) for k in keys] == rows
    finally:
        workers.finish()
        net.heal()
        client.close()
        rig.kill_all()


# -- delay and loss (the user-space link, testkit/tunlink.py) ----------------------------

def _submit(client: Client, prefix: str, count: int, args: str) -> list[JobKey]:
    keys = [JobKey("USER_JOB", "Probe.record", f"{prefix}{i}") for i in range(count)]
    client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
    return keys


def _fault_for(seconds: float, rig: Rig, check=None) -> None:
    """Let a fault last ``seconds``, failing at once if a node process dies (or ``check``
    raises) meanwhile."""
    def checks() -> None:
        rig.check_nodes()
        if check is not None:
            check()

    since = time.monotonic()
    wait_for(lambda: time.monotonic() - since >= seconds, seconds + 10, "the fault's time to pass", interval=0.2,
             check=checks)


class _Feeder(threading.Thread):
    """Keeps ``depth`` jobs submitted and not yet finished: the cluster works at its own pace
    and the backlog left when the fault ends is small. Its own client; the test process
    reaches the store over the bridge, never through the link."""

    def __init__(self, config, args: str, ended_log, depth: int) -> None:
        super().__init__(name="feeder", daemon=True)
        self.client = Client.from_config(config)
        self.args, self.ended_log, self.depth = args, ended_log, depth
        self.keys: list[JobKey] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                done = sum(1 for r in read_records(self.ended_log) if not r["aborted"])
                more = self.depth - (len(self.keys) - done)
                if more > 0:
                    new = [JobKey("USER_JOB", "Probe.record", f"d{len(self.keys) + i:04d}") for i in range(more)]
                    self.client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' "
                                              f"args='{self.args}';" for k in new))
                    self.keys.extend(new)
                self.stop.wait(0.2)
        except BaseException as exc:  # seen by the test through .error
            self.error = exc
        finally:
            self.client.close()


def _done_between(ended: list[dict], a: float, b: float) -> int:
    return sum(1 for r in ended if not r["aborted"] and a <= r["end"] < b)


#: Scenario 4's fault lasts 20 s in the suite, not the issue's 60 s: the partition tests run in
#: the suite's soak phase, and with 60 s the whole of ./scripts/test took 14:22 on a quiet 2-core
#: VM, too near its 15 minutes. FABRICJOBS_PARTITION_FAULT_SECONDS=60 runs the issue's figure
#: (two such runs on 2026-11-26: 0.96 and 0.43 jobs/s under the fault, no re-run, every job
#: finished after the heal under its newest run's epoch).
FAULT_SECONDS = float(os.environ.get("FABRICJOBS_PARTITION_FAULT_SECONDS", "20"))


def test_partition_delay_and_loss_on_every_path_slow_the_cluster_but_break_nothing(three, tmp_path):
    """Scenario 4: 200 ms +- 100 ms (uniform) and 5 % loss on every path between hosts, each
    way, for FAULT_SECONDS, while n1 and n2 run short jobs (0.2 s, 30 waiting at any time) on
    the three-node Cassandra. Jobs finish more slowly but still finish, and correctness holds:
    no two runs of a key at once, every job PROCESSED after the heal, every re-run explained by
    the node that ran it before fencing itself.

    20 s is 13 heartbeat intervals and one and a half dead thresholds, some 15 jobs of about
    20 round trips to the cluster each and ~5,000 packets through the link (each a 200 ms +-
    100 ms draw, 1 in 20 lost): every request path of a node, its beats and the replicas'
    Paxos rounds meet the fault many times over.

    Timings set for such a network, as an operator would: a request times out after 5 s (a
    transaction is about eight one-way trips here, 1.6 s, more with a retransmission), and the
    heartbeat is 1.5 s x 8. A beat (a read and a write, each about four one-way trips) must
    fit in its own timeout, one interval: at 1 s x 8 both nodes fenced themselves 3-4 times in
    30 s and finished no job while the fault lasted (safely). A lease lost counts as a failed
    try, so MAX_TRIES is raised to 20 for "every job PROCESSED" to be the check."""
    net, dbs, keyspaces = three
    config = _config(tmp_path, dbs, heartbeat=(1500, 8), request_timeout=5, jobs={"MAX_TRIES": 20}, keyspace=keyspaces.pop())
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    feeder = _Feeder(config, json.dumps({"log": str(log), "seconds": 0.2, "starts": str(starts)}), log, depth=30)
    workers = RunWatch(starts)

    def feeding() -> None:
        if feeder.error is not None:
            raise AssertionError(f"the feeder failed: {feeder.error!r}")

    try:
        workers.start()
        nodes = _start_nodes(rig, net, ["n1", "n2"])
        feeder.start()
        wait_for(lambda: len(read_records(log)) >= 10, 60, "the first runs to end", check=rig.check_nodes)
        base_from = time.time()
        _fault_for(5, rig, feeding)  # (no fault yet: the throughput to compare with)
        fault_at = time.time()
        net.delay(200, 100)
        net.loss(0.05)
        try:
            _fault_for(FAULT_SECONDS, rig, feeding)
        finally:
            net.heal()
        healed_at = time.time()
        assert net.link is not None
        relay = net.link.stats()
        feeder.stop.set()
        feeder.join(30)
        feeding()
        keys = list(feeder.keys)
        wait_for(lambda: _all_processed(client, keys), 120, "every job to be PROCESSED after the heal",
                 interval=0.5, check=rig.check_nodes, not_yet=(StoreError,))
        drained_at = time.time()
        workers.finish()
        started, ended = read_records(starts), read_records(log)
        runs = merge_runs(started, ended, workers.gone, worker_deaths(nodes))
        assert_no_overlap(runs)
        assert {r["key"] for r in ended if not r["aborted"]} == {str(k) for k in keys}
        fences = {name: fence_times(node) for name, node in nodes.items()}
        assert unexplained_reruns(runs, fences) == []
        assert_finished_by_newest_runs(client.store, keys, started)
        base = _done_between(ended, base_from, fault_at) / (fault_at - base_from)
        during = _done_between(ended, fault_at, healed_at) / (healed_at - fault_at)
        late = relay["late_ms"]
        print(f"scenario 4: {len(keys)} jobs; {base:.1f} jobs/s before the fault, {during:.2f} during "
              f"{healed_at - fault_at:.0f} s of it, all PROCESSED {drained_at - healed_at:.1f} s after the heal; "
              f"{len(started) - len({r['key'] for r in started})} re-runs; self-fences "
              f"{ {n: len(t) for n, t in fences.items()} }; link: {relay['received']} packets, "
              f"{relay['dropped']} dropped, released late by {late['mean']:.1f} ms on average, {late['max']:.1f} at most")
        assert 0 < during < base, (base, during)
    finally:
        feeder.stop.set()
        workers.finish()
        net.heal()
        client.close()
        rig.kill_all()


class _BeatWatch(threading.Thread):
    """Reads ``name``'s row every 0.1 s (over the bridge, never through the link) and keeps
    each read as (sent, returned, beat), beat None for a read that failed. A beat that changed
    between two reads landed in the store after the first was sent and before the second
    returned; two reads of one beat prove it stood still from the first's return to the
    second's send."""

    def __init__(self, config, name: str) -> None:
        super().__init__(name="beat-watch", daemon=True)
        self.client = Client.from_config(config)
        self.name_ = name
        self.reads: list[tuple[float, float, int | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                sent = time.time()
                try:
                    row = self.client.store.node(self.name_, timeout=1.0)
                except StoreError:
                    row = None
                self.reads.append((sent, time.time(), row.beat if row is not None else None))
                self.stop.wait(0.1)
        finally:
            self.client.close()

    def dump(self, path) -> None:
        """The reads, one JSON list (sent, returned, beat) a line: evidence for a failure."""
        path.write_text("".join(json.dumps(list(r)) + "\n" for r in self.reads))

    def _seen(self) -> list[tuple[float, float, int]]:
        return [(s, r, b) for s, r, b in self.reads if b is not None]

    def landings(self) -> list[tuple[float, float]]:
        """For each beat seen to change: (earliest, latest) time it can have landed."""
        seen = self._seen()
        return [(a[0], b[1]) for a, b in zip(seen, seen[1:]) if b[2] != a[2]]

    def longest_still(self, since: float, until: float) -> float:
        """The longest time the beat is proven to have stood still within [since, until]."""
        best, first = 0.0, None
        for read in self._seen():
            if first is None or read[2] != first[2]:
                first = read
            if since <= first[1] and read[0] <= until:
                best = max(best, read[0] - first[1])
        return best

    def failed(self) -> int:
        return sum(1 for r in self.reads if r[2] is None)


_TAKEOVER = re.compile(r"took over '(?P<key>[^']+)' from dead node (?P<owner>\S+) \(epoch \d+; judged dead by "
                       r"the read of the nodes at (?P<judged>[^)]+)\)")


def _takeovers(node, owner: str) -> list[tuple[float, str]]:
    """(when, key) of each job ``node`` took over from ``owner``, ``when`` being the time of the
    read of the nodes that judged ``owner`` dead (the line itself comes after the takeover's
    write: a beat that landed in between was not there to be seen), from its log."""
    out = []
    for line in node.log().splitlines():
        m = _TAKEOVER.search(line)
        assert m is not None or "from dead node" not in line, f"a takeover line of another form: {line}"
        if m and m.group("owner") == owner:
            out.append((datetime.fromisoformat(m.group("judged")).timestamp(), m.group("key")))
    return out


def _early_takeovers(watch: _BeatWatch, takeovers: list[tuple[float, str]], threshold: float) -> list:
    """Each takeover (when judged, key) judged while a beat of the watched node can have landed
    less than ``threshold`` before: a verdict of death that came too early. Empty when none did."""
    return [(when, key, earliest) for when, key in takeovers for earliest, latest in watch.landings()
            if latest <= when and when - earliest < threshold]


def test_partition_a_slow_heartbeat_path_fences_the_node_and_a_takeover_waits_for_its_beat_to_stop(three, tmp_path):
    """Scenario 5: only the packets n1 sends are held back (to every host; what they send it
    comes at once), on a 500 ms x 8 heartbeat: a beat's requests time out after 500 ms, n1's
    runs end 3 s after its last renewed lease, and it is dead after 4 s of a still beat.

    1. Beyond the dead threshold: 6 s (1.5 x 4 s) for 12 s, while n1 runs 10 s jobs. Nothing n1
       sends lands for 6 s: its beat stands still, its lease runs out and its runs end; n2
       takes them over once the beat stood still for 4 s, and what n1 sent before (its runs'
       outcomes) lands later and changes nothing.
    2. Around the beat's timeout: 750 ms +- 750 ms (uniform: 0-1.5 s, 1.5 x the interval on
       average) for 10 s, while both nodes run 4 s jobs. n1's beats fail, or succeed late, or
       land in the store after n1 gave up on them: it keeps its lease, or fences itself and
       gives back what it could not finish.

    Checked over both: no two runs of a key at once; every job PROCESSED after the heal;
    every re-run follows a self-fence of the node that ran it before; n2 took over from n1
    only when no beat of n1 can have landed within the dead threshold before (n1's row is
    read every 0.1 s over the bridge, so each landing is known to within a read)."""
    net, dbs, keyspaces = three
    heartbeat = (500, 8)
    threshold = heartbeat[0] * heartbeat[1] / 1000.0
    config = _config(tmp_path, dbs, heartbeat=heartbeat, jobs={"MAX_TRIES": 20}, keyspace=keyspaces.pop())
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    watch = _BeatWatch(config, "n1")
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    workers = RunWatch(starts)

    def args(seconds: float) -> str:
        return json.dumps({"log": str(log), "seconds": seconds, "starts": str(starts)})

    try:
        workers.start()
        nodes = _start_nodes(rig, net, ["n1"])
        keys = _submit(client, "t", JOBS, args(10.0))
        wait_for(lambda: len({r["key"] for r in read_records(starts)}) == JOBS, 30, "n1 to start every job",
                 check=rig.check_nodes)
        nodes.update(_start_nodes(rig, net, ["n2"]))
        watch.start()
        step1_at = time.time()
        net.delay(1.5 * threshold * 1000, hosts=["n1"], direction="from")
        try:
            _fault_for(12, rig)
        finally:
            net.heal()
        wait_for(lambda: _all_processed(client, keys), 60, "the first jobs to be PROCESSED after the heal",
                 interval=0.2, check=rig.check_nodes, not_yet=(StoreError,))
        step1_healed = time.time()
        first = {str(k): client.store.get(k) for k in keys}
        taken = _takeovers(nodes["n2"], "n1")

        more = _submit(client, "u", JOBS, args(4.0))
        wait_for(lambda: {str(k) for k in more} <= {r["key"] for r in read_records(starts)}, 30,
                 "every new job to start", check=rig.check_nodes)
        net.delay(1.5 * heartbeat[0], 1.5 * heartbeat[0], hosts=["n1"], direction="from")
        try:
            _fault_for(10, rig)
        finally:
            net.heal()
        wait_for(lambda: _all_processed(client, keys + more), 60, "every job to be PROCESSED after the heal",
                 interval=0.2, check=rig.check_nodes, not_yet=(StoreError,))
        watch.stop.set()
        watch.join(10)
        watch.dump(tmp_path / "beats-n1.jsonl")
        workers.finish()

        started, ended = read_records(starts), read_records(log)
        runs = merge_runs(started, ended, workers.gone, worker_deaths(nodes))
        assert_no_overlap(runs)
        assert {r["key"] for r in ended if not r["aborted"]} == {str(k) for k in keys + more}
        fences = {name: fence_times(node) for name, node in nodes.items()}
        assert unexplained_reruns(runs, fences) == []
        landings = watch.landings()
        takeovers = _takeovers(nodes["n2"], "n1")
        assert _early_takeovers(watch, takeovers, threshold) == []
        # Step 1: n1's beat stood still for the threshold and its jobs went to n2, by a takeover
        # or, when n1's own hand-back landed first, a claim; nothing n1 sent late won.
        still = watch.longest_still(step1_at, step1_healed)
        assert still >= threshold, f"n1's beat stood still {still:.1f} s in step 1 at most, as seen: {landings}"
        assert all(j is not None and j.worker_id == "n2" and j.epoch >= 2 for j in first.values()), first
        assert {k for _, k in taken} <= set(first)
        # What n1 sent about a job n2 took over is refused: its outcome, once it got an answer.
        wait_for(lambda: all(f"'{k}' is no longer ours" in nodes["n1"].log() for _, k in taken), 30,
                 "n1 to be refused the outcome of each run taken over", check=rig.check_nodes)
        assert "could not renew its lease" in nodes["n1"].log()
        print(f"scenario 5: n1 fenced itself {len(fences['n1'])} times; {len(landings)} beats of n1 seen to land "
              f"({watch.failed()} of {len(watch.reads)} reads failed), its beat still for {still:.1f} s in step 1; "
              f"n2 took over {len(taken)} of the first "
              f"{JOBS} jobs and {len(takeovers) - len(taken)} later; "
              f"{len(started) - 2 * JOBS} re-runs, {sum(1 for r in runs if r.get('killed'))} of them after a "
              f"run killed by its node before it could record its end")
    finally:
        watch.stop.set()
        workers.finish()
        net.heal()
        client.close()
        rig.kill_all()
