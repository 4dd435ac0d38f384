"""FINISHJOB and RUNJOB of a recurring job whose fire is due but still SCHEDULED: its owner
claims a due fire straight from SCHEDULED, and writes it WAITING only when it has no room for
it (docs/explanation/nodes.md#the-scheduler). Such a row is a due fire, as a WAITING one is,
not a job between fires."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.client import Client
from fabricjobs.clock import ManualClock
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from backends import add_sections
from harness import ROOT

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def client(store_config):
    add_sections(store_config, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(store_config)
    c = Client(open_store(cfg), cfg, ManualClock(T0), owns_store=True)
    yield c
    c.close()


def scheduled(client, uid: str, due: datetime) -> JobKey:
    key = JobKey("USER_JOB", "Customer.userJob1", uid)
    client.store.insert(Job(key, Status.SCHEDULED, T0 - timedelta(minutes=1), execution_interval="00:00:10",
                            next_run=due, worker_id="node-a", epoch=1))
    return key


def test_finishjob_of_a_due_fire_lets_it_run_then_ends_the_job(client):
    due = scheduled(client, "due", T0 - timedelta(milliseconds=100))
    between = scheduled(client, "between", T0 + timedelta(seconds=5))
    result = client.fetch("finishjob user_job name='Customer.userJob1';")
    notes = {r[2]: r[3:] for r in result.rows}
    assert notes["due"] == ("SCHEDULED", "finishing: this run completes, then no more fires")
    after = client.store.get(due)
    assert after.status is Status.SCHEDULED and after.finishing and after.next_run == T0 - timedelta(milliseconds=100)
    assert client.store.get(between).status is Status.PROCESSED  # between fires: ended at once


def test_runjob_of_a_due_fire_runs_nothing_more(client):
    due = scheduled(client, "due", T0 - timedelta(milliseconds=100))
    before = client.store.get(due)
    result = client.fetch("runjob user_job name='Customer.userJob1' uid='due';")
    assert result.rows[0][3:] == ("SCHEDULED", "already due: its run starts now")
    assert client.store.get(due) == before  # no extra run on top of the due one
