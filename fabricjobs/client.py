"""The application API: command strings in, typed results out (the seed's ``fabric().fetch``).

    from fabricjobs import Client
    with Client.from_config("config.ini") as client:
        row = client.fetch("startjob user_job name='Customer.userJob1' uid='u1';").first_row()
        row["Status"]  # 'WAITING'

Errors are typed (:mod:`fabricjobs.errors`): ``JobAlreadyRunning``, ``JobNotFound``,
``CommandSyntaxError``, ``ValidationError``, ... A client is a session: SET values apply to
the STARTJOBs it sends afterwards. The shell is built on this class.
"""

from __future__ import annotations

import os
from typing import Iterator

from .clock import Clock, following
from .commands import parse_script, statements
from .config import Config, find_config, load_config
from .result import Result
from .service import CommandService, Session
from .store import JobStore, open_store


class Client:
    def __init__(self, store: JobStore, config: Config, clock: Clock | None = None, *, owns_store: bool = False) -> None:
        self.config = config
        self.store = store
        self.clock = following(clock, store.wall_time())  # the store's time on Cassandra
        self.session = Session()
        self.service = CommandService(store, config, self.clock)
        self._owns_store = owns_store

    @classmethod
    def from_config(cls, path: str | os.PathLike | None = None, *, clock: Clock | None = None) -> "Client":
        """Open the store named by ``path`` (None: $FABRICJOBS_CONFIG, ./config.ini, defaults)."""
        config = load_config(find_config(str(path) if path is not None else None))
        return cls(open_store(config), config, clock, owns_store=True)

    def fetch(self, text: str) -> Result:
        """Run one or more statements; return the result of the last one."""
        results = self.run_script(text)
        return results[-1] if results else Result()

    def run_script(self, text: str) -> list[Result]:
        """Run every statement in ``text`` in order; the first error stops the script."""
        return self.service.run_script([s.command for s in parse_script(text, self.max_command_bytes)], self.session)

    def run_until_error(self, commands: list[statements.Command]) -> tuple[list[Result], Exception | None]:
        """Run parsed commands in order until one fails; the results of those before it, and
        its error (None: all ran). Consecutive STARTJOBs are written together, as in
        :meth:`run_script`."""
        return self.service.run_until_error(commands, self.session)

    @property
    def max_command_bytes(self) -> int:
        return self.config.get("jobs", "MAX_COMMAND_BYTES")

    def iter_script(self, text: str) -> Iterator[tuple[statements.Statement, Result]]:
        """Parse all of ``text`` first (a syntax error anywhere runs nothing), then run each
        statement, yielding it with its result as it completes."""
        for statement in parse_script(text, self.max_command_bytes):
            yield statement, self.execute(statement.command)

    def execute(self, command: statements.Command) -> Result:
        return self.service.execute(command, self.session)

    def wait(self, type: str, name: str, uid: str, timeout: float | None = None):
        """Until the job is final (a recurring job: until its current or next run ends); the
        job's row as JOBSTATUS shows it. Raises WaitTimeout after ``timeout`` seconds."""
        return self.execute(statements.WaitJob(type.upper(), name, uid, timeout)).first_row()

    def stop(self, type: str, name: str, uid: str | None = None, *, wait: bool = False, timeout: float | None = None) -> Result:
        """STOPJOB; with ``wait``, returns once every stopped job is final."""
        return self.execute(statements.StopJob(type.upper(), name, uid, wait=wait, timeout=timeout))

    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
