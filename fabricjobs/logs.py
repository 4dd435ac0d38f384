"""Log output of nodes and their workers: the seed's text lines, or one JSON object per line,
or Fabric's own lines (``fabric``), with a ``[LID...]`` log id after the time.

With ``--log-format json`` every line carries ``time``, ``level``, ``logger``, ``thread``,
``message`` and ``node``, plus ``job`` and ``epoch`` when the line is about a job (log calls
pass them as ``extra``), so a log pipeline can follow one job across nodes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

TEXT_FORMAT = "%(levelname)s %(asctime)s [%(threadName)s] %(name)s - %(message)s"


FABRIC_FORMAT = "%(levelname)s %(asctime)s [%(lid)s] [%(threadName)s] %(name)s - %(message)s"


def log_id(text: str) -> str:
    """Fabric's log id form, LID and 16 hex digits, for a job run ("KEY#epoch") or a node."""
    return "LID" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class FabricFormatter(logging.Formatter):
    """Fabric's line: ``INFO 2025-01-27 21:55:20,611 [LID5704...] [thread] logger - message``.
    A line about a job run (``job_extra``) has that run's LID on every node and worker that logs
    it; any other line has its node's."""

    def __init__(self, fmt: str, node: str) -> None:
        super().__init__(fmt)
        self.node_lid = log_id(node)

    def format(self, record: logging.LogRecord) -> str:
        job = getattr(record, "job", None)
        record.lid = log_id(f"{job}#{getattr(record, 'epoch', None)}") if job is not None else self.node_lid
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "node": self.node,
            "message": record.getMessage(),
        }
        for field in ("job", "epoch", "task"):
            value = getattr(record, field, None)
            if value is not None:
                out[field] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup_logging(level: str | int, fmt: str = "text", node: str = "", thread_name: str | None = None,
                  stream=None) -> None:
    """Configure the root logger of this process (a node or one of its workers); ``stream``:
    where its lines go (default: stderr)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(node))
    else:
        text = FABRIC_FORMAT if fmt == "fabric" else TEXT_FORMAT
        if thread_name is not None:
            text = text.replace("%(threadName)s", thread_name)
        handler.setFormatter(FabricFormatter(text, node) if fmt == "fabric" else logging.Formatter(text))
    root.addHandler(handler)
    root.setLevel(level)


def job_extra(key, epoch: int | None = None) -> dict:
    """``extra=`` for a log call about a job."""
    return {"job": str(key), "epoch": epoch}


def shell_log_path() -> Path:
    """The log of a user's shell and other one-off commands: what is not for their terminal."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fabricjobs" / "shell.log"


class _PrivateFileHandler(logging.Handler):
    """Appends records to a file made 0600 at the first one (a command that logs nothing leaves
    no file). A file that cannot be written drops the record: never a logging traceback on the
    user's terminal."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.WARNING)
        self.path = path
        self._file: TextIO | None = None
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s - %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self._file is None:
                from .private import private_file

                self._file = open(private_file(self.path), "a", encoding="utf-8")
            self._file.write(self.format(record) + "\n")
            self._file.flush()
        except Exception:  # (OSError, or a record that cannot be formatted)
            pass


def divert_driver_logs() -> None:
    """For the shell and the other one-off commands: the Cassandra driver's own lines (a host
    it cannot reach, a retry, a traceback it logs) go to the shell log, not to the terminal,
    where the command's own message already says what failed. A node and the web process keep
    them in their log."""
    driver = logging.getLogger("cassandra")
    driver.addHandler(_PrivateFileHandler(shell_log_path()))
    driver.propagate = False
