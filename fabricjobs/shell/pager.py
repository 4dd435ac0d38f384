"""The prompt's pager: an answer taller than the terminal is shown through ``less`` (as psql
and pgcli do), so that a JOBSTATUS of a thousand rows can be read from its top.

Only at the interactive prompt, and only for an answer printed at once (a FOLLOW's lines, which
come over time, are not held back). ``$FABRICJOBS_PAGER``, else ``$PAGER``, names the command;
an empty value (or ``off``) prints without one (docs/guides/commands.md, "At the prompt").
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import signal
import subprocess
from typing import TextIO

#: -F: quit at once if it fits after all; -R: colours as they are; -S: long lines cut, not
#: wrapped (a wide table stays a table); -X: leave it on the screen when it quits.
DEFAULT = "less -FRSX"


def pager_command(environ: "os._Environ[str] | dict[str, str]") -> list[str] | None:
    """The pager to run, or None for none."""
    text = environ.get("FABRICJOBS_PAGER", environ.get("PAGER", DEFAULT)).strip()
    if not text or text.lower() == "off":
        return None
    try:
        argv = shlex.split(text)
    except ValueError:
        return None
    return argv if argv and shutil.which(argv[0]) else None


class PagedOutput(io.TextIOBase):
    """A text stream over ``out``: a write of more lines than the terminal has goes through
    the pager; any other write goes to ``out`` as it is."""

    def __init__(self, out: TextIO, command: list[str] | None) -> None:
        self.out, self.command = out, command

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        rows = shutil.get_terminal_size((120, 40)).lines
        if self.command is None or text.count("\n") + 1 < rows:
            self.out.write(text)
            return len(text)
        self.out.flush()
        # Ctrl-C belongs to the pager while it runs (less takes it to stop a search).
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            subprocess.run(self.command, input=text, text=True, stdout=self.out, check=False)
        except OSError:
            self.out.write(text)
        finally:
            signal.signal(signal.SIGINT, previous)
        return len(text)

    def flush(self) -> None:
        self.out.flush()
