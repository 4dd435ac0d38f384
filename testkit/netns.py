"""Test hosts on one machine: each a Linux network namespace with its own address on a private
bridge, and the network faults between them as functions (the partition tests of docs/explanation/guarantees.md).

A :class:`Network` creates a bridge and, per host, a namespace joined to it by a veth pair,
all named ``fjt<id>-...`` and addressed in 10.213.<id>.0/24, a private subnet that exists only
on that bridge. The test process itself reaches the hosts through the bridge's own address
(``GATEWAY``): nothing is routed beyond the bridge, so only the project's own namespaces (and
loopback) are ever traffic targets.

Faults (iproute2 only, what these machines' kernels support: no netem, no nftables):

- :meth:`Network.isolate`: a host's cable pulled (its veth down): it reaches nobody, nobody
  reaches it, and its connections hang as they would on a real partition.
- :meth:`Network.cut`: host A and host B no longer reach each other (a blackhole route on
  each side); both still reach everyone else.
- :meth:`Network.delay` and :meth:`Network.loss`: packets between hosts held back (with
  jitter) or dropped, on every path or on the paths of some hosts only, one direction or
  both. The kernel cannot do that here, so those paths are routed through a relay process of
  ours (:mod:`testkit.tunlink`: a router namespace and a TUN device).
- :meth:`Network.heal`: every fault removed.

Everything a Network creates is removed by :meth:`Network.close` (a context manager's exit),
and leftovers of runs that died before their clean-up (same prefix, an id whose process is
gone) are removed by the next :class:`Network` made.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Sequence

from .rig import process_alive
from .tunlink import DETOUR_METRIC, ROUTER_INDEX, Link, PathFault

PREFIX = "fjt"
SUBNET_BYTE = 213  # 10.213.<id>.0/24


class NetnsUnavailable(RuntimeError):
    """This machine cannot build test hosts (not root, or no iproute2)."""


def unavailable() -> str | None:
    """Why test hosts cannot be built here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (Debian: apt-get install iproute2)"
    return None


def _ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


@dataclass(frozen=True)
class Host:
    name: str  # as the test calls it: "n1", "cassandra1", ...
    namespace: str
    address: str
    veth: str  # the bridge's end of its cable (in the root namespace)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


Direction = Literal["both", "from", "to"]


class Network:
    """A bridge and hosts on it; see the module docstring. Use as a context manager."""

    def __init__(self, names: Sequence[str]) -> None:
        why = unavailable()
        if why is not None:
            raise NetnsUnavailable(why)
        if len(names) >= ROUTER_INDEX:
            raise ValueError(f"at most {ROUTER_INDEX - 1} hosts on one test network")
        remove_stale()
        self.id = _claim_id()
        self.tag = f"{PREFIX}{self.id}"
        self.bridge = f"{self.tag}-br"
        self.gateway = f"10.{SUBNET_BYTE}.{self.id}.254"
        self.hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str]] = set()
        self._down: set[str] = set()
        self.link: Link | None = None  # made by the first delay() or loss()
        self._paths: dict[tuple[str, str], PathFault] = {}  # (from, to) -> what the link does
        self._detours: set[tuple[str, str]] = set()  # (from, to) routed through the link
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(names, start=1):
                self._add_host(name, i)
        except BaseException:
            self.close()
            raise

    def _add_host(self, name: str, i: int) -> None:
        host = Host(name, f"{self.tag}-{i}", f"10.{SUBNET_BYTE}.{self.id}.{i}", f"{self.tag}-{i}h")
        inner = f"{self.tag}-{i}n"
        _ip("netns", "add", host.namespace)
        self.hosts[name] = host
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", host.namespace)
        _ip("link", "set", host.veth, "master", self.bridge)
        _ip("link", "set", host.veth, "up")
        _ip("addr", "add", f"{host.address}/24", "dev", inner, namespace=host.namespace)
        _ip("link", "set", inner, "up", namespace=host.namespace)
        _ip("link", "set", "lo", "up", namespace=host.namespace)

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host(self, name: str) -> Host:
        return self.hosts[name]

    # -- faults --------------------------------------------------------------------------------

    def isolate(self, name: str) -> None:
        """Pull ``name``'s cable: it reaches no host and no host reaches it."""
        _ip("link", "set", self.hosts[name].veth, "down")
        self._down.add(name)

    def cut(self, a: str, b: str) -> None:
        """``a`` and ``b`` no longer reach each other; both still reach every other host."""
        for me, other in ((a, b), (b, a)):
            _ip("route", "add", "blackhole", f"{self.hosts[other].address}/32", namespace=self.hosts[me].namespace)
        self._cuts.add((a, b))

    def isolate_group(self, group: Sequence[str]) -> None:
        """Cut every host of ``group`` from every host outside it (a minority partition)."""
        for a in group:
            for b in self.hosts:
                if b not in group:
                    self.cut(a, b)

    def delay(self, ms: float, jitter_ms: float = 0.0, *, hosts: Sequence[str] | None = None,
              direction: Direction = "both", distribution: str = "uniform") -> None:
        """Hold each packet between two hosts back ``ms`` (one way), plus a random jitter of up
        to ``jitter_ms`` either side (``distribution`` "uniform", as netem; or "normal", with
        ``jitter_ms`` its standard deviation). On every path, or with ``hosts`` only on the
        paths of those: ``direction`` "both" (packets they send and receive), "from" (only
        what they send) or "to" (only what they receive). Replaces the delay those paths had;
        their loss stays. Packets may reorder, as under netem with jitter."""
        self._set_paths(self._select(hosts, direction), delay=ms / 1000.0, jitter=jitter_ms / 1000.0,
                        distribution=distribution)

    def loss(self, fraction: float, *, hosts: Sequence[str] | None = None, direction: Direction = "both") -> None:
        """Drop each packet between two hosts with probability ``fraction`` (independently; a
        round trip is lost with 1 - (1 - fraction)^2 when both ways drop). ``hosts`` and
        ``direction`` as for :meth:`delay`; replaces the loss those paths had, their delay stays."""
        self._set_paths(self._select(hosts, direction), loss=fraction)

    def _select(self, hosts: Sequence[str] | None, direction: Direction) -> list[tuple[str, str]]:
        names = list(self.hosts)
        chosen = set(names if hosts is None else hosts)
        if not chosen <= set(names):
            raise KeyError(f"no such test hosts: {sorted(chosen - set(names))}")
        if direction not in ("both", "from", "to"):
            raise ValueError(f"direction is both, from or to, not {direction!r}")
        return [(a, b) for a in names for b in names if a != b and (
            (direction != "to" and a in chosen) or (direction != "from" and b in chosen))]

    def _set_paths(self, pairs: list[tuple[str, str]], **change: object) -> None:
        faults = dict(self._paths)
        for pair in pairs:
            faults[pair] = replace(faults.get(pair, PathFault()), **change)  # type: ignore[arg-type]
        if self.link is None:
            link = Link(self.tag, self.bridge, f"10.{SUBNET_BYTE}.{self.id}")
            link.start()
            self.link = link
        # The relay knows a path before packets are sent its way, and forgets it only after
        # they no longer are (heal).
        self.link.set_paths({(self.hosts[a].address, self.hosts[b].address): f for (a, b), f in faults.items()})
        self._paths = faults
        for a, b in sorted(set(faults) - self._detours):
            _ip("route", "replace", f"{self.hosts[b].address}/32", "via", self.link.address, "metric",
                str(DETOUR_METRIC), namespace=self.hosts[a].namespace)
            self._detours.add((a, b))

    def ping(self, src: str, dst: str, count: int = 20, interval: float = 0.05,
             wait: float = 2.0) -> list[float | None]:
        """ICMP round trips from host ``src`` to host ``dst`` in ms (None: no answer)."""
        from .linkprobe import ping

        return ping(self.hosts[src].command([]), self.hosts[dst].address, count, interval, wait)

    def heal(self) -> None:
        """Remove every fault: cables back in (returns once their carrier is up), blackhole
        routes gone, delay and loss gone (packets the link holds still arrive, late). A host's
        neighbours may still need an ARP round to reach it."""
        for name in sorted(self._down):
            _ip("link", "set", self.hosts[name].veth, "up")
        for name in sorted(self._down):
            self._wait_carrier(self.hosts[name])
        self._down.clear()
        for a, b in sorted(self._cuts):
            for me, other in ((a, b), (b, a)):
                _ip("route", "del", "blackhole", f"{self.hosts[other].address}/32",
                    namespace=self.hosts[me].namespace, check=False)
        self._cuts.clear()
        for a, b in sorted(self._detours):
            _ip("route", "del", f"{self.hosts[b].address}/32", "metric", str(DETOUR_METRIC),
                namespace=self.hosts[a].namespace, check=False)
        self._detours.clear()
        self._paths.clear()
        if self.link is not None:
            self.link.set_paths({})

    def _wait_carrier(self, host: Host, timeout: float = 5.0) -> None:
        inner = host.veth[:-1] + "n"
        deadline = time.monotonic() + timeout
        while True:
            outer = _ip("-o", "link", "show", "dev", host.veth, check=False).stdout
            inside = _ip("-o", "link", "show", "dev", inner, namespace=host.namespace, check=False).stdout
            if "LOWER_UP" in outer and "LOWER_UP" in inside:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cable of test host {host.name} did not come up within {timeout} s")
            time.sleep(0.01)

    # -- the end -------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every namespace and link of this network (processes still inside a namespace
        keep it alive until they end; the caller ends its processes first)."""
        if self.link is not None:
            self.link.close()
            self.link = None
        for host in self.hosts.values():
            _ip("netns", "del", host.namespace, check=False)
            _ip("link", "del", host.veth, check=False)
        self.hosts.clear()
        _ip("link", "del", self.bridge, check=False)
        _remove_network(self.id)  # anything a failed start-up left half made
        _release_id(self.id)


def _ours() -> tuple[list[str], list[str]]:
    """The namespaces and the links on this machine named like a test network's."""
    spaces = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0]
             for line in _ip("-o", "link", "show", check=False).stdout.splitlines() if line.count(":") >= 2]
    return [n for n in spaces if n.startswith(PREFIX)], [n for n in links if n.startswith(PREFIX)]


def _id_of(name: str) -> int | None:
    head = name[len(PREFIX):].split("-", 1)[0]
    return int(head) if "-" in name and head.isdigit() else None


def _ids_in_use() -> set[int]:
    """The ids of every test network that has a link or a namespace on this machine."""
    spaces, links = _ours()
    return {i for i in map(_id_of, spaces + links) if i is not None}


def _claims_dir() -> Path:
    """Where a network's id is claimed (a file holding its owner's pid), so that two test
    processes never pick the same id and a dead owner's network is known to be stale."""
    for base in ("/run", tempfile.gettempdir()):
        path = Path(base) / "fabricjobs-testnets"
        try:
            path.mkdir(mode=0o700, exist_ok=True)
            return path
        except OSError:
            continue
    raise NetnsUnavailable("nowhere to record test network ids")


def _owner_alive(claim: Path) -> bool:
    try:
        pid = int(claim.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    return pid > 0 and process_alive(pid)


def _claim_id() -> int:
    """A free id, tried from a random one: an id just freed is not handed straight to another
    process while the test that freed it still looks for what it left. The claim appears with
    its owner's pid in it (linked into place whole), so remove_stale never reads an empty one."""
    claims = _claims_dir()
    first = random.randrange(253)
    fd, written = tempfile.mkstemp(prefix=".claim-", dir=claims)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        for i in range(253):
            candidate = 1 + (first + i) % 253
            try:
                os.link(written, claims / str(candidate))
            except FileExistsError:
                continue
            return candidate
    finally:
        os.unlink(written)
    raise NetnsUnavailable("no free test subnet: 253 test networks are claimed")


def _release_id(net_id: int) -> None:
    try:
        (_claims_dir() / str(net_id)).unlink()
    except FileNotFoundError:
        pass


def _remove_network(net_id: int) -> None:
    spaces, links = _ours()
    for name in spaces:
        if _id_of(name) == net_id:
            _ip("netns", "del", name, check=False)
    for name in links:
        if _id_of(name) == net_id:
            _ip("link", "del", name, check=False)


def remove_stale() -> None:
    """Remove the test networks of processes that died before their clean-up: a claim whose
    owner is gone, and links or namespaces of an id nobody claims."""
    claims = _claims_dir()
    for claim in claims.iterdir():
        if claim.name.isdigit() and not _owner_alive(claim):
            _remove_network(int(claim.name))
            claim.unlink(missing_ok=True)
    for net_id in _ids_in_use():
        if not (claims / str(net_id)).exists():
            _remove_network(net_id)
