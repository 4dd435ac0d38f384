"""A user-space network link for the test hosts of netns.py: delay, jitter and loss on chosen
paths between hosts, without the kernel's ``netem`` (docs/explanation/guarantees.md).

The kernels these tests run on have no ``netem`` qdisc and no ``tc`` classifiers, and neither
nftables nor iptables is installed, so a packet cannot be held back or dropped by the kernel.
Instead the packets of a faulty path are routed through a process of ours:

- A **router namespace** (``fjt<id>-r``) sits on the network's bridge with the address
  ``10.213.<id>.253``. It forwards (``ip_forward`` is set in that namespace only; the machine's
  own namespace is left as it is), and a policy rule sends every packet that arrives from the
  bridge into a TUN device (``ip rule add iif <its cable> lookup 100``, table 100 holding only
  ``default dev <tun>``).
- The **relay** (``python -m testkit.tunlink relay``, a process of its own inside the
  router namespace, not a thread of the test) reads each packet from the TUN, drops it with
  the path's loss probability, holds it for the path's delay plus a random jitter, and writes
  it back to the TUN. A packet written to the TUN arrives *from* the TUN, so the policy rule
  does not match it and the main table forwards it on to its host over the bridge: no loop.
- A host sends a packet through the router only on the paths that have a fault: ``10.213.<id>.B/32
  via 10.213.<id>.253 metric 100`` in host A's namespace. Every other path stays bridged, and
  so does the test process (it reaches the hosts through the bridge's own address). A cut
  (a blackhole /32 at metric 0) still wins over the detour.

Choices, compared with ``netem``:

- The delay is per packet and per direction: a path A->B with 50 ms adds 50 ms to each packet
  A sends to B, so a ping's round trip grows by 100 ms when both directions are delayed.
- The jitter is uniform in [delay - jitter, delay + jitter] (as netem without a distribution
  table), or normal with the jitter as its standard deviation; never below zero.
- Packets are **not kept in order**: each is released at its own time, so with jitter they
  reorder as they do under netem (TCP copes; that is part of the fault).
- Loss is independent per packet (no correlation, no bursts).
- The relay runs in the real-time scheduling class (SCHED_RR 1: it needs little CPU but needs
  it at the moment a packet is due; see ``_raise_priority``) and reports how late it released
  packets (``Link.stats``). ``python -m testkit.linkprobe measure`` prints its
  round trips, lateness and capacity on two fresh hosts.

Only packets between the network's own hosts ever reach the relay.
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Sequence

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
ROUTER_INDEX = 253  # the router's address in the network's /24 (the bridge is .254)
TABLE = 100
DETOUR_METRIC = 100  # a host's route through the router; a cut's blackhole (metric 0) wins
RELAY_NICE = -10
DISTRIBUTIONS = ("uniform", "normal")
# Lateness buckets, in ms: how long after its due time the relay released a packet.
LATE_BUCKETS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200)


@dataclass(frozen=True)
class PathFault:
    """What the link does to each packet of one direction of one path."""

    delay: float = 0.0  # seconds
    jitter: float = 0.0  # seconds: half-width (uniform) or standard deviation (normal)
    loss: float = 0.0  # probability that a packet is dropped
    distribution: str = "uniform"

    def __post_init__(self) -> None:
        if self.delay < 0 or self.jitter < 0:
            raise ValueError("delay and jitter cannot be negative")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss is a fraction in [0, 1], not {self.loss}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution is one of {DISTRIBUTIONS}, not {self.distribution!r}")


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


@dataclass
class Link:
    """The router namespace and its relay for one test network (see the module docstring).
    Made by :class:`~testkit.netns.Network` the first time a path gets a delay or a
    loss; removed by its close()."""

    tag: str  # the network's fjt<id>
    bridge: str
    subnet: str  # "10.213.<id>"
    namespace: str = field(init=False)
    address: str = field(init=False)
    tun: str = field(init=False)
    veth: str = field(init=False)  # the bridge's end of the router's cable
    _inner: str = field(init=False)  # its end in the router namespace
    _proc: subprocess.Popen | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.namespace = f"{self.tag}-r"
        self.address = f"{self.subnet}.{ROUTER_INDEX}"
        self.tun = f"{self.tag}-tun"
        self.veth = f"{self.tag}-rh"
        self._inner = f"{self.tag}-rn"

    def start(self, timeout: float = 20.0) -> None:
        ns = self.namespace
        try:
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", self.veth, "type", "veth", "peer", "name", self._inner])
            _run(["ip", "link", "set", self._inner, "netns", ns])
            _run(["ip", "link", "set", self.veth, "master", self.bridge])
            _run(["ip", "link", "set", self.veth, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address}/24", "dev", self._inner])
            _run(["ip", "-n", ns, "link", "set", self._inner, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            argv = ["ip", "netns", "exec", ns, sys.executable, "-m", "testkit.tunlink", "relay",
                    "--tun", self.tun]
            # stdin is the relay's control channel; its end (this process gone) ends the relay.
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          start_new_session=True)
            ready = self._reply(timeout)
            if not ready.get("ready"):
                raise RuntimeError(f"the link's relay did not start: {ready}")
            _run(["ip", "-n", ns, "link", "set", self.tun, "up"])
            _run(["ip", "-n", ns, "route", "add", "default", "dev", self.tun, "table", str(TABLE)])
            _run(["ip", "-n", ns, "rule", "add", "iif", self._inner, "lookup", str(TABLE)])
        except BaseException:
            self.close()
            raise

    def _reply(self, timeout: float) -> dict:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the link's relay did not answer within {timeout} s (exit code {proc.poll()})")
        return json.loads(line)

    def _ask(self, message: dict, timeout: float = 10.0) -> dict:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.poll() is not None:
            raise RuntimeError("the link's relay is not running")
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        return self._reply(timeout)

    def set_paths(self, faults: dict[tuple[str, str], PathFault]) -> None:
        """What to do to the packets from address A to address B, for every (A, B) given; every
        other packet that reaches the relay goes on at once. Applied when this returns."""
        paths = [[a, b, f.delay, f.jitter, f.loss, f.distribution] for (a, b), f in faults.items()]
        self._ask({"op": "paths", "paths": paths})

    def stats(self, reset: bool = False) -> dict:
        """The relay's counters: packets in, released, dropped, passed (no fault), the most held
        at once, and how late packets were released (``late_ms``: max, mean, and counts per
        bucket of ``LATE_BUCKETS``). ``reset``: start the counters again after reading."""
        return self._ask({"op": "stats", "reset": reset})

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()  # the relay ends at the end of its input
                except OSError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        _run(["ip", "netns", "del", self.namespace], check=False)
        _run(["ip", "link", "del", self.veth], check=False)


# -- the relay (its own process, in the router namespace) ----------------------------------------


def _sysctl(name: str, value: str) -> None:
    with open(f"/proc/sys/{name}", "w") as f:
        f.write(value)


def _raise_priority() -> None:
    """Run the relay in the real-time class (SCHED_RR, the lowest priority, 1): a packet is due
    at a moment, and the relay must run then, not when the scheduler next gets round to it. At
    nice -10 (even with its session's autogroup at -10 too) and beside four busy processes, it
    released held packets up to 47 ms late, and up to 127 ms late next to a three-node
    Cassandra; in the real-time class, within about 1 ms. It needs little CPU (it sleeps in
    epoll between packets), and the kernel's real-time throttling (95 % of each second by
    default) bounds it even if it did not. Where that is not allowed: nice RELAY_NICE."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        return
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, RELAY_NICE)
        with open("/proc/self/autogroup", "w") as f:  # a session competes as a whole at its group's nice
            f.write(str(RELAY_NICE))
    except OSError:
        pass  # not allowed, or no autogroups: the inherited priority, or the process's own, applies


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class _Stats:
    def __init__(self) -> None:
        self.received = self.released = self.dropped = self.passed = self.held_max = 0
        self.late_max = self.late_sum = 0.0
        self.late_counts = [0] * (len(LATE_BUCKETS) + 1)

    def late(self, seconds: float) -> None:
        ms = seconds * 1000.0
        self.late_max = max(self.late_max, ms)
        self.late_sum += ms
        for i, bound in enumerate(LATE_BUCKETS):
            if ms <= bound:
                self.late_counts[i] += 1
                return
        self.late_counts[-1] += 1

    def report(self) -> dict:
        return {"received": self.received, "released": self.released, "dropped": self.dropped,
                "passed": self.passed, "held_max": self.held_max,
                "late_ms": {"max": round(self.late_max, 3),
                            "mean": round(self.late_sum / self.released, 3) if self.released else 0.0,
                            "buckets": [*LATE_BUCKETS, None], "counts": self.late_counts}}


class _Relay:
    """The relay's state: the faulty paths, the packets held back, the figures."""

    def __init__(self, fd: int, seed: int | None, out: IO[str]) -> None:
        self.fd, self.rng, self.out = fd, random.Random(seed), out
        self.paths: dict[tuple[bytes, bytes], tuple[float, float, float, bool]] = {}
        self.held: list[tuple[float, int, bytes]] = []  # a heap of (due, seq, packet)
        self.stats = _Stats()
        self.seq = 0

    def release_due(self) -> float:
        """Write back every held packet that is due; the seconds until the next one (-1: none)."""
        held, now = self.held, time.monotonic()
        while held and held[0][0] <= now:
            due, _, packet = heapq.heappop(held)
            try:
                os.write(self.fd, packet)
            except OSError:
                self.stats.dropped += 1
                continue
            self.stats.released += 1
            self.stats.late(now - due)
            now = time.monotonic()
        return max(held[0][0] - now, 0.0) if held else -1.0

    def command(self, line: bytes) -> None:
        message = json.loads(line)
        if message["op"] == "paths":
            self.paths = {(socket.inet_aton(a), socket.inet_aton(b)): (d, j, loss, dist == "normal")
                          for a, b, d, j, loss, dist in message["paths"]}
            answer: dict = {"ok": True, "paths": len(self.paths)}
        elif message["op"] == "stats":
            answer = self.stats.report()
            if message.get("reset"):
                self.stats = _Stats()
        else:
            answer = {"error": f"unknown op {message['op']!r}"}
        self.out.write(json.dumps(answer) + "\n")
        self.out.flush()

    def take(self) -> None:
        """Read up to 256 packets (then what is due is released before reading on): pass those
        of a path without a fault straight back, drop or hold the others."""
        fd, stats, rng, read, write = self.fd, self.stats, self.rng, os.read, os.write
        for _ in range(256):
            try:
                packet = read(fd, 65536)
            except BlockingIOError:
                return
            stats.received += 1
            fault = self.paths.get((packet[12:16], packet[16:20])) if packet[:1] and packet[0] >> 4 == 4 else None
            if fault is None:
                try:
                    write(fd, packet)
                    stats.passed += 1
                except OSError:
                    stats.dropped += 1
                continue
            delay, jitter, loss, normal = fault
            if loss and rng.random() < loss:
                stats.dropped += 1
                continue
            if jitter:
                delay = rng.gauss(delay, jitter) if normal else rng.uniform(delay - jitter, delay + jitter)
            self.seq += 1
            heapq.heappush(self.held, (time.monotonic() + max(delay, 0.0), self.seq, packet))
            stats.held_max = max(stats.held_max, len(self.held))


def relay(tun: str, seed: int | None, control: IO[str], out: IO[str]) -> None:
    """Read packets from the TUN ``tun``, hold or drop those of a faulty path, write them back.
    Commands come as JSON lines on ``control`` (paths, stats); its end ends the relay."""
    for name, value in (("net/ipv4/ip_forward", "1"), ("net/ipv4/conf/all/rp_filter", "0"),
                        ("net/ipv4/conf/default/rp_filter", "0"), ("net/ipv4/conf/all/send_redirects", "0"),
                        ("net/ipv4/conf/default/send_redirects", "0")):
        _sysctl(name, value)
    fd = _open_tun(tun)
    # A packet comes back from the TUN with a source the router reaches over the bridge: a
    # reverse-path filter would drop it.
    _sysctl(f"net/ipv4/conf/{tun}/rp_filter", "0")
    _raise_priority()
    state = _Relay(fd, seed, out)
    ctl = control.fileno()
    os.set_blocking(ctl, False)
    pending = b""
    poller = select.epoll()
    poller.register(fd, select.EPOLLIN)
    poller.register(ctl, select.EPOLLIN)
    out.write(json.dumps({"ready": True, "tun": tun, "pid": os.getpid()}) + "\n")
    out.flush()
    while True:
        for source, _ in poller.poll(state.release_due()):
            if source != ctl:
                state.take()
                continue
            try:
                chunk = os.read(ctl, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                state.command(line)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.tunlink",
                                     description="The test hosts' user-space link: its relay (probes: linkprobe).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("relay", help="relay the packets of a TUN device (run by Link, in the router namespace)")
    p.add_argument("--tun", required=True)
    p.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    relay(args.tun, args.seed, sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
