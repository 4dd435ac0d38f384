"""What a PROCESS run may use: its wall-clock time, its memory, the environment it sees, and its
arguments (ARGS as argv, each within what exec can pass).

The node's operator sets the ceilings in config.ini (``[jobs] PROCESS_TIME_LIMIT_SEC``,
``PROCESS_MEMORY_MB``); a job may ask for less in its ARGS (``"time_limit_sec": 30``,
``"memory_mb": 256``), never for more, since whoever may STARTJOB is not the operator.

* The time limit is wall-clock time from the start of the run. When it passes, the run's
  process group gets SIGTERM, then SIGKILL after ``TERM_GRACE_SEC``; the run ends in an error
  that names the limit, and is retried as any failed run is (MAX_TRIES).
* The memory limit is ``RLIMIT_AS`` (address space) of every process of the run, set by the
  guard (guard.py) between fork and exec, and inherited by whatever the job starts. A job
  over it sees its allocations fail (a Python job: MemoryError) and usually exits with an
  error; the run's error then says which limit it ran under.
* The environment is not the node's: a job gets the variables in ``INHERITED_ENV`` (and those
  matching ``INHERITED_PREFIXES``), the ones the operator lists in ``[jobs] PROCESS_ENV``, and
  its own ``FABRICJOBS_JOB_KEY``, ``FABRICJOBS_JOB_UID``, ``FABRICJOBS_EPOCH``,
  ``FABRICJOBS_NODE``. The node's own settings (``FABRICJOBS_*``: store hosts, credentials)
  and anything else in its environment stay with the node.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Mapping

from ..errors import ValidationError
from .source import JobResolutionError

TERM_GRACE_SEC = 5.0  # after SIGTERM at the time limit, before SIGKILL
MAX_TIME_LIMIT_SEC = 366 * 86400.0
MIN_MEMORY_MB = 16  # below this not even a shell starts: a typo, not a limit
MAX_MEMORY_MB = 1 << 30  # 1 PiB: beyond any machine, and within what setrlimit takes
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM")
INHERITED_PREFIXES = ("LC_",)


class LimitError(ValidationError):
    """A PROCESS job's ARGS ask for a limit that cannot be."""


@dataclass(frozen=True)
class ProcessLimits:
    """Ceilings for one run; 0 means none."""

    time_limit_sec: float = 0.0
    memory_mb: int = 0
    env: tuple[str, ...] = ()  # more node variables the operator lets jobs see

    def for_job(self, arguments: Mapping) -> "ProcessLimits":
        """The limits a run with these ARGS gets: the job's own where they are tighter."""
        asked = check_arguments(arguments)
        return ProcessLimits(
            _tighter(self.time_limit_sec, asked.get("time_limit_sec", 0.0)),
            int(_tighter(self.memory_mb, asked.get("memory_mb", 0))),
            self.env,
        )

    def environment(self, node_env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """The environment a run starts with (see the module docstring)."""
        env = {k: v for k, v in node_env.items()
               if k in INHERITED_ENV or k in self.env or k.startswith(INHERITED_PREFIXES)}
        env.update(own)
        return env


def check_arguments(arguments: Mapping) -> dict:
    """The limits asked for in ARGS, checked (LimitError names the bad one)."""
    asked = {}
    value = arguments.get("time_limit_sec")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= MAX_TIME_LIMIT_SEC:
            raise LimitError(f"PROCESS time_limit_sec must be a number of seconds above 0 and at most "
                             f"{MAX_TIME_LIMIT_SEC:g}, not {json.dumps(value)[:40]}")
        asked["time_limit_sec"] = float(value)
    value = arguments.get("memory_mb")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or not MIN_MEMORY_MB <= value <= MAX_MEMORY_MB:
            raise LimitError(f"PROCESS memory_mb must be a whole number of MiB from {MIN_MEMORY_MB} to "
                             f"{MAX_MEMORY_MB}, not {json.dumps(value)[:40]}")
        asked["memory_mb"] = value
    return asked


def _tighter(node: float, job: float) -> float:
    if not node:
        return job
    return min(node, job) if job else node


#: What a PROCESS job's ARGS may hold besides argument positions: its limits, and the session
#: scope STARTJOB adds.
PROCESS_ARGS_KEYS = frozenset({"time_limit_sec", "memory_mb", "session_scope"})

#: Longest argument Linux takes (MAX_ARG_STRLEN, 32 pages): a longer one fails exec with E2BIG.
ARG_MAX_BYTES = 131072


def process_argv(path: str, arguments: dict) -> list[str]:
    """ARGS ``{"0": "...", "1": "..."}`` as argv, in numeric key order. Keys that are not
    digits (session_scope) are not arguments; a key of other digits ("²", "٣"), a NUL byte or
    an argument longer than ARG_MAX_BYTES is refused (JobResolutionError): exec cannot pass it."""
    numbered = []
    for k, v in arguments.items():
        if not k.isdigit():
            continue
        if not k.isascii():
            raise JobResolutionError(f"PROCESS ARGS key {k!r}: argument positions are written in ASCII digits (0, 1, ...)")
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        if "\x00" in text:
            raise JobResolutionError(f"PROCESS argument {k} holds a NUL byte, which no program can receive")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size >= ARG_MAX_BYTES:
            raise JobResolutionError(f"PROCESS argument {k} is {size:,} bytes; "
                                     f"an argument must be under {ARG_MAX_BYTES:,} (pass big data in a file)")
        numbered.append((int(k), text))
    return [path] + [text for _, text in sorted(numbered)]
