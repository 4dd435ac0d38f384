"""The console's bounded reads, on every backend (store/search.py): a search of the archived
jobs a page at a time, newest end first, with filters and a bound on what one page looks at;
capped counts of the live rows by status."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.search import BLOCKED, ArchiveQuery

NOW = datetime.now(timezone.utc).replace(microsecond=0)
FINAL = (Status.PROCESSED, Status.FAILED, Status.TERMINATED)


def _ended(store, uid: str, name: str, owner: str, status: Status, end: datetime, type: str = "USER_JOB") -> Job:
    row = store.insert(Job(key=JobKey(type, name, uid), status=Status.WAITING, creation_time=end - timedelta(minutes=1),
                           next_run=end, owner=owner)).row
    return store.cas(row, row.replace(status=status, archived=True, end_time=end)).row


@pytest.fixture
def history(store):
    """30 archived jobs an hour apart (j00 the newest), two names, two owners, three statuses;
    j03 resumed and ended again since (its last end is the newest); two live jobs."""
    jobs = [_ended(store, f"j{i:02}", ("Nightly.load", "Hourly.sync")[i % 2], ("ann", "bob")[i % 3 == 0],
                   FINAL[i % 3], NOW - timedelta(hours=i + 1), type="PROCESS" if i == 7 else "USER_JOB")
            for i in range(30)]
    again = store.cas(jobs[3], jobs[3].replace(status=Status.WAITING, archived=False, end_time=None)).row
    jobs[3] = store.cas(again, again.replace(status=Status.PROCESSED, archived=True, end_time=NOW - timedelta(minutes=1))).row
    for uid in ("live-1", "live-2"):
        store.insert(Job(key=JobKey("USER_JOB", "Nightly.load", uid), status=Status.WAITING, creation_time=NOW))
    return store, sorted(jobs, key=lambda j: (j.end_time, j.key), reverse=True)


def _pages(store, **filters) -> list[list[str]]:
    """Every page of a search, as UIDs, following the cursors to the end."""
    pages, after = [], None
    query = dict(since=NOW - timedelta(days=3), limit=7)
    query.update(filters)
    for _ in range(100):
        page = store.search_archived(ArchiveQuery(**query, after=after))
        pages.append([j.uid for j in page.jobs])
        assert len(page.jobs) <= query["limit"]
        if page.next is None:
            return pages
        after = page.next
    raise AssertionError("the cursor never came to an end")


def test_pages_of_a_search_are_every_archived_job_newest_end_first_once(history):
    store, jobs = history
    pages = _pages(store)
    assert [u for p in pages for u in p] == [j.uid for j in jobs]  # j03 once, first (its last end)
    assert all(len(p) == 7 for p in pages[:-1]) and pages[0][0] == "j03"
    assert not [u for p in pages for u in p if u.startswith("live")]


def test_the_filters_hold_and_a_page_looks_at_no_more_than_it_may(history):
    store, jobs = history

    def uids(**filters):
        return [u for p in _pages(store, **filters) for u in p]

    def expected(keep):
        return [j.uid for j in jobs if keep(j)]

    assert uids(name="NIGHTLY") == expected(lambda j: j.name == "Nightly.load")  # a part, in any case
    assert uids(uid="J1") == expected(lambda j: "j1" in j.uid)
    assert uids(owner="bob", statuses=frozenset({Status.FAILED})) == expected(
        lambda j: j.owner == "bob" and j.status is Status.FAILED)
    assert uids(type="PROCESS") == ["j07"] and uids(owner="nobody") == [] and uids(uid="%") == []
    window = dict(since=NOW - timedelta(hours=10, minutes=30), until=NOW - timedelta(hours=4, minutes=30))
    assert uids(**window) == expected(lambda j: window["since"] <= j.end_time < window["until"])
    assert uids(**window, statuses=frozenset({Status.TERMINATED})) == ["j05", "j08"]

    # Five entries a page at most: a page may come back with fewer jobs than asked (even
    # none), and a cursor; followed to the end, they find what one big page finds.
    few = _pages(store, examine=5, name="hourly", limit=50)
    assert len(few) >= 6 and [u for p in few for u in p] == expected(lambda j: j.name == "Hourly.sync")
    assert all(len(p) <= 5 for p in few)
    with pytest.raises(ValueError):
        ArchiveQuery(since=NOW, statuses=frozenset({Status.WAITING}))


def test_live_counts_count_each_status_up_to_the_cap(store):
    for i in range(7):
        store.insert(Job(key=JobKey("USER_JOB", "Count.me", f"w{i}"), status=Status.WAITING, creation_time=NOW, next_run=NOW))
    for i in range(3):
        store.insert(Job(key=JobKey("USER_JOB", "Count.me", f"s{i}"), status=Status.SCHEDULED, creation_time=NOW,
                         next_run=NOW + timedelta(hours=1)))
    store.insert(Job(key=JobKey("USER_JOB", "Count.me", "b"), status=Status.WAITING, creation_time=NOW, blocked=True))
    row = store.insert(Job(key=JobKey("USER_JOB", "Count.me", "r"), status=Status.WAITING, creation_time=NOW)).row
    store.cas(row, row.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1))
    # A run going on whose job was given new parents (UPDATEJOB DEPENDS_ON) counts as running,
    # and is no blocked row to free (the dependency check reads waiting rows only).
    going = store.insert(Job(key=JobKey("USER_JOB", "Count.me", "rb"), status=Status.WAITING, creation_time=NOW)).row
    store.cas(going, going.replace(status=Status.IN_PROCESS, worker_id="n1", epoch=1, blocked=True))
    _ended(store, "gone", "Count.me", "ann", Status.PROCESSED, NOW)
    counts = store.live_counts(100)
    assert {k: v for k, v in counts.items() if v} == {"WAITING": 7, "SCHEDULED": 3, BLOCKED: 1, "IN_PROCESS": 2}
    assert [j.key.uid for j in store.blocked_jobs(10)] == ["b"]
    capped = store.live_counts(5)
    assert capped["WAITING"] == 6 and capped["SCHEDULED"] == 3  # more than 5: counted as 6


def test_recent_runs_since_a_time_are_those_that_ended_then_or_after_without_output_or_log(store):
    from fabricjobs.store.base import RunRecord

    key = JobKey("USER_JOB", "Recent.one", "r")
    store.add_runs([RunRecord(key, i, "n1", None, NOW - timedelta(minutes=10 * i + 1), NOW - timedelta(minutes=10 * i),
                              "SKIPPED", "SCHEDULED", 0, output='{"big": 1}', log="a line") for i in range(1, 6)])
    assert [r.epoch for r in store.recent_runs(10, since=NOW - timedelta(minutes=30))] == [1, 2, 3]
    assert [r.epoch for r in store.recent_runs(2, since=NOW - timedelta(hours=2))] == [1, 2]
    assert store.recent_runs(10, since=NOW) == [] and len(store.recent_runs(10)) == 5
    assert all(r.output is None and r.log == "" for r in store.recent_runs(10))


def test_cassandra_archive_entries_of_before_version_17_are_checked_by_their_rows(store, request):
    """An archive entry written before schema version 17 has no owner or status: the search
    reads its row for them, and finds the job all the same."""
    if store.backend != "cassandra":
        pytest.skip("the archive by day is Cassandra's")
    jobs = [_ended(store, f"old{i}", "Legacy.job", ("ann", "bob")[i % 2], FINAL[i % 3], NOW - timedelta(hours=i + 1))
            for i in range(6)]
    for job in jobs:  # as a node of version 16 wrote them: the key and the end only
        write = store._archive_write(job)
        day, shard, end = write.params[:3]
        store._session.execute(f"UPDATE {store.keyspace}.k2_jobs_archived SET owner = null, status = null "
                               "WHERE day = %s AND shard = %s AND end_time = %s AND type = %s AND name = %s AND uid = %s",
                               (day, shard, end, job.type, job.name, job.uid))
    found = store.search_archived(ArchiveQuery(since=NOW - timedelta(days=1), owner="bob",
                                               statuses=frozenset({Status.FAILED, Status.PROCESSED}), limit=50))
    assert sorted(j.uid for j in found.jobs) == sorted(j.uid for j in jobs if j.owner == "bob" and j.status is not Status.TERMINATED)


def test_jobs_that_ended_in_the_same_millisecond_are_each_found_once_across_pages_and_reads(store):
    """600 jobs ended together (a script's STARTJOBs, one statement's runs): a search reads the
    archive in chunks and pages from a cursor, both bounds of (End Time, key). On Cassandra the
    entries of one millisecond come from 16 partitions: merged by End Time alone they came in
    partition order, and a read going on from a bound skipped some and repeated others."""
    end = NOW - timedelta(minutes=5)
    rows = [store.insert(Job(key=JobKey("USER_JOB", "Batch.load", f"b{i:03}"), status=Status.WAITING,
                             creation_time=end - timedelta(minutes=1), next_run=end)).row for i in range(600)]
    store.cas_many([(row, row.replace(status=Status.PROCESSED, archived=True, end_time=end)) for row in rows])
    pages = _pages(store, limit=50, since=NOW - timedelta(hours=1))
    found = [u for p in pages for u in p]
    assert found == [f"b{i:03}" for i in range(599, -1, -1)]  # each once, by key (descending) within the ms
