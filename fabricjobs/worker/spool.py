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


class Spool:
    """One run's spool file, opened at the first line. Writing never fails the run: a spool
    that cannot be written is given up (the run record still gets every line)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._file: io.FileIO | None = None
        self._lock = threading.Lock()  # a PROCESS job's stdout and stderr pumps write at once

    def write(self, line: str) -> None:
        if self.path is None:
            return
        data = "".join((part if len(part) <= LINE_MAX else part[:LINE_MAX] + " ... [truncated]") + "\n"
                       for part in line.split("\n")).encode("utf-8", "replace")
        with self._lock:
            try:
                if self._file is None:
                    self._file = io.FileIO(self.path, "a")
                self._file.write(data)
            except OSError:
                self.path = None

    def lines(self, prefix: str) -> "_Lines":
        """A writer of a byte stream's lines, each with ``prefix`` (a PROCESS job's stdout)."""
        return _Lines(self, prefix)

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


class _Lines:
    def __init__(self, spool: Spool, prefix: str) -> None:
        self.spool = spool
        self.prefix = prefix
        self.rest = b""

    def feed(self, chunk: bytes) -> None:
        if self.spool.path is None:
            return
        *lines, self.rest = (self.rest + chunk).split(b"\n")
        for line in lines:
            self.spool.write(self.prefix + line.decode("utf-8", "replace"))
        if len(self.rest) > LINE_MAX:  # a line without an end: shown in pieces
            self.spool.write(self.prefix + self.rest.decode("utf-8", "replace"))
            self.rest = b""

    def end(self) -> None:
        if self.rest:
            self.spool.write(self.prefix + self.rest.decode("utf-8", "replace"))
            self.rest = b""
