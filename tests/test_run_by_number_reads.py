"""JOBLOG ... WITH UID ... RUN n and WAITJOB ... RUN n read that one run's line by its key, not
the job's whole history: a job that runs every second has 2.6 million lines over a 30-day
retention, each with its output and log (docs/explanation/cassandra-queue.md, "Listings").
Counted on the Cassandra backends by the rows the store's reads returned."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from backends import BACKENDS, add_sections, make_backend_config
from fabricjobs.client import Client
from fabricjobs.clock import ManualClock
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.store.base import RunRecord
from harness import ROOT

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
RUNS = 300
KEY = JobKey("USER_JOB", "Customer.userJob1", "often")


@pytest.fixture(params=[b for b in BACKENDS if b.startswith("cassandra")])
def client(request, tmp_path):
    path = make_backend_config(request, request.param, tmp_path)
    add_sections(path, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(path)
    c = Client(open_store(cfg), cfg, ManualClock(T0 + timedelta(days=1)), owns_store=True)
    yield c
    c.close()


def test_one_run_of_a_job_with_a_long_history_is_read_alone(client):
    store = client.store
    store.insert(Job(KEY, Status.SCHEDULED, T0, next_run=T0 + timedelta(days=2), execution_interval="1s",
                     epoch=RUNS, runs=RUNS))
    store.add_runs([RunRecord(KEY, n, "node-a", T0 + timedelta(seconds=n), T0 + timedelta(seconds=n),
                              T0 + timedelta(seconds=n, milliseconds=500), "OK", "SCHEDULED", 0,
                              output=f"output of run {n}", log=f"log of run {n}") for n in range(1, RUNS + 1)])
    shown = read_alone(store, client, "joblog user_job 'Customer.userJob1' with uid='often' run 7;")
    assert shown.status.startswith("run 7 of USER_JOB.Customer.userJob1.often") and "log of run 7" in shown.status
    waited = read_alone(store, client, "waitjob user_job 'Customer.userJob1' with uid='often' run 7;")
    assert len(waited.rows) == 1 and "output of run 7" in waited.rows[0], waited.rows


def read_alone(store, client, statement: str):
    """What ``statement`` shows, having read no more than a handful of rows."""
    before = store.stats.rows_read
    shown = client.fetch(statement)
    assert store.stats.rows_read - before <= 10, f"{statement} read {store.stats.rows_read - before} rows"
    return shown
