"""A running run's log lines as they come (JOBLOG ... FOLLOW) on Cassandra.

``k2_live_log``: one partition per run (job key, epoch), its lines clustered by number. Every
line is written with a TTL (LIVE_LOG_KEEP_SEC, a day): the run record keeps the log for good,
so these lines are never deleted (no tombstones) and a table that only ever holds a day of
lines needs no clean-up. A partition holds one run's lines, read from a number on, in order.
"""

from __future__ import annotations

from typing import Sequence

from ..base import LIVE_LOG_KEEP_SEC
from ...model import JobKey
from .rows import Rows
from .session import _Write

_BIG_LINE = 2048  # characters: a longer line goes alone (a batch stays far below Cassandra's limits)


class LiveLog(Rows):
    """Live log lines: written by a run's node, read by FOLLOW."""

    def append_live_log(self, key: JobKey, epoch: int, first_seq: int, lines: Sequence[str]) -> None:
        stmt = self._stmt(("liveput",), "INSERT INTO k2_live_log (type, name, uid, epoch, seq, line) "
                                        "VALUES (?, ?, ?, ?, ?, ?) USING TTL ?")
        what = f"a live log line of run {epoch} of {key}"
        self._send([_Write(stmt, (key.type, key.name, key.uid, epoch, first_seq + i, line, LIVE_LOG_KEEP_SEC),
                           what=what, big=len(line) > _BIG_LINE)
                    for i, line in enumerate(lines)], bounded=False)

    def live_log(self, key: JobKey, epoch: int, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, str]]:
        stmt = self._stmt(("livesel",), "SELECT seq, line FROM k2_live_log WHERE type = ? AND name = ? AND uid = ? "
                                        "AND epoch = ? AND seq > ? LIMIT ?")
        rows = self._run(stmt, (key.type, key.name, key.uid, epoch, after_seq, limit))
        return [(int(r["seq"]), r["line"]) for r in rows]
