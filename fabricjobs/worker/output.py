"""What a run prints, for both kinds of job: captured, passed on in blocks, bounded
(docs/guides/run-isolation.md).

* A PROCESS job's stdout and stderr are pipes of its own, each read by a thread
  (:class:`ProcessStream`).
* A USER_JOB runs in its worker, whose stdout and stderr (descriptors 1 and 2, which whatever
  the job starts inherits) are pipes read by a thread of the worker for as long as it lives
  (:class:`StdCapture`); the worker's own log lines go to the node's log through a copy of the
  stderr it was started with.

Whatever is read goes to the run's :class:`RunOutput`, which cuts it into complete lines of
its stream (``stdout: ...``) and hands them on a block at a time: to the spool, the run's live
log (spool.py: at most ``[jobs] MAX_OUTPUT_BYTES``, the rest counted), and to the run's record
(runlog.py: its head and its tail). Reads take up to a megabyte, and the pipes are made that
large where the kernel allows, so a gigabyte of short lines costs a worker about a thousand
reads and no work per line beyond what is kept.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import sys
import threading
from typing import IO

from ..errors import one_line
from .runlog import RunLog
from .spool import LINE_MAX, Spool

READ_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux), missing from older Pythons' fcntl
_LONG = re.compile(rb"[^\n]{%d}" % (LINE_MAX + 1))
_BETWEEN_RUNS_MAX = 65536  # bytes a worker passes to the node's log between two runs


def enlarge(fd: int) -> None:
    """Make a pipe hold a megabyte (fewer, larger reads); as large as allowed if not."""
    for size in (READ_SIZE, 256 * 1024):
        try:
            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), size)
            return
        except OSError:
            continue


def size_text(n: int) -> str:
    """A byte count for people: 1,017 MB; 12 KB; 80 bytes."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:,.0f} MB"
    if n >= 1_000:
        return f"{n / 1_000:,.0f} KB"
    return f"{n} bytes"


class RunOutput:
    """One run's printed output, line by line per stream, handed on in blocks."""

    def __init__(self, spool: Spool, run_log: RunLog) -> None:
        self.spool = spool
        self.run_log = run_log
        self.total = 0  # bytes printed
        self._rest: dict[bytes, bytes] = {}  # per stream: the start of a line not ended yet
        self._lock = threading.Lock()  # a PROCESS job's two streams are read by two threads

    def feed(self, prefix: bytes, data: bytes) -> None:
        """What stream ``prefix`` (``b"stdout: "``) printed next."""
        with self._lock:
            self.total += len(data)
            data = self._rest.pop(prefix, b"") + data
            end = data.rfind(b"\n") + 1
            if len(data) - end > LINE_MAX:  # a line without an end yet: shown in pieces as it comes
                data += b"\n"
                end = len(data)
            elif end < len(data):
                self._rest[prefix] = data[end:]
            if end:
                self._lines(prefix, data[:end])

    def finish(self) -> None:
        """The run has ended: lines not ended are shown, and what was not kept is said."""
        with self._lock:
            for prefix, rest in list(self._rest.items()):
                self._lines(prefix, rest + b"\n")
            self._rest.clear()
        if self.spool.dropped:
            self.run_log.add(f"... {size_text(self.spool.dropped)} more not kept", live=False)

    def _lines(self, prefix: bytes, block: bytes) -> None:
        """Complete lines: to the spool while it has room (the rest is counted there), and
        to the run's record. Only what the spool takes is looked at line by line."""
        block_live = self._shown_in_pieces(block)
        live = self._room_for(prefix, block_live)
        if live:
            self.spool.write_block(prefix + live[:-1].replace(b"\n", b"\n" + prefix) + b"\n")
        if len(live) < len(block_live):
            self.spool.drop(len(block_live) - len(live))
        self.run_log.add_block(block, prefix)

    def _shown_in_pieces(self, block: bytes) -> bytes:
        """``block`` with each line the spool's room reaches cut into the pieces it is shown in
        (LINE_MAX), so that the room takes the start of a long line rather than none of it.
        Only as far as the room reaches: a flood past it is not looked at line by line."""
        room = self.spool.keep - self.spool.kept
        if room <= 0:
            return block
        end = block.find(b"\n", min(room, len(block)) - 1) + 1 or len(block)
        if not _LONG.search(block, 0, end):
            return block
        return b"".join(_pieces(line) for line in block[:end].split(b"\n")[:-1]) + block[end:]

    def _room_for(self, prefix: bytes, block: bytes) -> bytes:
        """The lines at the start of ``block`` that fit in the spool with their prefixes."""
        room = self.spool.keep - self.spool.kept
        if room <= 0:
            return b""
        live = block[:block.rfind(b"\n", 0, room) + 1]
        shown = len(live) + live.count(b"\n") * len(prefix)
        if shown > room:  # the prefixes make it longer: take as much less
            live = live[:live.rfind(b"\n", 0, len(live) * room // shown) + 1]
        return live


def _pieces(line: bytes) -> bytes:
    return b"".join(line[i:i + LINE_MAX] + b"\n" for i in range(0, max(len(line), 1), LINE_MAX))


class ProcessStream:
    """One output pipe of a PROCESS job, read by a thread of its own: each block to the run's
    output, and its head and tail (``limit`` bytes in all) kept for the run's result."""

    def __init__(self, stream: IO[bytes], limit: int, output: RunOutput, prefix: bytes) -> None:
        self.head = bytearray()
        self.tail = b""
        self.dropped = 0
        self.limit = limit
        enlarge(stream.fileno())
        self.thread = threading.Thread(target=self._pump, args=(stream, output, prefix), daemon=True)
        self.thread.start()

    def _pump(self, stream: IO[bytes], output: RunOutput, prefix: bytes) -> None:
        half = self.limit // 2
        fd = stream.fileno()
        try:
            for chunk in iter(lambda: os.read(fd, READ_SIZE), b""):
                output.feed(prefix, chunk)
                room = half - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    kept = (self.tail + chunk)[-half:] if len(chunk) < half else chunk[-half:]
                    self.dropped += len(self.tail) + len(chunk) - len(kept)
                    self.tail = kept
        except OSError:
            pass
        finally:
            stream.close()

    def text(self, timeout: float = 5.0) -> str:
        self.thread.join(timeout=timeout)
        body = bytes(self.head)
        if self.dropped:
            body += f"\n... [{self.dropped} bytes dropped] ...\n".encode()
        return (body + self.tail).decode("utf-8", "replace")


class StdCapture:
    """A worker's stdout and stderr as pipes, read for as long as it lives. During a run
    (:meth:`begin` to :meth:`end`) what comes is the run's output; between runs (the worker's
    own warnings) it goes to the node's log, a little of it."""

    def __init__(self) -> None:
        self.log_stream = os.fdopen(os.dup(2), "w", buffering=1, errors="replace")  # the node's log
        self._fds: dict[int, bytes] = {}
        for target, prefix in ((1, b"stdout: "), (2, b"stderr: ")):
            r, w = os.pipe()
            enlarge(w)
            os.set_blocking(r, False)
            os.dup2(w, target)
            os.close(w)
            self._fds[r] = prefix
        self._output: RunOutput | None = None
        self._between = 0  # bytes passed to the node's log since the last run
        self._lock = threading.Lock()
        threading.Thread(target=self._pump, name="output", daemon=True).start()

    def begin(self, output: RunOutput) -> None:
        with self._lock:
            self._output = output

    def end(self) -> None:
        """The run's code has returned: what it printed so far is the run's (flushed, and read
        out of the pipes here); what comes after is not."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        with self._lock:
            for fd in self._fds:
                self._drain(fd, most=2 * READ_SIZE)  # what the pipe held: a leftover that writes on is not waited for
            self._output = None
            self._between = 0

    def _pump(self) -> None:
        poller = select.poll()
        for fd in self._fds:
            poller.register(fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                with self._lock:
                    self._drain(fd, once=True)

    def _drain(self, fd: int, once: bool = False, most: int = 0) -> None:
        """Read what is in pipe ``fd`` now (``once``: one block; ``most``: at most that many
        bytes) and pass it on."""
        taken = 0
        while not most or taken < most:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return
            if not data:
                return
            taken += len(data)
            if self._output is not None:
                self._output.feed(self._fds[fd], data)
            elif self._between < _BETWEEN_RUNS_MAX:
                # A thread or process a run left behind, printing on: one line per write, its
                # stream named and its line breaks shown, so it cannot forge a node's line.
                self._between += len(data)
                self.log_stream.write(f"{self._fds[fd].decode()}(no run) "
                                      f"{one_line(data.decode('utf-8', 'replace').rstrip(chr(10)))}\n")
            if once:
                return
