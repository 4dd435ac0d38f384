"""Reads a node's pass makes with a limit, on every backend: the limit bounds what is returned,
and never hides the rows asked for behind other owners' rows (on Cassandra the limit is also
carried into the read of each index partition)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fabricjobs.model import Job, JobKey, Status

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _owned(store, uid: str, owner: str, status: Status, due: timedelta) -> Job:
    row = store.insert(Job(JobKey("USER_JOB", "Probe.record", uid), Status.WAITING, T0, next_run=T0 + due)).row
    claimed = store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id=owner, epoch=row.epoch + 1)).row
    return store.cas(claimed, claimed.replace(status=status)).row if status is not Status.IN_PROCESS else claimed


def test_a_limited_read_of_an_owners_rows_finds_them_behind_other_owners_rows(store):
    for i in range(5):  # others' STOPPING rows, due first
        _owned(store, f"other{i}", "alive", Status.STOPPING, timedelta(seconds=i))
    mine = _owned(store, "mine", "dead", Status.STOPPING, timedelta(hours=1))
    assert [j.uid for j in store.by_owner(["dead"], [Status.IN_PROCESS, Status.STOPPING], limit=1)] == [mine.key.uid]
    _owned(store, "run", "dead", Status.IN_PROCESS, timedelta(hours=2))
    assert len(store.by_owner(["dead"], [Status.IN_PROCESS, Status.STOPPING], limit=1)) == 1
    assert {j.uid for j in store.by_owner(["dead"], [Status.IN_PROCESS, Status.STOPPING])} == {"mine", "run"}
    assert len(store.by_status([Status.STOPPING], limit=2)) == 2
