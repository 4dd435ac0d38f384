"""Writes that straggle (docs/explanation/nodes.md, "Writes that straggle"): changes of rows
the loop sent and stopped waiting for after PATIENCE, while the store goes on settling them.

On Cassandra an LWT sent to a coordinator that froze is not answered until its timeout; the
loop does not wait for it with the node's other due jobs. What the answer was for (a run to
start, a schedule to take on, an outcome to finish) is done when it comes, on the loop's
thread, by the callback the write was left with. A claim's write holds a slot of its pool
meanwhile, so that the run has room if the write applies. The claims and the outcome writer
each keep theirs.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from ..logs import job_extra
from ..model import Job, JobKey
from ..store.base import CasResult

log = logging.getLogger("fabricjobs.node.reconcile")


@dataclass(frozen=True)
class Straggler:
    row: Job  # the row as the write expected it
    write: "Future[CasResult]"
    answered: Callable[[CasResult | None], None]  # what to do with the answer (None: not written)
    slot: str | None  # the pool whose slot it holds until then


class Stragglers:
    def __init__(self, wake: Callable[[], None], failed: Callable[[Job], None],
                 reserve: Callable[[str, int], None] | None = None) -> None:
        self.wake = wake  # the loop: a write answered
        self.failed = failed  # a write that could not be made at all (called while its error is handled)
        self.reserve = reserve  # hold (1) or let go (-1) a slot of a pool (Executor.reserve)
        self._left: dict[JobKey, Straggler] = {}

    def leave(self, row: Job, write: "Future[CasResult]", answered: Callable[[CasResult | None], None],
              slot: str | None = None) -> None:
        """Leave the write of ``row`` to the store; ``answered`` is called with its answer.
        One write per row at a time: callers pass over the rows whose writes are left."""
        if row.key in self._left:
            raise ValueError(f"a write of '{row.key}' is left already")
        if slot is not None:
            self._hold(slot, 1)
        self._left[row.key] = Straggler(row, write, answered, slot)
        write.add_done_callback(lambda _: self.wake())

    def _hold(self, slot: str, count: int) -> None:
        if self.reserve is None:
            raise ValueError("these writes hold no slots")
        self.reserve(slot, count)

    def __contains__(self, key: JobKey) -> bool:
        return key in self._left

    def __len__(self) -> int:
        return len(self._left)

    def act(self) -> None:
        """Act on the writes that have answered since (on the loop's thread)."""
        for key, straggler in list(self._left.items()):
            if not straggler.write.done():
                continue
            del self._left[key]
            if straggler.slot is not None:
                self._hold(straggler.slot, -1)
            try:
                res: CasResult | None = straggler.write.result()
            except Exception:
                self.failed(straggler.row)
                res = None
            try:
                straggler.answered(res)
            except Exception:  # the others' answers are still acted on; the row is looked at again later
                log.exception("acting on the answer to the write of '%s' failed", key,
                              extra=job_extra(key, straggler.row.epoch))

    def settle(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the writes left, and act on those that answered (the node
        stops: a claim that applied must not be left without its run)."""
        deadline = time.monotonic() + timeout
        for straggler in list(self._left.values()):
            try:
                straggler.write.exception(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:
                break  # out of time: what is left is taken over as this node's orphans
        self.act()
