"""What an INTERFACE_LISTENER run asks of the store, asked of its node instead.

A worker holds no store connection and no store settings: a USER_JOB runs in the same kind
of process, and the Cassandra password is not its business. The listener's four needs go to
the node over the worker's pipe, and the node answers them for that listener only
(node/collector.py, ``Collector._on_link_request``; node/listener_requests.py): its own file marks, and the jobs under
its own NAME and UID prefix, which the node starts through the command service like any
STARTJOB.

The pipe carries one request at a time: the node sends nothing else to a worker while its
run goes on (trains are for short runs; a listener never rides one).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..errors import StoreError
from ..model import Job, JobKey
from .protocol import ANSWER, REQUEST

TIMEOUT_SEC = 30.0


class Refused(Exception):
    """The node refused a listener's request for good (a STARTJOB of a file's job that its
    checks refuse: ARGS too long, a job name that no longer resolves): asking again would not
    help, unlike a StoreError."""


class NodeLink:
    """The listener's store, as far as it may use one."""

    def __init__(self, task: int, send: Callable[[Any], None], conn) -> None:
        self._task = task
        self._send = send
        self._conn = conn
        self._seq = 0

    def _ask(self, op: str, *args):
        """The node's answer to this request. Each carries a number: an answer that comes after
        its request was given up on (TIMEOUT_SEC) is told from the next one's, and dropped."""
        self._seq += 1
        self._send((REQUEST, self._task, op, args, self._seq))
        deadline = time.monotonic() + TIMEOUT_SEC
        while True:
            while not self._conn.poll(0.1):
                if time.monotonic() > deadline:
                    raise StoreError(f"the node did not answer {op} within {TIMEOUT_SEC:g} s")
            msg = self._conn.recv()
            if not (isinstance(msg, tuple) and msg[:1] == (ANSWER,)):
                raise StoreError(f"unexpected message from the node: {type(msg).__name__}")
            _, ok, value, seq = msg
            if seq == self._seq:
                break
        if not ok:
            text, transient = value if isinstance(value, tuple) else (value, True)
            raise (StoreError if transient else Refused)(text)
        return value

    def marked_files(self, listener: JobKey) -> set[str]:
        return self._ask("marked_files")

    def mark_file(self, listener: JobKey, file: str, note: str) -> bool:
        return self._ask("mark_file", file, note)

    def get(self, key: JobKey) -> Job | None:
        return self._ask("get", key)

    def start(self, key: JobKey, arguments: str) -> bool:
        """STARTJOB USER_JOB of ``key`` with these ARGS, as the node's command service runs it
        (affinity and priority are the listener's); False if a live job has the key."""
        return self._ask("start", key, arguments)
