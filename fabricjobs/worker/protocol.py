"""The pipe between a node and its workers: what goes each way, and the values on it.

    node -> worker   RunSpec | list[RunSpec] (a train: run in order) | None (exit)
                     (ANSWER, ok, value, seq)      the answer to a listener's REQUEST ``seq``
    worker -> node   (SPAWNED, task, pid)          a PROCESS job's process group leader
                     (DONE, task, Outcome)
                     (BOUNCED, [task, ...], slow)  runs of a train it will not run (slow, ahead
                                                   of them, is taking long)
                     (REQUEST, task, op, args, seq) a listener's store need (node_link.py)

Both sides import this module only for these: the worker side is worker/process.py, the node
side worker/pool.py, node/collector.py and node/executor.py. Everything here is picklable.
Messages go as ``Connection.send_bytes(encode(message))``, in multiprocessing's framing; the
node reads a worker's with a MessageReader, all that arrived at once with one read.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Iterator

from ..model import Job, JobKey
from ..jobs.context import FailMode
from ..jobs.registry import JobCatalog

SPAWNED = "spawned"
DONE = "done"
BOUNCED = "bounced"
REQUEST = "store"
ANSWER = "store-answer"


class OutcomeKind(StrEnum):
    """How a run ended, as its worker (or, for RELEASED, its node) reports it."""

    OK = "ok"
    ERROR = "error"
    KILLED = "killed"
    LEASE_LOST = "lease_lost"
    INTERRUPTED = "interrupted"
    RELEASED = "released"  # given back by the node: no try counted (decisions.after_run)


OK, ERROR, KILLED, LEASE_LOST, INTERRUPTED = (OutcomeKind.OK, OutcomeKind.ERROR, OutcomeKind.KILLED,
                                              OutcomeKind.LEASE_LOST, OutcomeKind.INTERRUPTED)


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs to run one job (picklable)."""

    task: int
    key: JobKey
    epoch: int
    node: str
    arguments: str
    slot: int
    output_max: int
    catalog: JobCatalog
    generation: int  # the lease generation it was claimed under (see board.py)
    log_max: int = 65536  # bytes of log lines kept for the run's history
    job: "Job | None" = None  # the row as claimed (INTERFACE_LISTENER needs it)
    board: tuple[str, int] | None = None  # (path, slots) of the node's board, set by the worker
    not_before: float | None = None  # wall-clock seconds: a fire prepared ahead starts then
    due: float | None = None  # wall-clock seconds: the due time this run stands for (JobContext.due)
    task_index: int | None = None  # a task of a parallel job (PARALLELISM=n): its index, 0..n-1
    task_count: int = 0  # and n (0: not a task)
    printed_max: int = 4 * 1024 * 1024  # bytes of what it prints passed on live ([jobs] MAX_OUTPUT_BYTES)

    def __reduce__(self):  # by value: the node's loop pickles one per run it sends (3.5 us a run, not 4.6)
        return RunSpec, tuple(getattr(self, name) for name in _RUNSPEC_FIELDS)


NOT_BEGUN = "ended before it started"  # a run stopped while it waited (a train, a prepared fire)


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    output: str | None = None  # JSON text of the result (ok)
    error: str = ""
    mode: FailMode = FailMode.RETRY_UNTIL_MAX
    exit_code: int | None = None
    log: str = ""  # the run's log lines (bounded: head and tail)
    elapsed: float = 0.0  # seconds the job ran, measured by its worker (how short it is)

    def with_log(self, log: str) -> "Outcome":
        return Outcome(self.kind, self.output, self.error, self.mode, self.exit_code, log, self.elapsed)

    def __reduce__(self):
        # One per run, unpickled by the node's collector thread, which shares the GIL with its
        # loop: by value, with the enums as their strings (pickle rebuilds an enum by calling
        # its class), a (DONE, task, Outcome) message loads in about 3.5 us instead of 11.
        return _outcome, (self.kind.value, self.output, self.error, self.mode.value, self.exit_code, self.log,
                          self.elapsed)


_KINDS = {kind.value: kind for kind in OutcomeKind}
_MODES = {mode.value: mode for mode in FailMode}
_RUNSPEC_FIELDS = tuple(f.name for f in fields(RunSpec))


def _outcome(kind: str, output: str | None, error: str, mode: str, exit_code: int | None, log: str,
             elapsed: float) -> Outcome:
    """An Outcome from its pickled form (Outcome.__reduce__)."""
    return Outcome(_KINDS[kind], output, error, _MODES[mode], exit_code, log, elapsed)


def encode(message) -> bytes:
    """A message as ``Connection.send_bytes`` takes it and ``Connection.recv`` (or
    MessageReader) reads it back: ``Connection.send`` pickles with a ForkingPickler, whose
    construction copies the copyreg table each time (10 us a DONE message, 5 with this); none
    of these values needs its reducers (no sockets, no connections)."""
    return pickle.dumps(message, pickle.HIGHEST_PROTOCOL)


class MessageReader:
    """The node's side of one worker's pipe: every message that has arrived, with one read.

    ``Connection.poll`` and ``recv`` cost a selector built and torn down and two reads per
    message, on the collector thread, which shares the GIL with the node's loop; a train of 32
    short runs sends 32 DONE messages, mostly in one burst. This reads what is there once and
    cuts it into messages by multiprocessing's framing (a 4-byte big-endian length, -1 and an
    8-byte one beyond 2 GiB), so the worker's side stays a plain ``Connection.send``."""

    _READ = 1 << 16

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._rest = b""  # the start of a message not all here yet
        self.closed = False  # its end was read (set by the reader's owner)

    def read(self) -> Iterator:
        """The messages complete after one read (call it when the pipe is readable), in order;
        EOFError once the worker's end is closed. A message that does not unpickle raises
        where it stands, after those before it (the pipe is out of step from there on: its
        worker is replaced)."""
        data = os.read(self.fd, self._READ)
        if not data:
            raise EOFError("worker pipe closed")
        if self._rest:
            data = self._rest + data
        frames, pos, end = [], 0, len(data)
        while end - pos >= 4:
            (size,) = _INT.unpack_from(data, pos)
            head = 4
            if size == -1:
                if end - pos < 12:
                    break
                (size,) = _HUGE.unpack_from(data, pos + 4)
                head = 12
            if end - pos - head < size:
                break
            frames.append(data[pos + head:pos + head + size])
            pos += head + size
        self._rest = data[pos:] if pos < end else b""
        return map(pickle.loads, frames)


_INT = struct.Struct("!i")
_HUGE = struct.Struct("!Q")
