"""The node's side of worker/node_link.py: a listener run's store requests, answered for that
listener only.

A worker may run operator code next to the pipe it shares with its node, so a request is
taken only while a listener run is on that worker, and only for what a listener does: read
and write its own file marks, read the jobs under its NAME and UID prefix, and start one of
them. The start is a STARTJOB through the command service, the one place a new job is
checked and written (NAME must resolve, ARGS must be an object, the doorbell rings).
"""

from __future__ import annotations

import dataclasses

from typing import Any

from .. import names
from ..commands.statements import StartJob
from ..errors import FabricJobsError, JobAlreadyRunning
from ..model import Job, JobKey, JobType
from ..service import CommandService, Session
from ..jobs.given_keys import CHILD_KEYS


class RequestRefused(FabricJobsError):
    """A request this run may not make (its text goes back to the worker)."""


class ListenerRequests:
    def __init__(self, service: CommandService) -> None:
        self.service = service
        self.store = service.store
        self._session = Session()

    def answer(self, listener: Job, op: str, args: tuple) -> Any:
        """The value of ``op`` for this listener's run (RequestRefused if it may not ask)."""
        key = listener.key
        if op == "marked_files":
            return self.store.marked_files(key)
        if op == "mark_file":
            file, note = args
            return self.store.mark_file(key, str(file), str(note))
        if op == "get":
            (child,) = args
            self._check_child(listener, child)
            return self.store.get(child)
        if op == "start":
            child, arguments = args
            self._check_child(listener, child)
            cmd = StartJob(type=JobType.USER_JOB.value, name=child.name, uid=child.uid, args=str(arguments),
                           affinity=listener.affinity or None, priority=listener.priority,
                           requestor=listener.requestor or None)
            # The file's job is the listener owner's: owned by, and within the ceiling of, that user.
            session = dataclasses.replace(self._session, owner=listener.owner or None, given_keys=CHILD_KEYS)
            try:
                self.service.execute(cmd, session)
            except JobAlreadyRunning:
                return False
            return True
        raise RequestRefused(f"unknown request {op!r}")

    @staticmethod
    def _check_child(listener: Job, child: Any) -> None:
        if not (isinstance(child, JobKey) and child.type == JobType.USER_JOB.value and child.name == listener.key.name
                and (names.derived_suffix(listener.key.uid, child.uid) or "").startswith("/")):
            raise RequestRefused(f"listener {listener.key} may only touch its own files' jobs, not {child!r}")

