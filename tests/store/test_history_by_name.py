"""A job name's history, newest first, on every backend: however its runs are found (Cassandra:
pointers by name and day, byname.py), the history of the name is the newest lines that exist:
lines deleted under a pointer (DELETEHISTORY) do not hide the older ones."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fabricjobs.model import JobKey
from fabricjobs.store.base import RunRecord

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)


def _line(uid: str, epoch: int, minutes: int) -> RunRecord:
    end = T0 + timedelta(minutes=minutes)
    return RunRecord(JobKey("USER_JOB", "Orders.ship", uid), epoch, "n1", end, end, end, "OK", "PROCESSED", 0)


def test_the_newest_lines_of_a_name_survive_the_deletion_of_newer_ones(store):
    store.add_runs([_line("old", e, e) for e in (1, 2, 3)])
    store.add_runs([_line("new", e, 10 + e) for e in (1, 2)])
    assert [(r.key.uid, r.epoch) for r in store.runs("USER_JOB", "Orders.ship", limit=3)] == \
        [("new", 2), ("new", 1), ("old", 3)]
    assert store.delete_job_runs(JobKey("USER_JOB", "Orders.ship", "new")) == 2
    assert [(r.key.uid, r.epoch) for r in store.runs("USER_JOB", "Orders.ship", limit=2)] == [("old", 3), ("old", 2)]
    assert [(r.key.uid, r.epoch) for r in store.runs("USER_JOB", "Orders.ship", limit=1)] == [("old", 3)]
    assert len(store.runs("USER_JOB", "Orders.ship")) == 3
