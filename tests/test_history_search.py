"""The console's history search finds a job that ended two days ago among 100,000 archived ones
on its first page, whatever else the search looks at (docs/guides/web-console.md#history):
the archived rows are written the fastest way the store allows (testkit/bulk.py), and the job
is searched by a part of its UID, by its name and owner, by the window it ended in and by its
status, through the console's own request on an in-process web app. On SQLite with 100,000
rows; on Apache Cassandra itself (when the run has one) with 3,000, the same searches. How fast
is ``scripts/bench.py console``'s figure (a speed goal is a benchmark's, not a test's)."""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta, timezone

import pytest

from backends import BACKENDS, add_sections, make_backend_config
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.web.app import Api, KeepSegments, create_app
from fabricjobs.web.tokens import Role, TokenFile
from testkit import bulk

NOW = datetime.now(timezone.utc).replace(microsecond=0)
ARCHIVED = {"sqlite": 100_000, "cassandra-real": 3_000}
TARGET = JobKey("USER_JOB", "Report.monthly", "invoice-2-days-ago")


def archived(count: int) -> list[Job]:
    """``count`` ended jobs over the last three days, a few names and owners; and the target,
    which ended two days ago (a FAILED one among them)."""
    jobs = []
    for i in range(count - 1):
        end = NOW - timedelta(seconds=1 + (i * 259_200 // count))
        jobs.append(Job(key=JobKey("USER_JOB", ("Nightly.load", "Hourly.sync", "Report.monthly")[i % 3], f"a{i:07d}"),
                        status=(Status.PROCESSED, Status.FAILED)[i % 7 == 0], creation_time=end - timedelta(minutes=2),
                        start_time=end - timedelta(minutes=1), end_time=end, archived=True, owner=("ann", "bob")[i % 2],
                        worker_id="old-node", epoch=1, runs=1))
    end = NOW - timedelta(days=2)
    jobs.append(Job(key=TARGET, status=Status.FAILED, creation_time=end - timedelta(minutes=2), start_time=end - timedelta(minutes=1),
                    end_time=end, archived=True, owner="carol", worker_id="old-node", epoch=1, runs=1, error_msg="no paper"))
    return jobs


@pytest.fixture(params=[b for b in BACKENDS if b in ARCHIVED])
def history(request, tmp_path):
    """An in-process web app on a store holding the archived jobs; its (client, store)."""
    path = add_sections(make_backend_config(request, request.param, tmp_path), {"web": {"CONSOLE_INTERVAL_SEC": 30}})
    cfg = load_config(path)
    jobs = archived(ARCHIVED[request.param])
    if request.param == "sqlite":
        bulk.archived_sqlite(cfg.get("store", "SQLITE_PATH"), jobs)
    store = open_store(cfg)
    request.addfinalizer(store.close)
    if request.param != "sqlite":
        bulk.archived_cassandra(store, jobs)
    api = Api(store, cfg, TokenFile(cfg.get("web", "TOKENS_FILE")))
    app = create_app(api)
    request.addfinalizer(app.state.live.stop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    token = api.tokens.create("viewer-1", Role.VIEWER)
    return TestClient(KeepSegments(app), base_url="http://console.test", headers={"Authorization": f"Bearer {token}"}), store


def test_a_job_that_ended_two_days_ago_is_found_on_the_first_page(history):
    client, store = history

    def first_page(**query: str) -> dict:
        got = client.get("/console/data/history", params=query)
        assert got.status_code == 200, got.text
        return got.json()

    window = {"since": (NOW - timedelta(days=2, hours=1)).isoformat(), "until": (NOW - timedelta(days=1, hours=23)).isoformat()}
    for query in ({"uid": "2-DAYS"}, {"name": "Report.monthly", "owner": "carol"}, {**window, "status": "FAILED", "uid": "invoice"},
                  {**window, "owner": "carol"}, {"owner": "carol", "status": "FAILED"}):
        page, pages = first_page(**query), 1
        while not page["jobs"] and page["next_cursor"] and pages < 10:  # a page looks at a bounded number of jobs
            page, pages = first_page(**query, cursor=page["next_cursor"]), pages + 1
        assert [(j["type"], j["name"], j["uid"]) for j in page["jobs"]] == [(TARGET.type, TARGET.name, TARGET.uid)], (query, page["jobs"][:3])
        assert page["jobs"][0]["status"] == "FAILED" and page["jobs"][0]["notes"] == "no paper"
        assert pages == 1, (query, pages)  # a page looks at 250,000 (SQLite), 80,000 (Cassandra)
    in_window = first_page(**window)  # everything that ended in those two hours, newest first
    ends = [j["end_time"] for j in in_window["jobs"]]
    assert len(ends) >= 80 and ends == sorted(ends, reverse=True), ends[:5]
    assert window["since"][:19] <= ends[-1][:19] and ends[0][:19] < window["until"][:19]
    newest = first_page()
    assert len(newest["jobs"]) == 100 and newest["next_cursor"] and newest["jobs"][0]["uid"] == "a0000000"
    older = first_page(cursor=newest["next_cursor"])
    assert older["jobs"][0]["uid"] == "a0000100"  # the next page goes on where the first ended
