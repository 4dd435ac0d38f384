"""The data centres of ``scripts/chaos.py --backend cassandra-real --dcs 2``.

Apache Cassandra in D data centres (testkit/realcassandra: node i in dc<i % D + 1>, a
cassandra-rackdc.properties each), --cassandra-nodes of them (default one per DC), the keyspace
NetworkTopologyStrategy with one replica per Cassandra node of a DC, up to 3 (two nodes:
dc1=1, dc2=1). The fabricjobs nodes are dealt between the DCs the same way (chaos1 in dc1,
chaos2 in dc2, ...), each with its own DC as [cassandra] LOCAL_DC and [node] DC, and every one
at QUORUM / SERIAL: the levels store/cassandra/topology.py allows across DCs.

Shown besides the checker's verdict:
* a refusal: once the nodes are up and warm, before the faults, a node of the last DC set to
  SERIAL_CONSISTENCY = LOCAL_SERIAL must exit non-zero, with the topology message, while the
  soak's nodes of the other DCs run (at LOCAL_SERIAL two DCs could each win a claim of one
  job). A node that starts, or exits for another reason, fails the run.
* a DC's Cassandra node paused: instead of cassandra-real's SIGSTOPs and SIGKILLs of random
  Cassandra nodes, one Cassandra node of one DC is SIGSTOPped for PAUSE (10 s) and continued
  (recorded as a cassandra-stop, a fault of the store), the DCs in turn from one the seed
  draws: the first 4-8 s into the soak, each next 20-30 s after the previous one ended, as long
  as it ends before the quiet tail (the first one in any case). With one replica per DC every
  QUORUM and SERIAL request needs every replica, so for those 10 s no store request of any
  node succeeds: the nodes' leases run out, they self-fence, and they recover after SIGCONT.
  The process faults of the fabricjobs nodes go on as in every chaos run.
"""

from __future__ import annotations

import itertools
import random
import re
import subprocess
import time
import uuid
from pathlib import Path

from chaos import REAL_TIMEOUT, ROOT, ChaosError, RealCassandraBackend, log_line

from testkit.rig import NodeProcess, merged, pythonpath_with, write_config

PAUSE = 10.0  # seconds a DC's Cassandra node stays SIGSTOPped
NEXT_PAUSE = (20.0, 30.0)  # seconds from the end of one pause to the next: time to recover and run jobs
REFUSED = "could each claim the same job"  # what topology.check_placement says


class DcBackend(RealCassandraBackend):
    """Cassandra in several DCs, fabricjobs nodes in each; a DC's Cassandra node paused in turn."""

    name = "cassandra-real"
    fault_thread = "dc-pauses"
    nodes = 4  # two per DC: fewer Cassandra JVMs than cassandra-real's three leave the room

    def __init__(self, args) -> None:
        super().__init__(args)
        self.dcs = args.dcs
        self.cassandra_nodes = args.cassandra_nodes if args.cassandra_nodes is not None else args.dcs
        if self.cassandra_nodes < self.dcs:
            raise ChaosError(f"--cassandra-nodes {self.cassandra_nodes}: each of the {self.dcs} DCs needs one")
        self.refusal = ""
        self._cluster = None

    def dc_of(self, name: str) -> str:
        """The DC of fabricjobs node ``chaos<k>``: dealt as the Cassandra nodes are."""
        from testkit.realcassandra import datacenter_of

        return datacenter_of(int(name.removeprefix("chaos")) - 1, self.dcs)

    def start(self, tmp: Path) -> dict[str, dict]:
        from testkit.realcassandra import CassandraCluster, available

        why = available()
        if why is not None:
            raise ChaosError(f"no real Cassandra here: {why}")
        log_line(f"starting a {self.cassandra_nodes}-node Cassandra cluster in {self.dcs} data centres")
        t = time.time()
        self.cc = CassandraCluster(tmp / "cassandra", nodes=self.cassandra_nodes, dcs=self.dcs,
                                   paxos_variant="v2", heap="768m")
        self.cc.start()
        dcs = self.cc.datacenters()
        log_line(f"Cassandra up in {time.time() - t:.0f} s: "
                 + "; ".join(f"{dc} {','.join(self.cc.dc_hosts(dc))}" for dc in dcs) + f", port {self.cc.port}")
        self.keyspace = "chaos_" + uuid.uuid4().hex[:10]
        self.hosts, self.port = self.cc.hosts, self.cc.port
        self.replication = "NetworkTopologyStrategy:" + ",".join(
            f"{dc}={min(3, len(self.cc.dc_hosts(dc)))}" for dc in dcs)
        return {"store": {"BACKEND": "cassandra"},
                "cassandra": {"HOSTS": ",".join(self.hosts), "PORT": self.port, "KEYSPACE": self.keyspace,
                              "REPLICATION": self.replication, "CONSISTENCY": "QUORUM",
                              "SERIAL_CONSISTENCY": "SERIAL", "PROTOCOL_VERSION": 5, "LOCAL_DC": dcs[0],
                              "REQUEST_TIMEOUT_SEC": REAL_TIMEOUT}}

    def node_sections(self, name: str) -> dict[str, dict]:
        dc = self.dc_of(name)
        return {"cassandra": {"LOCAL_DC": dc}, "node": {"DC": dc}}

    # -- the refusal -------------------------------------------------------------------------------

    def before_faults(self, cluster) -> None:
        """A node at LOCAL_SERIAL in the last DC, beside the running soak nodes: it must refuse."""
        dc = self.cc.datacenters()[-1]
        running = sorted((r.name for r in cluster.monitor_store.nodes() if r.state == "running"
                          and r.name in cluster.nodes and cluster.nodes[r.name].alive()))
        elsewhere = [n for n in running if self.dc_of(n) != dc]
        if not elsewhere:
            raise ChaosError(f"no soak node of a DC other than {dc} is running: nothing to refuse beside")
        config = write_config(cluster.tmp / "config-local-serial.ini", merged(cluster.settings, {
            "cassandra": {"LOCAL_DC": dc, "SERIAL_CONSISTENCY": "LOCAL_SERIAL"}, "node": {"DC": dc}}))
        name = "local-serial"
        log = cluster.tmp / f"node-{name}.log"
        t = time.monotonic()
        node = NodeProcess.spawn(name, config, log, cwd=cluster.tmp, log_level="warning",
                                 env={"PYTHONPATH": pythonpath_with(ROOT)})
        code: int | None = None
        try:
            code = node.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also on Ctrl-C: it runs in a session of its own
            if node.alive():
                node.end()
        if code is None:
            raise ChaosError(f"a node at SERIAL_CONSISTENCY = LOCAL_SERIAL in {dc} beside nodes of other DCs "
                             f"({', '.join(elsewhere)}) was still running after 120 s; it should refuse to start:\n"
                             + node.log()[-1500:])
        took = time.monotonic() - t
        text = node.log()
        said = [line for line in text.splitlines() if line.startswith("fabricjobs:")]
        if code == 0 or REFUSED not in text:
            raise ChaosError(f"a node at SERIAL_CONSISTENCY = LOCAL_SERIAL in {dc} beside nodes of other DCs "
                             f"({', '.join(elsewhere)}) exited with status {code}, without the topology "
                             f"refusal:\n{text[-1500:]}")
        message = re.sub(r"\s+", " ", said[-1] if said else text.strip().splitlines()[-1])
        self.refusal = (f"refusal: a node with SERIAL_CONSISTENCY = LOCAL_SERIAL in {dc}, beside "
                        f"{len(running)} running nodes ({', '.join(f'{n} {self.dc_of(n)}' for n in running)}), "
                        f"exited with status {code} after {took:.1f} s: {message}")
        log_line(self.refusal)

    # -- the pauses --------------------------------------------------------------------------------

    def _fault_loop(self, cluster, rng: random.Random, t_last: float) -> None:
        self._cluster = cluster
        dcs = self.cc.datacenters()
        first = rng.randrange(len(dcs))
        next_at = time.time() + rng.uniform(4, 8)
        for n in itertools.count():
            time.sleep(max(0.0, next_at - time.time()))
            now = time.time()
            if self._closed or now >= t_last or (n > 0 and now + PAUSE > t_last):
                return
            dc = dcs[(first + n) % len(dcs)]
            i = self.cc.hosts.index(rng.choice(self.cc.dc_hosts(dc)))
            if not self._inject(cluster, "cassandra-stop", i, PAUSE, note=f"{dc}; "):
                return
            next_at = time.time() + rng.uniform(*NEXT_PAUSE)

    # -- the report --------------------------------------------------------------------------------

    def pauses(self) -> dict[str, int]:
        """How many pauses of each DC's Cassandra node ended (SIGCONT sent)."""
        done: dict[str, int] = {}
        for f in self._cluster.faults if self._cluster is not None else []:
            if f.kind == "cassandra-stop" and f.end is not None:
                dc = f.note.split(";", 1)[0]
                done[dc] = done.get(dc, 0) + 1
        return done

    def report_lines(self) -> list[str]:
        pauses = ", ".join(f"{dc} {n}" for dc, n in sorted(self.pauses().items())) or "none"
        return [self.refusal or "refusal: not checked",
                f"data centres {', '.join(self.cc.datacenters())} (keyspace {self.replication}, QUORUM / SERIAL); "
                f"a DC's Cassandra node paused {PAUSE:g} s: {pauses}"]

    def report(self) -> dict:
        return {"refusal": self.refusal, "dc_pauses": self.pauses(), "replication": self.replication}
