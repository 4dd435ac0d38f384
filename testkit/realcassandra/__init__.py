"""Run a real Apache Cassandra (5.0 by default) on this machine for the tests: 1 node, or N nodes on
127.0.0.1, 127.0.0.2, ... (one DC, "datacenter1"; or ``dcs=D`` data centres dc1..dcD, node i in
dc<i % D + 1>), as plain JVM processes. No Docker: the server is the Maven artifact
org.apache.cassandra:cassandra-all, fetched once into a cache.

    from testkit.realcassandra import CassandraCluster, available

    if (why := available()) is not None:
        pytest.skip(why)
    with CassandraCluster(tmp_path / "c", nodes=3) as c:   # start() ... stop()
        cluster = c.connect()                              # a cassandra-driver Cluster
        ...
    with CassandraCluster(tmp_path / "c", nodes=2, dcs=2) as c:  # node 0 in dc1, node 1 in dc2
        c.datacenters(), c.datacenter(1), c.dc_hosts("dc2")     # ["dc1", "dc2"], "dc2", [...]

(Named so as not to shadow the driver's ``cassandra`` package.) ``scripts/cassandra`` is the
command line for the same thing.
"""

from ._config import CLUSTER_NAME, DATACENTER, C1_ONLY_JIT_FLAG, datacenter_of
from ._toolchain import DEFAULT_VERSION, CassandraError, available, cache_root, resolve
from .cluster import STATE_FILE, CassandraCluster

__all__ = [
    "CLUSTER_NAME", "DATACENTER", "DEFAULT_VERSION", "STATE_FILE", "C1_ONLY_JIT_FLAG",
    "CassandraCluster", "CassandraError", "available", "cache_root", "datacenter_of", "resolve",
]
