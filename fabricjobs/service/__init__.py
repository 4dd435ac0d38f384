"""What each command means, carried out on a store (docs/reference/statements.md).

The only place command semantics live: the shell, scripts and application code all reach
them through :class:`fabricjobs.client.Client`, the HTTP API (fabricjobs/web) directly.
:class:`CommandService` is one object made of the command families: jobs.py (the commands
that change job rows), views.py (those that read them; listing.py: the job list programs page
through; jobs.py also DELETEHISTORY), cluster.py (PS, KILL, NODES), on core.py (dispatch, the CAS loop, waking the
nodes); session.py holds a connection's SET state and who it acts for. The statement table
(fabricjobs/commands/table.py) names each statement's method.
"""

from __future__ import annotations

from typing import Sequence

from ..commands import statements
from ..result import Result
from .calendars import CALENDAR_COLUMNS, CALENDARS_COLUMNS
from .cluster import NODES_COLUMNS, NODES_DETAIL_COLUMNS, PS_COLUMNS, ClusterCommands
from .core import ServiceCore
from .jobs import CHANGE_COLUMNS, DELETED_COLUMNS, EXISTS_NOTE, START_COLUMNS, JobCommands
from .listing import MAX_PAGE, JobListing, JobPage, JobQuery
from .recent import RECENT_COLUMNS
from .session import Session, requester, with_session_scope
from .views import (
    COUNTER_COLUMNS, DETAIL_COLUMNS, FULL_COLUMNS, HISTORY_COLUMNS, HISTORY_LIMIT, LIST_COLUMNS, NEXT_RUN_TEXT,
    STATUS_COLUMNS, history_row, run_summary,
)

__all__ = [
    "CALENDAR_COLUMNS", "CALENDARS_COLUMNS", "CHANGE_COLUMNS", "COUNTER_COLUMNS", "DELETED_COLUMNS", "DETAIL_COLUMNS",
    "EXISTS_NOTE",
    "FULL_COLUMNS", "HISTORY_COLUMNS", "HISTORY_LIMIT", "LIST_COLUMNS", "NEXT_RUN_TEXT", "NODES_COLUMNS",
    "NODES_DETAIL_COLUMNS", "PS_COLUMNS", "RECENT_COLUMNS", "START_COLUMNS", "STATUS_COLUMNS", "CommandService",
    "MAX_PAGE", "JobPage", "JobQuery", "ServiceCore", "Session", "history_row", "requester", "run_summary", "with_session_scope",
]

# STARTJOBs per store transaction in a script (the nodes are rung after each). The write lock
# is held for the inserts alone (~60 us each on a slow host): ~15 ms, against which every
# lock taken less often counts when busy nodes contend for it (4 nodes: submit 1,150 -> 2,300/s).
STARTJOB_GROUP = 256


def _groupable(command: statements.Command) -> bool:
    """A STARTJOB whose checks read nothing its script may have written just before it."""
    return (isinstance(command, statements.StartJob) and not command.depends_on and not command.if_not_exists
            and not command.parallelism)


class CommandService(JobCommands, JobListing, ClusterCommands):
    """Every statement of the command language, carried out on a store."""

    def run_script(self, commands: Sequence[statements.Command], session: Session) -> list[Result]:
        """Run commands in order; the first error stops the script (what ran before it stays).

        Consecutive STARTJOBs share one store transaction (at most ``STARTJOB_GROUP`` at a time, so the
        write lock is held briefly): a bulk submit costs one commit per group, not one per job.
        A STARTJOB with DEPENDS_ON runs on its own: its checks read the jobs written before it.
        Their results are returned only after that commit."""
        results, error = self.run_until_error(commands, session)
        if error is not None:
            raise error
        return results

    def run_until_error(self, commands: Sequence[statements.Command],
                        session: Session) -> tuple[list[Result], Exception | None]:
        """As :meth:`run_script`, but an error comes back with the results of the commands
        before it (``results[i]`` is the result of ``commands[i]``; the error is that of
        ``commands[len(results)]``): a shell prints those, then the error. A bug (not a
        FabricJobsError) comes back the same way."""
        results: list[Result] = []
        try:
            with self.batch():
                i = 0
                while i < len(commands):
                    j = i
                    while j < len(commands) and j - i < STARTJOB_GROUP and _groupable(commands[j]):
                        j += 1
                    if j == i:
                        results.append(self.execute(commands[i], session))
                        i += 1
                        continue
                    self._start_group(commands[i:j], session, results)
                    i = j
        except Exception as exc:  # a bug too: the results before it are still the script's
            return results, exc
        return results, None

    # -- SET -----------------------------------------------------------------------------------

    def set(self, cmd: statements.Set, session: Session) -> Result:
        session.set(cmd.key, cmd.value)
        return Result(status="SET")
