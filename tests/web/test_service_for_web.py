"""What the service gained for the HTTP API, in-process on a real SQLite store: who asked is
recorded (Session.actor), a job list with filters and a cursor, one run found as JOBLOG finds
it, and built commands checked by the parser's rules."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.client import Client
from fabricjobs.clock import ManualClock
from fabricjobs.commands import statements as st
from fabricjobs.config import load_config
from fabricjobs.errors import ValidationError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.service import JobQuery, Session
from fabricjobs.store import open_store
from backends import SEED_BACKENDS, add_sections, make_backend_config
from harness import ROOT

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def client(request, tmp_path):
    path = make_backend_config(request, "sqlite", tmp_path)
    add_sections(path, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(path)
    c = Client(open_store(cfg), cfg, ManualClock(T0), owns_store=True)
    yield c
    c.close()


def notes(client, uid):
    return client.store.get(JobKey("USER_JOB", "Customer.userJob1", uid)).error_msg


def test_a_change_made_for_an_actor_names_it_in_the_jobs_notes_and_the_shells_way_stays_silent(client):
    web = Session(actor="token 'ops'")
    service = client.service
    service.execute(st.StartJob("USER_JOB", "Customer.userJob1", uid="a"), web)
    assert notes(client, "a").startswith("STARTJOB by token 'ops' on ")
    service.execute(st.StopJob("USER_JOB", "Customer.userJob1", uid="a"), web)
    assert notes(client, "a").startswith("STOPJOB by token 'ops' on ")
    service.execute(st.ResumeJob("USER_JOB", "Customer.userJob1", uid="a"), web)
    assert notes(client, "a").startswith("RESUMEJOB by token 'ops' on ")
    service.execute(st.UpdateJob("USER_JOB", "Customer.userJob1", uid="a", priority=7), web)
    assert notes(client, "a").startswith("UPDATEJOB by token 'ops' on ")
    service.execute(st.RestartJob("USER_JOB", "Customer.userJob1", uid="a"), web)
    assert notes(client, "a").startswith("RESTARTJOB by token 'ops' on ")
    client.fetch("startjob user_job name='Customer.userJob1' uid='b'; stopjob user_job name='Customer.userJob1' uid='b';")
    assert notes(client, "b") == ""


def test_a_blocked_jobs_notes_keep_saying_what_it_waits_for(client):
    client.fetch("startjob user_job name='Customer.userJob1' uid='parent';")
    client.service.execute(st.StartJob("USER_JOB", "Customer.userJob1", uid="child",
                                       depends_on=(JobKey("USER_JOB", "Customer.userJob1", "parent"),)),
                           Session(actor="token 'ops'"))
    assert notes(client, "child").startswith("waiting for ")


def test_the_job_list_filters_and_pages_by_key_without_reading_history_unless_asked(client):
    for uid in ("a", "b", "c", "d"):
        client.fetch(f"startjob user_job name='Customer.userJob1' uid='{uid}';")
    client.fetch("stopjob user_job name='Customer.userJob1' uid='d';")
    service = client.service
    first = service.list_jobs(JobQuery(limit=2))
    assert [r[2] for r in first.result.rows] == ["a", "b"] and first.next == JobKey("USER_JOB", "Customer.userJob1", "b")
    second = service.list_jobs(JobQuery(limit=2, after=first.next))
    assert [r[2] for r in second.result.rows] == ["c"] and second.next is None
    archived = service.list_jobs(JobQuery(live=False, archived=True))
    assert [(r[2], r[3]) for r in archived.result.rows] == [("d", "TERMINATED")]
    both = service.list_jobs(JobQuery(archived=True, statuses=frozenset({Status.TERMINATED, Status.WAITING})))
    assert len(both.result.rows) == 4
    assert service.list_jobs(JobQuery(type="process")).result.rows == ()
    assert service.list_jobs(JobQuery(since=T0 + timedelta(seconds=1))).result.rows == ()
    assert len(service.list_jobs(JobQuery(until=T0 + timedelta(seconds=1))).result.rows) == 3
    with pytest.raises(ValidationError, match="unknown job type"):
        service.list_jobs(JobQuery(type="nope"))
    with pytest.raises(ValidationError, match="limit"):
        service.list_jobs(JobQuery(limit=0))


@pytest.mark.parametrize("backend", SEED_BACKENDS)
def test_the_live_list_reads_a_page_from_the_store_not_every_live_job(request, tmp_path, monkeypatch, backend):
    """1,000 live jobs, one in 50 SCHEDULED: the pages of a status filter that matches sparse
    rows (more rows than one read of the store holds) put together are the unpaged list, and
    no page reads every live row; a page without a filter reads its own rows and one more."""
    path = make_backend_config(request, backend, tmp_path)
    add_sections(path, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(path)
    with Client(open_store(cfg), cfg, ManualClock(T0), owns_store=True) as c:
        store = c.store
        store.insert_many([Job(JobKey("USER_JOB", "Customer.userJob1", f"j{i:04}"),
                               Status.SCHEDULED if i % 50 == 7 else Status.WAITING, T0, next_run=T0) for i in range(1000)])
        gone = store.get(JobKey("USER_JOB", "Customer.userJob1", "j0057"))
        store.cas(gone, gone.replace(status=Status.TERMINATED, archived=True, end_time=T0))
        scheduled = [j.uid for j in store.live_jobs() if j.status is Status.SCHEDULED]
        assert len(scheduled) == 19
        reads: list[int] = []  # rows per read of the live list
        live_jobs = store.live_jobs

        def counted(*args, **kwargs):
            rows = live_jobs(*args, **kwargs)
            reads.append(len(rows))
            return rows

        monkeypatch.setattr(store, "live_jobs", counted)
        pages, after = [], None
        while True:
            page = c.service.list_jobs(JobQuery(statuses=frozenset({Status.SCHEDULED}), limit=3, after=after))
            pages.append([r[2] for r in page.result.rows])
            assert sum(reads) < 700, reads  # one page's reads
            reads.clear()
            if page.next is None:
                break
            after = page.next
        assert sum(pages, []) == scheduled and all(len(p) == 3 for p in pages[:-1]) and len(pages[-1]) == 1
        first = c.service.list_jobs(JobQuery(limit=100, after=JobKey("USER_JOB", "Customer.userJob1", "j0499")))
        assert [r[2] for r in first.result.rows] == [f"j{i:04}" for i in range(500, 600)] and reads == [101]


@pytest.mark.parametrize("backend", SEED_BACKENDS)
def test_the_list_of_archived_and_live_jobs_reads_a_page_not_the_whole_window(request, tmp_path, monkeypatch, backend):
    """scope=all: 300 ended jobs within the window and 300 live ones. A page read every live row
    and every archived row of the window (600 rows for a page of 25; on Cassandra every key of
    the window, millions on a busy cluster); now a page reads a page of live rows from the
    cursor on, then, once they are done, makes one bounded search of the archive, newest end
    first (service/listing.py). The pages put together are every job: the live ones by key,
    then the archived ones newest end first."""
    path = make_backend_config(request, backend, tmp_path)
    add_sections(path, {"jobs": {"USER_JOBS_DIR": ROOT / "examples" / "jobs"}, "node": {"TIME_ZONE": "UTC"}})
    cfg = load_config(path)
    with Client(open_store(cfg), cfg, ManualClock(T0 + timedelta(minutes=5)), owns_store=True) as c:
        store = c.store
        store.insert_many([Job(JobKey("USER_JOB", "Customer.userJob1", f"j{i:04}"), Status.WAITING, T0, next_run=T0)
                           for i in range(600)])
        for i in range(0, 600, 2):
            row = store.get(JobKey("USER_JOB", "Customer.userJob1", f"j{i:04}"))
            store.cas(row, row.replace(status=Status.PROCESSED, archived=True, end_time=T0 + timedelta(seconds=i)))
        reads: list[tuple[str, int]] = []  # (what, rows asked for) per read of the store
        monkeypatch.setattr(store, "archived_since", None)  # (the whole window's read is not used)
        live_jobs, search = store.live_jobs, store.search_archived
        monkeypatch.setattr(store, "live_jobs", lambda **kw: reads.append(("live", kw["limit"])) or live_jobs(**kw))
        monkeypatch.setattr(store, "search_archived", lambda q: reads.append(("archive", q.limit)) or search(q))
        pages, after = [], None
        while True:
            page = c.service.list_jobs(JobQuery(archived=True, limit=25, after=after))
            pages.append([r[2] for r in page.result.rows])
            assert len(reads) <= 2 and all(n <= 26 for _, n in reads), reads  # a page, of one kind or both
            reads.clear()
            if page.next is None:
                break
            after = page.next
        live = [f"j{i:04}" for i in range(1, 600, 2)]
        assert sum(pages, []) == live + [f"j{i:04}" for i in range(598, -1, -2)] and len(pages) == 24
        first = c.service.list_jobs(JobQuery(live=False, archived=True, limit=10))
        ended = c.service.list_jobs(JobQuery(live=False, archived=True, limit=10, after=first.next))
        assert [r[2] for r in ended.result.rows] == [f"j{i:04}" for i in range(578, 558, -2)]
        assert reads == [("archive", 10), ("archive", 10)]


@pytest.mark.parametrize("command, words", [
    (st.StartJob("USER_JOB", "Customer.userJob1", args="[1]"), "ARGS must be a JSON object, got a list"),
    (st.StartJob("USER_JOB", "Customer.userJob1", args="{\"a\": NaN}"), "NaN is not allowed"),
    (st.UpdateJob("USER_JOB", "Customer.userJob1", priority=42), "PRIORITY must be a whole number from 0 to 9"),
    (st.UpdateJob("USER_JOB", "Customer.userJob1", late_threshold="soon"), "LATE_THRESHOLD must be HH:MM:SS"),
    (st.UpdateJob("USER_JOB", "Customer.userJob1", overlap="maybe"), "OVERLAP must be SKIP or QUEUE"),
    (st.StartJob("USER_JOB", "Customer.userJob1", tz="Mars/Olympus"), "Mars/Olympus"),
    (st.StartJob("NOPE", "x"), "unknown job type 'NOPE'"),
    (st.StopJob("USER_JOB", ""), "NAME must not be empty"),
    (st.WaitJob("USER_JOB", "x", "u", timeout=-1), "TIMEOUT must be"),
    (st.StartJob("USER_JOB", "Customer.userJob1", uid="a\rb"), "UID must not contain control characters"),
])
def test_built_commands_meet_the_parsers_rules(client, command, words):
    with pytest.raises(ValidationError, match=words.replace("(", r"\(")):
        client.execute(command)


def test_a_built_commands_job_type_is_normalised_as_the_parsers(client):
    client.execute(st.StartJob("user_job", "Customer.userJob1", uid="lower"))
    assert client.store.get(JobKey("USER_JOB", "Customer.userJob1", "lower")) is not None


@pytest.mark.parametrize("text, command", [
    ("startjob user_job name='Customer.userJob1' parallelism=65;", st.StartJob("USER_JOB", "Customer.userJob1", parallelism=65)),
    ("startjob user_job name='Customer.userJob1' if not exists;", st.StartJob("USER_JOB", "Customer.userJob1", if_not_exists=True)),
    ("startjob user_job name='Customer.userJob1' calendar='no way';", st.StartJob("USER_JOB", "Customer.userJob1", calendar="no way")),
    ("startjob user_job name='Customer.userJob1' late_action='LATER';", st.StartJob("USER_JOB", "Customer.userJob1", late_action="LATER")),
    ("startjob user_job name='Customer.userJob1' on_failure='RUN';", st.StartJob("USER_JOB", "Customer.userJob1", on_failure="RUN")),
    ("startjob user_job name='Customer.userJob1' delete_on_success='a\x01';",
     st.StartJob("USER_JOB", "Customer.userJob1", delete_on_success="a\x01")),
    ("updatejob user_job name='Customer.userJob1' hold=false;", st.UpdateJob("USER_JOB", "Customer.userJob1", hold=False)),
    ("restartjob user_job uid='u' running;", st.RestartJob("USER_JOB", None, "u", running=True)),
    ("createcalendar 'bad name' exclude '2026-12-25';", st.CreateCalendar("bad name", ("2026-12-25",))),
    ("createcalendar 'c' exclude '2026-02-30';", st.CreateCalendar("c", ("2026-02-30",))),
    ("dropcalendar 'bad name';", st.DropCalendar("bad name")),
])
def test_a_built_command_is_refused_in_the_parsers_own_words(client, text, command):
    """The HTTP API builds commands without the parser: their bad values get the same reason."""
    with pytest.raises(ValidationError) as parsed:
        client.fetch(text)
    with pytest.raises(ValidationError) as built:
        client.execute(command)
    assert built.value.reason == parsed.value.reason
