"""The test hosts of the partition tests (testkit/netns.py): each host reaches the
others until a fault says otherwise, faults are exactly as wide as asked, delay and loss (the
user-space link, testkit/tunlink.py) are about what was asked, and nothing a
network created outlives it, even when its process is killed."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import textwrap

import pytest

from testkit import netns
from testkit.rig import process_alive, wait_for

pytestmark = pytest.mark.skipif(netns.unavailable() is not None, reason=f"test hosts: {netns.unavailable()}")

PORT = 7077
SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen(16)
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        c.sendall(b"hi")
        c.close()
""")
CLIENT = textwrap.dedent("""
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5) as c:
            sys.exit(0 if c.recv(2) == b"hi" else 2)
    except OSError:
        sys.exit(1)
""")


def _serve(host: netns.Host) -> subprocess.Popen:
    proc = subprocess.Popen(host.command([sys.executable, "-c", SERVER, host.address, str(PORT)]),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
    return proc


def _reaches(src: netns.Host | None, dst: netns.Host) -> bool:
    """Whether a TCP connection from ``src`` (None: this test process, through the bridge)
    to ``dst``'s server gets its answer."""
    argv = [sys.executable, "-c", CLIENT, dst.address, str(PORT)]
    return subprocess.run(src.command(argv) if src else argv, timeout=10).returncode == 0


def _leftovers(tag: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"{tag}-" in line]


@pytest.fixture
def net():
    with netns.Network(["a", "b", "c"]) as network:
        servers = [_serve(h) for h in network.hosts.values()]
        try:
            yield network
        finally:
            for proc in servers:
                proc.kill()
                proc.wait()


def test_hosts_reach_each_other_and_the_test_process_reaches_them(net):
    a, b, c = (net.host(n) for n in "abc")
    assert len({a.address, b.address, c.address}) == 3
    assert _reaches(a, b) and _reaches(b, c) and _reaches(c, a)
    assert _reaches(None, b)


def test_an_isolated_host_reaches_nobody_and_nobody_reaches_it_until_healed(net):
    a, b, c = (net.host(n) for n in "abc")
    net.isolate("b")
    assert not _reaches(a, b) and not _reaches(b, c) and not _reaches(None, b)
    assert _reaches(a, c)  # the others still talk
    net.heal()
    wait_for(lambda: _reaches(a, b) and _reaches(b, c), 15, "b to be reached again")  # an ARP round


def test_a_cut_between_two_hosts_leaves_their_other_links(net):
    a, b, c = (net.host(n) for n in "abc")
    net.cut("a", "b")
    assert not _reaches(a, b) and not _reaches(b, a)
    assert _reaches(a, c) and _reaches(c, b) and _reaches(None, a)
    net.isolate_group(["c"])  # c alone on its side
    assert not _reaches(c, a) and not _reaches(b, c)
    net.heal()
    wait_for(lambda: _reaches(a, b) and _reaches(c, a) and _reaches(b, c), 15, "every host to be reached again")


def test_closing_a_network_removes_every_namespace_and_link():
    with netns.Network(["x", "y"]) as network:
        tag = network.tag
        assert len(_leftovers(tag)) >= 5  # bridge, 2 cables, 2 namespaces
        network.cut("x", "y")
        network.delay(10, hosts=["x"])  # the link: a router namespace, its cable, a relay
        assert network.link is not None
        relay = network.link.stats()  # it answers
        assert len(_leftovers(tag)) >= 7 and relay["received"] >= 0
        pid = _relay_pid(tag)
    assert _leftovers(tag) == []
    assert not process_alive(pid)


def test_a_network_whose_process_was_killed_is_removed_before_the_next_one_is_made():
    code = ("import sys, time; from testkit import netns\n"
            "n = netns.Network(['p', 'q']); n.delay(10); print(n.tag, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tag = proc.stdout.readline().strip()
    assert tag and _leftovers(tag)
    relay = _relay_pid(tag)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _leftovers(tag)  # nothing cleaned up after a SIGKILL ...
    # ... but the relay ends itself: its control pipe closed with its owner.
    wait_for(lambda: not process_alive(relay), 10, "the relay of a killed network to end")
    netns.remove_stale()  # what every Network() does first
    assert _leftovers(tag) == []


def _relay_pid(tag: str) -> int:
    pids = subprocess.run(["ip", "netns", "pids", f"{tag}-r"], capture_output=True, text=True).stdout.split()
    assert len(pids) == 1, pids
    return int(pids[0])


# -- delay and loss: the user-space link ------------------------------------------------------------
# Round trips are measured by ICMP echo from one host's namespace to another's (linkprobe.ping,
# a process of its own). The lower bounds are exact (the relay never releases a packet early);
# the upper ones allow 25 ms. The probe runs in the real-time class, as the relay does, so the
# suite's niced tests beside these do not move either (they need no "timing" marker).

DELAY = 50.0  # ms, one way


def _rtts(net: netns.Network, src: str, dst: str, count: int = 20, interval: float = 0.02) -> list[float]:
    rtts = net.ping(src, dst, count, interval)
    assert None not in rtts, f"{src} -> {dst}: {rtts}"
    return [r for r in rtts if r is not None]


def _bridged(rtts: list[float]) -> bool:
    return statistics.median(rtts) < 10.0


def test_a_delay_on_every_path_adds_it_each_way_and_heal_removes_it(net):
    before = _rtts(net, "a", "b")
    assert _bridged(before)
    net.delay(DELAY)
    for src, dst in (("a", "b"), ("b", "c"), ("c", "a")):
        rtts = _rtts(net, src, dst)
        assert min(rtts) >= 2 * DELAY and statistics.median(rtts) < 2 * DELAY + 25, (src, dst, rtts)
    # The test process reaches the hosts over the bridge, never through the link.
    assert _bridged(json.loads(subprocess.run([sys.executable, "-m", "testkit.linkprobe", "ping",
                                               net.host("b").address, "--count", "10", "--interval", "0.02"],
                                              capture_output=True, text=True, check=True).stdout))
    assert _reaches(net.host("a"), net.host("b"))  # TCP too
    net.heal()
    assert _bridged(_rtts(net, "a", "b")) and _bridged(_rtts(net, "c", "a"))


def test_jitter_spreads_the_delay_within_its_bounds(net):
    net.delay(DELAY, 20)  # each way uniform in [30, 70] ms: a round trip in [60, 140]
    rtts = _rtts(net, "a", "b", count=40)
    assert min(rtts) >= 60 and max(rtts) < 140 + 25, rtts
    assert max(rtts) - min(rtts) > 20, rtts  # spread, not a fixed delay (P(fail) < 1e-20)


def test_a_delay_on_one_hosts_paths_one_way_or_both(net):
    net.delay(DELAY, hosts=["b"], direction="from")  # only what b sends
    for src, dst in (("a", "b"), ("c", "b")):
        rtts = _rtts(net, src, dst)
        assert min(rtts) >= DELAY and statistics.median(rtts) < DELAY + 25, (src, dst, rtts)
    assert _bridged(_rtts(net, "a", "c"))
    net.delay(DELAY, hosts=["b"])  # both ways now
    rtts = _rtts(net, "a", "b")
    assert min(rtts) >= 2 * DELAY and statistics.median(rtts) < 2 * DELAY + 25, rtts
    assert _bridged(_rtts(net, "c", "a"))
    net.heal()
    assert _bridged(_rtts(net, "a", "b"))


def test_loss_drops_about_the_fraction_asked_each_way_until_healed(net):
    net.loss(0.5)  # each way: a round trip survives with 0.5 * 0.5
    rtts = net.ping("a", "b", count=200, interval=0.005, wait=1.0)
    lost = rtts.count(None) / len(rtts)
    assert 0.6 <= lost <= 0.9, f"{lost:.0%} of round trips lost, 75% expected"  # +-5 standard deviations
    assert _bridged([r for r in rtts if r is not None])  # no delay asked: none added
    assert net.link is not None
    relay = net.link.stats()
    assert 0.4 <= relay["dropped"] / relay["received"] <= 0.6, relay
    net.heal()
    assert net.ping("a", "b", count=50, interval=0.005).count(None) == 0


def test_a_cut_wins_over_a_delay_and_heal_removes_both(net):
    net.delay(DELAY)
    net.cut("a", "b")
    assert net.ping("a", "b", count=5, interval=0.02, wait=0.5).count(None) == 5
    assert min(_rtts(net, "a", "c")) >= 2 * DELAY  # a's other paths: delayed, not cut
    net.heal()
    assert _bridged(_rtts(net, "a", "b"))
