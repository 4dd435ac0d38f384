"""A doorbell between processes on one host: "the store changed, look now".

A shell that writes a job, or a node that frees work for others, rings the nodes that share
its store on this host, so they run a reconcile pass at once instead of at their next poll.
It is only a hint: a lost ring costs one poll period, never correctness.

Linux abstract-namespace datagram sockets, named after the store and the node; no files to
clean up, nothing to configure. Elsewhere (or for stores that span hosts) it is a no-op and
nodes rely on polling.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import struct
import sys
import threading
import time
from typing import Callable, Iterable

log = logging.getLogger(__name__)

RING_INTERVAL = 0.02  # seconds: a node answers at most this many rings a second (50)
#: The sockets bound on this host (in this network namespace), abstract ones as "@name".
_BOUND = "/proc/net/unix"
LISTENERS_FRESH = 1.0  # seconds one read of _BOUND is reused for: a shell's script of rings reads it once


class Doorbell:
    def __init__(self, scope: str | None) -> None:
        self.enabled = bool(scope) and sys.platform.startswith("linux")
        self._prefix = "fabricjobs-" + hashlib.sha1((scope or "").encode()).hexdigest()[:16] + "-"
        self._send: socket.socket | None = None
        self._lock = threading.Lock()
        self._listening: tuple[float, list[bytes]] | None = None  # (when read, addresses)

    @classmethod
    def for_store(cls, store) -> "Doorbell":
        """Scoped to the store, so only nodes sharing it hear the bell (nodes on other hosts
        of a Cassandra cluster do not; they poll)."""
        return cls(store.identity)

    def _address(self, node: str) -> bytes:
        digest = hashlib.sha1(node.encode()).hexdigest()[:16]
        return b"\0" + (self._prefix + digest).encode()

    def ring(self, nodes: Iterable[str]) -> None:
        if not self.enabled:
            return
        self._ring_addresses(self._address(node) for node in nodes)

    def ring_listening(self) -> bool:
        """Ring every node of this store whose doorbell is bound on this host, found among the
        host's sockets: no read of the store's nodes table (on Cassandra that read was a third of
        the reads a STARTJOB cost). False where the host's sockets cannot be listed (the caller
        rings by node name instead)."""
        if not self.enabled:
            return True
        addresses = self._listeners()
        if addresses is None:
            return False
        self._ring_addresses(addresses)
        return True

    def _listeners(self) -> list[bytes] | None:
        now = time.monotonic()
        with self._lock:
            if self._listening is not None and now - self._listening[0] < LISTENERS_FRESH:
                return self._listening[1]
        try:
            with open(_BOUND, "rb") as f:
                table = f.read()
        except OSError:
            return None
        if table.count(b"\n") < 2:  # not even this host's own sockets are listed (a restricted /proc)
            return None
        ours = ("@" + self._prefix).encode()
        found = sorted({b"\0" + path[1:] for path in (line.rsplit(b" ", 1)[-1] for line in table.splitlines())
                        if path.startswith(ours)})
        with self._lock:
            self._listening = (now, found)
        return found

    def _ring_addresses(self, addresses: Iterable[bytes]) -> None:
        with self._lock:
            if self._send is None:
                self._send = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._send.setblocking(False)
            for address in addresses:
                try:
                    self._send.sendto(b"!", address)
                except OSError:  # nobody listening, or its queue is full: it will poll
                    pass

    def listen(self, node: str, on_ring: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``on_ring`` whenever someone rings ``node``. Returns a function that stops it.

        Only rings from this user (or root) count: the kernel attaches each sender's
        credentials (SO_PASSCRED), and an abstract socket has no file mode to keep other local
        users out. Rings are coalesced: ``on_ring`` runs at most once per RING_INTERVAL, and
        rings that came meanwhile count as one (a flood of datagrams once kept a node in back
        to back full passes)."""
        if not self.enabled:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(self._address(node))
        except OSError as exc:
            log.warning("doorbell for %s unavailable (%s); polling only", node, exc)
            sock.close()
            return None
        stopped = threading.Event()
        threading.Thread(target=_answer_rings, args=(sock, stopped, on_ring), name=f"doorbell-{node}",
                         daemon=True).start()

        def stop() -> None:
            stopped.set()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

        return stop

    def close(self) -> None:
        with self._lock:
            if self._send is not None:
                self._send.close()
                self._send = None


_CREDS_SIZE = socket.CMSG_SPACE(struct.calcsize("3i"))


def _trusted(ancdata, me: int) -> bool:
    """Whether a ring came from this user or root (the credentials the kernel attached)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
            _pid, uid, _gid = struct.unpack("3i", data[:12])
            return uid in (me, 0)
    return False


def _drained(sock: socket.socket) -> bool:
    """Read what rang meanwhile (answered by the one pass to come); False once the socket is closed."""
    while True:
        try:
            sock.recv(64, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False


def _answer_rings(sock: socket.socket, stopped: threading.Event, on_ring: Callable[[], None]) -> None:
    me = os.getuid()
    last = 0.0
    while not stopped.is_set():
        try:
            _data, ancdata, _flags, _addr = sock.recvmsg(64, _CREDS_SIZE)
        except OSError:
            return
        if not _trusted(ancdata, me):
            continue
        wait = last + RING_INTERVAL - time.monotonic()
        if wait > 0 and stopped.wait(wait):
            return
        if not _drained(sock):
            return
        last = time.monotonic()
        if not stopped.is_set():
            on_ring()
