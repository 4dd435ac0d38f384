"""A page of jobs for programs (the HTTP API's job list): JOBSTATUS's rows and meaning, with
filters and a cursor that the command language has no words for.

The rows are JOBSTATUS's (:meth:`JobViews._status_row`), so the list and the shell agree on
what a job looks like. Live rows are read through the store's live index in key order, from
the cursor on and only as many as the page needs (a page of 100 out of 100,000 scheduled jobs
reads about 100 rows). Archived rows are read only when asked for, through the store's bounded
search of the archive, newest End Time first (store/search.py): a page looks at a bounded
number of archived jobs whatever the window holds, so a page of a month of history on a busy
cluster costs what a page of an hour does (docs/guides/http-api.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from ..cluster import read_cluster
from ..commands import values
from ..errors import ValidationError
from ..model import FINAL_STATUSES, Job, JobKey, Status
from ..result import Result
from ..store.search import ArchiveQuery, Cursor
from .views import LIST_COLUMNS, JobViews, archived_statuses

MAX_PAGE = 1000
LIVE_READ, LIVE_READ_MAX = 200, 5000  # rows per read of the live list once a filter drops some


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, and which page of them: live jobs by key, then archived ones newest End
    Time first.

    ``since``/``until``: a live job by its Creation Time, an archived one by its End Time (as
    ``JOBSTATUS n DAYS AGO``); archived jobs without ``since``: all those still kept."""

    type: str | None = None
    name: str | None = None
    statuses: frozenset[Status] = frozenset()
    live: bool = True
    archived: bool = False
    since: datetime | None = None
    until: datetime | None = None
    owner: str | None = None  # only the jobs this user (OS user or token name) started
    requestor: str | None = None  # only the jobs for this requestor ('': those without one)
    after: JobKey | Cursor | None = None  # the previous page's ``next``
    limit: int = 100


@dataclass(frozen=True)
class JobPage:
    result: Result  # JOBSTATUS's columns, one row per job
    #: ``after`` for the next page (None: this is the last one): a key while live jobs go on, a
    #: Cursor of the archive's search once they are done. A page of archived jobs may hold fewer
    #: than ``limit`` (none, even) when more follow: the search looked at all it may for one page.
    next: JobKey | Cursor | None


class JobListing(JobViews):
    """The job list with filters and cursor paging."""

    def list_jobs(self, query: JobQuery) -> JobPage:
        if not 1 <= query.limit <= MAX_PAGE:
            raise ValidationError(f"limit must be from 1 to {MAX_PAGE}, got {query.limit}")
        try:
            type = values.job_type(query.type) if query.type is not None else None
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        next: JobKey | Cursor | None = None
        jobs: list[Job] = []
        only_final = bool(query.statuses) and query.statuses <= FINAL_STATUSES  # (no live job has one)
        if query.live and not only_final and not isinstance(query.after, tuple):  # (a Cursor: live jobs are done)
            jobs = self._live_page(type, query)
            if len(jobs) > query.limit:
                jobs = jobs[:query.limit]
                next = jobs[-1].key
            elif query.archived and len(jobs) == query.limit:
                next = jobs[-1].key  # the archived ones from the next page on (no live job follows)
        if query.archived and next is None and len(jobs) < query.limit:
            ended, next = self._archived_page(type, query, query.limit - len(jobs))
            jobs += ended
        nodes = read_cluster(self.store) if jobs else []
        rows = tuple(self._status_row(j, nodes, who=True) for j in jobs)
        return JobPage(Result(LIST_COLUMNS, rows), next)

    def _archived_page(self, type: str | None, query: JobQuery, limit: int) -> tuple[list[Job], Cursor | None]:
        """Up to ``limit`` archived jobs of the window, newest end first, from the cursor on,
        and where the next page goes on: one bounded search of the archive."""
        statuses = archived_statuses(query.statuses)
        if statuses is None:
            return [], None
        # Within what the store keeps: the search reads the window a day at a time, and the
        # archived jobs of 2000-01-01 ... 2999-01-01 are those of the last K2JOB_ARCHIVING_TIME_HOUR.
        now = self.clock.now()
        kept = self._kept_since(now)
        since = max(query.since, kept) if query.since is not None else kept
        until = min(query.until, now + timedelta(days=1)) if query.until is not None else None
        if until is not None and until <= since:
            return [], None
        page = self.store.search_archived(ArchiveQuery(
            since=since, until=until, type=type, name=query.name or "", owner=query.owner, statuses=statuses,
            after=query.after if isinstance(query.after, tuple) else None, limit=limit))
        # The search matches a name as a part of it, in any case; the list means the name exactly.
        jobs = [j for j in page.jobs if query.name in (None, j.name) and query.requestor in (None, j.requestor)]
        return jobs, page.next

    def _live_page(self, type: str | None, query: JobQuery) -> list[Job]:
        """The first ``limit`` + 1 wanted live jobs after the cursor (the one more says that a
        next page exists)."""
        return self._paged(lambda after, size: self.store.live_jobs(type=type, name=query.name, after=after, limit=size),
                           query)

    def _paged(self, read: Callable[[JobKey | None, int], list[Job]], query: JobQuery) -> list[Job]:
        """The first ``limit`` + 1 wanted jobs after the cursor, ``read`` from the store in
        pages from the cursor on: a page costs about its size, not the number of jobs. The
        first read is the page itself; a filter that drops rows makes each next read twice
        the last (from LIVE_READ to LIVE_READ_MAX rows), so a sparse one costs a few reads,
        not hundreds."""
        want, size = query.limit + 1, query.limit + 1
        after = query.after if isinstance(query.after, JobKey) else None
        found: list[Job] = []
        while len(found) < want:
            rows = read(after, size)
            found += [j for j in rows if _wanted(j, query)]
            if len(rows) < size:
                break
            after, size = rows[-1].key, min(max(2 * size, LIVE_READ), LIVE_READ_MAX)
        return found[:want]


def _wanted(job: Job, query: JobQuery) -> bool:
    """Whether the live job ``job`` is one ``query`` lists on its page."""
    if isinstance(query.after, JobKey) and not job.key > query.after:
        return False
    if query.statuses and job.status not in query.statuses:
        return False
    if query.owner not in (None, job.owner) or query.requestor not in (None, job.requestor):
        return False
    when = job.end_time if job.archived else job.creation_time
    if query.since is not None and (when is None or when < query.since):
        return False
    return query.until is None or (when is not None and when < query.until)
