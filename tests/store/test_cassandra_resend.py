"""A change sent again after its answer was lost (the node's write-back keeps an outcome whose
write failed and sends it later): on Cassandra the row already shows it, so the second send is
refused by its own first one. It is reported applied, and the run's history line, written
before the LWT, is kept: taking it back would delete the real run's line."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.base import RunRecord

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def test_an_outcome_sent_again_is_ours_and_keeps_its_history_line(store):
    if store.backend != "cassandra":
        pytest.skip("an outcome write's answer is never lost on SQLite: its transaction commits or not")
    key = JobKey("USER_JOB", "Probe.record", "again")
    row = store.insert(Job(key=key, status=Status.WAITING, creation_time=T0, next_run=T0)).row
    claimed = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=row.epoch + 1,
                                         start_time=T0)).row
    done = claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=1))
    line = RunRecord(key, claimed.epoch, "n1", T0, T0, T0 + timedelta(seconds=1), "OK", "PROCESSED", 0)
    assert store.cas_many([(claimed, done)], [line], whole=True)[0].applied
    again = store.cas_many([(claimed, done)], [line], whole=True)[0]
    assert again.applied and again.row.status is Status.PROCESSED
    assert [r.epoch for r in store.runs(key.type, key.name, key.uid)] == [claimed.epoch]
    # Another writer's change from the same row is still refused, and records nothing.
    other = claimed.replace(status=Status.FAILED, archived=True, end_time=T0 + timedelta(seconds=2), worker_id="n2")
    late = RunRecord(key, claimed.epoch, "n2", T0, T0, T0 + timedelta(seconds=2), "ERROR", "FAILED", 0)
    assert not store.cas_many([(claimed, other)], [late], whole=True)[0].applied
    assert [r.node for r in store.runs(key.type, key.name, key.uid)] == ["n1"]
