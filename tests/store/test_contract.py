"""The store contract: every backend passes these, written once (see tests/backends.py).

A backend that does not pass this suite does not exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.base import KillRequest, NodeRow, RunRecord, Version, in_lane

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
HELPERS = Path(__file__).resolve().parent.parent / "helpers"


def job(uid="u1", name="Customer.userJob1", type="USER_JOB", status=Status.WAITING, **kw) -> Job:
    kw.setdefault("creation_time", T0)
    kw.setdefault("next_run", T0)
    return Job(key=JobKey(type, name, uid), status=status, **kw)


def claim(row: Job, node: str, at: datetime = T0) -> Job:
    return row.replace(status=Status.IN_PROCESS, worker_id=node, epoch=row.epoch + 1, start_time=at)


# -- insert ----------------------------------------------------------------------------------

def test_insert_new_row_starts_at_revision_1(store):
    res = store.insert(job(arguments='{"a": 1}'))
    assert res.applied
    assert res.row.revision == 1 and res.row.epoch == 0
    got = store.get(JobKey("USER_JOB", "Customer.userJob1", "u1"))
    assert got == res.row
    assert got.arguments == '{"a": 1}' and got.creation_time == T0 and got.next_run == T0


def test_insert_refused_while_a_live_row_has_the_key(store):
    first = store.insert(job(arguments='{"v": 1}')).row
    res = store.insert(job(arguments='{"v": 2}'))
    assert not res.applied
    assert res.row == first  # the live row that blocked it, unchanged
    assert store.get(first.key).arguments == '{"v": 1}'


def test_insert_many_writes_in_order_and_stops_at_the_first_refusal(store):
    """A script's STARTJOBs: each inserted as insert() would (an archived key reused, with its
    counting kept), up to the first refused one; the jobs after it are not written."""
    old = store.insert(job(uid="u005")).row
    old = store.cas(old, claim(old, "n1")).row
    store.cas(old, old.replace(status=Status.PROCESSED, archived=True, end_time=T0))
    results = store.insert_many([job(uid=f"u{i:03d}") for i in range(100)])
    assert [r.applied for r in results] == [True] * 100
    assert [r.row.key.uid for r in results] == [f"u{i:03d}" for i in range(100)]
    assert results[5].row.epoch == 2 and results[3].row.revision == 1
    assert len(store.live_jobs()) == 100

    live = store.insert(job(uid="v070")).row
    batch = [job(uid=f"v{i:03d}", arguments=f'{{"i": {i}}}') for i in range(90)] + [job(uid="w")]
    results = store.insert_many(batch)
    assert [r.applied for r in results] == [True] * 70 + [False]  # v070 is live: refused, the rest unwritten
    assert results[70].row == live
    assert store.get(JobKey("USER_JOB", "Customer.userJob1", "v069")).arguments == '{"i": 69}'
    assert store.get(JobKey("USER_JOB", "Customer.userJob1", "v071")) is None
    assert store.get(JobKey("USER_JOB", "Customer.userJob1", "w")) is None

    twice = store.insert_many([job(uid="x1"), job(uid="x2"), job(uid="x1"), job(uid="x3")])
    assert [r.applied for r in twice] == [True, True, False]  # the second x1 meets the first
    assert store.get(JobKey("USER_JOB", "Customer.userJob1", "x3")) is None
    assert store.insert_many([]) == []


def test_insert_replaces_an_archived_row_and_keeps_counting(store):
    row = store.insert(job()).row
    claimed = store.cas(row, claim(row, "n1")).row
    done = store.cas(claimed, claimed.replace(status=Status.PROCESSED, archived=True, end_time=T0, output='"ok"')).row
    assert done.epoch == 1 and done.revision == 3
    res = store.insert(job(arguments='{"again": true}'))
    assert res.applied
    assert res.row.status is Status.WAITING and not res.row.archived
    assert res.row.epoch == 2 and res.row.revision == 4  # never back to a value a stale writer holds
    assert res.row.arguments == '{"again": true}' and res.row.output is None
    assert len(store.live_jobs()) == 1


# -- compare-and-set ---------------------------------------------------------------------------

def test_cas_applies_when_the_row_is_as_read(store):
    row = store.insert(job()).row
    res = store.cas(row, claim(row, "node-a"))
    assert res.applied
    assert res.row.revision == row.revision + 1
    stored = store.get(row.key)
    assert stored == res.row
    assert (stored.status, stored.worker_id, stored.epoch) == (Status.IN_PROCESS, "node-a", 1)


@pytest.mark.parametrize("stale", ["revision", "epoch", "status", "worker_id"])
def test_cas_refused_on_any_stale_condition_column(store, stale):
    row = store.insert(job()).row
    mine = store.cas(row, claim(row, "node-a")).row
    wrong = {
        "revision": mine.replace(revision=mine.revision - 1),
        "epoch": mine.replace(epoch=mine.epoch + 5),
        "status": mine.replace(status=Status.WAITING),
        "worker_id": mine.replace(worker_id="node-b"),
    }[stale]
    res = store.cas(wrong, mine.replace(status=Status.PROCESSED, archived=True, end_time=T0))
    assert not res.applied
    assert res.current == Version(Status.IN_PROCESS, 1, "node-a", mine.revision)
    assert store.get(row.key) == mine


def test_cas_writes_only_what_changed_so_a_candidate_row_is_enough(store):
    row = store.insert(job(arguments='{"keep": "me"}', error_msg="old error", output='"out"')).row
    candidate = row.replace(arguments="{}", error_msg="", output=None)  # as an index might give it
    res = store.cas(candidate, claim(candidate, "node-a"))
    assert res.applied
    stored = store.get(row.key)
    assert res.row == stored
    assert (stored.arguments, stored.error_msg, stored.output) == ('{"keep": "me"}', "old error", '"out"')
    assert (stored.status, stored.worker_id, stored.epoch) == (Status.IN_PROCESS, "node-a", 1)


def test_a_claim_answers_with_the_row_it_claimed_though_it_moved_on_at_once(store, monkeypatch):
    """A backend that reads an applied write's row back (Cassandra: an applied LWT returns
    none) may find the change that followed it, a STOPJOB or UPDATEJOB quick to act on a row
    just claimed: the claim's answer is still the row as the claim left it (the run it starts
    is the one claimed, due when it was claimed); only what a candidate does not carry is read."""
    store.insert(job(uid="c", arguments='{"x": 1}', next_run=T0))
    candidate = next(j for j in store.waiting(10) if j.key.uid == "c")
    read_many, later = store.get_many, T0 + timedelta(hours=1)

    def stop() -> None:
        monkeypatch.setattr(store, "get_many", read_many)
        now = store.get(candidate.key)
        assert store.cas(now, now.replace(status=Status.STOPPING, next_run=later), whole=True).applied

    def changed_first(keys):
        stop()
        return read_many(keys)

    monkeypatch.setattr(store, "get_many", changed_first)
    res = store.cas(candidate, claim(candidate, "n1"))
    assert res.applied
    if store.get_many is changed_first:  # (a backend that answers without a read: the change comes after)
        stop()
    assert (res.row.status, res.row.worker_id, res.row.epoch, res.row.next_run, res.row.revision, res.row.arguments) \
        == (Status.IN_PROCESS, "n1", 1, T0, candidate.revision + 1, '{"x": 1}')
    assert (store.get(candidate.key).status, store.get(candidate.key).next_run) == (Status.STOPPING, later)


def test_a_claim_whose_row_cannot_be_read_back_at_once_still_answers_with_its_row(store, monkeypatch):
    """A backend that reads an applied write's row back, whose first read fails (a timeout on a
    host under load), reads it again: the claim applied, and its run must not be left
    unstarted (its row would stay IN_PROCESS with no run, then be taken for a lost one)."""
    from concurrent.futures import Future

    from fabricjobs.errors import StoreError

    for uid in ("now", "group"):
        store.insert(job(uid=uid, arguments='{"x": 1}', next_run=T0))
    read_many, failures = store.get_many, []

    def fails_once(keys):
        monkeypatch.setattr(store, "get_many", read_many)
        failures.append(keys)
        raise StoreError("a read timed out")

    candidates = {j.key.uid: j for j in store.waiting(10)}
    monkeypatch.setattr(store, "get_many", fails_once)
    res = store.cas(candidates["now"], claim(candidates["now"], "n1"))
    assert res.applied and (res.row.status, res.row.arguments) == (Status.IN_PROCESS, '{"x": 1}')
    monkeypatch.setattr(store, "get_many", fails_once)
    errors: list = []
    (answer,) = store.cas_each_within([(candidates["group"], claim(candidates["group"], "n1"))],
                                      on_error=errors.append, patience=5.0)
    res = answer.result(10) if isinstance(answer, Future) else answer
    assert errors == [] and res.applied and (res.row.status, res.row.arguments) == (Status.IN_PROCESS, '{"x": 1}')
    assert len(failures) == (0 if store.candidates_whole else 2)  # (SQLite answers without a read)


def test_cas_on_a_missing_row_reports_no_row(store):
    ghost = job(uid="ghost").replace(revision=1)
    res = store.cas(ghost, claim(ghost, "n1"))
    assert not res.applied and res.current is None
    assert store.get(ghost.key) is None


def test_cas_cannot_change_the_key(store):
    row = store.insert(job()).row
    with pytest.raises(ValueError):
        store.cas(row, row.replace(key=JobKey("USER_JOB", "other", "u1")))


def test_cas_many_decides_each_write_on_its_own(store):
    a = store.insert(job(uid="a")).row
    b = store.insert(job(uid="b")).row
    c = store.insert(job(uid="c")).row
    store.cas(b, claim(b, "thief"))  # b changes behind our back
    results = store.cas_many([(a, claim(a, "me")), (b, claim(b, "me")), (c, claim(c, "me"))])
    assert [r.applied for r in results] == [True, False, True]
    assert results[1].current.worker_id == "thief"
    assert store.get(a.key).worker_id == "me" and store.get(c.key).worker_id == "me"
    assert store.get(b.key).worker_id == "thief"
    assert store.cas_many([]) == []


def test_cas_many_of_a_large_mixed_batch_answers_each_pair_in_order(store):
    """A node writes a pass's claims and outcomes together: many rows, several shapes of
    change, some stale, one key twice (in order: the second pair, built from the same row as
    the first, finds the row changed by it). Each result is the one a lone CAS would give."""
    rows = [store.insert(job(uid=f"r{i:03d}", arguments=f'{{"i": {i}}}')).row for i in range(150)]
    stale = {7, 64, 100, 149}
    for i in stale:
        store.cas(rows[i], claim(rows[i], "thief"))
    pairs = []
    for i, row in enumerate(rows):
        new = claim(row, "me") if i % 3 else row.replace(priority=9, error_msg=f"note {i}")  # two shapes
        candidate = row.replace(arguments="{}") if i % 5 == 0 else row  # as the claim's index read gives it
        pairs.append((candidate, new))
    pairs.append((rows[10], rows[10].replace(priority=1)))  # r010 again, after its first write
    results = store.cas_many(pairs)
    assert len(results) == 151
    for i, res in enumerate(results[:150]):
        assert res.applied is (i not in stale), i
        if res.applied:
            assert res.row == store.get(rows[i].key) and res.row.revision == rows[i].revision + 1
            assert res.row.arguments == f'{{"i": {i}}}'  # not blanked by a candidate
        else:
            assert res.current.worker_id == "thief"
    assert not results[150].applied and results[150].current.revision == rows[10].revision + 1
    assert store.get(rows[10].key).priority == rows[10].priority  # the first write of r010 stands


def test_writes_of_whole_rows_return_the_rows_as_stored(store):
    """cas_many(whole=True), as the node writes outcomes (its rows read whole, never claim
    candidates): the store may skip reading and decoding the written rows back, but what it
    returns must be what a read finds: times to the microsecond, cleared values, flags, an
    archived row; a stale pair still loses with the current version."""
    at = T0 + timedelta(microseconds=654321)
    rows = [store.cas(r, claim(r, "n1", at)).row
            for r in (store.insert(job(uid=f"w{i}", arguments=f'{{"i": {i}}}', error_msg="old", priority=i)).row
                      for i in range(4))]
    ended = at + timedelta(seconds=1, microseconds=1)
    changes = [
        rows[0].replace(status=Status.PROCESSED, archived=True, end_time=ended, worker_id=None, output='{"r": 1}',
                        runs=1, successes=1),
        rows[1].replace(status=Status.SCHEDULED, next_run=ended + timedelta(hours=1), error_msg="", tries=0),
        rows[2].replace(status=Status.WAITING, worker_id=None, tries=1, error_msg="boom", next_run=ended),
    ]
    store.cas(rows[3], rows[3].replace(priority=9))  # rows[3] changes behind the writer's back
    pairs = list(zip(rows[:3], changes)) + [(rows[3], rows[3].replace(status=Status.PROCESSED))]
    results = store.cas_many(pairs, whole=True)
    assert [r.applied for r in results] == [True, True, True, False]
    assert results[3].current.revision == rows[3].revision + 1
    for row, res in zip(rows, results[:3]):
        stored = store.get(row.key) if not res.row.archived else store.archived_since(T0)[0]
        assert res.row == stored and res.row.revision == row.revision + 1
        assert (res.row.end_time, res.row.next_run, res.row.error_msg) == (stored.end_time, stored.next_run, stored.error_msg)


def test_a_group_of_whole_rows_and_claim_candidates_returns_each_row_as_stored(store):
    """A claim pass writes fires the node has whole (as its last outcome write returned them)
    and WAITING candidates of :meth:`waiting` (no arguments) in one group, a ``whole`` flag per
    pair: every applied write returns the row a read finds, arguments and all."""
    scheduled = store.insert(job(uid="fire", status=Status.SCHEDULED, arguments='{"x": "fire"}', worker_id="n1",
                                 next_run=T0, execution_interval="00:00:01")).row
    store.insert(job(uid="new", arguments='{"x": "new"}', next_run=T0))
    whole = store.get(scheduled.key)
    candidate = next(j for j in store.waiting(10) if j.key.uid == "new")
    at = T0 + timedelta(milliseconds=123)
    pairs = [(whole, claim(whole, "n1", at)), (candidate, claim(candidate, "n1", at))]
    results = store.cas_each_within(pairs, whole=[True, False], patience=5.0)
    assert [r.applied for r in results] == [True, True]
    for res in results:
        stored = store.get(res.row.key)
        assert res.row == stored and stored.status is Status.IN_PROCESS and stored.start_time == at
    assert [r.row.arguments for r in results] == ['{"x": "fire"}', '{"x": "new"}']


def test_writes_grouped_in_a_transaction_are_all_there_when_it_ends(store, store_config):
    """A script's STARTJOBs share one transaction: readable by their writer inside it (a later
    statement may depend on an earlier one), by everyone once it ends, nested blocks included."""
    from fabricjobs.config import load_config
    from fabricjobs.store import open_store

    other = open_store(load_config(store_config))
    try:
        with store.transaction():
            first = store.insert(job("t1")).row
            with store.transaction():
                store.cas(first, claim(first, "n1"))
                store.insert(job("t2"))
            assert store.get(first.key).status is Status.IN_PROCESS
        got = {j.key.uid: j.status for j in other.live_jobs()}
        assert got == {"t1": Status.IN_PROCESS, "t2": Status.WAITING}
    finally:
        other.close()


def test_values_are_data_never_code(store):
    nasty = [
        "it's; DROP TABLE k2_jobs; --",
        "O''Reilly \\' \" `x`",
        "ünïcødé ✓ 日本語 🚀",
        "'); DELETE FROM nodes; SELECT ('",
        "a\nb\tc",
    ]
    for i, text in enumerate(nasty):
        args = json.dumps({"v": text})
        row = store.insert(job(uid=text, name=f"N.{text}", arguments=args, error_msg=text, affinity=text)).row
        got = store.get(JobKey("USER_JOB", f"N.{text}", text))
        assert got == row
        assert (got.uid, got.arguments, got.error_msg, got.affinity) == (text, args, text, text)
    assert len(store.live_jobs()) == len(nasty)


# -- reads ---------------------------------------------------------------------------------------

def test_cas_each_keeps_the_other_results_when_one_write_fails(store):
    """A batch that raises is written one pair at a time: the good pairs apply and report so,
    the bad one reports None (and is named), nothing is silently lost."""
    rows = [store.insert(job(uid)).row for uid in ("a", "b", "c")]
    real = store.cas_many

    def flaky(pairs, runs=None, **kw):
        if len(pairs) > 1 or pairs[0][0].key.uid == "b":
            raise RuntimeError("the store hiccupped")
        return real(pairs, runs, **kw)

    store.cas_many = flaky
    failed = []
    results = store.cas_each([(r, claim(r, "n1")) for r in rows], on_error=lambda expected: failed.append(expected.key.uid))
    assert [r is not None and r.applied for r in results] == [True, False, True] and results[1] is None
    assert failed == ["b"]
    assert [store.get(r.key).worker_id for r in rows] == ["n1", None, "n1"]


def test_cas_each_within_answers_each_write_now_or_by_its_future(store):
    """A write that has not answered by the patience given comes back as a Future of its
    result; once settled, every answer is the one cas_each gives (with no patience at all, a
    backend that sends writes concurrently returns Futures; SQLite answers them all at once)."""
    from concurrent.futures import Future, wait

    rows = [store.insert(job(uid=f"w{i}")).row for i in range(6)]
    store.cas(rows[2], claim(rows[2], "thief"))
    results = store.cas_each_within([(r, claim(r, "me")) for r in rows], patience=0)
    wait([res for res in results if isinstance(res, Future)], timeout=60)
    answers = [res.result() if isinstance(res, Future) else res for res in results]
    assert [res.applied for res in answers] == [True, True, False, True, True, True]
    assert answers[2].current.worker_id == "thief"
    assert [store.get(r.key).worker_id for r in rows] == ["me", "me", "thief", "me", "me", "me"]
    assert all(res.row == store.get(rows[i].key) for i, res in enumerate(answers) if res.applied)
    assert store.cas_each_within([], patience=0) == []


def test_get_many_reads_each_key_in_order_archived_or_not(store):
    live = store.insert(job("a")).row
    gone = store.insert(job("b")).row
    gone = store.cas(gone, gone.replace(status=Status.PROCESSED, archived=True, end_time=T0)).row
    missing = JobKey("USER_JOB", "Customer.userJob1", "nope")
    assert store.get_many([gone.key, missing, live.key]) == [gone, None, live]
    assert store.get_many([]) == []
    # Several job names, more keys of one name than one read may ask for, a key twice: each
    # answer in its key's place.
    more = [r.row for r in store.insert_many([job(f"m{i:03d}") for i in range(120)])]
    other = store.insert(Job(JobKey("USER_JOB", "Customer.userJob3", "a"), Status.WAITING, T0, next_run=T0)).row
    keys = [other.key, *(r.key for r in reversed(more)), missing, live.key, other.key]
    assert store.get_many(keys) == [other, *reversed(more), None, live, other]


def test_live_jobs_filters_and_never_returns_archived_rows(store):
    for uid, name, typ in [("1", "A.x", "USER_JOB"), ("2", "A.x", "USER_JOB"), ("3", "B.y", "USER_JOB"), ("4", "p.sh", "PROCESS")]:
        store.insert(job(uid=uid, name=name, type=typ))
    gone = store.get(JobKey("USER_JOB", "A.x", "2"))
    store.cas(gone, gone.replace(status=Status.TERMINATED, archived=True, end_time=T0))
    keys = lambda rows: [(r.type, r.name, r.uid) for r in rows]
    assert keys(store.live_jobs()) == [("PROCESS", "p.sh", "4"), ("USER_JOB", "A.x", "1"), ("USER_JOB", "B.y", "3")]
    assert keys(store.live_jobs(type="USER_JOB")) == [("USER_JOB", "A.x", "1"), ("USER_JOB", "B.y", "3")]
    assert keys(store.live_jobs(type="USER_JOB", name="A.x")) == [("USER_JOB", "A.x", "1")]
    assert keys(store.live_jobs(type="USER_JOB", name="A.x", uid="2")) == []
    assert store.get(gone.key).archived


def test_live_jobs_pages_in_key_order_after_an_exclusive_bound(store):
    """A page of the live list (the HTTP API's cursor): the rows above ``after`` in key order,
    at most ``limit`` of them; the type and name filters hold within a page, archived rows
    never appear, and the pages put together are the unpaged list."""
    for i in range(12):
        store.insert(job(uid=f"u{i:02}", name=("A.x", "B.y")[i % 2], type="PROCESS" if i % 3 == 0 else "USER_JOB"))
    for uid in ("u04", "u05"):
        gone = store.get(JobKey("USER_JOB", "A.x" if uid == "u04" else "B.y", uid))
        store.cas(gone, gone.replace(status=Status.TERMINATED, archived=True, end_time=T0))

    def keys(rows):
        return [(r.type, r.name, r.uid) for r in rows]

    everything = keys(store.live_jobs())
    assert everything == sorted(everything) and len(everything) == 10
    assert ("USER_JOB", "A.x", "u04") not in everything and ("USER_JOB", "B.y", "u05") not in everything
    assert keys(store.live_jobs(limit=3)) == everything[:3]
    bound = JobKey(*everything[4])
    assert keys(store.live_jobs(after=bound)) == everything[5:]  # the bound itself is not returned
    assert keys(store.live_jobs(after=bound, limit=2)) == everything[5:7]
    assert keys(store.live_jobs(after=JobKey("USER_JOB", "A.x", "u04"), limit=1)) == [("USER_JOB", "A.x", "u08")]  # past an archived key
    assert store.live_jobs(after=JobKey(*everything[-1])) == [] and store.live_jobs(limit=0) == []
    for filters in ({}, {"type": "USER_JOB"}, {"type": "PROCESS"}, {"name": "B.y"}, {"type": "USER_JOB", "name": "A.x"}):
        unpaged = keys(store.live_jobs(**filters))
        assert unpaged == [k for k in everything if all(dict(zip(("type", "name"), k))[f] == v for f, v in filters.items())]
        pages, after = [], None
        while True:
            page = keys(store.live_jobs(**filters, after=after, limit=3))
            assert len(page) <= 3
            pages += page
            if len(page) < 3:
                break
            after = JobKey(*page[-1])
        assert pages == unpaged, filters
    # an ``after`` in another type or name than the filters: all of them, or none
    assert keys(store.live_jobs(type="USER_JOB", after=JobKey("PROCESS", "Z.z", "zz"))) == keys(store.live_jobs(type="USER_JOB"))
    assert store.live_jobs(type="PROCESS", after=JobKey("USER_JOB", "A.a", "")) == []
    assert keys(store.live_jobs(type="USER_JOB", name="B.y", after=JobKey("USER_JOB", "A.x", "zz"), limit=1)) == [("USER_JOB", "B.y", "u01")]
    assert store.live_jobs(type="USER_JOB", name="A.x", after=JobKey("USER_JOB", "B.y", "")) == []
    one = JobKey("USER_JOB", "B.y", "u07")
    assert keys(store.live_jobs(one.type, one.name, one.uid, after=JobKey("USER_JOB", "B.y", "u06"))) == [("USER_JOB", "B.y", "u07")]
    assert store.live_jobs(one.type, one.name, one.uid, after=one) == []


def test_archived_since_is_bounded_by_end_time(store):
    for i in range(4):
        row = store.insert(job(uid=f"u{i}", type="PROCESS" if i == 3 else "USER_JOB")).row
        store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(days=i)))
    store.insert(job(uid="live"))
    since = store.archived_since(T0 + timedelta(days=1))
    assert sorted(r.uid for r in since) == ["u1", "u2", "u3"]
    assert [r.uid for r in store.archived_since(T0 + timedelta(days=1), type="PROCESS")] == ["u3"]
    assert all(r.archived for r in since)


def test_archived_since_gives_a_page_by_key(store):
    for i in range(6):
        row = store.insert(job(uid=f"p{i}", name="A.x" if i < 5 else "B.y")).row
        store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(hours=i)))
    store.insert(job(uid="p9", name="A.x"))  # live: never in it
    since = T0 + timedelta(hours=1)
    assert [r.uid for r in store.archived_since(since, limit=2)] == ["p1", "p2"]
    after = JobKey("USER_JOB", "A.x", "p2")
    assert [r.uid for r in store.archived_since(since, after=after, limit=2)] == ["p3", "p4"]
    assert [r.uid for r in store.archived_since(since, after=after)] == ["p3", "p4", "p5"]
    assert [r.uid for r in store.archived_since(since, name="B.y")] == ["p5"]
    assert [r.uid for r in store.archived_since(since, name="A.x", after=JobKey("USER_JOB", "A.x", "p4"))] == []


def test_waiting_returns_claim_candidates_longest_due_first(store):
    for i in (3, 1, 2):
        store.insert(job(uid=f"w{i}", next_run=T0 + timedelta(seconds=i)))
    store.insert(job(uid="s", status=Status.SCHEDULED, next_run=T0))
    r = store.get(JobKey("USER_JOB", "Customer.userJob1", "w2"))
    store.cas(r, claim(r, "n"))
    assert [j.uid for j in store.waiting(10)] == ["w1", "w3"]
    assert [j.uid for j in store.waiting(1)] == ["w1"]
    first = store.waiting(1)[0]
    assert [j.uid for j in store.waiting(10, after=(first.next_run, first.key))] == ["w3"]


def test_by_status_and_by_owner(store):
    rows = {}
    for uid, status, owner in [
        ("a", Status.SCHEDULED, None), ("b", Status.SCHEDULED, "n1"), ("c", Status.WAITING, "n1"),
        ("d", Status.STOPPING, "n2"), ("e", Status.RESTART, "n1"), ("f", Status.SCHEDULED, "n2"),
        ("g", Status.IN_PROCESS, "n1"),
    ]:
        rows[uid] = store.insert(job(uid=uid, status=status, worker_id=owner)).row
    done = rows["f"]
    store.cas(done, done.replace(status=Status.TERMINATED, archived=True, end_time=T0))
    uids = lambda js: sorted(j.uid for j in js)
    assert uids(store.by_status([Status.STOPPING, Status.RESTART])) == ["d", "e"]
    assert uids(store.by_status([Status.SCHEDULED])) == ["a", "b"]  # archived f excluded
    assert len(store.by_status([Status.SCHEDULED], limit=1)) == 1
    assert uids(store.by_owner([None], [Status.SCHEDULED])) == ["a"]
    assert uids(store.by_owner(["n1"], [Status.SCHEDULED, Status.WAITING, Status.RESTART])) == ["b", "c", "e"]
    assert uids(store.by_owner(["n1", "n2"], [Status.IN_PROCESS])) == ["g"]
    assert uids(store.by_status([Status.IN_PROCESS])) == ["g"]
    assert uids(store.by_owner(["n1", "n2", None], [Status.SCHEDULED, Status.STOPPING])) == ["a", "b", "d"]
    assert store.by_owner([], [Status.SCHEDULED]) == []
    assert len(store.by_owner(["n1", None], [Status.SCHEDULED, Status.WAITING, Status.RESTART], limit=2)) == 2


def test_waiting_pages_past_rows_with_the_same_due_time(store):
    for i in range(7):
        store.insert(job(uid=f"p{i}", next_run=T0))
    seen, after = [], None
    while True:
        page = store.waiting(3, after=after)
        if not page:
            break
        seen += [j.uid for j in page]
        after = (page[-1].next_run, page[-1].key)
    assert seen == [f"p{i}" for i in range(7)]


def test_waiting_in_a_lane_reads_that_lanes_rows_and_every_owned_row_in_order(store):
    """A node among several reads its own claim lane only (node/lanes.py): the rows whose key
    falls in it, and the rows with an owner, whose lane owner precedence decides. In due order,
    paged like any read, and the same lanes in every backend as in the node (JobKey.lane)."""
    lanes, mine = 3, 1
    rows = [store.insert(job(uid=f"r{i:02}", next_run=T0 + timedelta(seconds=i),
                             worker_id="n0" if i % 5 == 0 else None)).row for i in range(30)]
    expected = [r.uid for r in rows if in_lane(r, (lanes, mine))]
    assert 0 < len(expected) < len(rows) and any(r.worker_id and r.key.lane(lanes) != mine for r in rows)
    assert all(r.worker_id is not None or r.key.lane(lanes) == mine for r in rows if r.uid in expected)
    assert [j.uid for j in store.waiting(100, lane=(lanes, mine))] == expected
    assert [j.uid for j in store.waiting(3, lane=(lanes, mine))] == expected[:3]
    seen, after = [], None
    while page := store.waiting(4, after=after, lane=(lanes, mine)):
        seen += [j.uid for j in page]
        after = (page[-1].next_run, page[-1].key)
    assert seen == expected
    assert [j.uid for j in store.waiting(100)] == [r.uid for r in rows]  # no lane: every row


def test_due_scheduled_is_per_owner_and_ordered_by_due_time(store):
    for uid, owner, offset in [("a", "n1", 30), ("b", "n1", 10), ("c", "n2", 5), ("d", "n1", 500), ("e", None, 1)]:
        store.insert(job(uid=uid, status=Status.SCHEDULED, worker_id=owner, next_run=T0 + timedelta(seconds=offset)))
    store.insert(job(uid="w", status=Status.WAITING, worker_id="n1", next_run=T0))
    assert [j.uid for j in store.due_scheduled("n1", T0 + timedelta(seconds=60), 10)] == ["b", "a"]
    assert [j.uid for j in store.due_scheduled("n1", T0 + timedelta(seconds=60), 1)] == ["b"]
    assert [j.uid for j in store.due_scheduled("n2", T0 + timedelta(seconds=60), 10)] == ["c"]
    assert store.due_scheduled("n3", T0 + timedelta(days=1), 10) == []


def test_a_store_whose_candidates_are_whole_says_so_truly(store):
    """The scheduler decides a fire by its row's schedule, calendar and late threshold: it
    reads the rows of due_scheduled and by_owner whole unless the store says they are
    (``candidates_whole``). A store that says so must return every column."""
    row = store.insert(job(uid="s", status=Status.SCHEDULED, worker_id="n1", next_run=T0, execution_interval="0 * * * *",
                           calendar="holidays", late_threshold="00:00:30", time_zone="Europe/Paris",
                           arguments='{"x": 1}')).row
    store.insert(job(uid="u", status=Status.SCHEDULED, next_run=T0, execution_interval="0 * * * *", calendar="holidays"))
    read = store.due_scheduled("n1", T0 + timedelta(seconds=1), 10) + store.by_owner([None], [Status.SCHEDULED])
    whole = store.get_many([j.key for j in read])
    assert [j.key for j in whole] == [row.key, JobKey("USER_JOB", "Customer.userJob1", "u")]
    assert (read == whole) == store.candidates_whole  # (Cassandra's index holds none of those columns)


def _needs_test_server_clock(store, request):
    if request.node.callspec.params.get("store_config") == "cassandra-real":
        pytest.skip("moves the CQL test server's clock; a real cluster's TTLs cannot be hurried")


@contextmanager
def _past_retention(store, request, delete, deleted: int):
    """The block runs 721 h after T0, past the 720 h retention: SQLite has run ``delete`` (as
    the node's periodic task does), which removed ``deleted`` rows; the CQL test server's clock
    is 721 h ahead, so Cassandra's TTLs have run out (and is put back: it serves the whole run)."""
    if store.backend == "sqlite":
        assert delete(T0 - timedelta(hours=720)) == deleted
        yield
        return
    server = request.getfixturevalue("cql_server")
    server.advance(721 * 3600)
    try:
        yield
    finally:
        server.time_offset -= 721 * 3600


def test_archived_rows_go_after_their_retention_live_rows_stay(store, store_config, request):
    """SQLite deletes them (the node's periodic task calls delete_archived); Cassandra writes
    archived rows with a TTL of K2JOB_ARCHIVING_TIME_HOUR (720 h by default)."""
    _needs_test_server_clock(store, request)
    for i in range(3):
        row = store.insert(job(uid=f"old{i}")).row
        store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 - timedelta(hours=721)))
    store.insert(job(uid="live", next_run=T0 - timedelta(days=90)))
    with _past_retention(store, request, store.delete_archived, 3):
        assert [j.uid for j in store.live_jobs()] == ["live"]
        assert all(store.get(JobKey("USER_JOB", "Customer.userJob1", f"old{i}")) is None for i in range(3))


# -- run history -------------------------------------------------------------------------------

def record(row: Job, result="OK", status="PROCESSED", end=T0, **kw) -> RunRecord:
    return RunRecord(row.key, row.epoch, row.worker_id or "n1", row.next_run, row.start_time, end, result, status,
                     row.tries, **kw)


def test_a_run_is_recorded_exactly_when_its_outcome_write_applies(store):
    a = store.insert(job(uid="a")).row
    a1 = store.cas(a, claim(a, "n1")).row
    stale = a1  # what a fenced-off executor still holds
    taken = store.cas(a1, a1.replace(worker_id="n2", epoch=a1.epoch + 1)).row  # another node took it over
    done = taken.replace(status=Status.PROCESSED, archived=True, end_time=T0, output='"ok"')
    late = stale.replace(status=Status.PROCESSED, archived=True, end_time=T0, output='"stale"')
    res = store.cas_many([(stale, late), (taken, done)],
                         runs=[record(stale, output='"stale"'), record(taken, output='"ok"', log="line 1\nline 2")])
    assert [r.applied for r in res] == [False, True]
    runs = store.runs("USER_JOB", "Customer.userJob1", "a")
    assert [(r.epoch, r.node, r.output) for r in runs] == [(2, "n2", '"ok"')]  # the stale run left no record
    assert store.run(a.key, 2).log == "line 1\nline 2" and store.run(a.key, 1) is None


def test_runs_are_listed_newest_first_per_job_name(store):
    for uid in ("u1", "u2"):
        row = store.insert(job(uid=uid)).row
        for i in range(3):
            row = store.cas(row, claim(row, f"n{i}")).row
            after = row.replace(status=Status.WAITING, tries=row.tries + 1, error_msg=f"boom {i}")
            store.cas_many([(row, after)], runs=[record(row, "ERROR", "WAITING", end=T0 + timedelta(seconds=i),
                                                        error=f"boom {i}", exit_code=3)])
            row = store.get(row.key)
    both = store.runs("USER_JOB", "Customer.userJob1")
    assert len(both) == 6
    u1 = store.runs("USER_JOB", "Customer.userJob1", "u1")
    assert [(r.epoch, r.error, r.exit_code, r.node) for r in u1] == [(3, "boom 2", 3, "n2"), (2, "boom 1", 3, "n1"), (1, "boom 0", 3, "n0")]
    assert [r.epoch for r in store.runs("USER_JOB", "Customer.userJob1", "u1", limit=2)] == [3, 2]
    assert store.runs("USER_JOB", "Nope") == []


def test_run_records_go_after_their_retention(store, request):
    _needs_test_server_clock(store, request)
    row = store.insert(job(uid="r")).row
    row = store.cas(row, claim(row, "n1")).row
    store.cas_many([(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 - timedelta(hours=721)))],
                   runs=[record(row, end=T0 - timedelta(hours=721))])
    assert len(store.runs("USER_JOB", "Customer.userJob1")) == 1
    with _past_retention(store, request, store.delete_runs, 1):
        assert store.runs("USER_JOB", "Customer.userJob1") == []


# -- live log lines (JOBLOG ... FOLLOW) ------------------------------------------------

def test_live_log_lines_are_read_in_order_from_a_number_on_per_run(store):
    key, other = JobKey("USER_JOB", "Customer.userJob1", "live"), JobKey("USER_JOB", "Customer.userJob1", "other")
    assert store.live_log(key, 1) == []
    store.append_live_log(key, 1, 0, ["first", "second 'quoted'; DROP TABLE k2_jobs --"])
    store.append_live_log(key, 1, 2, ["third", "x" * 5000])  # a long line, stored whole
    store.append_live_log(key, 2, 0, ["run 2"])
    store.append_live_log(other, 1, 0, ["not this job's"])
    store.append_live_log(key, 1, 4, [])  # nothing to write: nothing written
    assert store.live_log(key, 1) == [(0, "first"), (1, "second 'quoted'; DROP TABLE k2_jobs --"), (2, "third"),
                                      (3, "x" * 5000)]
    assert store.live_log(key, 1, after_seq=1) == [(2, "third"), (3, "x" * 5000)]
    assert store.live_log(key, 1, after_seq=0, limit=1) == [(1, "second 'quoted'; DROP TABLE k2_jobs --")]
    assert store.live_log(key, 1, after_seq=3) == []
    assert store.live_log(key, 2) == [(0, "run 2")] and store.live_log(other, 1) == [(0, "not this job's")]
    store.append_live_log(key, 1, 2, ["third", "x" * 5000])  # a node that writes a number again: no second line
    assert [seq for seq, _ in store.live_log(key, 1)] == [0, 1, 2, 3]
    assert [job.uid for job in store.live_jobs()] == []  # lines are no job rows


def test_live_log_lines_go_after_a_day_at_most(store, request):
    """SQLite: the retention clean-up (delete_runs) takes lines older than a day, whatever
    the retention; Cassandra: every line is written with a TTL of a day (no deletes)."""
    _needs_test_server_clock(store, request)
    key = JobKey("USER_JOB", "Customer.userJob1", "aged")
    store.append_live_log(key, 1, 0, ["old line"])
    if store.backend == "sqlite":
        store.delete_runs(T0 - timedelta(hours=720))  # the retention's cutoff: these lines are younger than a day
        assert store.live_log(key, 1) == [(0, "old line")]
        store.delete_runs(store.store_time() + timedelta(seconds=1))
        assert store.live_log(key, 1) == []
        return
    server = request.getfixturevalue("cql_server")
    server.advance(86400 - 60)
    try:
        assert store.live_log(key, 1) == [(0, "old line")]
        server.advance(120)
        assert store.live_log(key, 1) == []
    finally:
        server.time_offset -= 86400 + 60


def test_counters_are_columns_of_the_row(store):
    row = store.insert(job(uid="c")).row
    assert (row.runs, row.successes, row.failures, row.retries_error, row.retries_lost, row.kills) == (0,) * 6
    new = store.cas(row, row.replace(runs=3, successes=1, failures=2, retries_error=1, retries_lost=1, kills=1)).row
    assert store.get(row.key) == new and (new.runs, new.kills) == (3, 1)


def test_the_finishing_flag_is_kept_through_insert_cas_and_archive(store):
    """FINISHJOB's flag (docs/explanation/design-choices.md): set on a running row, kept while it runs, read back."""
    row = store.insert(job(uid="fin", execution_interval="00:00:01")).row
    assert row.finishing is False
    running = store.cas(row, claim(row, "n1")).row
    res = store.cas(running, running.replace(finishing=True))
    assert res.applied and res.row.finishing is True
    assert store.get(row.key).finishing is True
    done = store.cas(res.row, res.row.replace(status=Status.PROCESSED, archived=True, end_time=T0, finishing=False))
    assert done.applied and store.get(row.key).finishing is False
    again = store.insert(job(uid="fin", finishing=True)).row  # an archived key reused
    assert again.finishing is True and store.get(row.key).finishing is True


def test_late_action_is_stored_and_changed(store):
    row = store.insert(job(uid="late", late_threshold="00:00:05", late_action="USER_JOB.Probe.echo")).row
    assert store.get(row.key).late_action == "USER_JOB.Probe.echo"
    assert store.cas(row, row.replace(late_action="RUN")).row.late_action == "RUN"
    assert store.get(row.key).late_action == "RUN"
    failing = store.insert(job(uid="fails", on_failure="USER_JOB.Probe.echo")).row
    assert store.get(failing.key).on_failure == "USER_JOB.Probe.echo"
    assert store.cas(failing, failing.replace(on_failure="")).row.on_failure == ""
    assert store.get(failing.key).on_failure == ""


def test_owner_and_requestor_are_stored_and_kept(store):
    """A job's owner (DolphinDB's userID) and requestor (IPF's jobRequestor): written
    with the row, read back live and archived, changed by a CAS, kept by one that leaves them."""
    row = store.insert(job(uid="own", owner="alice", requestor="payments")).row
    assert (row.owner, row.requestor) == ("alice", "payments")
    assert (store.get(row.key).owner, store.get(row.key).requestor) == ("alice", "payments")
    assert [(j.owner, j.requestor) for j in store.live_jobs(type="USER_JOB", uid="own")] == [("alice", "payments")]
    running = store.cas(row, claim(row, "n1")).row
    assert (running.owner, running.requestor) == ("alice", "payments")  # a claim leaves them
    moved = store.cas(running, running.replace(requestor="billing")).row
    assert store.get(row.key).requestor == "billing" and store.get(row.key).owner == "alice"
    done = store.cas(moved, moved.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=1)))
    assert done.applied
    (archived,) = [j for j in store.archived_since(T0 - timedelta(days=1), type="USER_JOB") if j.uid == "own"]
    assert (archived.owner, archived.requestor) == ("alice", "billing")
    assert (store.get(store.insert(job(uid="anon")).row.key).owner, store.get(JobKey("USER_JOB", "Customer.userJob1", "anon")).requestor) == ("", "")


def test_the_kept_fire_of_runjob_is_set_and_cleared(store):
    """RUNJOB's resume_at (docs/explanation/design-choices.md): the fire a schedule goes on with after an extra run."""
    row = store.insert(job(uid="once", status=Status.SCHEDULED, execution_interval="00:00:30",
                           next_run=T0 + timedelta(seconds=30))).row
    assert row.resume_at is None
    due = store.cas(row, row.replace(status=Status.WAITING, next_run=T0, resume_at=row.next_run)).row
    assert store.get(row.key).resume_at == T0 + timedelta(seconds=30)
    assert [j.uid for j in store.waiting(10)] == ["once"]
    back = store.cas(due, due.replace(status=Status.SCHEDULED, next_run=due.resume_at, resume_at=None))
    assert back.applied and store.get(row.key).resume_at is None
    assert store.get(row.key).next_run == T0 + timedelta(seconds=30)


# -- scheduling: blocked jobs, priorities, listener marks ---------------------------------------

def test_blocked_jobs_are_never_claim_candidates(store):
    store.insert(job(uid="free", next_run=T0 + timedelta(seconds=2)))
    blocked = store.insert(job(uid="kid", blocked=True, depends_on="USER_JOB.A.b.p", next_run=T0)).row
    assert [j.uid for j in store.waiting(10)] == ["free"]
    assert [j.uid for j in store.waiting_by_priority(10)] == ["free"]
    found = store.blocked_jobs(10)
    assert [(j.uid, j.depends_on) for j in found] == [("kid", "USER_JOB.A.b.p")]
    store.cas(found[0], found[0].replace(blocked=False))
    assert [j.uid for j in store.waiting(10)] == ["kid", "free"] and store.blocked_jobs(10) == []
    assert {j.uid for j in store.by_status([Status.WAITING])} == {"kid", "free"}


def test_blocked_jobs_page_by_due_time(store):
    for i in range(5):
        store.insert(job(uid=f"k{i}", blocked=True, depends_on="USER_JOB.A.b.p", next_run=T0 + timedelta(seconds=i)))
    assert [j.uid for j in store.blocked_jobs(2)] == ["k0", "k1"]
    assert [j.uid for j in store.blocked_jobs(2, since=T0 + timedelta(seconds=1))] == ["k1", "k2"]  # at or after
    assert [j.uid for j in store.blocked_jobs(10, since=T0 + timedelta(seconds=3, milliseconds=1))] == ["k4"]


def test_waiting_by_priority_is_highest_first_then_longest_due(store):
    for uid, prio, offset in [("low", 0, 0), ("high", 9, 5), ("mid", 4, 1), ("high-old", 9, 1)]:
        store.insert(job(uid=uid, priority=prio, next_run=T0 + timedelta(seconds=offset)))
    assert [j.uid for j in store.waiting_by_priority(10)] == ["high-old", "high", "mid", "low"]
    assert [j.uid for j in store.waiting_by_priority(2)] == ["high-old", "high"]
    assert [j.uid for j in store.waiting(10)] == ["low", "high-old", "mid", "high"]


def test_a_listener_marks_each_file_once(store):
    listener = JobKey("INTERFACE_LISTENER", "Files.handle", "in")
    assert store.mark_file(listener, "a.csv", "handled")
    assert not store.mark_file(listener, "a.csv", "handled")
    assert store.mark_file(listener, "b.csv", "present at start")
    assert store.marked_files(listener) == {"a.csv", "b.csv"}
    assert store.marked_files(JobKey("INTERFACE_LISTENER", "Files.handle", "other")) == set()


def test_a_listeners_file_marks_go_with_its_row_and_stay_while_it_is_brought_back(store, request):
    """SQLite deletes them with the archived row; Cassandra gives them the row's TTL when it is
    archived and lifts it when a STARTJOB brings the row back."""
    _needs_test_server_clock(store, request)
    kept, gone = (JobKey("INTERFACE_LISTENER", "Files.handle", uid) for uid in ("kept", "gone"))
    for key in (kept, gone):
        row = store.insert(job(uid=key.uid, name=key.name, type=key.type)).row
        store.mark_file(key, "a.csv/1-2-3", "started")
        store.cas(row, row.replace(status=Status.TERMINATED, archived=True, end_time=T0 - timedelta(hours=721)))
    back = store.get(kept)
    assert store.insert(job(uid="kept", name=kept.name, type=kept.type, creation_time=T0)).applied
    assert store.get(kept).epoch > back.epoch
    with _past_retention(store, request, store.delete_archived, 1):
        assert store.get(gone) is None and store.marked_files(gone) == set()
        assert store.marked_files(kept) == {"a.csv/1-2-3"}


def test_skipped_fires_are_recorded_beside_the_runs(store):
    row = store.insert(job(uid="s", status=Status.SCHEDULED, worker_id="n1")).row
    store.add_runs([RunRecord(row.key, row.epoch, "n1", T0, None, T0 + timedelta(hours=3), "SKIPPED", "SCHEDULED", 0,
                              note="fire due at 12:00 skipped: 3 h late")])
    runs = store.runs("USER_JOB", "Customer.userJob1", "s")
    assert [(r.result, r.note) for r in runs] == [("SKIPPED", "fire due at 12:00 skipped: 3 h late")]
    assert store.run(row.key, row.epoch) is None  # a skipped fire is not a run


def test_deleting_a_jobs_runs_removes_them_all_and_only_them(store):
    rows = {}
    for uid in ("d1", "d2"):
        row = store.insert(job(uid=uid, status=Status.SCHEDULED, worker_id="n1")).row
        for i in range(3):
            row = store.cas(row, claim(row, "n1")).row
            after = row.replace(status=Status.SCHEDULED, tries=0)
            store.cas_many([(row, after)], runs=[record(row, "OK", "SCHEDULED", end=T0 + timedelta(seconds=i),
                                                        log=f"run {i}")])
            row = store.get(row.key)
        rows[uid] = row
    store.add_runs([RunRecord(rows["d1"].key, rows["d1"].epoch, "n1", T0, None, T0 + timedelta(hours=1), "SKIPPED",
                              "SCHEDULED", 0, note="skipped: late")])
    assert len(store.runs("USER_JOB", "Customer.userJob1", "d1")) == 4
    assert store.delete_job_runs(rows["d1"].key) == 4  # the runs and the skipped fire, as JOBHISTORY lists them
    assert store.runs("USER_JOB", "Customer.userJob1", "d1") == []
    assert store.run(rows["d1"].key, 1) is None
    assert [r.key.uid for r in store.runs("USER_JOB", "Customer.userJob1")] == ["d2"] * 3  # another uid: untouched
    assert store.get(rows["d1"].key) == rows["d1"]  # the job row: untouched
    assert store.delete_job_runs(rows["d1"].key) == 0  # nothing left: nothing to do, no error
    # A later run of the job is recorded and listed as before (same bucket, same day).
    row = store.cas(rows["d1"], claim(rows["d1"], "n1")).row
    store.cas_many([(row, row.replace(status=Status.SCHEDULED))], runs=[record(row, "OK", "SCHEDULED", end=T0 + timedelta(hours=2))])
    assert [r.epoch for r in store.runs("USER_JOB", "Customer.userJob1", "d1")] == [row.epoch]


def test_recent_runs_are_the_clusters_last_runs_newest_first(store):
    """JOBHISTORY RECENT n: every job's runs in one list, across names, types, hours and days;
    a fenced run is not in it, nor a deleted job history. (Ends near now: a backend may read
    only the retention back from today.)"""
    now = datetime.now(UTC).replace(microsecond=0)
    ends = {("USER_JOB", "A", "a"): [now - timedelta(hours=30), now - timedelta(minutes=5)],
            ("PROCESS", "b.sh", "b"): [now - timedelta(hours=2)],
            ("USER_JOB", "C", "c"): [now - timedelta(seconds=1)]}
    rows = {}
    for (type, name, uid), times in ends.items():
        row = store.insert(job(uid=uid, name=name, type=type, status=Status.SCHEDULED, worker_id="n1")).row
        for i, end in enumerate(times):
            row = store.cas(row, claim(row, f"n{i}")).row
            result = "OK" if uid != "b" else "ERROR"
            store.cas_many([(row, row.replace(status=Status.SCHEDULED))],
                           runs=[record(row, result, "SCHEDULED", end=end, error="" if result == "OK" else "exit code 3",
                                        output='"out"', log="a line")])
            row = store.get(row.key)
        rows[uid] = row
    stale = rows["c"]
    store.cas(stale, stale.replace(worker_id="n9", epoch=stale.epoch + 1))  # taken over: stale is fenced
    store.cas_many([(stale, stale.replace(status=Status.PROCESSED, archived=True, end_time=now))],
                   runs=[record(stale, end=now)])
    store.add_runs([RunRecord(rows["a"].key, rows["a"].epoch, "n1", now, None, now - timedelta(minutes=1), "SKIPPED",
                              "SCHEDULED", 0, note="skipped: late")])
    expected = [("c", 1, "OK", "n0"), ("a", 2, "SKIPPED", "n1"), ("a", 2, "OK", "n1"), ("b", 1, "ERROR", "n0"),
                ("a", 1, "OK", "n0")]
    assert [(r.key.uid, r.epoch, r.result, r.node) for r in store.recent_runs(10)] == expected
    top = store.recent_runs(2)
    assert [(r.key.uid, r.result) for r in top] == [("c", "OK"), ("a", "SKIPPED")]
    b = store.recent_runs(4)[3]
    assert (b.key, b.end, b.status, b.error, b.start) == (rows["b"].key, now - timedelta(hours=2), "SCHEDULED", "exit code 3", T0)
    assert store.delete_job_runs(rows["a"].key) == 3
    assert [(r.key.uid, r.epoch) for r in store.recent_runs(10)] == [("c", 1), ("b", 1)]
    assert store.recent_runs(1)[0].key == rows["c"].key


# -- nodes and kill requests ---------------------------------------------------------------------

def node_row(name="n1", beat=1, **kw) -> NodeRow:
    kw.setdefault("incarnation", "inc-1")
    return NodeRow(name=name, dc="DC1", host="h", pid=123, started=T0, version="0.1.0", beat=beat, **kw)


def test_node_rows_are_upserted_and_stamped_by_the_store_clock(store):
    before = datetime.now(UTC) - timedelta(seconds=5)
    store.write_node(node_row("n2", beat=1))
    store.write_node(node_row("n1", beat=1, tasks='[{"task": 1}]'))
    store.write_node(node_row("n1", beat=2, running=3, info='{"ANY": 25}', state="stopped"))
    rows = store.nodes()
    assert [r.name for r in rows] == ["n1", "n2"]
    n1 = rows[0]
    assert (n1.beat, n1.running, n1.info, n1.state, n1.tasks) == (2, 3, '{"ANY": 25}', "stopped", "[]")
    assert before <= n1.beat_time <= datetime.now(UTC) + timedelta(seconds=5)
    assert abs((store.store_time() - datetime.now(UTC)).total_seconds()) < 5
    n2 = next(r for r in store.nodes() if r.name == "n2")
    assert store.node("n1") == n1 and store.node("n2") == n2  # one row, as the whole table shows it
    store.delete_node(n2)
    assert [r.name for r in store.nodes()] == ["n1"]
    assert store.node("n2") is None and store.node("n9") is None


def test_deleting_a_node_row_spares_a_beat_written_after_the_read(store):
    """Forgetting a dead node acts on the row it read; if the node came back and beat again
    in between, that newer beat (and so the node) must stay visible."""
    store.write_node(node_row("n3", beat=1))
    stale = next(r for r in store.nodes() if r.name == "n3")
    time.sleep(0.002)  # a later write (Cassandra orders cells by write time)
    store.write_node(node_row("n3", beat=2))
    store.delete_node(stale)
    assert [(r.name, r.beat) for r in store.nodes()] == [("n3", 2)]
    store.delete_node(next(r for r in store.nodes() if r.name == "n3"))
    assert store.nodes() == []


def test_kill_requests_are_per_node_and_idempotent(store):
    req = KillRequest("n1", 52625, T0, "shell@h")
    store.add_kill_request(req)
    store.add_kill_request(req)
    store.add_kill_request(KillRequest("n2", 7, T0, "shell@h"))
    assert store.kill_requests("n1") == [req]
    store.delete_kill_request("n1", 52625)
    assert store.kill_requests("n1") == []
    assert [r.task for r in store.kill_requests("n2")] == [7]


# -- concurrency: real OS processes racing for the same rows -------------------------------------

def test_eight_processes_claim_500_rows_each_exactly_once(store, store_config, tmp_path):
    n_rows, n_procs = 500, 8
    for i in range(n_rows):
        store.insert(job(uid=f"r{i:03d}", next_run=T0 + timedelta(milliseconds=i)))
    go = tmp_path / "go"
    procs = []
    for p in range(n_procs):
        out = tmp_path / f"claims-{p}.json"
        procs.append((out, subprocess.Popen(
            [sys.executable, str(HELPERS / "claim_race.py"), str(store_config), f"proc-{p}", str(go), str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )))
    claims: dict[str, str] = {}
    per_proc = []
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("ready-*"))) < n_procs:
            assert time.monotonic() < deadline, "claimers did not start"
            assert all(p.poll() is None for _, p in procs), [p.communicate() for _, p in procs if p.poll() is not None]
            time.sleep(0.01)
        go.touch()
        for out, p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, stderr.decode()
            mine = json.loads(out.read_text())
            per_proc.append(len(mine))
            for uid, epoch in mine:
                assert uid not in claims, f"{uid} claimed twice"
                assert epoch == 1
                claims[uid] = out.stem
    finally:  # no claimer may outlive the test: its store (a keyspace) goes to the next test
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert len(claims) == n_rows
    assert sum(1 for n in per_proc if n > 0) >= 2, f"no contention happened: {per_proc}"
    rows = store.by_status([Status.IN_PROCESS])
    assert len(rows) == n_rows and store.waiting(10) == []
    for r in rows:
        # One applied claim per row: epoch 1, revision 2, and the owner is the one claimant.
        assert (r.epoch, r.revision) == (1, 2)
        assert f"claims-{r.worker_id.split('-')[1]}" == claims[r.uid]


def test_a_held_row_is_live_but_never_a_claim_or_schedule_candidate(store):
    """HELD (RJM's unreleased job): a live row of its own status, found by status
    and in the live list, never among the rows nodes claim or fire; released by compare-and-set."""
    held = store.insert(job(uid="held", status=Status.HELD, next_run=None, priority=9)).row
    store.insert(job(uid="w"))
    assert [j.uid for j in store.waiting(10)] == ["w"] and [j.uid for j in store.waiting_by_priority(10)] == ["w"]
    assert [j.uid for j in store.by_status([Status.HELD])] == ["held"]
    assert [j.uid for j in store.by_owner([None], [Status.SCHEDULED])] == []
    assert "held" in [j.uid for j in store.live_jobs()] and store.get(held.key).status is Status.HELD
    released = store.cas(held, held.replace(status=Status.WAITING, next_run=T0, epoch=held.epoch + 1))
    assert released.applied
    assert sorted(j.uid for j in store.waiting(10)) == ["held", "w"] and store.by_status([Status.HELD]) == []


def test_waiting_reads_only_the_priorities_asked_for(store):
    """node.id's PRIORITIES (RJM's rjmproc -p): a node's claim reads skip the rows it
    may not claim, so a backlog of those never fills its pages."""
    for p in (1, 4, 6, 9):
        store.insert(job(uid=f"p{p}", priority=p, next_run=T0 + timedelta(seconds=p)))
    assert [j.uid for j in store.waiting(10)] == ["p1", "p4", "p6", "p9"]
    assert [j.uid for j in store.waiting(10, priorities=(5, 9))] == ["p6", "p9"]
    assert [j.uid for j in store.waiting(1, priorities=(0, 4))] == ["p1"]
    first = store.waiting(1, priorities=(0, 4))[0]
    assert [j.uid for j in store.waiting(10, after=(first.next_run, first.key), priorities=(0, 4))] == ["p4"]
    assert [j.uid for j in store.waiting_by_priority(10, (4, 6))] == ["p6", "p4"]
    assert [j.uid for j in store.waiting_by_priority(10)] == ["p9", "p6", "p4", "p1"]
    assert store.waiting(10, priorities=(7, 8)) == [] and store.waiting_by_priority(10, (2, 3)) == []


def test_a_refresh_shows_a_priority_another_writer_used_first(store, store_config):
    """A node keeps what its store knows of where WAITING rows may be between two full passes
    (refresh(keep_for)); the refresh at a full pass (a doorbell after a STARTJOB) shows the
    rows of a priority another process used first meanwhile, in priority order."""
    from fabricjobs.config import load_config
    from fabricjobs.store import open_store

    store.refresh(keep_for=3600)
    store.insert(job(uid="p4", next_run=T0))
    assert [j.uid for j in store.waiting(10)] == ["p4"]
    other = open_store(load_config(store_config))
    try:
        other.insert(job(uid="p9", priority=9, next_run=T0 + timedelta(seconds=1)))
    finally:
        other.close()
    store.refresh(keep_for=3600)
    assert [j.uid for j in store.waiting(10)] == ["p4", "p9"]
    assert [j.uid for j in store.waiting_by_priority(10)] == ["p9", "p4"]
    store.refresh()  # back to reading it each time (shells, the web)
    assert [j.uid for j in store.waiting(10, priorities=(9, 9))] == ["p9"]


def test_a_store_kept_between_refreshes_sees_its_own_new_waiting_rows_at_once(store):
    """Between two refreshes a node's store may answer "nothing WAITING" from its last read;
    never once this store itself has made a row WAITING since (an insert, a claim given back)."""
    store.refresh(keep_for=3600)
    assert store.waiting(10) == []
    first = store.insert(job(uid="a", next_run=T0)).row
    assert [j.uid for j in store.waiting(10)] == ["a"]
    taken = store.cas(first, claim(first, "n1")).row
    assert store.waiting(10) == []
    store.cas(taken, taken.replace(status=Status.WAITING, worker_id=None, epoch=taken.epoch + 1))
    assert [j.uid for j in store.waiting(10)] == ["a"]


def test_calendars_are_created_replaced_listed_and_deleted(store):
    """IPF's job calendars (docs/explanation/design-choices.md) live in the store so that every node agrees on them; a
    job names one by its CALENDAR column."""
    from fabricjobs.calendar import make_calendar

    assert store.calendar("holidays") is None and store.calendars() == []
    holidays = make_calendar("holidays", ["2026-12-25", "2026-12-28..2026-12-30"])
    store.put_calendar(holidays)
    store.put_calendar(make_calendar("weekends", ["* * * * sat,sun"]))
    assert store.calendar("holidays") == holidays
    replaced = make_calendar("holidays", ["2027-01-01"])
    store.put_calendar(replaced)
    assert store.calendar("holidays") == replaced
    assert [c.name for c in store.calendars()] == ["holidays", "weekends"]
    assert store.delete_calendar("weekends") is True and store.delete_calendar("weekends") is False
    assert [c.name for c in store.calendars()] == ["holidays"]
    row = store.insert(job(uid="cal", calendar="holidays")).row
    assert row.calendar == "holidays" and store.get(row.key).calendar == "holidays"


def test_a_parallel_job_and_its_tasks_are_written_together_and_read_back(store):
    """PARALLELISM=n (DolphinDB's tasks of a job): the job (parallelism n, blocked on
    its tasks) and its n tasks (parallelism n, task_of the job's key, UID '<uid>/<i>'), inserted
    in one transaction; each column reads back, and the blocked job is among the blocked rows."""
    tasks = [job(uid=f"p/{i}", parallelism=3, task_of="USER_JOB.Customer.userJob1.p") for i in range(3)]
    parent = job(uid="p", parallelism=3, blocked=True, depends_on=",".join(str(t.key) for t in tasks))
    with store.transaction():
        results = store.insert_many([parent, *tasks])
    assert [r.applied for r in results] == [True] * 4
    assert store.get(parent.key).parallelism == 3 and store.get(parent.key).task_of == ""
    assert [(t.parallelism, t.task_of) for t in (store.get(k.key) for k in tasks)] == [(3, "USER_JOB.Customer.userJob1.p")] * 3
    assert [j.key for j in store.blocked_jobs(10)] == [parent.key]
    first = results[1].stored
    done = store.cas(first, first.replace(output='{"i": 0}')).row
    assert (done.parallelism, done.task_of, done.output) == (3, "USER_JOB.Customer.userJob1.p", '{"i": 0}')
