"""The worker protocol's values survive the pipe unchanged (they are pickled by value: see
fabricjobs/worker/protocol.py), enums as the very members the node compares with; and the
node's MessageReader cuts what a worker's Connection sends into the same messages, however
the bytes arrive."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading

import pytest

from fabricjobs.jobs.context import FailMode
from fabricjobs.jobs.registry import JobCatalog
from fabricjobs.model import JobKey
from fabricjobs.worker.protocol import DONE, MessageReader, Outcome, OutcomeKind, RunSpec, encode


@pytest.mark.parametrize("kind", list(OutcomeKind))
@pytest.mark.parametrize("mode", list(FailMode))
def test_an_outcome_comes_back_equal_with_its_enum_members(kind, mode):
    sent = (DONE, 12345, Outcome(kind, output='{"n": 1}', error="boom", mode=mode, exit_code=3, log="a\nb",
                                 elapsed=0.25))
    got = pickle.loads(pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
    assert got == sent
    assert got[2].kind is kind and got[2].mode is mode


def test_a_train_of_run_specs_comes_back_equal():
    catalog = JobCatalog("/jobs", ("examples",), "/process")
    train = [RunSpec(i, JobKey("USER_JOB", "Bench.noop", f"t{i}"), 2, "n1", '{"a": 1}', 3, 65536, catalog, 7,
                     not_before=1.5 if i else None, due=2.5, task_index=i, task_count=4) for i in range(4)]
    got = pickle.loads(pickle.dumps(train, protocol=pickle.HIGHEST_PROTOCOL))
    assert got == train
    assert got[0].catalog is got[1].catalog  # one catalog per message, not one per run


@pytest.fixture
def pipe():
    node, worker = multiprocessing.Pipe(duplex=True)  # as WorkerPool makes them
    yield node, worker
    node.close()
    worker.close()


def _read_until(reader: MessageReader, count: int) -> list:
    got: list = []
    while len(got) < count:
        got += list(reader.read())  # blocks until some bytes are there, as after the collector's select
    return got


def test_messages_sent_in_a_burst_are_read_together_and_in_order(pipe):
    node, worker = pipe
    sent = [(DONE, i, Outcome(OutcomeKind.OK, output=str(i), elapsed=0.001)) for i in range(32)]
    for message in sent:
        worker.send_bytes(encode(message))  # the worker's side: one write per message
    reader = MessageReader(node.fileno())
    assert list(reader.read()) == sent  # all of them with one read
    worker.send(("spawned", 7, 4242))  # Connection.send (a ForkingPickler) frames the same way
    assert list(reader.read()) == [("spawned", 7, 4242)]


def test_a_message_larger_than_one_read_and_one_split_mid_header_come_back_whole(pipe):
    node, worker = pipe
    big = (DONE, 1, Outcome(OutcomeKind.ERROR, error="x" * 300_000, log="y" * 65_536))
    small = (DONE, 2, Outcome(OutcomeKind.OK))
    reader = MessageReader(node.fileno())
    sender = threading.Thread(target=worker.send_bytes, args=(encode(big),))  # more than the pipe holds
    sender.start()
    assert _read_until(reader, 1) == [big]  # several reads' worth: MessageReader reads 64 KiB at a time
    sender.join()
    framed = len(encode(small)).to_bytes(4, "big") + encode(small)
    os.write(worker.fileno(), framed[:2])  # a header cut in two, as a busy pipe may deliver it
    assert list(reader.read()) == []
    os.write(worker.fileno(), framed[2:])
    assert list(reader.read()) == [small]


def test_a_closed_worker_end_reads_as_the_end_of_the_pipe(pipe):
    node, worker = pipe
    worker.send_bytes(encode((DONE, 3, Outcome(OutcomeKind.OK))))
    worker.close()
    reader = MessageReader(node.fileno())
    assert list(reader.read()) == [(DONE, 3, Outcome(OutcomeKind.OK))]
    with pytest.raises(EOFError):
        reader.read()


def test_a_garbled_message_raises_after_the_messages_before_it(pipe):
    node, worker = pipe
    worker.send_bytes(encode((DONE, 4, Outcome(OutcomeKind.OK))))
    worker.send_bytes(b"not a pickle")  # a job that wrote to its worker's pipe
    messages = MessageReader(node.fileno()).read()
    assert next(messages) == (DONE, 4, Outcome(OutcomeKind.OK))  # the collector acts on it first
    with pytest.raises(pickle.UnpicklingError):
        next(messages)
