"""A run's log lines as its record keeps them (JOBLOG): the head and the tail, ``limit`` bytes in
all, whatever the run logged or printed.

Lines come one at a time (the job's logger) or as blocks of complete lines (what it printed,
worker/output.py): a block costs work in proportion to what can be kept of it, not to its size,
so a run that prints a gigabyte costs its worker no more than one that prints a few pages.
"""

from __future__ import annotations

import logging
from collections import Counter, deque

from ..errors import one_line
from .spool import LINE_MAX, Spool

_RUN_LOG_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(message)s")


class RunLog(logging.Handler):
    """Keeps a run's log lines, bounded to ``limit`` bytes: the head and the tail. A worker
    keeps one and resets it for each run (one run at a time).

    The tail holds lines and, for what was printed, raw blocks of complete lines with their
    stream's prefix, split into lines only when the text is asked for. When it is over its
    half of ``limit``, the stream with the most in it gives up its oldest lines first: a
    flood on stdout does not push out the last lines of stderr or of the job's logger."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.setFormatter(_RUN_LOG_FORMAT)
        self.reset(limit)

    def reset(self, limit: int, spool: Spool | None = None) -> "RunLog":
        self.limit = limit
        self.spool = spool or Spool(None)  # each line as it comes, for the node (JOBLOG ... FOLLOW)
        self.head: list[str] = []
        self.tail: deque[tuple[bytes | None, str | bytes]] = deque()  # (None, line) or (prefix, block)
        self.head_bytes = self.tail_bytes = self.dropped = 0
        self.stream_bytes: Counter[bytes | None] = Counter()  # what each stream has in the tail
        return self

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.add(self.format(record))
        except Exception:  # a log line must never fail a job
            pass

    def add(self, line: str, live: bool = True) -> None:
        if live:
            self.spool.write(line)
        size = len(line.encode("utf-8", "replace")) + 1
        if self.head_bytes + size <= self.limit // 2 and not self.tail:
            self.head.append(line)
            self.head_bytes += size
            return
        self._to_tail(None, line, size)

    def add_block(self, data: bytes, prefix: bytes = b"") -> None:
        """Complete lines (each ending in a newline) as printed, each to be shown after
        ``prefix``: only what the head can take is split into lines now; of the rest, what
        cannot stay in the tail is counted and let go."""
        half = self.limit // 2
        if self.head_bytes < half and not self.tail:
            data = self._to_head(data, prefix)
        if not data:
            return
        if len(data) > half:  # only its end can stay in the tail: the rest is counted
            cut = data.rfind(b"\n", 0, len(data) - half) + 1
            self.dropped += data.count(b"\n", 0, cut)
            data = data[cut:]
            first = data.find(b"\n")
            if first > 4 * LINE_MAX:  # a line longer than is ever shown: its start is kept, not all of it
                data = data[:4 * LINE_MAX] + data[first:]  # (bytes enough for LINE_MAX characters)
        self._to_tail(prefix, data, _shown(prefix, data))

    def _to_head(self, data: bytes, prefix: bytes) -> bytes:
        """Lines of ``data`` into the head while it has room; the rest of ``data``."""
        half, pos, shown = self.limit // 2, 0, _decode(prefix)
        while self.head_bytes < half:  # (a line counts as much of it as is shown: LINE_MAX at most)
            end = data.find(b"\n", pos)
            if end < 0:
                break
            size = len(prefix) + min(end - pos, LINE_MAX) + 1
            if self.head_bytes + size > half:
                break
            self.head.append(shown + _decode(data[pos:min(end, pos + 4 * LINE_MAX)])[:LINE_MAX])  # (characters)
            self.head_bytes += size
            pos = end + 1
        return data[pos:]

    def _to_tail(self, stream: bytes | None, item: str | bytes, size: int) -> None:
        self.tail.append((stream, item))
        self.tail_bytes += size
        self.stream_bytes[stream] += size
        half = self.limit // 2
        while self.tail_bytes > half:
            biggest = max(self.stream_bytes, key=lambda s: self.stream_bytes[s])
            at = next(i for i, (s, _) in enumerate(self.tail) if s == biggest)
            if not self._shrink(at, self.tail_bytes - half):
                break

    def _shrink(self, at: int, excess: int) -> bool:
        """Give up the first lines of tail entry ``at`` (``excess`` bytes' worth, or all of it);
        False if it is the only entry and cannot be cut."""
        stream, item = self.tail[at]
        if isinstance(item, bytes):
            assert stream is not None
            raw = -(-excess * len(item) // _shown(stream, item))  # as many bytes before their prefixes
            cut = item.find(b"\n", max(raw, 1) - 1) + 1
            if 0 < cut < len(item):
                self.tail[at] = (stream, item[cut:])
                self._gone(stream, _shown(stream, item[:cut]), item.count(b"\n", 0, cut))
                return True
        if len(self.tail) == 1:
            return False
        del self.tail[at]
        if isinstance(item, bytes):
            assert stream is not None
            self._gone(stream, _shown(stream, item), item.count(b"\n"))
        else:
            self._gone(stream, len(item.encode("utf-8", "replace")) + 1, 1)
        return True

    def _gone(self, stream: bytes | None, size: int, lines: int) -> None:
        self.tail_bytes -= size
        self.stream_bytes[stream] -= size
        if self.stream_bytes[stream] <= 0:
            del self.stream_bytes[stream]
        self.dropped += lines

    def _tail_lines(self) -> tuple[list[str], int]:
        lines: list[str] = []
        for prefix, item in self.tail:
            if prefix is None:
                assert isinstance(item, str)
                lines.append(item)
            else:
                assert isinstance(item, bytes)
                shown = _decode(prefix)
                lines.extend(shown + line[:LINE_MAX] for line in _decode(item[:-1]).split("\n"))
        size = sum(len(line.encode("utf-8", "replace")) + 1 for line in lines)
        skip = 0
        while skip < len(lines) - 1 and size > self.limit // 2:  # the prefixes made it longer
            size -= len(lines[skip].encode("utf-8", "replace")) + 1
            skip += 1
        return lines[skip:], skip

    def text(self) -> str:
        tail, skipped = self._tail_lines()
        lines = list(self.head)
        if self.dropped + skipped:
            lines.append(f"... [{self.dropped + skipped} lines dropped] ...")
        return clean_text("\n".join(lines + tail), self.limit + 200)


def _shown(prefix: bytes, block: bytes) -> int:
    """Bytes of a block of lines once each has its prefix."""
    return len(block) + block.count(b"\n") * len(prefix)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def clean_text(text: str, limit: int) -> str:
    """Valid UTF-8 (lone surrogates replaced), at most ``limit`` characters."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 20] + "... [truncated]"


#: ``extra={ALWAYS: True}``: a line the node's log gets whatever the run's share (runner.py).
ALWAYS = "fabricjobs_node_log_always"
#: Set on the one-line copy a share hands to the node's log (:class:`ForeignLines` lets it by).
SHARED = "fabricjobs_node_log_shared"


def one_line_copy(record: logging.LogRecord, text: str | None = None) -> logging.LogRecord:
    """``record`` as one line of the node's log: its message (or ``text``) and its traceback on
    one line, so that a line break in either cannot forge a line of the node's own."""
    if text is None:
        text = one_line(record.getMessage())
        if record.exc_info:  # its traceback, on the same line
            text += " " + one_line(logging.Formatter().formatException(record.exc_info))
    return logging.makeLogRecord({**record.__dict__, "msg": text, "args": None, "exc_info": None,
                                  "exc_text": None, "stack_info": None, SHARED: True})


class NodeLogShare(logging.Handler):
    """What of a job's own log lines (``current_job().logger``) also goes to its node's log, as
    Fabric's job lines go to the server log: each as one line (a line break in a message cannot
    forge a line of the node's own), and ``limit`` bytes of them per run; then one line says
    the rest is in the run's log only. The run's log (JOBLOG) has every line, bounded as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.reset(0)

    def reset(self, limit: int) -> "NodeLogShare":
        self.limit, self.used, self.closed = limit, 0, False
        return self

    def emit(self, record: logging.LogRecord) -> None:
        always = getattr(record, ALWAYS, False)  # (the node's own word on the run: how it ended)
        if self.closed and not always:
            return
        try:
            copy = one_line_copy(record)
            self.used += len(copy.msg.encode("utf-8", "replace")) + 1
            if self.used > self.limit and not always:
                self.closed = True
                copy = one_line_copy(record, f"[{self.limit:,} bytes of this run's log lines are in the node's log; "
                                             "the rest are in the run's log only (JOBLOG)]")
            logging.getLogger().handle(copy)  # the worker's handlers: the node's log
        except Exception:  # a log line must never fail a job
            pass


class ForeignLines(logging.Filter):
    """On the worker's own handlers (the node's log): the lines of a job's own Python loggers
    (``logging.getLogger(__name__)``, a library's) take the road of ``current_job().logger``'s
    lines. During a run they go to the run's log, and to the node's log one line each within
    the run's share; between runs, one line each. Our own lines (``fabricjobs.*``) pass as
    they are (docs/guides/run-isolation.md, "What a job prints")."""

    def __init__(self) -> None:
        super().__init__()
        self.run: tuple[logging.Handler, ...] = ()  # where a run's lines go, while one runs

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "fabricjobs" or record.name.startswith("fabricjobs.") or getattr(record, SHARED, False):
            return True
        try:
            if self.run:
                for handler in self.run:
                    handler.handle(record)
            else:
                logging.getLogger().handle(one_line_copy(record))
        except Exception:  # a log line must never fail a job
            pass
        return False
