"""A run's log lines as they come, for its node to pass on (JOBLOG ... FOLLOW).

The worker appends each line of a run (the job's logger, a PROCESS job's stdout and stderr)
to a spool file of that run, ``<board>.live/<task>.log``: next to its node's board, so the
directory is the node's own (one per node process, whatever else runs on the host). The file
is made at the run's first line (a run that logs nothing costs nothing) and removed when the
run ends; the node reads the complete lines from it now and then (node/livelog.py). No
message on the worker's pipe: the files are the whole protocol.
"""

from __future__ import annotations

import io
import os
import threading

LINE_MAX = 2000  # characters of one line passed on live (the run record keeps it whole)


def spool_dir(board_path: str) -> str:
    return board_path + ".live"


def spool_path(board_path: str, task: int) -> str:
    return os.path.join(spool_dir(board_path), f"{task}.log")


DEFAULT_KEEP = 4 * 1024 * 1024  # bytes a run's spool holds at most ([jobs] MAX_OUTPUT_BYTES)


class Spool:
    """One run's spool file, opened at the first line, holding at most ``keep`` bytes: what
    comes beyond is counted (``dropped``), not written, and one line says so. Writing never
    fails the run: a spool that cannot be written is given up (the run record still gets the
    head and the tail of everything)."""

    def __init__(self, path: str | None, keep: int = DEFAULT_KEEP) -> None:
        self.path = path
        self.keep = keep
        self.kept = 0  # bytes written (or, with no file, that would have been)
        self.dropped = 0  # bytes beyond ``keep``
        self._first_drop = False  # the bytes just dropped were the first: say so
        self._file: io.FileIO | None = None
        self._lock = threading.Lock()  # a job's stdout and stderr are read by threads of their own

    def write(self, line: str) -> None:
        """One line (a log record's text, which may hold line breaks)."""
        self.write_block("".join((part if len(part) <= LINE_MAX else part[:LINE_MAX] + " ... [truncated]") + "\n"
                                 for part in line.split("\n")).encode("utf-8", "replace"))

    def write_block(self, data: bytes) -> None:
        """Complete lines (each ending in a newline), in one write."""
        with self._lock:
            room = self.keep - self.kept
            if len(data) > room:
                cut = data.rfind(b"\n", 0, room) + 1 if room > 0 else 0
                self._drop(len(data) - cut)
                data = data[:cut] + self._marker()
            self._write(data)

    def drop(self, size: int) -> None:
        """``size`` bytes of output that there is no room for: counted."""
        with self._lock:
            self._drop(size)
            self._write(self._marker())

    def _drop(self, size: int) -> None:
        self._first_drop = self.dropped == 0
        self.dropped += size

    def _marker(self) -> bytes:
        """The line that says why nothing more comes: once, at the first bytes dropped."""
        if not self._first_drop:
            return b""
        self._first_drop = False
        return f"... output beyond {self.keep:,} bytes is counted, not kept ([jobs] MAX_OUTPUT_BYTES)\n".encode()

    def _write(self, data: bytes) -> None:
        if not data:
            return
        self.kept += len(data)
        if self.path is None:
            return
        try:
            if self._file is None:
                self._file = io.FileIO(self.path, "a")
            self._file.write(data)
        except OSError:
            self.path = None

    def close(self) -> None:
        """The run has ended: the file goes (lines not yet read are in the run record)."""
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                    os.unlink(self._file.name)
                except OSError:
                    pass
            self._file = None
            self.path = None
