"""The index repair pass's store part (JobStore.repair_index), on every backend: a walk over
all shares reads every row once (a store without an index of its own is done at once), and a
live row that lost its index entry gets it back and is claimable again."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fabricjobs.model import Job, JobKey, Status

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def _job(uid: str, **kw) -> Job:
    return Job(key=JobKey("USER_JOB", "Probe.record", uid), status=Status.WAITING, creation_time=T0, next_run=T0, **kw)


def _walk(store, shares: int, limit: int = 7) -> tuple[int, int, int]:
    """(pages, rows read, entries restored) over every share."""
    pages = read = restored = 0
    for index in range(shares):
        cursor = None
        while True:
            page = store.repair_index((shares, index), cursor, limit)
            pages, read, restored = pages + 1, read + page.read, restored + page.restored
            if page.cursor is None:
                break
            cursor = page.cursor
    return pages, read, restored


def test_a_walk_over_every_share_reads_each_row_once_and_restores_nothing_when_nothing_is_lost(store):
    for i in range(40):
        store.insert(_job(f"r{i:02d}"))
    done = store.insert(_job("done")).row
    store.cas(done, done.replace(status=Status.PROCESSED, archived=True, end_time=T0))
    pages, read, restored = _walk(store, 3)
    if not store.keeps_index:
        assert (pages, read, restored) == (3, 0, 0)  # nothing of its own to repair: done at once
        return
    assert read == 41 and restored == 0
    assert store.stats.repair_rows == 41 and store.stats.index_restored == 0


def test_a_live_row_that_lost_its_index_entry_is_claimable_again_after_a_walk(store):
    if not store.keeps_index:
        pytest.skip("the database keeps this store's indexes")
    row = store.insert(_job("lost")).row
    store.insert(_job("kept"))
    store._session.execute(f"DELETE FROM {store.keyspace}.k2_jobs_index WHERE bucket = 'WAITING|4' AND shard IN "
                           f"(0, 1, 2, 3, 4, 5, 6, 7) AND next_run = %s AND type = 'USER_JOB' AND name = 'Probe.record'"
                           " AND uid = 'lost' AND revision = 1", (T0,))
    assert [j.key.uid for j in store.waiting(10)] == ["kept"]  # invisible: nothing reads a row without its entry
    assert _walk(store, 2)[2] == 1
    assert [j.key.uid for j in store.waiting(10)] == ["kept", "lost"]
    assert store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1)).applied
    assert _walk(store, 1)[2] == 0  # its new entry was written with the claim
