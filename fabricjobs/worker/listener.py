"""INTERFACE_LISTENER jobs (Fabric's interface listener): watch a directory, start one run of
a user job per newly added file.

    STARTJOB INTERFACE_LISTENER NAME='Files.handle' UID='inbox' ARGS='{"path": "inbox", "pattern": "*.csv"}'

The listener is a job like any other (claimed, fenced, taken over when its node dies). While
it runs it starts, for each new file F, the job USER_JOB NAME with UID '<listener uid>/F' and
ARGS {"file": "<absolute path>", "name": "F", "listener": "<listener key>", "version": "<inode>-<mtime
ns>-<size>"} plus the listener's own other ARGS (all but path, pattern, settle_sec, poll_sec). A
file dropped again under the same name (another inode, time or size) is a new file: its job is
'<listener uid>/F/<version>'.

Exactly once per file, across node failover: a file is handled by starting its job (or
finding it already there: the UID is derived from the file) and then marking the file in the
store (``k2_listener_files``, one mark per version of a file); a listener that starts again after a takeover handles exactly
the files not marked yet. "Only files added after the listener started": when a listener
first runs, the files already there whose modification time is before its STARTJOB are marked
as present at start (never run), then a baseline mark says so; from then on every unmarked
file is new, whatever its modification time (a file moved in with ``mv`` keeps an old one). A file is taken once its size and time have not changed for ``settle_sec``
(default 0.5 s), so half-written files wait.

The listener runs in a worker, which holds no store: it reads and writes its marks, and starts
its files' jobs, through its node (node_link.py), which starts them with the command service
like any STARTJOB.

File events come from watchdog (inotify) when it is available; the directory is also listed
every ``poll_sec`` (default 1 s), which is all there is without watchdog and which catches
anything an event missed.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import stat
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from .. import names
from ..errors import StoreError
from ..model import Job, JobKey, JobType
from .node_link import NodeLink, Refused
from ..jobs.registry import JobCatalog

log = logging.getLogger("fabricjobs.job.listener")


def child_key(listener: JobKey, file: str, version: str | None = None) -> JobKey:
    """The job for a file: ``<listener uid>/F``; a later version of F (dropped again under the
    same name) gets ``<listener uid>/F/<version>``."""
    uid = names.derived_uid(listener.uid, f"/{file}" + (f"/{version}" if version is not None else ""))
    return JobKey(JobType.USER_JOB.value, listener.name, uid)


def file_version(st: os.stat_result) -> str:
    """What tells one file under a name from the next one dropped under it."""
    return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


def changed_since_seen(arguments: dict, first: bool) -> str | None:
    """Why the file a listener started this job for is not the file it saw (None: it is, or
    the job is no listener's). Checked as its run begins: a file swapped for a symlink (to
    /etc/shadow, say) or for another file after the listener looked must not be what the job
    is handed. Before the ``first`` run of the job the whole version must match: a file
    deleted and written again may get the same inode at once (ext4 hands a freed one out
    again), and the listener starts a job of its own for the new version. Later, the same
    file changed in place (a retry after the job appended to it) is the same file: only its
    kind and inode are compared. A file gone is left to the job (a retry may follow a run
    that moved it). This narrows the window to the job's own open of the path; a job that
    must be sure opens it with O_NOFOLLOW."""
    if not isinstance(arguments.get("listener"), str) or not isinstance(arguments.get("file"), str) \
            or not isinstance(arguments.get("version"), str):
        return None
    path = arguments["file"]
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return f"the file {ascii(path)} is no longer a regular file (a symlink?) since its listener saw it: not run"
    now = file_version(st)
    same = arguments["version"] == now if first else arguments["version"].partition("-")[0] == str(st.st_ino)
    if not same:
        return (f"the file {ascii(path)} was {'replaced or changed' if first else 'replaced'} since its listener saw "
                f"it (version {arguments['version']}, now {now}): not run; the new file is a new file to the listener")
    return None


#: The mark RESUMEJOB writes for the life it starts: that listener goes on where the stopped
#: one was, so the files not handled yet (dropped while it was stopped) are new to it.
RESUMED = "/resumed at "


def resumed_mark(started: datetime) -> str:
    """The mark of a listener's life resumed at ``started`` (its row's new Creation Time)."""
    return RESUMED + started.isoformat()


def _resumed(ids: set[str], started: datetime) -> bool:
    """Whether RESUMEJOB started this life (a store keeps times to the millisecond or so)."""
    for mark in ids:
        if mark.startswith(RESUMED):
            try:
                if abs((datetime.fromisoformat(mark[len(RESUMED):]) - started).total_seconds()) < 0.002:
                    return True
            except ValueError:
                continue
    return False


class _Marks:
    """The listener's marks, as read from and written to the store: ``F/<version>`` per
    handled version of file F. A mark of the bare name F was written before marks carried
    versions: it stands for the version there when the listener first meets it again."""

    def __init__(self, store: NodeLink, listener: JobKey) -> None:
        self.store, self.listener = store, listener
        self.ids = store.marked_files(listener)
        files = [i for i in self.ids if not i.startswith("/")]  # not the baseline
        self.names = {i.partition("/")[0] for i in files}
        self.versioned = {i.partition("/")[0] for i in files if "/" in i}

    def __contains__(self, mark: str) -> bool:
        return mark in self.ids

    def add(self, mark: str, note: str) -> None:
        self.store.mark_file(self.listener, mark, note)
        self.ids.add(mark)
        name, slash, _ = mark.partition("/")
        if name:
            self.names.add(name)
            if slash:
                self.versioned.add(name)

    def legacy(self, name: str) -> bool:
        return name in self.ids and name not in self.versioned


def listen(
    listener: Job,
    catalog: JobCatalog,
    store: NodeLink,
    args: dict,
    is_aborted: Callable[[], bool],
) -> int:
    """Run until aborted; returns how many files it started jobs for."""
    directory, pattern = catalog.check_listener(json.dumps(args), must_exist=False)  # (gone for now: waited for)
    settle = float(args.get("settle_sec", 0.5))
    poll = float(args.get("poll_sec", 1.0))
    wake = threading.Event()
    stop_watch = _watch(directory, wake)
    inbox: _Inbox | None = None
    trouble = _Trouble(listener.key)
    try:
        while not is_aborted():
            try:
                if inbox is None:
                    inbox = _Inbox(listener, store, directory, pattern, settle)
                inbox.scan(is_aborted)
            except (StoreError, OSError) as exc:
                # The store out for a while, the directory gone for a moment (a remount, a
                # rotation): a listener only ends when asked to, so it waits and looks again;
                # every start and mark is idempotent (docs/guides/writing-jobs.md, "INTERFACE_LISTENER").
                wait = trouble.failed(exc, poll)
                wake.clear()
                _pause(wait, is_aborted)  # the whole wait: file events do not cut it short
                continue
            trouble.over()
            wake.wait(min(poll, settle) if inbox.seen else poll)
            wake.clear()
    finally:
        if stop_watch is not None:
            stop_watch()
    return inbox.handled if inbox is not None else 0


def _pause(seconds: float, is_aborted: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not is_aborted() and time.monotonic() < end:
        time.sleep(min(0.1, max(end - time.monotonic(), 0)))


class _Trouble:
    """A listener's failing scans: said once, then once a minute while they go on, and when
    they are over; the wait before the next scan doubles up to 30 s."""

    def __init__(self, listener: JobKey) -> None:
        self.listener = listener
        self.since: float | None = None
        self.said = float("-inf")
        self.wait = 0.0

    def failed(self, exc: BaseException, poll: float) -> float:
        now = time.monotonic()
        if self.since is None:
            self.since, self.wait = now, poll
        else:
            self.wait = min(2 * self.wait, max(poll, _TROUBLE_WAIT_MAX))
        if now - self.said >= _TROUBLE_SAY_EVERY:
            self.said = now
            log.warning("listener %s cannot scan its directory (%s: %s); it looks again in %.1f s",
                        self.listener, type(exc).__name__, exc, self.wait)
        return self.wait

    def over(self) -> None:
        if self.since is not None:
            log.warning("listener %s scans again, after %.1f s", self.listener, time.monotonic() - self.since)
            self.since, self.said = None, float("-inf")


_TROUBLE_WAIT_MAX = 30.0
_TROUBLE_SAY_EVERY = 60.0


class _Inbox:
    """The listener's directory as it has seen it: files waiting to settle, and the marks."""

    def __init__(self, listener: Job, store: NodeLink, directory: Path, pattern: str, settle: float) -> None:
        self.listener = listener
        self.store = store
        self.directory = directory
        self.pattern = pattern
        self.settle = settle
        self.started_at = listener.creation_time.timestamp()
        self.handled = 0
        self.seen: dict[str, tuple[str, float]] = {}  # name -> (version, first seen unchanged)
        self.refused: set[str] = set()  # names no job could carry, already logged; versions whose job was refused
        self.marks = _Marks(store, listener.key)
        self.baseline = f"/present at {listener.creation_time.isoformat()}"  # a '/': never a file's name
        # A resumed life marks nothing as present at its start: what is not marked is new.
        self.resumed = _resumed(self.marks.ids, listener.creation_time)

    def scan(self, is_aborted: Callable[[], bool]) -> None:
        """Start the jobs of the new files that have settled."""
        for name in sorted(os.listdir(self.directory)):
            if not fnmatch.fnmatch(name, self.pattern):
                continue
            st = self._regular_file(name)
            if st is None:
                continue
            version = file_version(st)
            if not self._settled(name, version, st):
                continue
            if is_aborted():
                break
            if f"{name}/{version}" in self.refused:
                continue  # (its job was refused: not asked again in this run)
            try:
                key = _start_child(self.store, self.listener, name, version, name in self.marks.names,
                                   str(self.directory / name))
            except Refused as exc:  # for good: this file waits where it is, the others go on
                self.refused.add(f"{name}/{version}")
                log.warning("listener %s cannot start the job of the file %s: %s; the file is left where it "
                            "is (a restart of the listener tries it again)", self.listener.key, ascii(name), exc)
                continue
            self.marks.add(f"{name}/{version}", f"started {key.uid}")
            self.seen.pop(name, None)
            self.handled += 1
        if self.baseline not in self.marks:  # the files there at start are sorted out: the rest is new
            self.marks.add(self.baseline, "the files present at start are marked")

    def _regular_file(self, name: str) -> os.stat_result | None:
        """The file's status, or None for a name no job could carry or not a regular file."""
        why = _unfit(name)
        if why is not None:
            if name not in self.refused:  # once per name: it stays where it is
                self.refused.add(name)
                log.warning("listener %s skips the file %s: %s", self.listener.key, ascii(name), why)
            return None
        try:
            st = os.lstat(self.directory / name)  # a symlink is not followed (inbox/x.csv -> /etc/shadow)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _settled(self, name: str, version: str, st: os.stat_result) -> bool:
        """Whether this version of the file is new and has not changed for ``settle`` seconds
        (marks the files that were there before the listener started, never run)."""
        mark = f"{name}/{version}"
        if mark in self.marks:
            return False
        if self.marks.legacy(name) and _old_enough(self.store, self.listener, name, st):
            self.marks.add(mark, "handled (marked before marks carried versions)")
            return False
        if self.baseline not in self.marks and not self.resumed and st.st_mtime < self.started_at:
            self.marks.add(mark, "present when the listener started")
            return False
        first = self.seen.get(name)
        if first is None or first[0] != version:
            self.seen[name] = (version, time.monotonic())
            return False
        return time.monotonic() - first[1] >= self.settle


OWN_ARGS = ("path", "pattern", "settle_sec", "poll_sec", "session_scope")


def _unfit(name: str) -> str | None:
    """Why a file name cannot become part of a job's UID, or None: not UTF-8 (os.listdir gave
    it lone surrogates, which no store can hold), or characters that would forge a log line or
    show one name as another."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    why = names.complaint("its name", name) or names.unwritable("its name", name)  # (its job's UID ends with it)
    return None if why is None else why.replace("its name must not contain", "its name holds")


def _start_child(store: NodeLink, listener: Job, name: str, version: str, again: bool, path: str) -> JobKey:
    """Start the job for this version of the file, or find it started (before a takeover:
    only its mark was missing). The first version of a name gets the plain key unless that
    holds another version's job; ``again``: an earlier version of the name was marked."""
    key = child_key(listener.key, name)
    existing = store.get(key)
    if again or (existing is not None and _version_of(existing) not in (None, version)):
        key = child_key(listener.key, name, version)
        existing = store.get(key)
    if existing is not None:
        return key
    try:
        inherited = {k: v for k, v in json.loads(listener.arguments).items() if k not in OWN_ARGS}
    except (ValueError, AttributeError):
        inherited = {}
    args = json.dumps({**inherited, "file": path, "name": name, "listener": str(listener.key), "version": version},
                      ensure_ascii=False)
    if store.start(key, args):
        log.info("listener %s started %s for %s", listener.key, key, name)
    return key


def _old_enough(store: NodeLink, listener: Job, name: str, st: os.stat_result) -> bool:
    """Whether the file a bare-name mark stands for can be this one: not changed since the
    listener started or since the job for the name was started. A file dropped after those
    is a new file under an old name."""
    child = store.get(child_key(listener.key, name))
    since = max([listener.creation_time] + ([child.creation_time] if child is not None else []))
    return st.st_mtime <= since.timestamp()


def _version_of(job: Job) -> str | None:
    try:
        return json.loads(job.arguments or "{}").get("version")
    except (ValueError, AttributeError):
        return None


def _watch(directory, wake: threading.Event):
    """Wake the loop on file events (watchdog), if it is there; None means poll only."""
    try:
        from watchdog.events import FileSystemEventHandler
        from watchdog.observers import Observer
    except ImportError:
        return None

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event):
            wake.set()

    try:
        observer = Observer()
        observer.schedule(Handler(), str(directory), recursive=False)
        observer.start()
    except Exception as exc:  # no inotify here (e.g. a network filesystem): poll
        log.info("no file events for %s (%s); polling", directory, exc)
        return None

    def stop():
        observer.stop()
        observer.join(timeout=2)

    return stop
