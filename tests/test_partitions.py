"""Network partitions between real hosts (issue #20): fabricjobs nodes and Apache Cassandra
each in a network namespace of their own (fabricjobs/testing/netns.py), the faults cut between
them while jobs run, and the guarantees of SPEC 5 checked on what the jobs themselves recorded:
never two runs of a key at once, no job lost, and no write of a fenced run accepted.

Each test starts its own Cassandra 5.0 (one node, in its own namespace) next to the one
./scripts/test runs for the real tier: the faults here must not reach that one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict

import pytest
from realcassandra import CassandraCluster, available

from fabricjobs.client import Client
from fabricjobs.errors import StoreError
from fabricjobs.model import JobKey, Status
from fabricjobs.testing import netns
from fabricjobs.testing.rig import Rig, wait_for, write_config
from harness import FAST, assert_no_overlap, read_records

_why = netns.unavailable() or available()
pytestmark = [pytest.mark.partition, pytest.mark.soak, pytest.mark.skipif(_why is not None, reason=f"partition tests: {_why}")]

HEARTBEAT_MS, MISS = 200, 5  # dead after 1 s; a run's lease lapses 0.6 s after its last renewal
JOBS = 6
SECONDS = 8.0


@pytest.fixture
def hosts(tmp_path):
    """Three test hosts: db (Cassandra), n1 and n2 (fabricjobs nodes), and the Cassandra."""
    with netns.Network(["db", "n1", "n2"]) as net:
        db = net.host("db")
        cassandra = CassandraCluster(tmp_path / "cassandra", 1, namespaces=[(db.namespace, db.address)],
                                     heap="512m")
        cassandra.start()
        try:
            yield net, cassandra
        finally:
            cassandra.stop(timeout=30)


def _config(tmp_path, dbs: list[netns.Host], heartbeat: tuple[int, int] = (HEARTBEAT_MS, MISS)):
    sections = {s: dict(v) for s, v in FAST.items()}
    sections["heartbeat"] = {"FABRIC_HEARTBEAT_INTERVAL_MS": heartbeat[0], "FABRIC_HEARTBEAT_MISS": heartbeat[1]}
    sections["store"] = {"BACKEND": "cassandra"}
    sections["cassandra"] = {"HOSTS": ",".join(db.address for db in dbs), "PORT": 9042,
                             "KEYSPACE": "fj_" + uuid.uuid4().hex[:12], "REPLICATION": f"SimpleStrategy:{len(dbs)}",
                             "PROTOCOL_VERSION": 5, "CONSISTENCY": "QUORUM", "TOKEN_AWARE": "false",
                             "REQUEST_TIMEOUT_SEC": 2}
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


def _runs(started: list[dict], ended: list[dict]) -> list[dict]:
    """Each run from its start record, with the end its end record gave (none: still going, or
    killed before it could write one). A run that ended but whose node lost its lease before
    the outcome was written is run again: at least once after a fault, never two at once."""
    ends = {(r["key"], r["epoch"]): r["end"] for r in ended}
    return [dict(r, end=ends[(r["key"], r["epoch"])]) if (r["key"], r["epoch"]) in ends else r for r in started]


def _runs_by_key(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["key"]].append(r)
    return out


def test_partition_a_node_cut_from_the_store_ends_its_runs_before_another_takes_them_over(hosts, tmp_path):
    """Scenario 1: n1 runs jobs and loses every path to Cassandra. Its runs end themselves when
    its lease lapses; n2 takes them over after the dead threshold, never while n1's still run;
    healed, n1's late outcome writes are refused (its epoch is gone) and it beats again."""
    net, _cassandra = hosts
    config = _config(tmp_path, [net.host("db")])
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    try:
        n1 = _start_nodes(rig, net, ["n1"])["n1"]
        args = json.dumps({"log": str(log), "seconds": SECONDS, "starts": str(starts)})
        client.fetch("".join(f"startjob user_job name='Probe.record' uid='p{i}' args='{args}';" for i in range(JOBS)))
        wait_for(lambda: len({r["key"] for r in read_records(starts)}) == JOBS, 30, "n1 to start every job",
                 check=rig.check_nodes)
        _start_nodes(rig, net, ["n2"])

        cut_at = time.time()
        net.cut("n1", "db")
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "n2"}) == JOBS, 30,
                 lambda: f"n2 to take over every job; starts: {read_records(starts)}", check=rig.check_nodes)
        keys = [JobKey("USER_JOB", "Probe.record", f"p{i}") for i in range(JOBS)]
        wait_for(lambda: all((lambda j: j is not None and j.status is Status.PROCESSED)(client.store.get(k))
                             for k in keys), SECONDS + 30, "n2 to finish every job", check=rig.check_nodes)

        records, started = read_records(log), read_records(starts)
        # n1's runs ended, aborted, before n2 began the same key; no two runs of a key overlap.
        ended_on_n1 = {r["key"]: r for r in records if r["node"] == "n1"}
        assert set(ended_on_n1) == {str(k) for k in keys}, records
        assert all(r["aborted"] for r in ended_on_n1.values())
        for key, runs in _runs_by_key(started).items():
            second = min(r["start"] for r in runs if r["node"] == "n2")
            assert ended_on_n1[key]["end"] <= second, (key, ended_on_n1[key], runs)
            assert ended_on_n1[key]["end"] - cut_at < 3.0  # the lease (0.6 s) and a request timeout
        # Every row was finished by n2 under the newer epoch: nothing n1 wrote after the cut won.
        rows = [client.store.get(k) for k in keys]
        assert all(j.worker_id == "n2" and j.epoch == 2 for j in rows), rows
        assert "could not renew its lease" in n1.log()

        net.heal()
        beat = next(r.beat for r in client.store.nodes() if r.name == "n1")
        wait_for(lambda: next(r.beat for r in client.store.nodes() if r.name == "n1") > beat + 3, 30,
                 "n1 to beat again after the heal", check=rig.check_nodes)
        # Its runs' outcomes, kept through the cut, were tried once it could reach the store
        # again, and refused: the rows still say n2, epoch 2.
        wait_for(lambda: n1.log().count("is no longer ours") >= JOBS, 30,
                 "n1 to be refused the outcome of each run it lost", check=rig.check_nodes)
        assert [client.store.get(k) for k in keys] == rows
        # And it takes work again: a job pinned to it runs there.
        client.fetch("startjob user_job name='Probe.noop' uid='after' affinity='n1';")
        wait_for(lambda: (lambda j: j is not None and j.status is Status.PROCESSED and j.worker_id == "n1")(
            client.store.get(JobKey("USER_JOB", "Probe.noop", "after"))), 30, "n1 to run a job after the heal")
    finally:
        client.close()
        rig.kill_all()


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Test hosts c1-c3 (a three-node Cassandra, every keyspace RF 3, QUORUM / SERIAL) and n1,
    n2 (fabricjobs nodes), shared by the tests below; each heals what it cut."""
    with netns.Network(["c1", "c2", "c3", "n1", "n2"]) as net:
        dbs = [net.host(f"c{i}") for i in (1, 2, 3)]
        cassandra = CassandraCluster(tmp_path_factory.mktemp("cassandra3"), 3, heap="512m",
                                     namespaces=[(h.namespace, h.address) for h in dbs])
        cassandra.start()
        try:
            yield net, dbs
        finally:
            net.heal()
            cassandra.stop(timeout=30)


def test_partition_one_isolated_replica_of_three_does_not_stop_the_cluster(three, tmp_path):
    """Scenario 3: with c3 cut off from everyone, the nodes keep claiming and finishing jobs
    through c1 and c2 (a quorum of RF 3): no gap between run starts longer than two request
    timeouts, no node fences itself, nothing runs twice at once, nothing is lost."""
    net, dbs = three
    config = _config(tmp_path, dbs, heartbeat=(500, 8))
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
        assert_no_overlap(_runs(started, ended))
        after = sorted(r["start"] for r in started if r["start"] >= cut_at)
        gaps = [b - a for a, b in zip([cut_at] + after, after)]
        assert after and max(gaps) < 2 * 2 + 1.0, f"longest pause in run starts after the cut: {max(gaps):.2f} s"
        for name, node in nodes.items():
            assert "could not renew its lease" not in node.log(), f"{name} fenced itself:\n{node.log()[-3000:]}"
    finally:
        client.close()
        rig.kill_all()


def test_partition_a_node_with_a_minority_of_replicas_fences_itself_and_nothing_is_lost(three, tmp_path):
    """Scenario 2: n1 and c1 on one side, n2, c2 and c3 on the other. n1 still reaches one
    replica, but no quorum: its compare-and-sets fail, its lease lapses and its runs end; n2
    takes their jobs over on the majority side. Healed, n1 beats again; every job ends once."""
    net, dbs = three
    config = _config(tmp_path, dbs)
    rig = Rig(tmp_path, config)
    client = Client.from_config(config)
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    try:
        nodes = _start_nodes(rig, net, ["n1"])
        args = json.dumps({"log": str(log), "seconds": SECONDS, "starts": str(starts)})
        keys = [JobKey("USER_JOB", "Probe.record", f"m{i}") for i in range(JOBS)]
        client.fetch("".join(f"startjob user_job name='Probe.record' uid='{k.uid}' args='{args}';" for k in keys))
        wait_for(lambda: len({r["key"] for r in read_records(starts)}) == JOBS, 30, "n1 to start every job",
                 check=rig.check_nodes)
        nodes.update(_start_nodes(rig, net, ["n2"]))
        cut_at = time.time()
        net.isolate_group(["n1", "c1"])
        wait_for(lambda: len({r["key"] for r in read_records(starts) if r["node"] == "n2"}) == JOBS, 60,
                 lambda: f"n2 to take over every job; starts: {read_records(starts)}", check=rig.check_nodes)
        wait_for(lambda: _all_processed(client, keys), SECONDS + 60, "n2 to finish every job", check=rig.check_nodes,
                 not_yet=(StoreError,))
        started, ended = read_records(starts), read_records(log)
        assert_no_overlap(_runs(started, ended))
        on_n1 = [r for r in ended if r["node"] == "n1"]
        assert len(on_n1) == JOBS and all(r["aborted"] and r["end"] - cut_at < 5.0 for r in on_n1), on_n1
        assert "could not renew its lease" in nodes["n1"].log()
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
        net.heal()
        client.close()
        rig.kill_all()
