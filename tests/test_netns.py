"""The test hosts of the partition tests (fabricjobs/testing/netns.py): each host reaches the
others until a fault says otherwise, faults are exactly as wide as asked, and nothing a
network created outlives it, even when its process is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from fabricjobs.testing import netns
from fabricjobs.testing.rig import wait_for

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
    wait_for(lambda: _reaches(a, b) and _reaches(b, c), 5, "b to be reached again")  # an ARP round


def test_a_cut_between_two_hosts_leaves_their_other_links(net):
    a, b, c = (net.host(n) for n in "abc")
    net.cut("a", "b")
    assert not _reaches(a, b) and not _reaches(b, a)
    assert _reaches(a, c) and _reaches(c, b) and _reaches(None, a)
    net.isolate_group(["c"])  # c alone on its side
    assert not _reaches(c, a) and not _reaches(b, c)
    net.heal()
    wait_for(lambda: _reaches(a, b) and _reaches(c, a) and _reaches(b, c), 5, "every host to be reached again")


def test_closing_a_network_removes_every_namespace_and_link():
    with netns.Network(["x", "y"]) as network:
        tag = network.tag
        assert len(_leftovers(tag)) >= 5  # bridge, 2 cables, 2 namespaces
        network.cut("x", "y")
    assert _leftovers(tag) == []


def test_a_network_whose_process_was_killed_is_removed_before_the_next_one_is_made():
    code = ("import sys, time; from fabricjobs.testing import netns\n"
            "n = netns.Network(['p', 'q']); print(n.tag, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tag = proc.stdout.readline().strip()
    assert tag and _leftovers(tag)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _leftovers(tag)  # nothing cleaned up after a SIGKILL ...
    netns.remove_stale()  # what every Network() does first
    assert _leftovers(tag) == []
