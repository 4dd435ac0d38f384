"""Passing running runs' log lines to the store as they come (JOBLOG ... FOLLOW).

A worker appends each line of its run to the run's spool file (worker/spool.py). Every
LIVE_LOG_FLUSH_MS this part reads the new complete lines of each running run's file and
writes them to the store (``append_live_log``) with their numbers, at most LIVE_LOG_MAX_BYTES
per run and flush: lines beyond are skipped, and one line says how many. A file of a task
this node no longer runs (its worker was killed before it could remove it) is removed.

Its collaborators are given: the store, the spool directory, what runs (task -> job key and
epoch, from the run table), a clock. It runs on its own thread, so a slow store write never
holds up the node's loop; a failed write is tried again at the next flush (same numbers: the
store replaces a line written twice). A store that keeps failing (a full disk) is logged once,
in one line, and again when it works: not a traceback every flush.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass
from typing import Callable

from ..clock import Clock
from ..errors import StoreError
from ..model import JobKey
from ..store.base import JobStore

log = logging.getLogger(__name__)

_SCAN = 1 << 20  # bytes read at a time while counting skipped lines


@dataclass
class _Tail:
    key: JobKey
    epoch: int
    offset: int = 0  # bytes of the file passed on (or skipped)
    seq: int = 0  # the number of the next line


class LiveLogFlusher:
    def __init__(self, store: JobStore, spool_dir: str, running: Callable[[], dict[int, tuple[JobKey, int]]],
                 clock: Clock, *, interval: float, max_bytes: int) -> None:
        self.store = store
        self.spool_dir = spool_dir
        self.running = running
        self.clock = clock
        self.interval = interval
        self.max_bytes = max_bytes
        self._tails: dict[int, _Tail] = {}
        self._failing = False  # the last flush failed: its store is in an outage
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Make the spool directory (the node's own: workers write there) and, unless
        switched off, start flushing."""
        if self.interval <= 0:
            return
        os.makedirs(self.spool_dir, mode=0o700, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="live-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        shutil.rmtree(self.spool_dir, ignore_errors=True)

    def _loop(self) -> None:
        next_at = self.clock.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_at - self.clock.monotonic())):
            next_at = self.clock.monotonic() + self.interval
            self.flush_and_report()

    def flush_and_report(self) -> None:
        """One flush (the thread's, every interval). A store that fails (a full disk, a locked
        or unreachable store) is said once per spell, and its recovery once; the node goes on
        either way: a live log is a convenience."""
        try:
            written = self.flush_once()
        except StoreError as exc:
            if not self._failing:
                log.warning("passing live log lines on failed: %s (trying again every flush)", exc)
            self._failing = True
            return
        except Exception:  # noqa: BLE001 - not the store's kind of failure: with its traceback
            log.warning("passing live log lines on failed (trying again)", exc_info=True)
            self._failing = True
            return
        if self._failing and written:  # (a pass with nothing to write says nothing of the store)
            log.warning("passing live log lines on works again")
            self._failing = False

    def flush_once(self) -> int:
        """One pass over the spool files; returns how many lines were written."""
        try:
            names = os.listdir(self.spool_dir)
        except OSError:
            return 0
        running = self.running()  # after the listing: a file listed belongs to a run in here, or to an ended one
        for task in [t for t in self._tails if t not in running]:
            del self._tails[task]
        written = 0
        for name in names:
            path = os.path.join(self.spool_dir, name)
            stem = name.removesuffix(".log")
            if not stem.isdigit() or int(stem) not in running:
                _remove(path)
                continue
            task = int(stem)
            key, epoch = running[task]
            tail = self._tails.get(task)
            if tail is None or (tail.key, tail.epoch) != (key, epoch):
                tail = self._tails[task] = _Tail(key, epoch)
            written += self._pass_on(path, tail)
        return written

    def _pass_on(self, path: str, tail: _Tail) -> int:
        try:
            with open(path, "rb") as f:
                lines, offset = _read_lines(f, tail.offset, self.max_bytes)
        except OSError:  # the run has just ended: its worker removed the file
            return 0
        if not lines:
            return 0
        self.store.append_live_log(tail.key, tail.epoch, tail.seq, lines)
        tail.offset = offset
        tail.seq += len(lines)
        return len(lines)


def _read_lines(f, offset: int, budget: int) -> tuple[list[str], int]:
    """The complete lines from ``offset`` on, up to ``budget`` bytes of them, then a line
    counting the complete lines skipped beyond; and the offset after what was read."""
    f.seek(offset)
    data = f.read(budget)
    cut = data.rfind(b"\n") + 1
    lines = [line.decode("utf-8", "replace") for line in data[:cut].split(b"\n")[:-1]]
    offset += cut
    if len(data) < budget:
        return lines, offset
    skipped, pos = 0, offset
    while True:  # every line is shorter than a scan (worker/spool.py): each pass moves on
        f.seek(pos)
        chunk = f.read(_SCAN)
        end = chunk.rfind(b"\n") + 1
        if not end:
            break
        skipped += chunk.count(b"\n")
        pos = offset = pos + end
    if skipped:
        lines.append(f"[{skipped} lines skipped]")
    return lines, offset


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
