"""A STARTJOB that reuses an archived key keeps its run counters, on every backend: the row's
Runs counts the key's runs, as JOBHISTORY lists them (docs/explanation/design-choices.md)."""

from __future__ import annotations

from datetime import datetime, timezone

from fabricjobs.model import RUN_COUNTERS, Job, JobKey, Status

T0 = datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)


def _job(uid: str) -> Job:
    return Job(key=JobKey("USER_JOB", "Customer.userJob1", uid), status=Status.WAITING, creation_time=T0, next_run=T0)


def _ran_and_ended(store, row: Job) -> Job:
    claimed = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=row.epoch + 1)).row
    counted = {c: getattr(claimed, c) + i + 1 for i, c in enumerate(RUN_COUNTERS)}
    return store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0, **counted)).row


def test_insert_and_insert_many_keep_the_counters_of_the_archived_row_they_reuse(store):
    first = _ran_and_ended(store, store.insert(_job("once")).row)
    assert first.runs == 1 and first.canceled == len(RUN_COUNTERS)
    again = store.insert(_job("once"))  # a new Job holds zeros: the stored counters win
    assert again.applied and again.row.status is Status.WAITING
    assert {c: getattr(again.row, c) for c in RUN_COUNTERS} == {c: getattr(first, c) for c in RUN_COUNTERS}
    assert store.get(first.key).runs == 1
    twice = _ran_and_ended(store, again.row)
    assert twice.runs == 2 and twice.successes == 4

    other = _ran_and_ended(store, store.insert(_job("bulk")).row)
    results = store.insert_many([_job("new-1"), _job("bulk"), _job("new-2")])
    assert [r.applied for r in results] == [True, True, True]
    assert results[1].row.runs == other.runs == 1 and results[1].row.kills == other.kills
    assert results[0].row.runs == 0 and results[2].row.runs == 0  # new keys start from zero
