"""Which Cassandra settings are refused on which topology (fabricjobs/store/cassandra/topology.py):
the rules themselves, and the check a running node makes; on a real cluster of two DCs,
scripts/chaos.py --backend cassandra-real --dcs 2 (a node at LOCAL_SERIAL in the second DC refuses to start)."""

from __future__ import annotations

import pytest

from fabricjobs.errors import StoreError
from fabricjobs.store.cassandra.topology import Peer, Placement, check_placement, local_dc, replication_for


def test_local_dc_must_name_a_dc_of_the_cluster_and_is_required_when_there_are_several():
    assert local_dc("", ["dc1", "dc1"]) == "dc1"
    assert local_dc("dc2", ["dc1", "dc2"]) == "dc2"
    with pytest.raises(StoreError, match=r"LOCAL_DC is required: this Cassandra cluster has data centres dc1, dc2"):
        local_dc("", ["dc2", "dc1"])
    with pytest.raises(StoreError, match=r"LOCAL_DC = dc3: not a data centre of this Cassandra cluster \(it has dc1, dc2\)"):
        local_dc("dc3", ["dc1", "dc2"])


def test_the_default_replication_is_one_replica_on_one_cassandra_node_only():
    assert replication_for("", 1) == "SimpleStrategy:1"
    assert replication_for("NetworkTopologyStrategy:dc1=3", 3) == "NetworkTopologyStrategy:dc1=3"
    assert replication_for("SimpleStrategy:1", 3) == "SimpleStrategy:1"  # said out loud: the operator's choice
    with pytest.raises(StoreError, match=r"REPLICATION is required to create the keyspace on a cluster of 3 Cassandra nodes"):
        replication_for("", 3)


@pytest.mark.parametrize("me, peers, refused", [
    (Placement("dc1", "QUORUM", "SERIAL"), [Peer("b", Placement("dc2", "QUORUM", "SERIAL"))], None),
    (Placement("dc1", "LOCAL_QUORUM", "LOCAL_SERIAL"), [Peer("b", Placement("dc1", "LOCAL_QUORUM", "LOCAL_SERIAL"))], None),
    (Placement("dc1", "QUORUM", "LOCAL_SERIAL"), [Peer("b", Placement("dc2", "QUORUM", "SERIAL"))], "local to data centre dc1"),
    (Placement("dc1", "LOCAL_QUORUM", "SERIAL"), [Peer("b", Placement("dc2", "QUORUM", "SERIAL"))], "local to data centre dc1"),
    (Placement("dc2", "QUORUM", "SERIAL"), [Peer("a", Placement("dc1", "QUORUM", "LOCAL_SERIAL"))], "nodes in data centre dc1 \\(a\\)"),
    (Placement("dc1", "LOCAL_QUORUM", "LOCAL_SERIAL"), [Peer("old", Placement("", "", ""))], None),  # a node of before version 16
])
def test_local_levels_are_refused_beside_a_node_of_another_dc_in_either_direction(me, peers, refused):
    if refused is None:
        check_placement(me, peers)
    else:
        with pytest.raises(StoreError, match=refused):
            check_placement(me, peers)


def test_a_store_at_local_levels_refuses_beside_an_older_node_of_another_dc(request, tmp_path):
    """The check as a running node makes it (Node._check_placement every 30 s): on the CQL test
    server (one DC, datacenter1), a node row of another DC written as a node of that DC would;
    the younger of the two is refused, the older not."""
    from datetime import timedelta

    from backends import make_backend_config
    from fabricjobs.config import load_config
    from fabricjobs.errors import PlacementError
    from fabricjobs.store import open_store

    path = make_backend_config(request, "cassandra", tmp_path, {"cassandra": {"SERIAL_CONSISTENCY": "LOCAL_SERIAL"}})
    store = open_store(load_config(path))
    try:
        now = store.store_time()
        store._session.execute(
            f"INSERT INTO {store.keyspace}.nodes (name, beat, beat_time, state, started, store_dc, store_serial,"
            " store_consistency) VALUES ('far', 1, toTimestamp(now()), 'RUNNING', %s, 'dc2', 'SERIAL', 'QUORUM')",
            (now - timedelta(minutes=5),))
        with pytest.raises(PlacementError, match="local to data centre datacenter1, but fabricjobs nodes run in dc2"):
            store.check_placement("near", now)
        store.check_placement("near", now - timedelta(minutes=10))  # older than 'far': far is the one to stop
    finally:
        store.close()


def test_a_shell_or_web_process_at_local_levels_is_refused_once_a_node_of_another_dc_runs(request, tmp_path, monkeypatch):
    """A process that writes no node row (a shell, the web) is seen by no node: it re-reads the
    nodes before its writes (every 30 s; here at once), and refuses to write beside a node
    started in another DC since it opened. A node judges itself by the rule above instead."""
    from datetime import timedelta

    from backends import make_backend_config
    from fabricjobs.config import load_config
    from fabricjobs.errors import PlacementError
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.store import open_store
    from fabricjobs.store.cassandra import store as cassandra_store

    path = make_backend_config(request, "cassandra", tmp_path, {"cassandra": {"SERIAL_CONSISTENCY": "LOCAL_SERIAL"}})
    web, node = open_store(load_config(path)), open_store(load_config(path))
    try:
        now = web.store_time()
        job = lambda uid: Job(JobKey("USER_JOB", "Probe.noop", uid), Status.WAITING, now, next_run=now)  # noqa: E731
        assert web.insert(job("before")).applied
        node.check_placement("near", now - timedelta(minutes=10))  # a node of this DC, the oldest
        web._session.execute(
            f"INSERT INTO {web.keyspace}.nodes (name, beat, beat_time, state, started, store_dc, store_serial,"
            " store_consistency) VALUES ('far', 1, toTimestamp(now()), 'RUNNING', %s, 'dc2', 'SERIAL', 'QUORUM')",
            (now - timedelta(minutes=5),))
        monkeypatch.setattr(cassandra_store, "PLACEMENT_RECHECK_SEC", 0.0)
        with pytest.raises(PlacementError, match="local to data centre datacenter1, but fabricjobs nodes run in dc2"):
            web.insert(job("after"))
        assert web.get(JobKey("USER_JOB", "Probe.noop", "after")) is None
        before = web.get(JobKey("USER_JOB", "Probe.noop", "before"))
        with pytest.raises(PlacementError):
            web.cas(before, before.replace(status=Status.TERMINATED, archived=True, end_time=now))
        assert node.insert(job("by-node")).applied  # the older node goes on; 'far', the younger, stops
    finally:
        web.close()
        node.close()


def test_a_node_beside_an_older_node_of_another_dc_stops_within_seconds_of_its_start(request, tmp_path):
    """Two nodes started together in two DCs at local levels both pass the check at open
    (neither row is written yet). The younger re-checks 3 s after its start, not 30 s: here a
    node of dc2, older, appears just after this one opened its store, and this one stops."""
    from datetime import timedelta

    from harness import Cluster
    from testkit.rig import wait_for

    cluster = Cluster(tmp_path, backend="cassandra", settings={"cassandra": {"SERIAL_CONSISTENCY": "LOCAL_SERIAL"}},
                      request=request)
    try:
        node = cluster.start_node("near")
        store = cluster.client().store
        store._session.execute(
            f"INSERT INTO {store.keyspace}.nodes (name, beat, beat_time, state, started, store_dc, store_serial,"
            " store_consistency) VALUES ('far', 1, toTimestamp(now()), 'RUNNING', %s, 'dc2', 'SERIAL', 'QUORUM')",
            (store.store_time() - timedelta(minutes=5),))
        node.killed = True  # its end is what the test waits for
        wait_for(lambda: not node.alive(), 15, lambda: f"node near to stop; its log:\n{node.log()[-2000:]}")
        assert "local to data centre datacenter1, but fabricjobs nodes run in dc2 too (far)" in node.log(), node.log()[-2000:]
        assert "node near stops" in node.log()
    finally:
        cluster.stop_all()


def test_a_shell_writes_on_its_last_check_while_the_nodes_table_cannot_be_read(request, tmp_path, monkeypatch, caplog):
    """The re-check must not turn a hiccup of the nodes table into a refusal of every write."""
    import logging

    from backends import make_backend_config
    from fabricjobs.config import load_config
    from fabricjobs.errors import StoreError
    from fabricjobs.model import Job, JobKey, Status
    from fabricjobs.store import open_store
    from fabricjobs.store.cassandra import store as cassandra_store

    path = make_backend_config(request, "cassandra", tmp_path, {"cassandra": {"SERIAL_CONSISTENCY": "LOCAL_SERIAL"}})
    web = open_store(load_config(path))
    try:
        monkeypatch.setattr(cassandra_store, "PLACEMENT_RECHECK_SEC", 0.0)

        def unreadable():
            raise StoreError("Cassandra did not answer (test)")

        web._peers = unreadable
        now = web.store_time()
        with caplog.at_level(logging.WARNING, logger="fabricjobs.store.cassandra"):
            assert web.insert(Job(JobKey("USER_JOB", "Probe.noop", "h"), Status.WAITING, now, next_run=now)).applied
        assert "could not re-read the nodes' data centres (Cassandra did not answer (test))" in caplog.text
    finally:
        web.close()
