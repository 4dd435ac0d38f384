"""The store's bounded reads for people looking at the cluster (the web console, JOBSTATUS's
status filter): a search of the archived jobs a page at a time, and capped counts of the live
ones (docs/explanation/design-choices.md, "The console reads a page").

Both cost a bounded amount of work whatever the store holds. ``search_archived``: at most
``query.limit`` jobs, newest End Time first, having looked at no more than ``query.examine``
archived jobs (the backend's EXAMINE when None), and where the next page goes on (None: no older
job matches); a job resumed and ended again is found once, at its last end. ``live_counts``:
each status's count stops a little past its cap ("more than cap"), a read of the live indexes
that costs about the cap a status at most, not the number of live rows; a count is of keys (a
change in flight counts once). Neither is read by a node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..model import FINAL_STATUSES, Job, Status

#: A page's cursor as a backend gives it: (End Time as the backend stores it, type, name, uid).
#: Plain JSON values, so that a client can carry it (the console and the API encode it).
Cursor = tuple[float | int, str, str, str]
#: Archived jobs a page looks at, at most, unless the query says: what each backend reads in well
#: under a second on a small host (SQLite reads its index at ~0.5 us an entry; Cassandra's driver
#: decodes ~100,000 archive entries a second, and reads the rows of those that pass the filters).
EXAMINE = {"sqlite": 250_000, "cassandra": 80_000}
BLOCKED = "BLOCKED"  # the key of live_counts for blocked rows (of any status)


@dataclass(frozen=True, slots=True)
class ArchiveQuery:
    """Which archived jobs :meth:`~fabricjobs.store.base.JobStore.search_archived` looks for.

    Those that ended in [``since``, ``until``), of ``type`` (exactly), whose name and UID hold
    ``name`` and ``uid`` (in any case of ASCII letters: "" matches all), started by ``owner``
    (exactly), in one of ``statuses`` (empty: any final one); newest End Time first, then key
    (descending); from ``after`` (the ``next`` of the page before) on."""

    since: datetime
    until: datetime | None = None
    type: str | None = None
    name: str = ""
    uid: str = ""
    owner: str | None = None
    statuses: frozenset[Status] = frozenset()
    after: Cursor | None = None
    limit: int = 50
    examine: int | None = None  # None: the backend's EXAMINE

    def wants(self, job: Job) -> bool:
        """Whether ``job`` (an archived row) is one this query looks for."""
        if not job.archived or job.end_time is None or job.end_time < self.since:
            return False
        if self.until is not None and job.end_time >= self.until:
            return False
        if (self.type not in (None, job.type) or self.owner not in (None, job.owner)
                or (self.statuses and job.status not in self.statuses)):
            return False
        return holds(job.name, self.name) and holds(job.uid, self.uid)

    def __post_init__(self) -> None:
        if not self.statuses <= FINAL_STATUSES:
            raise ValueError("an archived job's status is PROCESSED, FAILED or TERMINATED")


@dataclass(frozen=True, slots=True)
class ArchivePage:
    """One page of a search: the jobs found, where the next page goes on (None: no older job
    matches), and the End Time the search got down to (the console's "searched back to")."""

    jobs: list[Job]
    next: Cursor | None
    reached: datetime


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def folded(text: str) -> str:
    """``text`` with its ASCII letters in lower case (SQLite's LIKE folds those, no others)."""
    return text.translate(_ASCII_LOWER)


def holds(text: str, part: str) -> bool:
    return not part or folded(part) in folded(text)
