"""The exceptions a user or an application can see.

Every error that reaches a shell user is one of these and prints as one clear message;
anything else is a bug and is logged with its traceback, never shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from .model import JobKey


class FabricJobsError(Exception):
    """Base of every error fabricjobs reports to its users."""


class ConfigError(FabricJobsError):
    """A config.ini or node.id value is wrong. The message names the key or line."""


class ScheduleError(FabricJobsError, ValueError):
    """An EXEC_INTERVAL text is not a valid schedule."""


class StoreError(FabricJobsError):
    """The store cannot be used (unreachable, schema too new, ...)."""


class StoreUnavailable(StoreError):
    """The store did not answer (a timeout, too few replicas up, no host reachable): it may
    answer again. A command exits with status 1 for it, not 2, so that the systemd unit
    starts a node again that stopped on it (docs/guides/deployment.md)."""


class SchemaVersionError(StoreError):
    """The store holds a schema newer than this code understands."""


class InsertInterrupted(StoreError):
    """A bulk insert stopped by a store error at one job, on a store without multi-row
    transactions (Cassandra): the jobs before it stay written, and some after it may be too
    (their inserts went out together). ``failed``: that job's key; ``written``: the keys after
    it that were written; ``also_failed``: those after it that failed too. Whether the failed
    ones were written is unknown (a lost answer is not a refusal): JOBSTATUS shows it."""

    _SHOWN = 2000  # characters of keys in the message at most (a key may be 1.3 KB)

    def __init__(self, failed: JobKey, cause: Exception, written: Sequence[JobKey], also_failed: Sequence[JobKey],
                 position: int = 0) -> None:
        """The jobs by their keys (shown as text); ``position``: the failed job's index among
        the jobs of the bulk insert."""
        self.failed = str(failed)
        self.written, self.also_failed = tuple(map(str, written)), tuple(map(str, also_failed))
        self.written_keys = tuple(written)  # the keys themselves, for a caller that goes on
        self.position = position
        self.rest_of_group = 0  # statements after it whose inserts went out with it (set by the service)
        parts = [f"STARTJOB of {failed} failed ({cause}); it may or may not be written. The jobs before it "
                 f"in the script were written"]
        if written:
            parts.append(f"{len(written)} after it were written all the same: {self._keys(self.written)}")
        if also_failed:
            parts.append(f"{len(also_failed)} after it failed too: {self._keys(self.also_failed)}")
        super().__init__("; ".join(parts) + ". Nothing after this group ran")

    @classmethod
    def _keys(cls, keys: Sequence[str]) -> str:
        shown: list[str] = []
        width = 0
        for key in keys:
            width += len(key) + 2
            if width > cls._SHOWN + 2:
                return ", ".join(shown) + f" and {len(keys) - len(shown)} more"
            shown.append(key)
        return ", ".join(shown)


class PlacementError(StoreError):
    """Writing from here beside the other live nodes could let two places claim one job (on
    Cassandra: local consistency levels with nodes in several data centres)."""


class CommandError(FabricJobsError):
    """A command was understood but cannot be carried out."""


class CommandSyntaxError(CommandError):
    """The command text is wrong. Carries the position and, for syntax errors, what was expected.

    Renders as one line saying what and where, then the offending source line with a caret.
    """

    label = "Syntax error"

    def __init__(
        self,
        message: str,
        *,
        text: str = "",
        line: int | None = None,
        column: int | None = None,
        expected: tuple[str, ...] = (),
    ) -> None:
        self.reason = message
        self.text = text
        self.line = line
        self.column = column
        self.expected = expected
        super().__init__(self._render())

    def _render(self) -> str:
        if self.line is None:
            return _visible(self.reason)
        head = _visible(f"{self.label} at line {self.line}, column {self.column}: {self.reason}")
        lines = self.text.split("\n")  # the parser counts lines by "\n" only
        if not 1 <= self.line <= len(lines):
            return head
        src, col = lines[self.line - 1], max(1, self.column or 1)
        if len(src) > _WIDTH:  # show a window around the column, not a megabyte of line
            start = max(0, min(col - 1 - _WIDTH // 2, len(src) - _WIDTH))
            src, col = src[start:start + _WIDTH], col - start
        return f"{head}\n  {_visible(src)}\n  {' ' * (col - 1)}^"


_WIDTH = 160
_SHOWN = {i: chr(0x2400 + i) for i in range(0x20)}  # control characters as their pictures: one column each
_SHOWN.update({i: "\ufffd" for i in range(0x80, 0xA0)})  # C1 controls (0x9B starts a terminal escape in some)
_SHOWN.update({0x09: " ", 0x7F: "\u2421", 0x2028: "\ufffd", 0x2029: "\ufffd"})
#: Characters that change the direction of the text around them or take no room, and lone
#: surrogates, as (first, last) code points: names may not hold them (names.py), and a quote
#: shows each as one replacement character, so it can neither reorder the text around it nor
#: fail to encode.
INVISIBLE = ((0x061C, 0x061C), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x2069),
             (0xFEFF, 0xFEFF), (0xD800, 0xDFFF))
_SHOWN.update({c: "\ufffd" for first, last in INVISIBLE for c in range(first, last + 1)})


def _visible(text: str) -> str:
    """The text with one visible character for each control, invisible or direction-changing
    character or line break, so that the message stays one line and the caret stays under the
    column it points at (a carriage return in a quoted line would send the terminal back to its
    start)."""
    return text if text.isprintable() else text.translate(_SHOWN)


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Why a file that should be text could not be read: which byte, where."""
    return f"it is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"


def one_line(text: str) -> str:
    """``text`` with every control character and line break made visible: one line of a log,
    whatever a job put in it (a line break could forge a line of its own)."""
    return _visible(text)


def message_of(exc: BaseException) -> str:
    """What a terminal user is shown for ``exc``: a syntax error's lines (its quote of the input
    already visible), anything else as one line with every control character visible. A
    message may quote user data (a name, a job's error), which must neither split it nor move
    the terminal's cursor."""
    return str(exc) if isinstance(exc, CommandSyntaxError) else _visible(str(exc))


def shown(text: str) -> str:
    """``text`` (a table cell, a notice) as a terminal should print it: its line breaks kept,
    every other control character made visible (a job's output may hold escape sequences)."""
    return "\n".join(_visible(line) for line in text.replace("\r\n", "\n").split("\n"))


class ValidationError(CommandSyntaxError):
    """The text parses but a value is wrong (bad JSON, unknown job type, invalid interval,
    duplicate or missing parameter, ...). Positioned when it comes from the parser."""

    label = "Invalid command"


class JobAlreadyRunning(CommandError):
    """STARTJOB / RESUMEJOB on a key that has a live (non-archived) row."""


class JobNotFound(CommandError):
    """The command names a job that does not exist (or is not in the needed state)."""


class JobEnded(JobNotFound):
    """The command names one job (its UID) to change while it runs or waits, and that job has
    ended (archived: PROCESSED, FAILED, TERMINATED). SMILA tells this from a job that never
    existed (HTTP 410 Gone against 404): a client may stop asking."""


class NodeNotFound(CommandError):
    """PS / KILL name a node that is not alive in the cluster."""


class CalendarNotFound(CommandError):
    """CALENDAR= or DROPCALENDAR name a calendar that is not stored (CREATECALENDAR makes one)."""


class TaskNotFound(CommandError):
    """KILL names a task that the node does not run."""


class PriorityAboveCeiling(CommandError):
    """STARTJOB / UPDATEJOB ask for a PRIORITY above the caller's ceiling ([jobs] MAX_JOB_PRIORITY)."""


class WaitTimeout(CommandError):
    """WAITJOB / STOPJOB WAIT gave up before the job reached the awaited state."""
