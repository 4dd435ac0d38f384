"""The pipe between a node and its workers: what goes each way, and the values on it.

    node -> worker   RunSpec | list[RunSpec] (a train: run in order) | None (exit)
                     (ANSWER, ok, value)           the answer to a listener's REQUEST
    worker -> node   (SPAWNED, task, pid)          a PROCESS job's process group leader
                     (DONE, task, Outcome)
                     (BOUNCED, [task, ...], slow)  runs of a train it will not run (slow, ahead
                                                   of them, is taking long)
                     (REQUEST, task, op, args)     a listener's store need (node_link.py)

Both sides import this module only for these: the worker side is worker/process.py, the node
side worker/pool.py, node/collector.py and node/executor.py. Everything here is picklable.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

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
