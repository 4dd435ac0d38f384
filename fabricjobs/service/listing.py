"""A page of jobs for programs (the HTTP API's job list): JOBSTATUS's rows and meaning, with
filters and a cursor that the command language has no words for.

The rows are JOBSTATUS's (:meth:`JobViews._status_row`), so the list and the shell agree on
what a job looks like. Live rows are read through the store's live index, from the cursor on
and only as many as the page needs (a page of 100 out of 100,000 scheduled jobs reads about
100 rows); archived rows only when asked for, bounded by a time window (as ``JOBSTATUS n DAYS
AGO``), so a list of live jobs never reads history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from ..cluster import read_cluster
from ..commands import values
from ..errors import ValidationError
from ..model import Job, JobKey, Status
from ..result import Result
from .views import LIST_COLUMNS, JobViews

MAX_PAGE = 1000
LIVE_READ, LIVE_READ_MAX = 200, 5000  # rows per read of the live list once a filter drops some


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, and which page of them (ordered by key).

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
    after: JobKey | None = None  # the last key of the previous page
    limit: int = 100


@dataclass(frozen=True)
class JobPage:
    result: Result  # JOBSTATUS's columns, one row per job
    next: JobKey | None  # ``after`` for the next page; None: this is the last one


class JobListing(JobViews):
    """The job list with filters and cursor paging."""

    def list_jobs(self, query: JobQuery) -> JobPage:
        if not 1 <= query.limit <= MAX_PAGE:
            raise ValidationError(f"limit must be from 1 to {MAX_PAGE}, got {query.limit}")
        try:
            type = values.job_type(query.type) if query.type is not None else None
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        if query.archived:
            jobs = self._with_archived(type, query)
        else:
            jobs = self._live_page(type, query) if query.live else []
        page = jobs[:query.limit]
        nodes = read_cluster(self.store) if page else []
        rows = tuple(self._status_row(j, nodes, who=True) for j in page)
        return JobPage(Result(LIST_COLUMNS, rows), page[-1].key if len(jobs) > query.limit else None)

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
        want, after, size = query.limit + 1, query.after, query.limit + 1
        found: list[Job] = []
        while len(found) < want:
            rows = read(after, size)
            found += [j for j in rows if _wanted(j, query)]
            if len(rows) < size:
                break
            after, size = rows[-1].key, min(max(2 * size, LIVE_READ), LIVE_READ_MAX)
        return found[:want]

    def _with_archived(self, type: str | None, query: JobQuery) -> list[Job]:
        """The page of archived jobs (and live ones with scope=all) after the cursor: each kind
        read a page at a time from the cursor on, then merged by key (a job is one or the
        other). The time window bounds the archived ones."""
        hours = self.config.get("jobs", "K2JOB_ARCHIVING_TIME_HOUR")
        since = query.since or self.clock.now() - timedelta(hours=hours)
        jobs = self._paged(lambda after, size: self.store.archived_since(since, type=type, name=query.name, after=after,
                                                                          limit=size), query)
        if query.live:
            jobs += self._live_page(type, query)
        return sorted(jobs, key=lambda j: j.key)[:query.limit + 1]


def _wanted(job: Job, query: JobQuery) -> bool:
    if query.after is not None and not job.key > query.after:
        return False
    if query.statuses and job.status not in query.statuses:
        return False
    if query.owner not in (None, job.owner) or query.requestor not in (None, job.requestor):
        return False
    when = job.end_time if job.archived else job.creation_time
    if query.since is not None and (when is None or when < query.since):
        return False
    return query.until is None or (when is not None and when < query.until)
