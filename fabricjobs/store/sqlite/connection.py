"""Connections to the database file and the write lock: one connection per thread, busy waits
of our own (short sleeps: another process's write lasts well under a millisecond), and write
transactions that take the lock up front (``BEGIN IMMEDIATE``), so two writers never deadlock
on a lock upgrade.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from ...errors import StoreError, StoreUnavailable
from ...model import claim_lane
from ...private import private_file, tighten_if_present

T = TypeVar("T")


class Connections:
    """One database file, opened by any number of threads (and processes) at once."""

    def _open(self, path: str | os.PathLike, synchronous: str, busy_timeout_ms: int) -> None:
        """Check the settings and the file's directory; the file itself is opened per thread."""
        self.path = str(path)
        self.identity = os.path.realpath(self.path)
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"bad synchronous mode {synchronous!r}")
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        # Threads of one process queue here for the write lock instead of in SQLite's busy
        # handler, which sleeps 1, 2, 5, 10 ... ms between tries: a claim must not wait 10 ms
        # for a completion write of the same node that took 50 us.
        self._writer = threading.Lock()
        self._closed = False
        parent = Path(self.path).parent
        if not parent.exists():
            raise StoreError(f"cannot open SQLite store {self.path!r}: directory {str(parent)!r} does not exist")
        try:  # its WAL and shared-memory files take the database file's mode (when new)
            private_file(self.path, make_parent=False)
            for suffix in ("-wal", "-shm"):
                tighten_if_present(f"{self.path}{suffix}")
        except OSError as exc:
            raise StoreError(f"cannot open SQLite store {self.path!r}: {exc.strerror or exc}") from None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError("store is closed")
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=0,  # busy waits are ours: see _busy_retry
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA busy_timeout = 0")
                conn.create_function("fj_lane", 4, claim_lane, deterministic=True)  # waiting(lane=...)
                self._ensure_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"cannot open SQLite store {self.path!r}: {exc}") from None
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _ensure_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new database to WAL. The switch needs the file to itself, which several
        node processes starting together on a fresh file do not give it at once: retry."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000.0
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
                continue
            if mode.lower() != "wal":
                raise StoreError(f"cannot put {self.path!r} in WAL mode (got {mode})")
            return

    def _busy_retry(self, attempt: Callable[[], T], what: str) -> T:
        """Run ``attempt`` until SQLite stops answering "busy"/"locked", up to the busy timeout.
        Tries again after 0.1 ms, doubling to 2 ms: another process's write transaction lasts
        well under a millisecond, and SQLite's own handler would sleep up to 100 ms at a time."""
        deadline = None
        pause = 0.0001
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" not in text and "busy" not in text:
                    raise self._failed(exc) from None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.busy_timeout_ms / 1000.0
                elif now > deadline:
                    raise StoreUnavailable(f"SQLite store {self.path!r} stayed locked ({what}): {exc}") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.002)

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Take the write lock: this process's writer mutex, then BEGIN IMMEDIATE."""
        if not self._writer.acquire(timeout=self.busy_timeout_ms / 1000.0):
            raise StoreUnavailable(f"SQLite store {self.path!r}: timed out waiting for this process's other writer")
        try:
            self._busy_retry(lambda: conn.execute("BEGIN IMMEDIATE"), "BEGIN IMMEDIATE")
        except BaseException:
            self._writer.release()
            raise

    def _end(self, conn: sqlite3.Connection, commit: bool) -> None:
        try:
            if commit:
                self._busy_retry(lambda: conn.execute("COMMIT"), "COMMIT")
            else:
                conn.execute("ROLLBACK")
        finally:
            if conn.in_transaction:  # a COMMIT that failed for good: do not leave it open
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            self._writer.release()

    @contextmanager
    def _write(self, atomic: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error). Inside
        :meth:`transaction` it is a savepoint of that transaction instead, or nothing for an
        ``atomic`` write (one statement: SQLite undoes a failed statement by itself)."""
        conn = self._conn()
        if getattr(self._local, "in_transaction", False):
            if atomic:
                yield conn
                return
            conn.execute("SAVEPOINT w")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                raise
            conn.execute("RELEASE w")
            return
        self._begin(conn)
        try:
            yield conn
        except sqlite3.OperationalError as exc:  # (a file it may not write, a full disk, ...)
            self._end(conn, commit=False)
            raise self._failed(exc) from None
        except BaseException:
            self._end(conn, commit=False)
            raise
        self._end(conn, commit=True)

    def _failed(self, exc: sqlite3.OperationalError) -> StoreError:
        """A write that SQLite refused, as a StoreError that says what to do about it; one that
        may succeed when tried again (a lock, an I/O error) as StoreUnavailable."""
        text = str(exc)
        if "locked" in text or "busy" in text or "disk I/O" in text:
            return StoreUnavailable(f"SQLite store {self.path!r}: {exc}")
        if "full" in text:  # (SQLITE_FULL: space freed, the same write succeeds; a node started again runs)
            return StoreUnavailable(f"SQLite store {self.path!r}: {exc}; free space on its file system")
        if "readonly" in text:
            return StoreError(f"SQLite store {self.path!r} cannot be written by this process (user id "
                              f"{os.geteuid()}): {exc}; the file and its directory must be writable by every "
                              "process that uses the store (nodes, shells, the web process)")
        return StoreError(f"SQLite error: {exc}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if getattr(self._local, "in_transaction", False):
            yield
            return
        conn = self._conn()
        self._begin(conn)
        self._local.in_transaction = True
        try:
            yield
        except sqlite3.OperationalError as exc:
            self._local.in_transaction = False
            self._end(conn, commit=False)
            raise self._failed(exc) from None
        except BaseException:
            self._local.in_transaction = False
            self._end(conn, commit=False)
            raise
        self._local.in_transaction = False
        self._end(conn, commit=True)

    def _read(self, sql: str, params: Sequence = ()) -> list:
        conn = self._conn()
        return self._busy_retry(lambda: conn.execute(sql, params).fetchall(), "read")

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            conns, self._all = self._all, []
        for c in conns:
            try:
                c.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()
