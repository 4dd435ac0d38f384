"""Files that may hold secrets or job data (the SQLite store, the shell's history and log) are
created readable by their owner only: a password given in ARGS reaches the store and the
history, and a 0644 file would show it to every local user."""

from __future__ import annotations

import os
from pathlib import Path


def private_file(path: str | os.PathLike, *, make_parent: bool = True) -> Path:
    """Create ``path`` (mode 0600) if it does not exist, and its directory (0700) if
    ``make_parent``; an existing file keeps the mode its owner gave it."""
    path = Path(path)
    if make_parent:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
    return path
