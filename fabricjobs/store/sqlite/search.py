"""The console's bounded reads on SQLite (store/search.py): a page of archived jobs through the
archive index, newest end first, and capped counts of the live rows through the live indexes."""

from __future__ import annotations

from typing import Callable, Sequence

from ...model import LIVE_STATUSES, Status
from ..search import BLOCKED, EXAMINE, ArchivePage, ArchiveQuery, Cursor
from .rows import _COLS, _row_to_job, _ts, _when

_ORDER = "end_time DESC, type DESC, name DESC, uid DESC"  # the archive index read backwards (no sort)
_ENTRIES = "SELECT end_time, type, name, uid FROM k2_jobs INDEXED BY k2_jobs_archive WHERE archived = 1"
# Each count reads the index that holds exactly its rows, up to the cap (LIMIT inside: COUNT
# stops there): WAITING rows that are not blocked, blocked ones, then each other live status.
# A row is counted BLOCKED while it waits (WAITING or SCHEDULED); a run going on counts as
# running even when its next run will wait for new parents (UPDATEJOB ... DEPENDS_ON).
_COUNT = "SELECT count(*) FROM (SELECT 1 FROM k2_jobs INDEXED BY {index} WHERE {where} LIMIT ?)"
_COUNTS = (
    (Status.WAITING.value, "k2_jobs_waiting", "status = 'WAITING' AND blocked = 0"),
    (BLOCKED, "k2_jobs_blocked", "blocked = 1 AND archived = 0 AND status IN ('WAITING', 'SCHEDULED')"),
    *((s.value, "k2_jobs_live_status",
       f"archived = 0 AND status = '{s.value}'" + (" AND blocked = 0" if s is Status.SCHEDULED else ""))
      for s in sorted(LIVE_STATUSES - {Status.WAITING})),
)


def _like(part: str) -> str:
    """A LIKE pattern for "holds ``part``" (SQLite's LIKE folds ASCII letters, as search.holds)."""
    return "%" + part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class Search:
    """search_archived and live_counts for SqliteStore."""

    _read: Callable[[str, Sequence], list]  # (Connections')

    def search_archived(self, query: ArchiveQuery) -> ArchivePage:
        """The archive index (End Time, then key) read backwards from the cursor, ``examine``
        entries at most, joined to the rows that the filters keep: one statement for the page,
        and, when it is not full, one for the last entry looked at (where the next goes on)."""
        examine = query.examine or EXAMINE["sqlite"]
        window, params = self._window(query)
        entries = f"{_ENTRIES}{window} ORDER BY {_ORDER} LIMIT ?"
        where, more = _filters(query)
        rows = self._read(f"SELECT {', '.join('j.' + c for c in _COLS.split(', '))} FROM ({entries}) AS e "
                          f"JOIN k2_jobs AS j USING (type, name, uid) WHERE j.archived = 1{where} "
                          f"ORDER BY j.{_ORDER.replace(', ', ', j.')} LIMIT ?",
                          [*params, examine, *more, query.limit + 1])
        jobs = [_row_to_job(r) for r in rows]
        if len(jobs) > query.limit:  # more match: the next page starts after this one's last
            last = rows[query.limit - 1]
            return ArchivePage(jobs[:query.limit], (last[10], last[0], last[1], last[2]), _when(last[10]))
        edge = self._read(f"{_ENTRIES}{window} ORDER BY {_ORDER} LIMIT 1 OFFSET ?", [*params, examine - 1])
        if edge:  # looked at all it may: the next page goes on after the last entry looked at
            return ArchivePage(jobs, (edge[0][0], edge[0][1], edge[0][2], edge[0][3]), _when(edge[0][0]))
        return ArchivePage(jobs, None, query.since)

    def _window(self, query: ArchiveQuery) -> tuple[str, list]:
        where, params = " AND end_time >= ?", [_ts(query.since)]
        if query.after is not None:
            where += " AND (end_time, type, name, uid) < (?, ?, ?, ?)"
            params += list(_cursor(query.after))
        elif query.until is not None:
            where += " AND end_time < ?"
            params.append(_ts(query.until))
        return where, params

    def live_counts(self, cap: int) -> dict[str, int]:
        counts = {}
        for label, index, where in _COUNTS:
            n = self._read(_COUNT.format(index=index, where=where), [cap + 1])[0][0]
            if n:
                counts[label] = n
        return counts


def _filters(query: ArchiveQuery) -> tuple[str, list]:
    where, params = "", []
    for column, value in (("type", query.type), ("owner", query.owner)):
        if value is not None:
            where += f" AND j.{column} = ?"
            params.append(value)
    for column, part in (("name", query.name), ("uid", query.uid)):
        if part:
            where += f" AND j.{column} LIKE ? ESCAPE '\\'"
            params.append(_like(part))
    if query.statuses:
        where += f" AND j.status IN ({', '.join('?' for _ in query.statuses)})"
        params += sorted(s.value for s in query.statuses)
    return where, params


def _cursor(after: Cursor) -> tuple:
    end, type, name, uid = after
    if not isinstance(end, (int, float)) or not all(isinstance(v, str) for v in (type, name, uid)):
        raise ValueError("not a cursor of this store")
    return float(end), type, name, uid
