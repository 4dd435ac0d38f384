"""Files that may hold secrets or job data (the SQLite store, the shell's history and log) are
readable by their owner only: a password given in ARGS reaches the store and the history, and
a 0644 file would show it to every local user. A new file is created 0600; an existing one of
ours that others may read (made before this rule, or copied under a loose umask) is tightened
to 0600 when it is opened, with a warning, since what it held may already have been read.

An existing file is changed by its path, never opened here: closing any descriptor of a file
drops every POSIX lock the process holds on it, and SQLite keeps its locks on the store's
database and shared-memory files that way. A second store opened in a process that had one
open silently took the first one's locks away (so another process, closing what it took for
the last connection, could reset the write-ahead log under it: a test's client then read a
row older than the nodes had written)."""

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
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        tighten_if_present(path)
    else:
        os.close(fd)  # a file this call made: no lock of this process is on it yet
    return path


def tighten_if_present(path: str | os.PathLike) -> None:
    """Make an existing regular file of ours that others may read 0600 (also a store's WAL and
    shared-memory files, which SQLite creates with the database's mode but never changes).
    lstat, then chmod by path: a symlink is left alone; one swapped in between the two calls
    would need write access to the store's own directory."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # not there: nothing to tighten
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or not st.st_mode & 0o077:
        return  # not ours to change, or already private
    mode = stat.S_IMODE(st.st_mode) & 0o700
    try:
        os.chmod(path, mode)
    except OSError as exc:  # (a read-only mount of it: say so, and go on using it)
        log.warning("%s is readable by other users (mode %o) and cannot be made private: %s",
                    path, stat.S_IMODE(st.st_mode), exc.strerror or exc)
        return
    log.warning("%s was readable by other users (mode %o); it is now %o: what it held may have been read",
                path, stat.S_IMODE(st.st_mode), mode)
