"""systemd's readiness protocol (sd_notify), without a dependency: one datagram to the socket
``$NOTIFY_SOCKET`` names. A node started by ``fabricjobs-node@.service`` (``Type=notify``) says
READY=1 once its first heartbeat is written, so that units ordered after it start against a
node the cluster can see, and STOPPING=1 when it begins a clean shutdown
(docs/guides/deployment.md). Without the variable, as outside systemd, it does nothing.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(*states: str) -> bool:
    """Send ``states`` (``READY=1``, ``STATUS=...``, ``STOPPING=1``) to the service manager;
    whether a manager was there to tell. A failure to send is logged, never raised: the node
    runs the same with or without a manager listening."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not states:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(states).encode("utf-8"))
        return True
    except OSError as exc:
        log.warning("could not notify the service manager at %s (%s): %s", os.environ.get("NOTIFY_SOCKET"),
                    ", ".join(states), exc)
        return False
