"""Probes of the test hosts' network (netns.py) and of the user-space link (tunlink.py): ICMP
round trips between two hosts, a UDP sink and flood, and ``measure``, which builds two fresh
hosts and prints the link's round trips, delay accuracy and capacity
(``python -m testkit.linkprobe measure``). Each probe runs as a process of its own
inside a host's namespace."""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from typing import Sequence

from .tunlink import _raise_priority, _run

def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _ping(address: str, count: int, interval: float, wait: float) -> list[float | None]:
    """ICMP echo to ``address``, ``count`` times, one every ``interval`` s; each round trip in
    ms, or None for an echo not answered within ``wait`` s of the last one sent."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    sent: dict[int, float] = {}
    rtts: dict[int, float] = {}
    start = time.monotonic()
    until: float | None = None
    seq = 0
    while True:
        now = time.monotonic()
        if seq < count and now >= start + seq * interval:
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + b"fabricjobs-tunlink-ping" + bytes(33)
            header = header[:2] + struct.pack("!H", _checksum(header)) + header[4:]
            try:
                sock.sendto(header, (address, 0))
            except OSError:  # no route (a cut: blackhole) or no neighbour: lost
                pass
            sent[seq] = now
            seq += 1
            if seq == count:
                until = now + wait
        if until is not None and (now > until or len(rtts) == count):
            break
        next_send = start + seq * interval if seq < count else (until or now)
        ready, _, _ = select.select([sock], [], [], max(min(next_send - now, 0.05), 0.0))
        if ready:
            data, _ = sock.recvfrom(2048)
            got = time.monotonic()
            head = (data[0] & 0x0F) * 4
            kind, _, _, who, number = struct.unpack("!BBHHH", data[head:head + 8])
            if kind == 0 and who == ident and number in sent and number not in rtts:
                rtts[number] = (got - sent[number]) * 1000.0
    sock.close()
    return [rtts.get(i) for i in range(count)]


def ping(prefix: Sequence[str], address: str, count: int = 20, interval: float = 0.05,
         wait: float = 2.0) -> list[float | None]:
    """Ping ``address`` from the namespace ``prefix`` runs in (``Host.command([])``; [] for this
    one), in a process of its own: each round trip in ms, None where no answer came."""
    argv = [*prefix, sys.executable, "-m", "testkit.linkprobe", "ping", address,
            "--count", str(count), "--interval", str(interval), "--wait", str(wait)]
    done = _run(argv)
    return json.loads(done.stdout)


def _sink(address: str, port: int, seconds: float) -> dict:
    """Count the UDP datagrams arriving at address:port until ``seconds`` of silence."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((address, port))
    print(json.dumps({"listening": True}), flush=True)
    sock.settimeout(30.0)
    count, first, last = 0, 0.0, 0.0
    while True:
        try:
            sock.recv(2048)
        except socket.timeout:
            break
        last = time.monotonic()
        if not count:
            first = last
            sock.settimeout(seconds)
        count += 1
    return {"count": count, "seconds": last - first}


def _flood(address: str, port: int, seconds: float, size: int) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = bytes(size)
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            try:
                sock.sendto(payload, (address, port))
                sent += 1
            except OSError:  # ENOBUFS: the queue is full, as on a real host
                pass
    return {"sent": sent, "seconds": seconds}


def _summary(rtts: list[float | None]) -> dict:
    got = sorted(r for r in rtts if r is not None)
    out: dict = {"sent": len(rtts), "lost": len(rtts) - len(got)}
    if got:
        out.update({"min": round(got[0], 2), "median": round(got[len(got) // 2], 2),
                    "p90": round(got[max(int(len(got) * 0.9) - 1, 0)], 2), "max": round(got[-1], 2),
                    "mean": round(sum(got) / len(got), 2)})
    return out


def measure(rounds: int = 40, delay_ms: float = 50.0, flood_seconds: float = 3.0) -> dict:
    """The figures docs/benchmarks.md shows, on two fresh test hosts: the round trip bridged and
    through the relay (no fault; ``delay_ms`` each way; 200 ms +- 100 ms and 5 % loss each way,
    five times as many pings), how late the relay itself released packets, and its capacity:
    64-byte UDP datagrams sent as fast as one sender can for ``flood_seconds``, counted at the
    receiver, with no delay and with ``delay_ms`` (every datagram held)."""
    from .netns import Network

    out: dict = {}
    with Network(["a", "b"]) as net:
        a, b = net.host("a"), net.host("b")
        out["bridged"] = _summary(net.ping("a", "b", rounds))
        net.delay(0)
        link = net.link
        assert link is not None
        out["relay_no_fault"] = _summary(net.ping("a", "b", rounds))
        net.delay(delay_ms)
        link.stats(reset=True)
        out[f"relay_{delay_ms:g}ms_each_way"] = _summary(net.ping("a", "b", rounds))
        out[f"relay_{delay_ms:g}ms_lateness_ms"] = link.stats(reset=True)["late_ms"]
        net.delay(200, 100)
        net.loss(0.05)
        out["relay_200ms_100ms_jitter_5pct_loss_each_way"] = _summary(net.ping("a", "b", 5 * rounds, 0.02, 3.0))
        out["relay_200ms_100ms_jitter_lateness_ms"] = link.stats(reset=True)["late_ms"]
        net.heal()
        for ms in (0.0, delay_ms):
            net.delay(ms)
            port = 7078
            sink = subprocess.Popen(b.command([sys.executable, "-m", "testkit.linkprobe", "sink", b.address,
                                               "--port", str(port)]), stdout=subprocess.PIPE, text=True)
            try:
                assert sink.stdout is not None and json.loads(sink.stdout.readline()).get("listening")
                link.stats(reset=True)
                flood = json.loads(_run(a.command([sys.executable, "-m", "testkit.linkprobe", "flood",
                                                   b.address, "--port", str(port), "--seconds",
                                                   str(flood_seconds)])).stdout)
                got = json.loads(sink.communicate(timeout=60)[0])
            finally:
                if sink.poll() is None:
                    sink.kill()
                    sink.wait()
            relayed = link.stats(reset=True)
            out[f"capacity_{ms:g}ms"] = {
                "sent_per_s": round(flood["sent"] / flood["seconds"]),
                "relayed_per_s": round(relayed["received"] / flood["seconds"]),
                "received_per_s": round(got["count"] / max(got["seconds"], 1e-9)),
                "held_max": relayed["held_max"], "late_ms_max": relayed["late_ms"]["max"],
                "late_ms_mean": relayed["late_ms"]["mean"]}
        out["load_average"] = [round(x, 1) for x in os.getloadavg()]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.linkprobe",
                                     description="Probes of the test hosts' network and of the user-space link.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ping", help="ICMP round trips as JSON (ms, null for a lost one)")
    p.add_argument("address")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--wait", type=float, default=2.0)
    p = sub.add_parser("sink", help="count UDP datagrams")
    p.add_argument("address")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--quiet-seconds", type=float, default=1.0)
    p = sub.add_parser("flood", help="send UDP datagrams as fast as possible")
    p.add_argument("address")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--size", type=int, default=64)
    p = sub.add_parser("measure", help="build two test hosts and print the link's round trips, "
                                       "delay accuracy and capacity")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--delay-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    if args.command == "ping":
        # In the real-time class, as the relay: a round trip measures the link, not how long a
        # loaded machine (the suite's niced tests) kept this process from reading its echo.
        _raise_priority()
        print(json.dumps(_ping(args.address, args.count, args.interval, args.wait)))
    elif args.command == "sink":
        print(json.dumps(_sink(args.address, args.port, args.quiet_seconds)))
    elif args.command == "flood":
        print(json.dumps(_flood(args.address, args.port, args.seconds, args.size)))
    else:
        print(json.dumps(measure(args.rounds, args.delay_ms)))


if __name__ == "__main__":
    main()
