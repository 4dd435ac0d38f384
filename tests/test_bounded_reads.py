"""Reads bounded by what they return, not by how many jobs there are: 20,000 live jobs and
20,000 archived ones on Apache Cassandra, and a page of the HTTP API's job list (live or
archived), the next page, a filtered page and one job's JOBSTATUS each read about one page of
rows (the store's own count of rows returned by every read it sent: StoreStats.rows_read).
docs/explanation/cassandra-queue.md, "Listings"; docs/guides/http-api.md.

The jobs are written the fastest way there is, plain writes of their rows, index entries and
listing entries (what a STARTJOB writes, without its LWT), since what is measured is the reads.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta, timezone

import pytest

from backends import BACKENDS, make_backend_config
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.store.cassandra.listing import LIVE_SHARDS
from fabricjobs.web.app import Api, KeepSegments, create_app
from fabricjobs.web.tokens import Role, TokenFile

pytestmark = [pytest.mark.real_cassandra,
              pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="a read's cost on Apache Cassandra (real tier)")]

LIVE = 20_000
ARCHIVED = 20_000
OTHER = 10  # jobs of another name among them
PAGE = 50
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _bulk_load(store, jobs: list[Job]) -> None:
    from cassandra.concurrent import execute_concurrent

    row = store._stmt(("bulk-row",), "UPDATE k2_jobs SET status = ?, creation_time = ?, archived = ?, next_run = ?, "
                                     "revision = ?, epoch = ?, priority = ?, arguments = ? WHERE type = ? AND name = ? "
                                     "AND uid = ?")
    writes = []
    for job in jobs:
        k = job.key
        writes.append((row, (job.status.value, job.creation_time, False, job.next_run, 1, 0, job.priority,
                             job.arguments, k.type, k.name, k.uid)))
        for w in (store._entry_write(job, 1), store._listed_write(job)):
            writes.append((w.stmt, w.params))
    for ok, result in execute_concurrent(store._session._s, writes, concurrency=256, raise_on_first_error=True):
        assert ok, result


def _bulk_archive(store, jobs: list[Job]) -> None:
    """Archived rows with their archive entries (what an outcome that archives writes)."""
    from cassandra.concurrent import execute_concurrent

    row = store._stmt(("bulk-archived",), "UPDATE k2_jobs USING TTL ? SET status = ?, creation_time = ?, archived = ?, "
                                          "end_time = ?, revision = ?, epoch = ? WHERE type = ? AND name = ? AND uid = ?")
    writes = []
    for job in jobs:
        k = job.key
        writes.append((row, (store.archive_ttl, job.status.value, job.creation_time, True, job.end_time, 3, 1,
                             k.type, k.name, k.uid)))
        entry = store._archive_write(job)
        writes.append((entry.stmt, entry.params))
    for ok, result in execute_concurrent(store._session._s, writes, concurrency=256, raise_on_first_error=True):
        assert ok, result


@pytest.fixture(scope="module")
def api(request, tmp_path_factory):
    path = make_backend_config(request, "cassandra-real", tmp_path_factory.mktemp("bounded"))
    cfg = load_config(path)
    store = open_store(cfg)
    jobs = [Job(JobKey("USER_JOB", "Bulk.job", f"u{i:05d}"), Status.WAITING, T0, next_run=T0 + timedelta(milliseconds=i))
            for i in range(LIVE - OTHER)]
    jobs += [Job(JobKey("USER_JOB", "Bulk.other", f"o{i}"), Status.WAITING, T0, next_run=T0) for i in range(OTHER)]
    _bulk_load(store, jobs)
    ended = datetime.now(timezone.utc) - timedelta(hours=1)  # within the retention, whenever the test runs
    _bulk_archive(store, [Job(JobKey("USER_JOB", "Bulk.done", f"d{i:05d}"), Status.PROCESSED, T0, archived=True,
                              end_time=ended - timedelta(milliseconds=i)) for i in range(ARCHIVED)])
    api = Api(store, cfg, TokenFile(cfg.get("web", "TOKENS_FILE")))
    token = api.tokens.create("viewer", Role.VIEWER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    yield TestClient(KeepSegments(create_app(api)), raise_server_exceptions=False), store, {"Authorization": f"Bearer {token}"}
    store.close()


def _rows_read(store, call):
    before = store.stats.rows_read
    result = call()
    return result, store.stats.rows_read - before


def test_a_page_of_the_job_list_reads_one_page_of_rows_whatever_the_number_of_live_jobs(api):
    client, store, auth = api
    one_page = LIVE_SHARDS * (PAGE + 1) + (PAGE + 1) + 50  # listing rows per shard, the page's rows, the nodes
    answer, read = _rows_read(store, lambda: client.get(f"/api/v1/jobs?limit={PAGE}", headers=auth))
    assert answer.status_code == 200, answer.text
    first = [j["uid"] for j in answer.json()["jobs"]]
    assert first == [f"u{i:05d}" for i in range(PAGE)]
    print(f"\na page of {PAGE} among {LIVE} live jobs: {read} rows read")
    assert read <= one_page, f"{read} rows read for a page of {PAGE} among {LIVE} live jobs"
    cursor = answer.json()["next_cursor"]
    answer, read = _rows_read(store, lambda: client.get(f"/api/v1/jobs?limit={PAGE}&cursor={cursor}", headers=auth))
    assert [j["uid"] for j in answer.json()["jobs"]] == [f"u{i:05d}" for i in range(PAGE, 2 * PAGE)]
    assert read <= one_page, read
    # A name with 10 jobs among the 20,000: its page costs its own size.
    answer, read = _rows_read(store, lambda: client.get("/api/v1/jobs?type=USER_JOB&name=Bulk.other", headers=auth))
    assert sorted(j["uid"] for j in answer.json()["jobs"]) == [f"o{i}" for i in range(OTHER)]
    assert read <= LIVE_SHARDS * (OTHER + 1) + OTHER + 50, read


def test_one_jobs_status_reads_its_row(api):
    client, store, auth = api
    answer, read = _rows_read(store, lambda: client.post(
        "/api/v1/commands", headers=auth, json={"text": "jobstatus user_job 'Bulk.job' with uid='u12345';"}))
    assert answer.status_code == 200, answer.text
    assert read <= 50, read


def test_a_page_of_archived_jobs_reads_about_a_page_whatever_the_number_of_archived_jobs(api):
    """The archived list is the archive's search, newest end first: its first read of a day
    asks for a few pages' worth of entries, not for all it may look at (80,000); it read every
    archived key of the window before (20,000 here, millions on a busy cluster)."""
    client, store, auth = api
    one_page = 4 * (PAGE + 1) + 200 + 50  # the day's first read of entries, one read of their rows, the nodes
    answer, read = _rows_read(store, lambda: client.get(f"/api/v1/jobs?scope=archived&limit={PAGE}", headers=auth))
    assert answer.status_code == 200, answer.text
    assert [j["uid"] for j in answer.json()["jobs"]] == [f"d{i:05d}" for i in range(PAGE)]  # newest end first
    print(f"\na page of {PAGE} among {ARCHIVED} archived jobs: {read} rows read")
    assert read <= one_page, f"{read} rows read for a page of {PAGE} among {ARCHIVED} archived jobs"
    cursor = answer.json()["next_cursor"]
    answer, read = _rows_read(store, lambda: client.get(f"/api/v1/jobs?scope=archived&limit={PAGE}&cursor={cursor}",
                                                        headers=auth))
    assert [j["uid"] for j in answer.json()["jobs"]] == [f"d{i:05d}" for i in range(PAGE, 2 * PAGE)]
    assert read <= one_page, read
