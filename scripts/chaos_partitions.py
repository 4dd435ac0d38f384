"""The network faults of ``scripts/chaos.py --partitions`` (docs/explanation/guarantees.md).

Each fabricjobs node and each of the three Cassandra nodes runs on a test host of its own (a
network namespace on a private bridge, testkit/netns.py), and besides the process
faults of every chaos run (kill, stop, restart of a fabricjobs node) one network fault at a
time comes every 5-15 s (the seed fixes the kinds, hosts and lengths):

  net-isolate         a fabricjobs host's cable pulled for 2-8 s: it reaches no Cassandra node
                      (scenario 1 of the issue);
  net-minority        a fabricjobs host and one Cassandra host cut from the rest for 3-8 s: the
                      node reaches one replica of three, never a quorum (scenario 2);
  net-replica         one Cassandra host isolated for 3-8 s (scenario 3);
  net-delay           200 ms +- 100 ms (uniform) on every path, each way, for 5-10 s (scenario 4);
  net-loss            5 % of the packets dropped on every path for 5-10 s (scenario 4);
  net-slow-heartbeat  400-900 ms on what one fabricjobs host sends, for 4-8 s: its heartbeat
                      path is slower than its lease margin allows (scenario 5).

Delay and loss go through the user-space link (testkit/tunlink.py): this kernel has
no netem. A fault of a fabricjobs host (isolate, minority, slow heartbeat) is a fault of that
node for the checker; the others are faults of the store (chaos.STORE_FAULTS), which explain
a re-run or a missed fire only through a lease lapse of the node that held the job.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import chaos
from chaos import REAL_TIMEOUT, ChaosError, Fault, RealCassandraBackend, log_line

CASSANDRA_HOSTS = ("c1", "c2", "c3")
KINDS = ("net-isolate", "net-minority", "net-replica", "net-delay", "net-loss", "net-slow-heartbeat")


class PartitionBackend(RealCassandraBackend):
    """Three Cassandra hosts (RF 3, QUORUM / SERIAL) and one host per fabricjobs node on one test
    network; network faults instead of the Cassandra process faults of cassandra-real."""

    name = "cassandra-real"
    fault_thread = "network-faults"

    def __init__(self, args) -> None:
        super().__init__(args)
        if args.cassandra_hosts:
            raise ChaosError("--partitions starts its own Cassandra hosts: drop --cassandra-hosts")
        self.net = None

    def start(self, tmp: Path) -> dict[str, dict]:
        from testkit import netns
        from testkit.realcassandra import CassandraCluster, available

        why = netns.unavailable() or available()
        if why is not None:
            raise ChaosError(f"--partitions cannot run here: {why}")
        names = [f"chaos{i + 1}" for i in range(self.args.nodes)]
        self.net = netns.Network([*CASSANDRA_HOSTS, *names])
        dbs = [self.net.host(h) for h in CASSANDRA_HOSTS]
        log_line(f"test network {self.net.tag}: " + ", ".join(f"{h.name} {h.address}" for h in self.net.hosts.values()))
        log_line("starting a 3-node Cassandra cluster (RF 3), a test host each")
        t = time.time()
        self.cc = CassandraCluster(tmp / "cassandra", nodes=3, paxos_variant="v2", heap="768m",
                                   namespaces=[(h.namespace, h.address) for h in dbs])
        self.cc.start()
        log_line(f"Cassandra up in {time.time() - t:.0f} s")
        self.keyspace = "chaos_" + uuid.uuid4().hex[:10]
        self.hosts, self.port = [h.address for h in dbs], 9042
        return {"store": {"BACKEND": "cassandra"},
                "cassandra": {"HOSTS": ",".join(self.hosts), "PORT": self.port, "KEYSPACE": self.keyspace,
                              "REPLICATION": "NetworkTopologyStrategy:datacenter1=3",
                              "CONSISTENCY": "QUORUM", "SERIAL_CONSISTENCY": "SERIAL", "PROTOCOL_VERSION": 5,
                              "LOCAL_DC": "datacenter1", "REQUEST_TIMEOUT_SEC": REAL_TIMEOUT}}

    def node_prefix(self, name: str) -> list[str]:
        return self.net.host(name).command([]) if self.net is not None else []

    def _fault_loop(self, cluster, rng: random.Random, t_last: float) -> None:
        kinds = list(KINDS)
        rng.shuffle(kinds)  # every kind once first, in an order the seed draws; then any
        next_at = time.time() + rng.uniform(5, 15)
        while True:
            time.sleep(max(0.0, next_at - time.time()))
            if time.time() >= t_last or self._closed:
                return
            kind = kinds.pop(0) if kinds else rng.choice(KINDS)
            length = rng.uniform(*((5, 10) if kind in ("net-delay", "net-loss") else
                                   (2, 8) if kind == "net-isolate" else (4, 8) if kind == "net-slow-heartbeat"
                                   else (3, 8)))
            node = replica = None
            if kind in chaos.NODE_NET_FAULTS:
                with cluster.lock:
                    free = sorted(n for n in cluster.nodes if n not in cluster.busy)
                    if not free:  # every node is in a process fault now: try again soon
                        next_at = time.time() + 1.0
                        continue
                    node = rng.choice(free)
                    cluster.busy.add(node)
            if kind in ("net-minority", "net-replica"):
                replica = rng.choice(CASSANDRA_HOSTS)
            try:
                self._inject(cluster, rng, kind, length, node, replica)
            except Exception as exc:
                if self._closed:
                    return
                cluster.fault_errors.append(f"{kind}: {exc}")
                return
            finally:
                if node is not None:
                    with cluster.lock:
                        cluster.busy.discard(node)
            next_at = time.time() + rng.uniform(5, 15)

    def _inject(self, cluster, rng: random.Random, kind: str, length: float, node: str | None,
                replica: str | None) -> None:
        net = self.net
        faults = []
        now = time.time()
        if node is not None:
            faults.append(Fault(kind, node, now))
        if replica is not None:
            faults.append(Fault("net-replica", f"cassandra@{net.host(replica).address}", now))
        if node is None and replica is None:
            faults.append(Fault(kind, "network", now))
        with cluster.lock:
            cluster.faults.extend(faults)
        what = f"{kind} {node or ''} {replica or ''}".strip()
        log_line(f"fault: {what} for {length:.1f} s", always=False)
        if kind == "net-isolate":
            net.isolate(node)
        elif kind == "net-minority":
            net.isolate_group([node, replica])
        elif kind == "net-replica":
            net.isolate(replica)
        elif kind == "net-delay":
            net.delay(200, 100)
        elif kind == "net-loss":
            net.loss(0.05)
        else:  # net-slow-heartbeat
            ms = rng.uniform(400, 900)
            net.delay(ms, direction="from", hosts=[node])
            faults[0].note += f"{ms:.0f} ms on what it sends; "
        time.sleep(length)
        ended = time.time()
        net.heal()
        ready = time.time()
        for f in faults:
            f.end, f.ready = ended, ready
            f.note += f"{length:.1f} s; "

    def close(self) -> None:
        self._closed = True
        if self.net is not None:
            try:
                self.net.heal()
            except Exception as exc:
                print(f"chaos: healing the test network: {exc}")
        super().close()  # stops Cassandra (its JVMs live in the namespaces)
        if self.net is not None:
            self.net.close()
            self.net = None
