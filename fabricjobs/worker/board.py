"""A node's shared-memory board: its lease and the abort flags of its worker slots.

The node writes, its worker processes read, with no message passing, so that

* a run can ask ``is_aborted()`` as often as it likes for the price of a memory read;
* a worker keeps seeing the lease even while the node process is paused or dead: when the
  node stops renewing it, every run of that node ends itself before any other node may
  declare the node dead (docs/explanation/guarantees.md, guarantee 1).

The lease has a *generation*. It goes up whenever the lease is renewed after it had run
out: the node may have been judged dead meanwhile and its jobs taken over, so a run started
under an older generation must end, even though the lease is valid again.

Layout (one small file mapped by every process of the node):

    0   uint64  sequence (odd while the writer is mid-update)
    8   float64 lease_until, on CLOCK_MONOTONIC (shared by all processes of one host)
    16  uint64  generation
    24  uint64  per worker slot, TRAIN_RUNS of them: the tasks whose runs must end (0: none).
                A worker may hold a train of up to TRAIN_RUNS short runs (see node/trains.py), so
                a flag names a run, one entry per place in the train.
    then        per worker slot: uint64 task, float64 done, float64 total: the progress the
                run in that slot last reported (``current_job().progress``), which the node
                publishes with its running tasks (PS, JOBSTATUS, the web console). Written by
                the worker, read by the node; a torn read shows a number from one report and
                one from the next, which a progress bar can live with.
"""

from __future__ import annotations

import glob
import mmap
import os
import shutil
import struct
import tempfile
import time

_HEADER = 24
_SEQ = struct.Struct("=Q")
_LEASE = struct.Struct("=d")
_GEN = struct.Struct("=Q")
_TASK = struct.Struct("=Q")
TRAIN_RUNS = 32  # runs per worker message at most (node/trains.py), one abort entry each
_FLAGS = struct.Struct(f"={TRAIN_RUNS}Q")
_PROGRESS = struct.Struct("=Qdd")
_PREFIX = "fabricjobs-board-"
_READ_TRIES = 10_000  # a torn read is retried this often (an update takes microseconds)


class Board:
    def __init__(self, path: str, slots: int, *, create: bool = False) -> None:
        self.path = path
        self.slots = slots
        self._progress_at = _HEADER + _FLAGS.size * max(slots, 1)
        size = self._progress_at + _PROGRESS.size * max(slots, 1)
        if create:
            with open(path, "wb") as f:
                f.write(b"\0" * size)
        self._fd = os.open(path, os.O_RDWR)
        self._mm = mmap.mmap(self._fd, size)

    @classmethod
    def create(cls, slots: int) -> "Board":
        _remove_stale_boards()
        fd, path = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}-")
        os.close(fd)
        return cls(path, slots, create=True)

    # -- lease (single writer: the node's heartbeat) -------------------------------------------

    def set_lease(self, until_monotonic: float, now_monotonic: float) -> bool:
        """Renew the lease. Returns True if it had run out (the generation went up)."""
        lapsed = now_monotonic >= self.lease_until() and self.lease_until() > 0
        seq = _SEQ.unpack_from(self._mm, 0)[0]
        _SEQ.pack_into(self._mm, 0, seq + 1)
        _LEASE.pack_into(self._mm, 8, until_monotonic)
        if lapsed:
            _GEN.pack_into(self._mm, 16, _GEN.unpack_from(self._mm, 16)[0] + 1)
        _SEQ.pack_into(self._mm, 0, seq + 2)
        return lapsed

    def _read(self) -> tuple[float, int]:
        for _ in range(_READ_TRIES):
            s1 = _SEQ.unpack_from(self._mm, 0)[0]
            lease = _LEASE.unpack_from(self._mm, 8)[0]
            gen = _GEN.unpack_from(self._mm, 16)[0]
            s2 = _SEQ.unpack_from(self._mm, 0)[0]
            if s1 == s2 and not s1 & 1:
                return lease, gen
            time.sleep(0)
        # The writer died or froze mid-update (odd sequence): its lease cannot be trusted.
        return 0.0, gen

    def lease_until(self) -> float:
        return self._read()[0]

    def generation(self) -> int:
        return self._read()[1]

    def lease_valid(self, now_monotonic: float | None = None, generation: int | None = None) -> bool:
        """The lease is valid now (and, if given, still of ``generation``)."""
        lease, gen = self._read()
        now = time.monotonic() if now_monotonic is None else now_monotonic
        return now < lease and (generation is None or gen == generation)

    # -- abort flags (node sets, the run in that slot reads) --------------------------------------

    def set_abort(self, slot: int, place: int, task: int) -> None:
        """Ask run ``task``, at ``place`` in the train of ``slot``, to end (it may be running
        or still queued)."""
        _TASK.pack_into(self._mm, _HEADER + _FLAGS.size * slot + _TASK.size * place, task)

    def clear_abort(self, slot: int) -> None:
        _FLAGS.pack_into(self._mm, _HEADER + _FLAGS.size * slot, *([0] * TRAIN_RUNS))

    def aborted(self, slot: int, task: int) -> bool:
        return task in _FLAGS.unpack_from(self._mm, _HEADER + _FLAGS.size * slot)

    # -- progress (the run in a slot writes, the node reads) ----------------------------------------

    def set_progress(self, slot: int, task: int, done: float, total: float) -> None:
        _PROGRESS.pack_into(self._mm, self._progress_at + _PROGRESS.size * slot, task, done, total)

    def progress(self, slot: int, task: int) -> tuple[float, float] | None:
        """(done, total) that run ``task`` last reported from ``slot``, or None."""
        reported, done, total = _PROGRESS.unpack_from(self._mm, self._progress_at + _PROGRESS.size * slot)
        return (done, total) if reported == task else None

    def close(self, unlink: bool = False) -> None:
        try:
            self._mm.close()
            os.close(self._fd)
        except (OSError, ValueError):
            pass
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _remove_stale_boards() -> None:
    """Board files of nodes that died without a clean shutdown (their pid is in the name)."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), _PREFIX + "*")):
        pid = os.path.basename(path)[len(_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            if os.path.isdir(path):  # its live log spool (spool.py)
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
        except PermissionError:
            pass
