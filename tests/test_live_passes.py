"""Statements that look at every live job (CALENDARS, DROPCALENDAR, RELEASEJOB's dependency
graph, an export) read them a page at a time: a cluster with many live jobs must not have a
shell or web process hold all of them at once to answer one statement."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fabricjobs.client import Client
from fabricjobs.config import load_config
from fabricjobs.errors import CommandError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.sqlite import SqliteStore
from harness import ROOT
from testkit.rig import write_config

FILLERS = 2_500  # live jobs ahead of the ones each statement is about, by key: pages 1 to 3
PAGE = 1_000


@pytest.fixture
def client(tmp_path):
    path = tmp_path / "j.db"
    config = write_config(tmp_path / "c.ini", {"store": {"BACKEND": "sqlite", "SQLITE_PATH": str(path)},
                                               "jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}})
    store = SqliteStore(path)
    now = datetime.now(timezone.utc)
    store.insert_many([Job(JobKey("USER_JOB", "Customer.filler", f"f{i:05d}"), Status.WAITING, now, next_run=now)
                       for i in range(FILLERS)])
    c = Client(store, load_config(config), owns_store=True)
    limits: list[int | None] = []
    read = store.live_jobs

    def live_jobs(type=None, name=None, uid=None, **kw):
        if name is None and uid is None:  # a read of every live job (one job name's are that statement's own)
            limits.append(kw.get("limit"))
        return read(type, name, uid, **kw)

    store.live_jobs = live_jobs
    c.read_limits = limits
    yield c
    c.close()


def _all_paged(client) -> None:
    assert client.read_limits and all(n is not None and n <= PAGE for n in client.read_limits), client.read_limits
    client.read_limits.clear()


def test_calendars_and_dropcalendar_count_the_users_on_every_page(client):
    client.fetch("createcalendar 'off' exclude '2000-01-01';")
    client.fetch("startjob user_job name='Customer.userJob1' uid='cal1' exec_interval='01:00:00' calendar='off';"
                 "startjob user_job name='Customer.userJob1' uid='cal2' exec_interval='01:00:00' calendar='off';")
    client.read_limits.clear()

    listed = client.fetch("calendars;")
    assert [(r[0], r[2]) for r in listed.rows] == [("off", 2)]  # both users, found past 2,500 other jobs
    _all_paged(client)

    with pytest.raises(CommandError, match=r"named by 2 live job\(s\), e.g. USER_JOB.Customer.userJob1.cal1"):
        client.fetch("dropcalendar 'off';")
    _all_paged(client)
    assert client.store.calendar("off") is not None  # refused: nothing dropped


def test_releasejob_finds_held_children_past_the_first_page(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='root' hold=true;"
                 "startjob user_job name='Customer.userJob1' uid='kid' hold=true "
                 "depends_on='USER_JOB.Customer.userJob1.root';")
    client.read_limits.clear()

    released = client.fetch("releasejob user_job name='Customer.userJob1' uid='root';")
    assert sorted(r[2] for r in released.rows) == ["kid", "root"], released.rows
    _all_paged(client)
    assert client.store.get(JobKey("USER_JOB", "Customer.userJob1", "root")).status is not Status.HELD
