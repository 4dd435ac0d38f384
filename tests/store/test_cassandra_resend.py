"""A change sent again after its first send got no answer (the node's write-back keeps an
outcome whose write failed, and sends it later): on Cassandra the first send may have applied,
and the second is then refused by it. The store tells that apart from another writer's change
by the whole row (every value the change wrote), reports it applied and keeps the run's history
line; a change another writer made, even to the same status, owner and epoch, is still refused.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.errors import StoreError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.base import RunRecord

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
OUTCOME_LWT = r"UPDATE \w+\.k2_jobs USING TTL .* IF status"


def _claimed(store, uid: str) -> Job:
    key = JobKey("USER_JOB", "Probe.record", uid)
    row = store.insert(Job(key=key, status=Status.WAITING, creation_time=T0, next_run=T0)).row
    return store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=row.epoch + 1, start_time=T0)).row


def test_an_outcome_sent_again_after_a_lost_answer_is_ours_and_keeps_its_history_line(store, request):
    if request.node.callspec.params.get("store_config") != "cassandra":
        pytest.skip("needs the CQL test server's faults: an LWT that applies and whose answer is lost")
    server = request.getfixturevalue("cql_server")
    claimed = _claimed(store, "again")
    key = claimed.key
    done = claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=1))
    line = RunRecord(key, claimed.epoch, "n1", T0, T0, T0 + timedelta(seconds=1), "OK", "PROCESSED", 0)
    # The outcome's LWT applies but times out, and every read that could settle it times out too.
    server.faults.write_timeout(OUTCOME_LWT, applied=True, times=1)
    server.faults.add("read_timeout", r"SELECT .* FROM \w+\.k2_jobs WHERE", times=1000, statements="read")
    try:
        with pytest.raises(StoreError):
            store.cas_many([(claimed, done)], [line], whole=True)
    finally:
        server.faults.clear()
    again = store.cas_many([(claimed, done)], [line], whole=True)[0]  # the write-back sends it again
    assert again.applied and again.row.status is Status.PROCESSED
    assert [r.epoch for r in store.runs(key.type, key.name, key.uid)] == [claimed.epoch]


def test_a_change_another_writer_made_is_refused_even_with_the_same_status_owner_and_epoch(store):
    """Two STARTJOBs reuse one archived key at once, with other arguments: exactly one of them
    applies, and the other is told so (not both)."""
    claimed = _claimed(store, "twice")
    archived = store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0)).row
    results: list = [None, None]

    def start(i: int) -> None:
        new = Job(key=archived.key, status=Status.WAITING, creation_time=T0 + timedelta(hours=1),
                  next_run=T0 + timedelta(hours=1), arguments=f'{{"who": {i}}}')
        results[i] = store.insert(new)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.applied for r in results) == [False, True]
    winner = next(r for r in results if r.applied)
    assert store.get(archived.key).arguments == winner.row.arguments


MARK_LWT = r"UPDATE \w+\.k2_listener_files SET note .* IF note = null"


@pytest.mark.parametrize("applied", [False, True], ids=["lost", "applied"])
def test_a_file_mark_whose_lwt_timed_out_is_the_truth_not_a_rivals_mark(store, request, applied):
    """A mark's LWT that timed out is settled by a SERIAL read (itself tried again: the silent
    host may coordinate it too): applied, it is ours; not applied (nobody's mark there), it is
    sent again. Reported as not ours, the listener would skip a file that nobody handled (a
    real 3-node Cassandra showed it once, right after a heal)."""
    if request.node.callspec.params.get("store_config") != "cassandra":
        pytest.skip("needs the CQL test server's faults: an LWT that times out")
    server = request.getfixturevalue("cql_server")
    listener = JobKey("INTERFACE_LISTENER", "Inbox.watch", f"mark-{applied}")
    timed_out = server.faults.write_timeout(MARK_LWT, applied=applied, times=1)
    unsettled = server.faults.read_timeout(r"SELECT note FROM \w+\.k2_listener_files", times=1, statements="read")
    try:
        assert store.mark_file(listener, "a.csv", "seen")
    finally:
        server.faults.clear()
    assert (timed_out.fired, unsettled.fired) == (1, 1)
    assert store.marked_files(listener) == {"a.csv"}
    assert not store.mark_file(listener, "a.csv", "seen")  # and a second mark is a rival's


def test_a_file_mark_that_never_applies_is_an_error_not_a_rivals_mark(store, request):
    if request.node.callspec.params.get("store_config") != "cassandra":
        pytest.skip("needs the CQL test server's faults: an LWT that times out")
    server = request.getfixturevalue("cql_server")
    listener = JobKey("INTERFACE_LISTENER", "Inbox.watch", "never")
    server.faults.write_timeout(MARK_LWT, applied=False, times=100)
    try:
        with pytest.raises(StoreError, match="did not apply"):
            store.mark_file(listener, "a.csv", "seen")
    finally:
        server.faults.clear()
    assert store.marked_files(listener) == set()
