"""The real-Cassandra rig's data centres (testkit/realcassandra): which DC each node is put in,
what its cassandra-rackdc.properties and seed list say, and that cluster.json keeps it for a
later ``attach`` (``scripts/cassandra stop`` / ``status`` from another process). Nothing here
starts a JVM: the files are what Cassandra reads, the start itself is shown by hand and by
``scripts/chaos.py --backend cassandra-real --dcs 2``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from testkit.realcassandra import DATACENTER, STATE_FILE, CassandraCluster

ROOT = Path(__file__).resolve().parents[1]


def prepared(tmp_path: Path, nodes: int, dcs: int | None = None) -> CassandraCluster:
    """A cluster's files and cluster.json written as start() writes them, no node started."""
    c = CassandraCluster(tmp_path, nodes) if dcs is None else CassandraCluster(tmp_path, nodes, dcs=dcs)
    c._lib = tmp_path / "lib"  # not resolved: no JVM is started
    c._prepare("java", tmp_path / "jamm.jar")
    return c


def node_files(c: CassandraCluster, i: int) -> tuple[str, str]:
    """(its cassandra-rackdc.properties, the seeds line of its cassandra.yaml)."""
    conf = c.node_dir(i) / "conf"
    seeds = next(line for line in (conf / "cassandra.yaml").read_text().splitlines() if "seeds:" in line)
    return (conf / "cassandra-rackdc.properties").read_text(), seeds.split(":", 1)[1].strip().strip('"')


def test_three_nodes_in_two_dcs_are_dealt_round_robin_with_a_seed_per_dc(tmp_path):
    c = prepared(tmp_path, 3, dcs=2)
    assert c.datacenters() == ["dc1", "dc2"]
    assert [c.datacenter(i) for i in range(3)] == ["dc1", "dc2", "dc1"]
    assert c.dc_hosts("dc1") == ["127.0.0.1", "127.0.0.3"] and c.dc_hosts("dc2") == ["127.0.0.2"]
    port = c.storage_port
    files = [node_files(c, i) for i in range(3)]
    assert [rackdc for rackdc, _ in files] == ["dc=dc1\nrack=rack1\n", "dc=dc2\nrack=rack1\n", "dc=dc1\nrack=rack1\n"]
    # the first node of each DC is a seed, listed by the nodes that start after it
    assert [seeds for _, seeds in files] == [
        f"127.0.0.1:{port}", f"127.0.0.1:{port},127.0.0.2:{port}", f"127.0.0.1:{port},127.0.0.2:{port}"]
    again = CassandraCluster.attach(tmp_path)
    assert [again.datacenter(i) for i in range(3)] == ["dc1", "dc2", "dc1"]
    assert again.datacenters() == ["dc1", "dc2"]


def test_default_is_one_dc_named_as_a_stock_node_names_it(tmp_path):
    c = prepared(tmp_path, 2)
    assert c.datacenters() == [DATACENTER] == ["datacenter1"]
    assert [node_files(c, i) for i in range(2)] == [("dc=datacenter1\nrack=rack1\n", f"127.0.0.1:{c.storage_port}")] * 2


def test_a_state_file_from_before_dcs_attaches_as_one_dc(tmp_path):
    prepared(tmp_path, 2, dcs=2)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    for node in state["nodes"]:
        del node["datacenter"]
    del state["datacenters"]
    state["datacenter"] = DATACENTER
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    assert CassandraCluster.attach(tmp_path).datacenters() == [DATACENTER]


@pytest.mark.parametrize("nodes, dcs", [(2, 3), (2, 0)])
def test_more_dcs_than_nodes_is_refused(tmp_path, nodes, dcs):
    with pytest.raises(ValueError, match="data centres"):
        CassandraCluster(tmp_path, nodes, dcs=dcs)
    run = subprocess.run([str(ROOT / "scripts" / "cassandra"), "start", "--dir", str(tmp_path),
                          "--nodes", str(nodes), "--dcs", str(dcs)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"--dcs {dcs}: from 1 to --nodes ({nodes})" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / STATE_FILE).exists()
