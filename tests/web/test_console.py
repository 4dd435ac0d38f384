"""The console's sessions, CSRF checks, pages and data, in-process on a real SQLite store (an
ASGI client, no browser: tests/web/test_console_browser.py drives a real Chromium), and the
plots' arithmetic. The tests that read the store (the data of an empty cluster, one read per
interval for many browsers) run on the Cassandra backend (the CQL test server) too."""

from __future__ import annotations

import re
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabricjobs.config import load_config
from fabricjobs.errors import ValidationError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.web import plots
from fabricjobs.web.app import Api, KeepSegments, create_app
from fabricjobs.web.console_pages import LiveFilters
from fabricjobs.web.runfeed import RunFeed, RunPoint
from fabricjobs.web.tokens import Role, TokenFile
from backends import add_sections, make_backend_config
from web_site import API_BACKENDS

UTC = timezone.utc
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


#: A test that reads the store runs on each backend the API tests run on.
on_each_backend = pytest.mark.parametrize("console", [{"backend": b} for b in API_BACKENDS], indirect=True,
                                          ids=API_BACKENDS)


@pytest.fixture
def console(request, tmp_path):
    """An app on a fresh store (SQLite unless the test's parameter names a ``backend``) with a
    token per role; returns (make_client, api, tokens, app)."""
    web = dict(getattr(request, "param", {}))
    backend = web.pop("backend", "sqlite")
    jobs = {"USER_JOBS_DIR": Path(__file__).parents[1] / "jobs"}
    path = add_sections(make_backend_config(request, backend, tmp_path),
                        {"web": {"CONSOLE_INTERVAL_SEC": 30, **web}, "jobs": jobs})
    cfg = load_config(path)
    api = Api(open_store(cfg), cfg, TokenFile(cfg.get("web", "TOKENS_FILE")))
    tokens = {role.value: api.tokens.create(f"{role.value}-1", role) for role in Role}
    app = create_app(api)
    request.addfinalizer(api.store.close)
    request.addfinalizer(app.state.live.stop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    def client():
        return TestClient(KeepSegments(app), base_url="http://console.test", raise_server_exceptions=False,
                          follow_redirects=False)
    return client, api, tokens, app


def log_in(client, token: str) -> str:
    """Log in through the form as a browser would; the page's CSRF token."""
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text).group(1)
    done = client.post("/login", data={"nonce": nonce, "token": token}, headers={"Origin": "http://console.test"})
    assert done.status_code == 303 and done.headers["location"] == "/", done.text
    page = client.get("/")
    assert page.status_code == 200
    return re.search(r'name="fj-csrf" content="([^"]+)"', page.text).group(1)


def test_the_session_cookie_is_httponly_samesite_strict_and_signed(console):
    make, api, tokens, _ = console
    client = make()
    assert client.get("/").status_code == 303  # not logged in: to the login form
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text).group(1)
    done = client.post("/login", data={"nonce": nonce, "token": tokens["operator"]})
    cookie = done.headers["set-cookie"]
    assert "fj_session_80=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie  # (its port: 80 here)
    assert "Secure" not in cookie  # plain HTTP here (see the next test)
    assert tokens["operator"] not in cookie
    name, value = cookie.split(";")[0].split("=", 1)
    forged = make()
    forged.cookies.set(name, value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
    assert forged.get("/").status_code == 303 and forged.get("/api/v1/jobs").status_code == 401


@pytest.mark.parametrize("console", [{"SECURE_COOKIE": "true"}], indirect=True)
def test_the_cookie_is_secure_when_asked_to_be(console):
    make, api, tokens, _ = console
    client = make()
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text).group(1)
    assert form.headers["set-cookie"].startswith("__Secure-fj_login_80=") and "Secure" in form.headers["set-cookie"]
    client.cookies.set("__Secure-fj_login_80", form.cookies["__Secure-fj_login_80"])  # (sent over TLS alone: here, by hand)
    cookie = client.post("/login", data={"nonce": nonce, "token": tokens["viewer"]}).headers["set-cookie"]
    assert "Secure" in cookie and cookie.startswith("__Host-fj_session_80=")  # host-only, TLS-only, its port's


def test_a_login_needs_a_known_token_the_form_s_nonce_and_no_foreign_origin(console):
    make, api, tokens, _ = console
    client = make()
    nonce = re.search(r'name="nonce" value="([^"]+)"', client.get("/login").text).group(1)
    wrong = client.post("/login", data={"nonce": nonce, "token": "fjt_nope"})
    assert wrong.status_code == 401 and "Unknown or revoked token" in wrong.text and "fj_session" not in wrong.headers.get("set-cookie", "")
    assert make().post("/login", data={"nonce": "made-up", "token": tokens["admin"]}).status_code == 403
    foreign = client.post("/login", data={"nonce": nonce, "token": tokens["admin"]}, headers={"Origin": "http://evil.test"})
    assert foreign.status_code == 403


def test_a_change_through_the_session_needs_the_csrf_token_and_a_same_site_origin(console):
    make, api, tokens, _ = console
    client = make()
    csrf = log_in(client, tokens["operator"])
    stop = "/api/v1/jobs/USER_JOB/Probe.noop/none/stop"
    assert client.get("/api/v1/jobs").status_code == 200  # a read needs no CSRF token
    assert client.post(stop).json()["message"].startswith("missing or wrong CSRF token")
    assert client.post(stop, headers={"X-CSRF-Token": csrf + "x"}).status_code == 403
    assert client.post(stop, headers={"X-CSRF-Token": csrf, "Origin": "http://evil.test"}).status_code == 403
    assert client.post(stop, headers={"X-CSRF-Token": csrf}).status_code == 404  # allowed: there is no such job
    other = make()
    assert log_in(other, tokens["operator"]) != csrf  # a CSRF token per session
    viewer = make()
    viewer_csrf = log_in(viewer, tokens["viewer"])
    refused = viewer.post(stop, headers={"X-CSRF-Token": viewer_csrf})
    assert refused.status_code == 403 and "'viewer-1' (viewer) may not" in refused.json()["message"]


def test_revoking_the_token_ends_its_sessions_and_logout_ends_one(console):
    make, api, tokens, _ = console
    client = make()
    csrf = log_in(client, tokens["viewer"])
    assert client.post("/logout", data={"csrf": "wrong"}).status_code == 403
    out = client.post("/logout", data={"csrf": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/login" and 'fj_session_80=""' in out.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/").status_code == 303
    log_in(client, tokens["viewer"])
    api.tokens.revoke("viewer-1")
    assert client.get("/").status_code == 303 and client.get("/console/data/jobs").status_code == 401


@on_each_backend
def test_pages_allow_only_their_own_scripts_and_show_the_empty_state_data(console):
    make, api, tokens, app = console
    client = make()
    log_in(client, tokens["viewer"])
    page = client.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert not re.search(r"<script(?![^>]*\bsrc=)", page.text) and "http" not in re.sub(r'content="[^"]*"', "", page.text).split("<body>")[0]
    assert client.get("/static/console.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../app.py").status_code == 404
    data = client.get("/console/data/jobs").json()
    assert data["counts"] == {} and data["jobs"] == [] and data["error"] == "" and data["next_cursor"] is None
    assert client.get("/console/data/job", params={"type": "USER_JOB", "name": "x", "uid": "y"}).status_code == 404
    # A UID as long as a job may have one, and a cursor of such a key in 4-byte characters: asked, not refused.
    assert client.get("/console/data/job", params={"type": "USER_JOB", "name": "x", "uid": "é" * 1024}).status_code == 404
    from fabricjobs.model import JobKey
    from fabricjobs.web.cursors import key_cursor
    cursor = key_cursor(JobKey("USER_JOB", "A." + "😀" * 254, "😀" * 1024))
    assert client.get("/console/data/jobs", params={"cursor": cursor}).status_code == 200, len(cursor)
    assert "/console" not in str(client.get("/api/v1/openapi.json").json()["paths"])  # not part of the API


@on_each_backend
def test_browsers_share_one_read_of_the_store_per_interval(console):
    make, api, tokens, app = console
    clients = [make() for _ in range(10)]
    for c in clients:
        log_in(c, tokens["viewer"])
    pages, read = [], api.store.live_jobs
    api.store.live_jobs = lambda *a, **k: pages.append(k) or read(*a, **k)  # the jobs table's reads
    first = clients[0].get("/console/data/jobs")
    ticks = app.state.live.ticks
    assert len(pages) == 1
    for c in clients * 3:
        assert c.get("/console/data/jobs").json()["version"] == first.json()["version"]
        c.get("/console/data/nodes")
    assert app.state.live.ticks == ticks  # 60 polls within the (30 s) interval: no new read of the view ...
    assert len(pages) == 1 and pages[0]["limit"] == 101  # ... nor of the page, which the first poll read for all
    again = clients[0].get("/console/data/jobs", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304


def test_the_table_filters():
    row = Job(key=JobKey("USER_JOB", "Customer.userJob1", "u1"), status=Status.WAITING, creation_time=NOW,
              worker_id="w1", error_msg="blocked: parent X", blocked=True)
    assert LiveFilters(status="BLOCKED").keeps(row) and not LiveFilters(status="WAITING").keeps(row)
    assert LiveFilters(type="USER_JOB", name="userjob", node="w1", q="PARENT").keeps(row)
    assert not LiveFilters(node="w2").keeps(row) and not LiveFilters(q="nothing").keeps(row)
    assert LiveFilters(q="any").keeps(row)  # no affinity: ANY
    with pytest.raises(ValidationError):
        LiveFilters(status="FAILED")  # not a live status: the history shows those


def test_the_plots_arithmetic():
    now = datetime(2026, 1, 1, 12, 30, 30, tzinfo=UTC)
    key = JobKey("USER_JOB", "Probe.noop", "tick")
    points = [RunPoint(key, i, "OK" if i % 3 else "ERROR", now - timedelta(seconds=20 * i), 10 * i, 5 * i, True)
              for i in range(6)]
    per_minute = plots.runs_per_minute(points, now, minutes=5)
    totals = [sum(s["values"][i] for s in per_minute["series"]) for i in range(5)]
    assert totals == [0, 0, 1, 3, 2]  # ends at 12:28:50; 12:29:10, :30, :50; 12:30:10, :30 and [s["name"] for s in per_minute["series"]] == ["OK", "ERROR"]
    lag = plots.fire_lag(points)
    assert lag["series"][0]["name"] == str(key) and sorted(p[1] for p in lag["series"][0]["points"]) == [0, 5, 10, 15, 20, 25]
    assert plots.histogram([0, 10, 20, 30]) == {"edges": [0, 8, 15, 22, 30], "counts": [1, 1, 1, 1]}
    assert plots.histogram([7, 7]) == {"edges": [7, 8], "counts": [2]}


def test_the_run_feed_reads_only_the_runs_that_ended_since_it_last_looked():
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    asked, rows_read = [], []
    lines = [SimpleNamespace(key=JobKey("USER_JOB", "n", str(i)), epoch=1, result="OK", start=now - timedelta(seconds=i + 1),
                             end=now - timedelta(seconds=i), due=now - timedelta(seconds=i + 1)) for i in range(5)]

    def recent_runs(limit, since=None):
        asked.append(since)
        return sorted((r for r in lines if since is None or r.end >= since), key=lambda r: r.end, reverse=True)[:limit]

    def get_many(keys):
        rows_read.extend(keys)
        return [SimpleNamespace(execution_interval="00:00:01" if k.uid == "0" else "") for k in keys]

    feed = RunFeed(SimpleNamespace(recent_runs=recent_runs, get_many=get_many), per_tick=3)
    feed.update(now)
    assert asked == [now - timedelta(hours=1)] and len(feed.runs()) == 3 and feed.missed  # the window: 3 a tick
    assert [p.recurring for p in feed.runs()] == [False, False, True]
    feed.update(now)  # nothing ended since: the same runs are not added again, the rows not read again
    assert asked[1] == now - timedelta(seconds=5) and len(feed.runs()) == 3 and len(rows_read) == 3
    lines.append(SimpleNamespace(key=JobKey("USER_JOB", "n", "new"), epoch=7, result="ERROR", start=now, end=now + timedelta(seconds=1),
                                 due=now))
    feed.update(now + timedelta(seconds=2))
    assert [p.run for p in feed.runs()][-1] == 7 and len(feed.runs()) == 4


def test_a_script_refused_partway_still_shows_what_its_earlier_statements_did(console):
    """POST /commands answers a script whose second statement fails with that error, but its
    first statement's change stays: the console's cached page must show it at the next poll,
    not up to an interval later (the interval is 30 s here)."""
    make, api, tokens, app = console
    browser = make()
    log_in(browser, tokens["viewer"])
    assert [j["uid"] for j in browser.get("/console/data/jobs").json()["jobs"]] == []
    script = ("startjob user_job name='Probe.noop' uid='kept' affinity='nowhere';\n"
              "stopjob user_job name='Probe.noop' uid='never-started';")
    said = make().post("/api/v1/commands", json={"text": script}, headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert said.status_code == 404 and said.json()["ran"] == 1, said.text
    assert [j["uid"] for j in browser.get("/console/data/jobs").json()["jobs"]] == ["kept"]
    refused = make().post("/api/v1/commands", json={"text": "stopjob user_job name='Probe.noop' uid='nope';"},
                          headers={"Authorization": f"Bearer {tokens['operator']}"})
    assert refused.status_code == 404 and not refused.json().get("ran"), refused.text


def test_every_answer_says_its_content_type_is_to_be_taken_as_it_is(console):
    """X-Content-Type-Options: nosniff on the API's answers (a job's name or log line in JSON is
    never read as a page), its refusals (401 before a body is read) and the console's pages."""
    make, api, tokens, app = console
    client = make()
    answers = [client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {tokens['viewer']}"}),
               client.post("/api/v1/jobs", content=b"{}", headers={"Content-Type": "application/json"}),
               client.get("/login"), client.get("/healthz")]
    assert [a.status_code for a in answers] == [200, 401, 200, 200]
    assert all(a.headers.get("x-content-type-options") == "nosniff" for a in answers), [dict(a.headers) for a in answers]
    assert client.get("/login").headers.get_list("x-content-type-options") == ["nosniff"]  # (once, not twice)


def test_a_session_key_or_tokens_file_others_may_read_is_made_private(console):
    """Whoever reads the session key can sign a session of any token's: an existing key file
    or tokens file of mode 0644 (a copy under a loose umask) is made 0600 when it is read."""
    import os
    import stat

    make, api, tokens, app = console
    key_file, tokens_file = app.state.sessions.path, api.tokens.path
    app.state.sessions.key()
    for path in (key_file, tokens_file):
        os.chmod(path, 0o644)
    app.state.sessions._key = None  # (read again, as a restarted web process would)
    app.state.sessions.key()
    api.tokens._seen = None
    api.tokens.find(tokens["viewer"])
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (key_file, tokens_file)] == [0o600, 0o600]


def test_a_jobs_page_offers_the_task_of_its_running_run_only():
    """The nodes' published tasks are as old as their last beat: a job's page offered KILL for
    a run that had ended (or for an earlier run), which the node then refused (TaskNotFound)."""
    from fabricjobs.web.console_data import _running_task

    task = {"node": "n1", "task": 7, "epoch": 3, "elapsed_ms": 10}
    running = {"status": "IN_PROCESS", "is_archived": False, "epoch": 3}
    assert _running_task(running, task) == task
    assert _running_task(running, None) is None
    assert _running_task(dict(running, status="PROCESSED", is_archived=True), task) is None
    assert _running_task(dict(running, status="SCHEDULED"), task) is None
    assert _running_task(dict(running, epoch=4), task) is None  # the next run's row, the last run's task
    assert _running_task(running, dict(task, epoch=None)) == dict(task, epoch=None)  # (a node that names none)


def test_more_than_a_thousand_blocked_jobs_hide_neither_waiting_jobs_nor_a_parents_children(console):
    """WAITING's count leaves out the jobs blocked by parents, its index does not: with 1,100
    blocked jobs the WAITING filter read 1,001 candidates, all blocked, and showed one of five
    WAITING jobs. A parent's page read the first 1,000 blocked jobs only, and said "None" of
    a child further on."""
    make, api, tokens, app = console
    parent = lambda uid: Job(JobKey("USER_JOB", "Probe.noop", uid), Status.HELD, NOW, next_run=NOW)  # noqa: E731
    rows = [parent("parent1"), parent("parent2")]
    rows += [Job(JobKey("USER_JOB", "Probe.noop", f"kid{i:04d}"), Status.WAITING, NOW, next_run=NOW + timedelta(milliseconds=i),
                 depends_on="USER_JOB.Probe.noop.parent1", blocked=True) for i in range(1100)]
    rows.append(Job(JobKey("USER_JOB", "Probe.noop", "kid2"), Status.WAITING, NOW, next_run=NOW + timedelta(hours=1),
                    depends_on="USER_JOB.Probe.noop.parent2", blocked=True))
    rows += [Job(JobKey("USER_JOB", "Probe.noop", f"zgpu{i}"), Status.WAITING, NOW, next_run=NOW + timedelta(hours=2),
                 affinity="GPU") for i in range(5)]  # (after the blocked ones, in key and due order)
    api.store.insert_many(rows)
    client = make()
    log_in(client, tokens["viewer"])
    waiting = client.get("/console/data/jobs", params={"status": "WAITING"}).json()
    assert [j["uid"] for j in waiting["jobs"]] == [f"zgpu{i}" for i in range(5)], waiting["jobs"][:3]
    page = client.get("/console/data/job", params={"type": "USER_JOB", "name": "Probe.noop", "uid": "parent2"}).json()
    assert [c["uid"] for c in page["children"]] == ["kid2"] and page["children_cut"] is False
