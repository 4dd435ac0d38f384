"""The index repair pass, on a thread of its own: this node's share of all rows read a page at
a time, no faster than ``rows_per_sec``, and every live row whose index entry is missing given
one again (the store's part: :meth:`JobStore.repair_index`; docs/explanation/cassandra-queue.md).

The rows are shared between the live nodes as claim lanes are (the live names, sorted: this
node's place among them), so a cluster reads each row about once per pass whatever its size.
A node that joins or leaves changes the shares for the next pass; a pass then covers a row
twice or not at all, and the pass after covers it. Between passes the node rests ``pause``
seconds. A store with nothing to repair (SQLite) ends each pass at once, and the thread is not
started at all when ``rows_per_sec`` is 0.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..clock import Clock
from ..errors import StoreError
from ..store.base import JobStore

log = logging.getLogger(__name__)

PAGE = 100  # rows per page (expired archived rows are tombstones a page steps over until gc_grace)


class IndexRepairer:
    def __init__(self, store: JobStore, clock: Clock, share: Callable[[], tuple[int, int]], *,
                 rows_per_sec: float, pause: float) -> None:
        self.store = store
        self.clock = clock
        self.share = share
        self.rows_per_sec = rows_per_sec
        self.pause = pause
        self.passes = 0
        self._resume: tuple[tuple[int, int], object] | None = None  # (share, cursor) a failed pass stopped at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.rows_per_sec <= 0 or not self.store.keeps_index:
            return  # off, or a store with no index of its own to repair
        self._thread = threading.Thread(target=self._loop, name="index-repair", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pass()
            except StoreError as exc:  # the store is away: the next pass starts again from the top
                log.info("index repair pass interrupted: %s", exc)
            except Exception:  # noqa: BLE001 - a bug here must not end the node; with its traceback
                log.exception("index repair pass failed")
            if self._stop.wait(self.pause):
                return

    def run_pass(self) -> int:
        """One pass over this node's share; how many entries it restored. A pass that the
        store stopped (a timeout, an outage) is taken up again where it stopped, not from the
        top: on a big share the start would never reach the end."""
        share = self.share()
        cursor: object | None = self._resume[1] if self._resume is not None and self._resume[0] == share else None
        restored = read = 0
        began = self.clock.monotonic()
        while not self._stop.is_set():
            try:
                page = self.store.repair_index(share, cursor, PAGE)
            except StoreError:
                self._resume = (share, cursor)
                raise
            self._resume = None
            restored += page.restored
            read += page.read
            if page.cursor is None:
                break
            cursor = page.cursor
            # Rate: the pass so far may not have gone faster than rows_per_sec.
            ahead = read / self.rows_per_sec - (self.clock.monotonic() - began)
            if ahead > 0 and self._stop.wait(ahead):
                break
        self.passes += 1
        if restored:
            log.warning("index repair pass: %d of %d rows read (share %d of %d) had lost their index entry; "
                        "they have one again", restored, read, share[1] + 1, share[0])
        return restored
