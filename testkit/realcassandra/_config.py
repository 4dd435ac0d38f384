"""What one Cassandra node is started with: its cassandra.yaml, logback.xml,
cassandra-rackdc.properties and JVM command line. Written from scratch (not copied from
Cassandra's conf/), keeping only what Cassandra 5.0 requires and what makes a small test cluster
start fast on a 2-core machine."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

# The GossipingPropertyFileSnitch reads the node's DC and rack from cassandra-rackdc.properties;
# "datacenter1"/"rack1" are the names a stock node (and the SimpleSnitch) uses: a one-DC cluster
# keeps them, so a keyspace made for a stock node (NetworkTopologyStrategy datacenter1=N) fits.
DATACENTER = "datacenter1"
RACK = "rack1"
CLUSTER_NAME = "fabricjobs-test"

# From Cassandra 5.0's conf/jvm17-server.options: the JDK internals Cassandra (and jamm, Netty,
# Chronicle) reach into. Without them Java 17 refuses the reflective access at start-up.
JAVA17_MODULE_FLAGS = [
    "-Djdk.attach.allowAttachSelf=true",
    *(f"--add-exports={m}=ALL-UNNAMED" for m in (
        "java.base/jdk.internal.misc",
        "java.management.rmi/com.sun.jmx.remote.internal.rmi",
        "java.rmi/sun.rmi.registry",
        "java.rmi/sun.rmi.server",
        "java.sql/java.sql",
        "java.base/java.lang.ref",
        "jdk.unsupported/sun.misc",
        "jdk.compiler/com.sun.tools.javac.file",
        "jdk.attach/sun.tools.attach",
    )),
    *(f"--add-opens={m}=ALL-UNNAMED" for m in (
        "java.base/java.lang.module",
        "java.base/jdk.internal.loader",
        "java.base/jdk.internal.ref",
        "java.base/jdk.internal.reflect",
        "java.base/jdk.internal.math",
        "java.base/jdk.internal.module",
        "java.base/jdk.internal.util.jar",
        "jdk.management/com.sun.management.internal",
        "java.base/sun.nio.ch",
        "java.base/java.io",
        "java.base/java.lang.reflect",
        "jdk.compiler/com.sun.tools.javac",
        "java.base/java.lang",
        "java.base/java.util",
    )),
]

# From conf/jvm-server.options and jvm17-server.options, the flags that matter for a test node.
# Left out on purpose: -XX:+AlwaysPreTouch (would make the whole heap resident at once),
# -XX:+UseNUMA, -XX:+HeapDumpOnOutOfMemoryError (a heap-sized file on a CI disk), GC logging,
# the JIT hints file (conf/hotspot_compiler).
SERVER_FLAGS = [
    "-ea", "-da:net.openhft...",  # assertions on, except Chronicle's (they leak by design)
    "-XX:+UseThreadPriorities",
    "-Xss256k",
    "-XX:+UseTLAB", "-XX:+ResizeTLAB",
    "-XX:+PerfDisableSharedMem",  # no hsperfdata mmap: avoids long pauses, see jvm-server.options
    "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1",
    # die rather than limp on (cassandra-env.sh does "kill -9 %p"; Cassandra warns without it)
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.net.preferIPv4Stack=true",
    "-Dchronicle.analytics.disable=true",  # Chronicle (audit/full query log) would phone home
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dio.netty.allocator.useCacheForAllThreads=true",
    "-Dio.netty.allocator.maxOrder=11",
]

# Start-up shortcuts for a fresh loopback cluster (each is a documented system property):
FAST_START_FLAGS = [
    # do not wait (up to ~30 s) for the gossip state to stop changing before serving clients
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    # upper bound of the shadow round with the seeds; our seeds are already up on loopback
    "-Dcassandra.ring_delay_ms=5000",
    # create the default cassandra/cassandra superuser at once, not after a 10 s delay
    "-Dcassandra.superuser_setup_delay_ms=0",
    # measure the memtable row overhead with 100 rows, not 100000 (~6 s of a 2-core start-up);
    # Cassandra's own test configuration does the same
    "-Dcassandra.memtable_row_overhead_computation_step=100",
]

# For a short-lived cluster that spends its life on start-up and schema changes (the partition
# tests' three nodes): JIT-compile with C1 only. C2's compiles cost each node 45-70 s of CPU in
# its first minutes; measured on 2026-11-27 (2 cores), a three-node cluster then used 8 s of
# CPU a node to start instead of 16 and made a keyspace of the fabricjobs schema in 16 s
# instead of 20-31. Not for a node under steady load: the real tier's single node with it made
# that tier's last phase 453 s instead of 313-340 (C1's code is the slower one).
C1_ONLY_JIT_FLAG = "-XX:TieredStopAtLevel=1"

# Opt-in only (CassandraCluster(unsafe_system=True)): no blocking flush of the schema and system
# tables after each change, so DDL is faster (~0.1 s a statement here). Not the default because
# a node killed with SIGKILL then comes back without the keyspaces and tables created since its
# last flush: the schema is loaded before the commit log is replayed, so they are listed in
# system_schema but "do not exist", while the node's schema version matches its peers' (seen
# with 5.0.8: CREATE KEYSPACE, SIGKILL, restart, "keyspace ... does not exist").
UNSAFE_SYSTEM_FLAG = "-Dcassandra.unsafesystem=true"


@dataclass(frozen=True)
class NodeSpec:
    """Everything that differs between the nodes of one cluster, plus the shared settings."""

    index: int
    address: str
    seeds: str
    dir: Path
    native_port: int
    storage_port: int
    jmx_port: int
    initial_token: int
    authenticator: bool
    paxos_variant: str
    tombstone_warn: int | None
    tombstone_failure: int | None
    heap: str
    extra_yaml: dict[str, Any] | None
    jvm_options: tuple[str, ...] = ()
    cluster_name: str = CLUSTER_NAME
    datacenter: str = DATACENTER

    @property
    def conf_dir(self) -> Path:
        return self.dir / "conf"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def yaml_path(self) -> Path:
        return self.conf_dir / "cassandra.yaml"


def datacenter_of(index: int, dcs: int) -> str:
    """Node ``index``'s DC: ``DATACENTER`` in a one-DC cluster, else ``dc1`` ... ``dc<dcs>`` dealt
    round-robin (node i in ``dc{i % dcs + 1}``: 3 nodes in 2 DCs are dc1 = 0 and 2, dc2 = 1).
    Dealt rather than in blocks so that the evenly spaced tokens alternate between the DCs, as
    NetworkTopologyStrategy places replicas best, and the first ``dcs`` nodes are one per DC."""
    if dcs < 1:
        raise ValueError("a cluster needs at least one data centre")
    return DATACENTER if dcs == 1 else f"dc{index % dcs + 1}"


def initial_token(index: int, nodes: int) -> int:
    """Evenly spaced Murmur3 tokens, one per node (as ccm assigns them): every node owns the same
    share, and replica placement is the same at every run."""
    return (2**64 // nodes) * index - 2**63


def cassandra_yaml(spec: NodeSpec) -> dict[str, Any]:
    """The node's cassandra.yaml, as a dict (5.0 key names, values with units)."""
    d = spec.dir
    y: dict[str, Any] = {
        "cluster_name": spec.cluster_name,
        # One token per node at a fixed place; auto_bootstrap off since every node of a new
        # cluster is empty (no streaming, no 30 s "waiting for ring information").
        "num_tokens": 1,
        "initial_token": str(spec.initial_token),
        "auto_bootstrap": False,
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "seed_provider": [{
            "class_name": "org.apache.cassandra.locator.SimpleSeedProvider",
            "parameters": [{"seeds": spec.seeds}],
        }],
        "listen_address": spec.address,
        "rpc_address": spec.address,
        "storage_port": spec.storage_port,
        "native_transport_port": spec.native_port,
        "start_native_transport": True,
        "endpoint_snitch": "GossipingPropertyFileSnitch",
        "data_file_directories": [str(d / "data")],
        "commitlog_directory": str(d / "commitlog"),
        "saved_caches_directory": str(d / "saved_caches"),
        "hints_directory": str(d / "hints"),
        "cdc_raw_directory": str(d / "cdc_raw"),
        "commitlog_sync": "periodic",
        "commitlog_sync_period": "10000ms",
        # Tests drop and truncate keyspaces all the time: no snapshot each time.
        "auto_snapshot": False,
        "snapshot_before_compaction": False,
        "paxos_variant": spec.paxos_variant,
        # As the stock 5.0 cassandra.yaml ships it (SSTable format "big", no 5.0-only features).
        "storage_compatibility_mode": "CASSANDRA_4",
        # Small pools and memtables: a test node has 2 cores and a few hundred MB of heap.
        "memtable_heap_space": "64MiB",
        "memtable_offheap_space": "64MiB",
        "memtable_flush_writers": 1,
        "concurrent_reads": 8,
        "concurrent_writes": 8,
        "concurrent_counter_writes": 4,
        "concurrent_materialized_view_writes": 4,
        "concurrent_compactors": 1,
        "key_cache_size": "16MiB",
        "native_transport_max_threads": 32,
    }
    if spec.authenticator:
        y["authenticator"] = {"class_name": "org.apache.cassandra.auth.PasswordAuthenticator"}
        y["authorizer"] = {"class_name": "org.apache.cassandra.auth.CassandraAuthorizer"}
        y["role_manager"] = {"class_name": "org.apache.cassandra.auth.CassandraRoleManager"}
    else:
        y["authenticator"] = {"class_name": "org.apache.cassandra.auth.AllowAllAuthenticator"}
        y["authorizer"] = {"class_name": "org.apache.cassandra.auth.AllowAllAuthorizer"}
    if spec.tombstone_warn is not None:
        y["tombstone_warn_threshold"] = spec.tombstone_warn
    if spec.tombstone_failure is not None:
        y["tombstone_failure_threshold"] = spec.tombstone_failure
    y.update(spec.extra_yaml or {})
    return y


def logback_xml(spec: NodeSpec) -> str:
    """system.log in the node's log dir, INFO and up (so WARNs such as "Read N live rows and M
    tombstone cells" land there); nothing on the console."""
    log = escape(str(spec.log_dir / "system.log"))
    return f"""<configuration scan="false" debug="false">
  <appender name="SYSTEMLOG" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <append>true</append>
    <encoder>
      <pattern>%-5level [%thread] %date{{ISO8601}} %logger{{0}} - %msg%n</pattern>
    </encoder>
  </appender>
  <logger name="org.apache.cassandra" level="INFO"/>
  <root level="INFO">
    <appender-ref ref="SYSTEMLOG"/>
  </root>
</configuration>
"""


def rackdc_properties(datacenter: str = DATACENTER) -> str:
    """What GossipingPropertyFileSnitch reads: the node's DC (and its rack, one per DC)."""
    return f"dc={datacenter}\nrack={RACK}\n"


def jvm_command(java: str, lib: Path, jamm: Path, spec: NodeSpec) -> list[str]:
    """``java <options> -cp '<lib>/*' CassandraDaemon`` for one node, in the foreground (the
    caller detaches it)."""
    conf = spec.conf_dir
    return [
        *_without_mlock(),
        java,
        *SERVER_FLAGS,
        *JAVA17_MODULE_FLAGS,
        f"-Xms{spec.heap}", f"-Xmx{spec.heap}",
        f"-javaagent:{jamm}",  # as cassandra-env.sh adds it: memtable sizes are measured with it
        # Local-only JMX (nodetool), a port per node since it binds 127.0.0.1 on every node.
        f"-Dcassandra.jmx.local.port={spec.jmx_port}",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        f"-Dcassandra.config={spec.yaml_path.as_uri()}",
        f"-Dcassandra-rackdc.properties={(conf / 'cassandra-rackdc.properties').as_uri()}",
        f"-Dlogback.configurationFile={conf / 'logback.xml'}",
        f"-Dcassandra.logdir={spec.log_dir}",
        f"-Dcassandra.storagedir={spec.dir}",
        f"-Dcassandra.triggers_dir={spec.dir / 'triggers'}",
        "-Dcassandra-foreground=yes",  # keep stdout/stderr open (they go to a file)
        *FAST_START_FLAGS,
        *spec.jvm_options,
        "-cp", f"{lib}/*",
        "org.apache.cassandra.service.CassandraDaemon",
    ]


def write_node_files(spec: NodeSpec) -> None:
    """Create the node's directories and write its configuration files."""
    for sub in ("conf", "data", "commitlog", "saved_caches", "hints", "cdc_raw", "logs",
                "triggers"):
        (spec.dir / sub).mkdir(parents=True, exist_ok=True)
    spec.yaml_path.write_text(to_yaml(cassandra_yaml(spec)))
    (spec.conf_dir / "logback.xml").write_text(logback_xml(spec))
    (spec.conf_dir / "cassandra-rackdc.properties").write_text(rackdc_properties(spec.datacenter))


def _without_mlock() -> Sequence[str]:
    """A prefix that takes CAP_IPC_LOCK away from the JVM when we are root.

    Cassandra always calls mlockall(MCL_CURRENT) at start-up. For a normal user that fails
    (RLIMIT_MEMLOCK) and is only a warning; root has CAP_IPC_LOCK, so the call succeeds, faults
    in and pins every mapped page: the whole heap is resident from the start (~1.3 GB RSS per
    node with a 768 MB heap) and can never be reclaimed. Without the capability, root behaves
    like any other user.
    """
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")  # util-linux
    return (setpriv, "--bounding-set=-ipc_lock", "--") if setpriv else ()


def to_yaml(value: dict[str, Any]) -> str:
    """A block-style YAML document for plain data (dicts, lists, str, int, float, bool, None).
    Strings are written JSON-quoted, which YAML reads back unchanged."""
    return "\n".join(_yaml_lines(value, 0)) + "\n"


def _yaml_lines(value: Any, indent: int) -> Iterator[str]:
    pad = "  " * indent
    if isinstance(value, dict):
        for key, v in value.items():
            if isinstance(v, (dict, list)) and v:
                yield f"{pad}{key}:"
                yield from _yaml_lines(v, indent + 1)
            else:
                yield f"{pad}{key}: {_yaml_scalar(v)}"
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                first, *rest = _yaml_lines(item, indent + 1)
                yield f"{pad}- {first.lstrip()}"
                yield from rest
            else:
                yield f"{pad}- {_yaml_scalar(item)}"
    else:
        yield pad + _yaml_scalar(value)


def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return json.dumps(str(v))
