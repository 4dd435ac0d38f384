"""The console's two tables, each a bounded read of the store per request (shared by the
browsers that ask the same page within an interval): the live jobs a page at a time in key
order, and the history search of archived jobs, newest end first
(docs/explanation/design-choices.md, "The console reads a page").

Live jobs are read from the store's live listing from the cursor on, as many as the page needs;
filters the store cannot apply (a part of a name, a node, text) are applied to what is read, and
a page that has looked at :data:`LIVE_EXAMINE` jobs stops there with a cursor to go on. A
status with few jobs (at most :data:`SMALL_STATUS`, by the live view's counts) is read through
its index instead, so that the 20 running jobs among 10,000 waiting ones are one page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..cluster import NodeView
from ..errors import ValidationError
from ..model import FINAL_STATUSES, LIVE_STATUSES, Job, JobKey, JobType, Status
from ..service import CommandService
from ..store.base import JobStore
from ..store.search import BLOCKED, ArchivePage, ArchiveQuery, Cursor, folded
from .live import iso
from .schemas import record

PAGE_SIZES = (50, 100, 500, 1000)
LIVE_EXAMINE = 5000  # live jobs a page looks at, at most, when filters drop rows
SMALL_STATUS = 1000  # a status with at most this many live jobs is read through the live index by status
_READ = 200  # live rows read at a time once a filter drops some


@dataclass(frozen=True)
class LiveFilters:
    """The jobs table's filters: status (a live status, or BLOCKED), type exactly, node (the
    job's owner), a part of the name and text in the name, UID, type, node, affinity or notes
    (any case)."""

    status: str = ""
    type: str = ""
    name: str = ""
    node: str = ""
    q: str = ""

    def __post_init__(self) -> None:
        if self.status and self.status != BLOCKED and self.status not in {s.value for s in LIVE_STATUSES}:
            raise ValidationError(f"status must be a live status or BLOCKED, got {self.status!r}")
        if self.type:
            _job_type(self.type)

    def keeps(self, job: Job) -> bool:
        if self.status == BLOCKED and not job.waits_for_parents:
            return False
        if self.status not in ("", BLOCKED) and (job.status.value != self.status or job.waits_for_parents):
            return False
        if (self.type and job.type != self.type) or (self.node and job.worker_id != self.node):
            return False
        if self.name and folded(self.name) not in folded(job.name):
            return False
        text = " ".join((job.type, job.name, job.uid, job.worker_id or "", job.affinity or "ANY", job.error_msg))
        return not self.q or folded(self.q) in folded(text)


@dataclass(frozen=True)
class LivePage:
    jobs: list[Job]
    next: JobKey | None  # where the next page starts (None: the last page)
    partial: bool  # the page stopped after LIVE_EXAMINE jobs: more may match further on


def live_page(store: JobStore, filters: LiveFilters, after: JobKey | None, limit: int,
              counts: dict[str, int]) -> LivePage:
    small = filters.status and counts.get(filters.status, 0) <= SMALL_STATUS
    page = _by_status(store, filters, after, limit) if small else None
    if page is not None:
        return page
    found: list[Job] = []
    looked, size, last = 0, limit + 1, after
    while len(found) <= limit and looked < LIVE_EXAMINE:
        want = min(size, LIVE_EXAMINE - looked)
        rows = store.live_jobs(type=filters.type or None, after=last, limit=want)
        looked += len(rows)
        for row in rows:
            last = row.key
            if filters.keeps(row):
                found.append(row)
                if len(found) > limit:
                    break
        if len(rows) < want:
            return LivePage(found[:limit], found[limit - 1].key if len(found) > limit else None, False)
        size = max(2 * size, _READ)
    if len(found) > limit:
        return LivePage(found[:limit], found[limit - 1].key, False)
    return LivePage(found, last, True)


def _by_status(store: JobStore, filters: LiveFilters, after: JobKey | None, limit: int) -> LivePage | None:
    """The jobs of a status with few of them, read through the index (candidates, then their
    rows), in key order from the cursor on. None where the index holds more than that: the
    count leaves out rows the index has (WAITING's count is of those not blocked by parents,
    its index has both), and a cut candidate list would hide some of the few."""
    if filters.status == BLOCKED:
        candidates = store.blocked_jobs(SMALL_STATUS + 1)
    else:
        candidates = store.by_status([Status(filters.status)], limit=SMALL_STATUS + 1)
    if len(candidates) > SMALL_STATUS:
        return None
    keys = sorted(j.key for j in candidates if after is None or j.key > after)
    rows = [r for r in store.get_many(keys) if r is not None and not r.archived and filters.keeps(r)]
    return LivePage(rows[:limit], rows[limit - 1].key if len(rows) > limit else None, False)


@dataclass(frozen=True)
class HistoryFilters:
    """The history search's filters (store/search.py's ArchiveQuery, as the form gives them)."""

    since: datetime | None = None  # None: as far back as the store keeps them
    until: datetime | None = None
    type: str = ""
    name: str = ""
    uid: str = ""
    owner: str = ""
    status: str = ""

    def query(self, after: Cursor | None, limit: int, kept_since: datetime) -> ArchiveQuery:
        """The store's query; ``kept_since``: the oldest end the store still keeps."""
        since = max(self.since, kept_since) if self.since is not None else kept_since
        if self.status and self.status not in {s.value for s in FINAL_STATUSES}:
            raise ValidationError(f"status must be PROCESSED, FAILED or TERMINATED, got {self.status!r}")
        if self.until is not None and self.until <= since:
            raise ValidationError("the end of the window must come after its start (and within the retention)")
        return ArchiveQuery(since=since, until=self.until, type=_job_type(self.type) if self.type else None,
                            name=self.name, uid=self.uid, owner=self.owner or None,
                            statuses=frozenset({Status(self.status)}) if self.status else frozenset(),
                            after=after, limit=limit)


def history_page(store: JobStore, filters: HistoryFilters, after: Cursor | None, limit: int,
                 kept_since: datetime) -> ArchivePage:
    return store.search_archived(filters.query(after, limit, kept_since))


def rows(service: CommandService, jobs: list[Job], nodes: list[NodeView]) -> list[dict[str, Any]]:
    """JOBSTATUS's rows of ``jobs`` as JSON, with what the page links and draws by."""
    result = service.status_rows(jobs, nodes)
    out = []
    for job, row in zip(jobs, result.rows):
        item = {k: iso(v) for k, v in record(result.columns, row).items()}
        item.update(key=str(job.key), blocked=job.blocked, interval=job.execution_interval, owner=job.owner)
        out.append(item)
    return out


def _job_type(text: str) -> str:
    try:
        return JobType.parse(text).value
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
