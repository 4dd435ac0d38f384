"""A real Apache Cassandra cluster on loopback (node i listens on first_address + i), started as
plain JVM processes from the Maven jars, for tests that must run against the real thing; in one
data centre, or in several (GossipingPropertyFileSnitch, a cassandra-rackdc.properties per node)."""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._config import (CLUSTER_NAME, DATACENTER, JAVA17_MODULE_FLAGS, UNSAFE_SYSTEM_FLAG,
                      NodeSpec, datacenter_of, initial_token, jvm_command, write_node_files)
from ._toolchain import (DEFAULT_VERSION, CassandraError, jamm_agent, java_executable,
                         java_problem, resolve)

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

STATE_FILE = "cluster.json"
# Below Linux's ephemeral port range, so no outgoing connection takes one between our check
# and the node's bind.
PORT_RANGE = (20000, 32000)
_PORT_CLASH = ("Address already in use", "Port already in use", "BindException")
SUPERUSER = ("cassandra", "cassandra")


class _PortClash(CassandraError):
    """A node could not bind a port we had checked was free (another process took it since)."""


class CassandraCluster:
    """N Cassandra nodes on 127.0.0.1, 127.0.0.2, ... each a JVM in its own session with its own
    directory under ``dir``. One DC, ``DATACENTER``, by default; with ``dcs=D`` node i is in DC
    ``dc{i % D + 1}`` (3 nodes in 2 DCs: dc1 = nodes 0 and 2, dc2 = node 1), and the first node
    of each DC (nodes 0 .. D-1) is a seed (node i lists those up to i: they start in order).

    The pids, addresses and ports are kept in ``dir/cluster.json`` so that another process can
    take over with :meth:`attach` (``scripts/cassandra stop`` stops what ``start`` started).
    Node indices are 0-based: node ``i`` listens on ``hosts[i]``.
    """

    def __init__(self, dir: Path | str, nodes: int = 1, *, first_address: str = "127.0.0.1",
                 native_port: int | None = None, storage_port: int | None = None,
                 tombstone_warn: int | None = None, tombstone_failure: int | None = None,
                 authenticator: bool = False, paxos_variant: str = "v2", heap: str = "768m",
                 extra_yaml: dict[str, Any] | None = None, version: str = DEFAULT_VERSION,
                 cluster_name: str = CLUSTER_NAME, jvm_options: Sequence[str] = (),
                 unsafe_system: bool = False, namespaces: Sequence[tuple[str, str]] = (),
                 dcs: int = 1) -> None:
        """``namespaces``: (network namespace, its address) per node, to run each node on a
        test host of its own (testkit/netns.py) instead of on loopback; each
        namespace has its own ports, so the default ones are used. ``dcs``: how many data
        centres the nodes are dealt into (see the class docstring)."""
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if not 1 <= dcs <= nodes:
            raise ValueError(f"{dcs} data centres need 1 to {nodes} of them (one node at least each)")
        if paxos_variant not in ("v1", "v2"):
            raise ValueError(f"paxos_variant is v1 or v2, not {paxos_variant!r}")
        self.dir = Path(dir).resolve()
        self.version = version
        self.cluster_name = cluster_name
        self.authenticator = authenticator
        self._settings: dict[str, Any] = {
            "tombstone_warn": tombstone_warn, "tombstone_failure": tombstone_failure,
            "paxos_variant": paxos_variant, "heap": heap, "extra_yaml": extra_yaml or {},
            "jvm_options": list(jvm_options), "unsafe_system": unsafe_system,
        }
        first = ipaddress.IPv4Address(first_address)
        self._addresses = [str(first + i) for i in range(nodes)]
        self._datacenters = [datacenter_of(i, dcs) for i in range(nodes)]
        self._namespaces = [ns for ns, _ in namespaces]
        if namespaces:
            if len(namespaces) != nodes:
                raise ValueError("one namespace per node")
            self._addresses = [address for _, address in namespaces]
            native_port, storage_port = native_port or 9042, storage_port or 7000
        self._want_native, self._want_storage = native_port, storage_port
        self._native_port: int | None = native_port
        self._storage_port: int | None = storage_port
        self._jmx_ports: list[int] = []
        self._commands: list[list[str]] = []
        self._pids: list[int | None] = [None] * nodes
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._lib: Path | None = None

    # ----------------------------------------------------------------------------- re-attach

    @classmethod
    def attach(cls, dir: Path | str) -> CassandraCluster:
        """The cluster a start() (maybe in another process) left described in ``dir``."""
        path = Path(dir).resolve() / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise CassandraError(f"no Cassandra cluster in {path.parent} "
                                 f"(no {STATE_FILE})") from None
        nodes = state["nodes"]
        # (a cluster.json written before several DCs existed names one DC for all)
        dcs = [n.get("datacenter", state.get("datacenter", DATACENTER)) for n in nodes]
        c = cls(path.parent, len(nodes), first_address=nodes[0]["address"],
                authenticator=state["authenticator"], version=state["version"],
                cluster_name=state["cluster_name"], **state["settings"])
        c._addresses = [n["address"] for n in nodes]
        c._datacenters = dcs
        c._native_port, c._storage_port = state["native_port"], state["storage_port"]
        c._jmx_ports = [n["jmx_port"] for n in nodes]
        c._commands = [n["command"] for n in nodes]
        c._pids = [n["pid"] for n in nodes]
        c._lib = Path(state["lib"])
        return c

    def _save(self) -> None:
        """Write cluster.json atomically (a reader never sees half of it)."""
        state = {
            "version": self.version, "cluster_name": self.cluster_name,
            "datacenters": self.datacenters(), "lib": str(self._lib),
            "native_port": self._native_port, "storage_port": self._storage_port,
            "authenticator": self.authenticator, "settings": self._settings,
            "nodes": [{"address": a, "datacenter": dc, "jmx_port": j, "pid": p,
                       "dir": str(self.node_dir(i)), "command": cmd}
                      for i, (a, dc, j, p, cmd) in enumerate(zip(
                          self._addresses, self._datacenters, self._jmx_ports, self._pids,
                          self._commands, strict=True))],
        }
        tmp = self.dir / f".{STATE_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.rename(self.dir / STATE_FILE)

    # ---------------------------------------------------------------------------- accessors

    @property
    def hosts(self) -> list[str]:
        """The nodes' addresses (CQL and storage), node i at index i."""
        return list(self._addresses)

    @property
    def port(self) -> int:
        """The CQL (native transport) port, the same on every node."""
        if self._native_port is None:
            raise CassandraError("the cluster has not been started: no port yet")
        return self._native_port

    @property
    def storage_port(self) -> int:
        if self._storage_port is None:
            raise CassandraError("the cluster has not been started: no storage port yet")
        return self._storage_port

    def datacenter(self, i: int) -> str:
        """Node i's data centre (as its cassandra-rackdc.properties names it)."""
        return self._datacenters[i]

    def datacenters(self) -> list[str]:
        """The data centres, in the order of their first node (dc1, dc2, ...; or DATACENTER)."""
        return list(dict.fromkeys(self._datacenters))

    def dc_hosts(self, dc: str) -> list[str]:
        """The addresses of the nodes in data centre ``dc``."""
        return [a for a, d in zip(self._addresses, self._datacenters, strict=True) if d == dc]

    def jmx_port(self, i: int) -> int:
        return self._jmx_ports[i]

    def node_dir(self, i: int) -> Path:
        return self.dir / f"node{i}"

    def log_path(self, i: int) -> Path:
        """Node i's system.log (Cassandra's INFO and up, tombstone warnings included)."""
        return self.node_dir(i) / "logs" / "system.log"

    def pid(self, i: int) -> int | None:
        """Node i's JVM pid, None when it is not running (stopped, killed, exited)."""
        return self._pids[i] if self.state(i) != "stopped" else None

    def state(self, i: int) -> str:
        """"running", "paused" (SIGSTOPped) or "stopped" (no process)."""
        pid = self._pids[i]
        if pid is None:
            return "stopped"
        proc = self._procs.get(i)
        if proc is not None and proc.pid == pid:  # our child: poll() also reaps it
            if proc.poll() is not None:
                return "stopped"
        elif not self._owns(i, pid):  # started by another process: is the pid still the node?
            return "stopped"
        proc_state = _proc_state(pid)
        if proc_state is None or proc_state in "ZX":
            return "stopped"
        return "paused" if proc_state in "Tt" else "running"

    def rss(self, i: int) -> int | None:
        """Node i's resident memory in bytes (None when it is not running)."""
        pid = self.pid(i)
        if pid is None:
            return None
        with suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return None

    def _owns(self, i: int, pid: int) -> bool:
        """Whether ``pid`` is still node i's JVM, not a process that reused the number."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return self.node_dir(i).joinpath("conf", "cassandra.yaml").as_uri().encode() in cmdline

    # ------------------------------------------------------------------------------- start

    def start(self, timeout: float = 300.0) -> CassandraCluster:
        """Start a fresh cluster (the node directories of an earlier run are wiped), the nodes one
        after another, and return once every node answers CQL and, with several nodes, every
        node knows every other one as NORMAL with the same schema. Raises CassandraError (with
        the tail of the node's log) when a node exits or is not ready within ``timeout`` s."""
        running = [i for i in range(len(self._pids)) if self.state(i) != "stopped"]
        if running or self._previous_run_alive():
            raise CassandraError(f"a Cassandra cluster from {self.dir} is still running; "
                                 "stop it first")
        reason = java_problem()
        if reason is not None:
            raise CassandraError(reason)
        java = java_executable()
        assert java is not None
        self._lib = resolve(self.version)
        jamm = jamm_agent(self._lib)
        deadline = time.monotonic() + timeout
        fixed_ports = self._want_native is not None and self._want_storage is not None
        for attempt in range(1 if fixed_ports else 3):
            self._prepare(java, jamm)
            try:
                for i in range(len(self._addresses)):
                    self._launch(i)
                    self._wait_node(i, deadline)
                self._wait_converged(deadline)
                if self.authenticator and len(self._addresses) > 1:
                    self._replicate_auth()
                return self
            except _PortClash:
                self.stop(timeout=30)
                if attempt == 2:
                    raise
            except BaseException:
                self.stop(timeout=30)
                raise
        raise AssertionError("unreachable")

    def _previous_run_alive(self) -> bool:
        with suppress(CassandraError, KeyError, ValueError):
            old = CassandraCluster.attach(self.dir)
            return any(old.state(i) != "stopped" for i in range(len(old._pids)))
        return False

    def _prepare(self, java: str, jamm: Path) -> None:
        """Pick ports, wipe the old node directories, write each node's files and command."""
        assert self._lib is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        rng = random.SystemRandom()
        taken: set[int] = set()

        def pick(wanted: int | None, addresses: Sequence[str], what: str) -> int:
            if self._namespaces:  # hosts of their own: every port is free there
                return wanted or 7199
            if wanted is not None:
                busy = [a for a in addresses if not _port_free(a, wanted)]
                if busy:
                    raise CassandraError(f"{what} port {wanted} is in use on {', '.join(busy)}")
                taken.add(wanted)
                return wanted
            for _ in range(500):
                port = rng.randrange(*PORT_RANGE)
                if port not in taken and all(_port_free(a, port) for a in addresses):
                    taken.add(port)
                    return port
            raise CassandraError(f"found no free {what} port in {PORT_RANGE}")

        self._native_port = pick(self._want_native, self._addresses, "native transport")
        self._storage_port = pick(self._want_storage, self._addresses, "storage")
        self._jmx_ports = [pick(None, ["127.0.0.1"], "JMX") for _ in self._addresses]
        # The seeds: the first node of each DC (gossip between the DCs does not rest on one
        # node), as far as they start before this node or are it. A seed listed before it runs
        # would cost the first node a shadow round of ring_delay_ms (5 s) waiting for it.
        firsts = [self._datacenters.index(dc) for dc in self.datacenters()]
        self._commands = []
        for i, address in enumerate(self._addresses):
            shutil.rmtree(self.node_dir(i), ignore_errors=True)
            spec = NodeSpec(
                index=i, address=address, dir=self.node_dir(i),
                seeds=",".join(f"{self._addresses[s]}:{self._storage_port}"
                               for s in firsts if s <= i),
                native_port=self._native_port, storage_port=self._storage_port,
                jmx_port=self._jmx_ports[i],
                initial_token=initial_token(i, len(self._addresses)),
                datacenter=self._datacenters[i],
                authenticator=self.authenticator, cluster_name=self.cluster_name,
                paxos_variant=self._settings["paxos_variant"],
                tombstone_warn=self._settings["tombstone_warn"],
                tombstone_failure=self._settings["tombstone_failure"],
                heap=self._settings["heap"], extra_yaml=self._settings["extra_yaml"],
                jvm_options=(*self._settings["jvm_options"],
                             *([UNSAFE_SYSTEM_FLAG] if self._settings["unsafe_system"] else [])))
            write_node_files(spec)
            self._commands.append(jvm_command(java, self._lib, jamm, spec))
        self._pids = [None] * len(self._addresses)
        self._save()

    def _launch(self, i: int) -> None:
        """Start node i's JVM detached: its own session (a Ctrl-C meant for the test run does not
        reach it), stdout and stderr to logs/stdout.log."""
        out_path = self.node_dir(i) / "logs" / "stdout.log"
        env = dict(os.environ, MALLOC_ARENA_MAX="4")  # as cassandra-env.sh: fewer glibc arenas
        with open(out_path, "ab") as out:
            proc = subprocess.Popen(self._in_host(i, self._commands[i]), cwd=self.node_dir(i), env=env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[i] = proc
        self._pids[i] = proc.pid
        self._save()

    def _in_host(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` in node i's namespace, if it has one (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self._namespaces[i], *argv] if self._namespaces else argv

    def start_node(self, i: int, timeout: float = 180.0) -> None:
        """Restart stopped (or killed) node i on its existing data and wait until it answers CQL
        and the other running nodes see it again."""
        if self.state(i) != "stopped":
            raise CassandraError(f"node {i} ({self._addresses[i]}) is {self.state(i)}")
        deadline = time.monotonic() + timeout
        self._launch(i)
        self._wait_node(i, deadline)
        self._wait_converged(deadline)

    # -------------------------------------------------------------------------------- stop

    def stop(self, timeout: float = 60.0, *, wipe: bool = False) -> None:
        """Stop every node: SIGTERM (Cassandra drains and exits), SIGKILL after ``timeout`` s.
        A paused node is continued so that it sees the SIGTERM. ``wipe`` also deletes ``dir``."""
        self._terminate([i for i in range(len(self._pids)) if self.state(i) != "stopped"],
                        timeout)
        if wipe:
            shutil.rmtree(self.dir, ignore_errors=True)

    def stop_node(self, i: int, timeout: float = 60.0) -> None:
        """Stop node i cleanly (SIGTERM, then SIGKILL after ``timeout`` s); its data stays."""
        self._terminate([i] if self.state(i) != "stopped" else [], timeout)

    def kill_node(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node i: SIGKILL (returns once it is gone), SIGSTOP (once it is
        paused), SIGCONT (once it runs again), or any other signal (at once)."""
        pid = self.pid(i)
        if pid is None:
            raise CassandraError(f"node {i} ({self._addresses[i]}) is not running")
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            self._wait_gone([i], time.monotonic() + 30)
            self._pids[i] = None
            self._save()
        elif sig in (signal.SIGSTOP, signal.SIGCONT):  # delivered asynchronously
            want = "paused" if sig == signal.SIGSTOP else "running"
            deadline = time.monotonic() + 10
            while self.state(i) not in (want, "stopped") and time.monotonic() < deadline:
                time.sleep(0.01)

    def _terminate(self, nodes: list[int], timeout: float) -> None:
        for i in nodes:
            pid = self._pids[i]
            assert pid is not None
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)
        left = self._wait_gone(nodes, time.monotonic() + timeout)
        for i in left:
            with suppress(ProcessLookupError, TypeError):
                os.kill(self._pids[i], signal.SIGKILL)  # type: ignore[arg-type]
        left = self._wait_gone(left, time.monotonic() + 30)
        if left:
            raise CassandraError(f"nodes {left} did not exit even after SIGKILL")
        for i in nodes:
            self._pids[i] = None
        if nodes:
            self._save()

    def _wait_gone(self, nodes: list[int], deadline: float) -> list[int]:
        """Wait until the nodes' processes are gone (or the deadline); those still there."""
        while True:
            left = [i for i in nodes if self.state(i) != "stopped"]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    # ----------------------------------------------------------------------------- waiting

    def _wait_node(self, i: int, deadline: float) -> None:
        """Until node i answers ``SELECT release_version FROM system.local``."""
        address = self._addresses[i]
        last_error = "the CQL port is not open yet"
        while True:
            if self.state(i) == "stopped":
                raise self._died(i)
            if _port_open(address, self.port):
                try:
                    with self._session([address]) as session:
                        session.execute("SELECT release_version FROM system.local").one()
                    return
                except Exception as e:  # not serving yet, or the superuser not created yet
                    last_error = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise CassandraError(f"node {i} ({address}) not answering CQL in time "
                                     f"({last_error})\n{self._tail(i)}")
            time.sleep(0.5)

    def _wait_converged(self, deadline: float) -> None:
        """Until every running node lists every other running node as a peer, in its DC, NORMAL
        in gossip at the generation that node itself has (so a restart has been seen), all on
        one schema version; then until the driver, connected to all of them (every DC), has
        every one UP."""
        running = [i for i in range(len(self._addresses)) if self.state(i) == "running"]
        if len(running) > 1:
            problem: str | None = "not checked yet"
            while problem is not None:
                problem = self._convergence_problem(running)
                if problem is None:
                    break
                for i in running:
                    if self.state(i) == "stopped":
                        raise self._died(i)
                if time.monotonic() > deadline:
                    raise CassandraError(f"the cluster did not converge in time: {problem}")
                time.sleep(0.5)
        wanted = {self._addresses[i] for i in running}
        with self._session(sorted(wanted), whitelist=False) as session:
            while True:
                up = {h.address for h in session.cluster.metadata.all_hosts() if h.is_up}
                if wanted <= up:
                    return
                if time.monotonic() > deadline:
                    raise CassandraError(f"the driver sees {sorted(wanted - up)} down")
                time.sleep(0.5)

    def _convergence_problem(self, running: list[int]) -> str | None:
        """What is not converged yet among the running nodes, None when nothing."""
        views: dict[int, dict[str, Any]] = {}
        for i in running:
            address = self._addresses[i]
            try:
                with self._session([address]) as s:
                    local = s.execute("SELECT schema_version FROM system.local").one()
                    peers = list(s.execute(
                        "SELECT peer, host_id, schema_version, data_center FROM system.peers"))
                    gossip = list(s.execute("SELECT * FROM system_views.gossip_info"))
            except Exception as e:
                return f"node {i} ({address}): {type(e).__name__}: {e}"
            views[i] = {
                "schema": local.schema_version,
                "peers": {str(p.peer): p for p in peers},
                "gossip": {str(g.address): g for g in gossip},
            }
        for i in running:
            me = self._addresses[i]
            own = views[i]["gossip"].get(me)
            if own is None:
                return f"node {i} ({me}) has no gossip state for itself yet"
            for j in running:
                if j == i:
                    continue
                other = self._addresses[j]
                peer = views[i]["peers"].get(other)
                if peer is None or peer.host_id is None:
                    return f"node {i} ({me}) does not list {other} in system.peers yet"
                if peer.schema_version != views[i]["schema"]:
                    return f"node {i} ({me}) and {other} disagree on the schema"
                if peer.data_center != self._datacenters[j]:
                    return (f"node {i} ({me}) has {other} in DC {peer.data_center}, "
                            f"not {self._datacenters[j]}")
                seen = views[i]["gossip"].get(other)
                if seen is None or "NORMAL" not in str(_status(seen)):
                    return f"node {i} ({me}) sees {other} as {_status(seen)!s}"
                self_view = views[j]["gossip"].get(other)
                if self_view is None or seen.generation != self_view.generation:
                    return f"node {i} ({me}) has not seen {other} restart yet"
        return None

    def _replicate_auth(self) -> None:
        """With several nodes, give system_auth a replica on (up to 3) nodes of each DC, so that
        killing one node does not lock everyone out, and copy the roles there (a read at ALL
        repairs them)."""
        from cassandra import ConsistencyLevel
        from cassandra.query import SimpleStatement

        rf = ", ".join(f"'{dc}': {min(3, len(self.dc_hosts(dc)))}" for dc in self.datacenters())
        with self._session(self.hosts, whitelist=False) as s:
            s.execute("ALTER KEYSPACE system_auth WITH replication = "
                      f"{{'class': 'NetworkTopologyStrategy', {rf}}}")
            s.cluster.control_connection.wait_for_schema_agreement()
            tables = [r.table_name for r in s.execute(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'system_auth'")]
            for table in tables:
                s.execute(SimpleStatement(f"SELECT * FROM system_auth.{table}",
                                          consistency_level=ConsistencyLevel.ALL))

    def _died(self, i: int) -> CassandraError:
        proc = self._procs.get(i)
        code = proc.poll() if proc is not None else None
        self._pids[i] = None
        self._save()
        tail = self._tail(i)
        how = f"exited with status {code}" if code is not None else "exited"
        msg = f"node {i} ({self._addresses[i]}) {how} during start-up\n{tail}"
        fixed = self._want_native is not None and self._want_storage is not None
        if not fixed and any(s in tail for s in _PORT_CLASH):
            return _PortClash(msg)
        return CassandraError(msg)

    def _tail(self, i: int, lines: int = 40) -> str:
        out = []
        for path, n in ((self.log_path(i), lines), (self.node_dir(i) / "logs" / "stdout.log", 15)):
            with suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-n:]
                if text:
                    out.append(f"--- last lines of {path}:\n" + "\n".join(text))
        return "\n".join(out) or "(no log output)"

    # ------------------------------------------------------------------------------ driver

    def connect(self, **kwargs: Any) -> Cluster:
        """A cassandra-driver Cluster for this cluster: every node as contact point, its port, the
        superuser's credentials when auth is on. Keyword arguments go to Cluster(). Unless they
        name a policy, requests go token-aware to the first DC's nodes, and to the other DCs'
        when none of those is up (a client of a multi-DC cluster sees every node)."""
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster

        kwargs.setdefault("contact_points", self.hosts)
        kwargs.setdefault("port", self.port)
        if self.authenticator:
            kwargs.setdefault("auth_provider", PlainTextAuthProvider(*SUPERUSER))
        if "execution_profiles" not in kwargs and "load_balancing_policy" not in kwargs:
            from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
            from cassandra.policies import TokenAwarePolicy
            kwargs["execution_profiles"] = {EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=TokenAwarePolicy(self._dc_aware()))}
        return Cluster(**kwargs)

    @contextmanager
    def _session(self, addresses: list[str], *, whitelist: bool = True) -> Iterator[Session]:
        """A short-lived driver session; with ``whitelist`` it talks to ``addresses`` only (a
        probe of one node must not be answered by another), else to every node of every DC."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
        from cassandra.policies import WhiteListRoundRobinPolicy

        policy = WhiteListRoundRobinPolicy(addresses) if whitelist else self._dc_aware()
        cluster = self.connect(
            contact_points=addresses, connect_timeout=5, control_connection_timeout=5,
            schema_metadata_enabled=not whitelist, token_metadata_enabled=False,
            execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=policy, request_timeout=20)})
        try:
            yield cluster.connect()
        finally:
            cluster.shutdown()

    def _dc_aware(self) -> Any:
        """The first DC's nodes first, then (if none is up) those of the other DCs: a plain
        DCAwareRoundRobinPolicy would never send a request to another DC, nor see its nodes up."""
        from cassandra.policies import DCAwareRoundRobinPolicy

        return DCAwareRoundRobinPolicy(self.datacenters()[0],
                                       used_hosts_per_remote_dc=len(self._addresses))

    # ----------------------------------------------------------------------------- nodetool

    def nodetool(self, i: int, *args: str, timeout: float = 120.0) -> str:
        """Run ``nodetool <args>`` against node i (over its local JMX port); its output."""
        java = java_executable()
        if java is None or self._lib is None:
            raise CassandraError("no java, or the cluster was never started")
        logback = self.dir / "nodetool-logback.xml"  # warnings to stderr, as logback-tools.xml
        if not logback.exists():
            logback.write_text(_NODETOOL_LOGBACK)
        cmd = [java, "-Xmx128m", *JAVA17_MODULE_FLAGS, "-cp", f"{self._lib}/*",
               f"-Dlogback.configurationFile={logback}",
               "org.apache.cassandra.tools.NodeTool", "-h", "127.0.0.1",
               "-p", str(self._jmx_ports[i]), *args]
        run = subprocess.run(self._in_host(i, cmd), capture_output=True, text=True, timeout=timeout)
        if run.returncode != 0:
            raise CassandraError(f"nodetool {' '.join(args)} failed ({run.returncode}):\n"
                                 f"{run.stdout}{run.stderr}")
        return run.stdout

    # ---------------------------------------------------------------------- context manager

    def __enter__(self) -> CassandraCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


_NODETOOL_LOGBACK = """<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
"""


def _status(gossip_row: Any) -> str | None:
    """A gossip_info row's STATUS ("NORMAL,<token>", "shutdown,true", ...)."""
    if gossip_row is None:
        return None
    for column in ("status_with_port", "status"):
        value = getattr(gossip_row, column, None)
        if value:
            return str(value)
    return None


def _proc_state(pid: int) -> str | None:
    """The state letter in /proc/<pid>/stat (R, S, T, Z, ...), None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _port_free(address: str, port: int) -> bool:
    """Whether ``address:port`` can be bound now (no SO_REUSEADDR: stricter than Cassandra)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def _port_open(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((address, port)) == 0
