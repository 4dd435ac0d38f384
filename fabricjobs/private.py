"""Files that may hold secrets or job data (the SQLite store, the shell's history and log) are
readable by their owner only: a password given in ARGS reaches the store and the history, and
a 0644 file would show it to every local user. A new file is created 0600; an existing one of
ours that others may read (made before this rule, or copied under a loose umask) is tightened
to 0600 when it is opened, with a warning, since what it held may already have been read."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("fabricjobs")


def private_file(path: str | os.PathLike, *, make_parent: bool = True) -> Path:
    """Create ``path`` (mode 0600) if it does not exist, and its directory (0700) if
    ``make_parent``; an existing file that its group or others may read or write is made 0600."""
    path = Path(path)
    if make_parent:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        _tighten(fd, path)
    finally:
        os.close(fd)
    return path


def tighten_if_present(path: str | os.PathLike) -> None:
    """Make an existing file that others may read 0600 (a store's WAL and shared-memory files,
    which SQLite creates with the database's mode but never changes afterwards)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return  # not there (or not a file we may open): nothing to tighten
    try:
        _tighten(fd, Path(path))
    finally:
        os.close(fd)


def _tighten(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not st.st_mode & 0o077:
        return  # not ours to change, or already private
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)
    log.warning("%s was readable by other users (mode %o); it is now %o: what it held may have been read",
                path, stat.S_IMODE(st.st_mode), stat.S_IMODE(st.st_mode) & 0o700)
