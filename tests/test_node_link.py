"""A listener's store requests over its worker's pipe (worker/node_link.py): an answer that
comes after its request was given up on is told apart from the next request's."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

from fabricjobs.model import JobKey
from fabricjobs.worker.node_link import NodeLink
from fabricjobs.worker.protocol import ANSWER, REQUEST


def test_a_late_answer_to_an_earlier_request_is_dropped_not_taken_for_the_next_ones():
    node_side, worker_side = Pipe()
    link = NodeLink(7, worker_side.send, worker_side)
    key = JobKey("USER_JOB", "Probe.handle_file", "inbox/a.csv")

    def node() -> None:
        kind, task, op, args, seq = node_side.recv()
        assert (kind, task, op, args) == (REQUEST, 7, "get", (key,))
        node_side.send((ANSWER, True, "the answer to a request given up on", seq - 1))
        node_side.send((ANSWER, True, "the answer to this one", seq))

    answering = threading.Thread(target=node)
    answering.start()
    try:
        assert link.get(key) == "the answer to this one"
    finally:
        answering.join(10)
    node_side.close()
    worker_side.close()
