"""The HTTP API against a real ``fabricjobs web`` process and a real node on a real store, once
on SQLite and once on the Cassandra backend (the CQL test server): every endpoint under every
role, every error status, and jobs that really run. A job's life (list, one job, start, stop,
runs, logs, nodes, commands, ...) runs on Apache Cassandra itself too, when there is one."""

from __future__ import annotations

import base64

import json
from datetime import datetime
from urllib.parse import quote


from harness import wait_for
from web_site import on_every_backend, running_site

JOB = "/jobs/USER_JOB/Probe.noop/no-such-uid"
#: (method, path, JSON body, the least role allowed, the status that role gets). The jobs,
#: runs, nodes and tasks named do not exist, so an allowed request changes nothing.
ENDPOINTS = [
    ("GET", "/jobs", None, "viewer", 200),
    ("GET", JOB, None, "viewer", 404),
    ("POST", "/jobs", {"type": "USER_JOB", "name": "Probe.no_such_function"}, "operator", 400),
    ("POST", JOB + "/stop", None, "operator", 404),
    ("POST", JOB + "/stop?wait=true&timeout=1", None, "operator", 404),
    ("POST", JOB + "/restart", None, "operator", 404),
    ("POST", JOB + "/resume", None, "operator", 404),
    ("PATCH", JOB, {"priority": 1}, "operator", 404),
    ("GET", JOB + "/wait?timeout=0", None, "operator", 404),
    ("GET", JOB + "/runs", None, "viewer", 404),
    ("GET", JOB + "/runs/1", None, "viewer", 404),
    ("GET", JOB + "/runs/1/log", None, "viewer", 404),
    ("GET", JOB + "/runs/1/wait?timeout=0", None, "operator", 404),
    ("GET", JOB + "/log", None, "viewer", 404),
    ("DELETE", JOB + "/runs", None, "admin", 200),  # idempotent: nothing to delete is no error
    ("GET", "/ps", None, "viewer", 200),
    ("GET", "/nodes", None, "viewer", 200),
    ("POST", "/nodes/no-such-node/tasks/1/kill", None, "operator", 404),
    ("POST", JOB + "/finish", None, "operator", 404),
    ("POST", JOB + "/finish?wait=true&timeout=1", None, "operator", 404),
    ("POST", JOB + "/run", None, "operator", 404),
    ("POST", JOB + "/release", None, "operator", 404),
    ("POST", "/jobs/USER_JOB/restart-running?name=Probe.no_such_function", None, "operator", 200),
    ("POST", "/jobs", {"type": "USER_JOB", "name": "Probe.noop", "parallelism": 1}, "operator", 400),
    ("PATCH", JOB, {"hold": True, "calendar": "", "late_action": "RUN"}, "operator", 404),
    ("GET", "/runs?recent=5", None, "viewer", 200),
    ("GET", "/nodes?details=true", None, "viewer", 200),
    ("GET", "/calendars", None, "viewer", 200),
    ("GET", "/calendars/no-such-calendar", None, "viewer", 404),
    ("PUT", "/calendars/probe-refused", {"exclude": ["not a rule"]}, "admin", 400),
    ("DELETE", "/calendars/no-such-calendar", None, "admin", 404),
    ("POST", "/commands", {"text": "jobstatus; nodes;"}, "viewer", 200),
    ("POST", "/commands", {"text": "stopjob user_job name='Probe.noop' uid='no-such-uid';"}, "operator", 404),
    ("POST", "/commands", {"text": "deletehistory user_job 'Probe.noop' with uid='no-such-uid';"}, "admin", 404),
]
RANK = {"viewer": 1, "operator": 2, "admin": 3}


def no_traceback(response) -> None:
    assert "Traceback" not in response.text and 'File "' not in response.text, response.text


def test_every_endpoint_under_every_role_and_without_a_valid_token(site):
    clients = {role: site.client(role) for role in RANK}
    clients["no token"] = site.client(None)
    clients["a wrong token"] = site.client(token="fjt_not-a-token")
    for method, path, body, least, allowed in ENDPOINTS:
        for who, client in clients.items():
            r = client.request(method, path, json=body)
            no_traceback(r)
            if who not in RANK:
                assert r.status_code == 401, (who, method, path, r.text)
                assert r.json()["error"] == "Unauthorized" and r.headers["WWW-Authenticate"].startswith("Bearer")
            elif RANK[who] < RANK[least]:
                assert r.status_code == 403, (who, method, path, r.text)
                assert r.json() == {"error": "Forbidden", "message": r.json()["message"]}
                assert f"'{who}-1' ({who}) may not" in r.json()["message"]
            else:
                assert r.status_code == allowed, (who, method, path, r.text)
    for path in ("/healthz", "/readyz"):  # no token needed, and HEAD too (what some load balancers probe with)
        assert site.client(None).get(site.web.url + path).status_code == 200
        assert site.client(None).head(site.web.url + path).status_code == 200


def test_a_script_names_the_statement_its_token_may_not_run_and_has_a_bounded_length(site):
    """A refusal says which statement of a script the role does not allow; a script of more
    statements than one request may hold (cheap reads hold a server thread for as long as
    they take) is refused whole, before any of it runs (docs/guides/http-api.md)."""
    operator = site.client("operator")
    refused = operator.post("/commands", json={"text": "jobstatus; createcalendar 'c' exclude '2026-12-25';"})
    assert refused.status_code == 403 and refused.json()["message"] == (
        "token 'operator-1' (operator) may not run CREATECALENDAR (statement 2)"), refused.text
    long = operator.post("/commands", json={"text": "startjob user_job name='Probe.noop' uid='many' hold=true;"
                                                    + "jobstatus;" * 1000})
    assert long.status_code == 400 and long.json()["message"] == (
        "a script sent to the API has at most 1,000 statements (this one has 1,001): send the rest in further "
        "requests; nothing was run"), long.text
    assert operator.get("/jobs/USER_JOB/Probe.noop/many").status_code == 404


@on_every_backend  # the real Cassandra's representative: list, a job, start, stop, runs, logs, nodes, commands
def test_a_job_through_its_life_on_a_real_node(site, tmp_path):
    api = site.client("operator")
    # (alive: a beat at most two intervals old; a late one under load shows it suspect a while)
    nodes = wait_for(lambda: (lambda n: n if [(x["node"], x["state"]) for x in n] == [("w1", "alive")] else None)(
        api.get("/nodes").json()), 20, "w1 to be listed alive")
    assert nodes[0]["capacity"], nodes
    log = tmp_path / "runs.jsonl"
    body = {"type": "user_job", "name": "Probe.record", "uid": "life", "args": {"log": str(log), "seconds": 60}}
    started = api.post("/jobs", json=body)
    assert started.status_code == 201, started.text
    assert started.headers["Location"] == "/api/v1/jobs/USER_JOB/Probe.record/life"
    assert started.json()["notes"].startswith("STARTJOB by token 'operator-1' on ")
    job = "/jobs/USER_JOB/Probe.record/life"
    wait_for(lambda: api.get(job).json()["status"] == "IN_PROCESS", 20, "the job to run")
    listed = api.get("/jobs", params={"status": "IN_PROCESS", "name": "Probe.record"}).json()["jobs"]
    assert [j["node"] for j in listed if j["uid"] == "life"] == ["w1"], listed

    task = wait_for(lambda: tasks(api), 10, "PS to show the run")
    assert task[0]["node"] == "w1"
    stopped = api.post(job + "/stop", params={"wait": "true", "timeout": 30})
    assert stopped.json()["status"] == "TERMINATED", stopped.text
    assert stopped.json()["notes"].startswith("STOPJOB by token 'operator-1'")
    said = api.post("/commands", json={"text": "jobstatus user_job 'Probe.record' with uid='life';"}).json()
    assert [(r["UID"], r["Status"], r["Is Archived"]) for r in said["rows"]] == [("life", "TERMINATED", True)], said

    runs = api.get(job + "/runs").json()
    assert [(r["uid"], r["result"], r["status"]) for r in runs] == [("life", "STOPPED", "TERMINATED")]
    one = api.get(f"{job}/runs/{runs[0]['run']}").json()
    assert one == runs[0] and one["duration_ms"] >= 0
    log_body = api.get(f"{job}/runs/{one['run']}/log").json()
    assert log_body["run"] == one["run"] and log_body["summary"].startswith(f"run {one['run']} of USER_JOB.Probe.record.life")
    assert api.get(job + "/log").json() == log_body
    assert api.delete(job + "/runs").status_code == 403  # run-data deletion is the admin's
    deleted = site.client("admin").delete(job + "/runs")
    assert deleted.status_code == 200 and deleted.json() == {"type": "USER_JOB", "name": "Probe.record", "uid": "life",
                                                              "deleted_runs": 1}, deleted.text
    assert api.get(job + "/runs").json() == [] and api.get(job).json()["status"] == "TERMINATED"
    assert api.get(job + "/log").json()["error"] == "JobNotFound"

    resumed = api.post(job + "/resume")
    assert resumed.json()["notes"].startswith("RESUMEJOB by token 'operator-1'"), resumed.text
    wait_for(lambda: api.get(job).json()["status"] == "IN_PROCESS", 20, "the resumed job to run")
    seen = {t["task"] for t in task}  # PS shows what the node published at its last beat: wait for the new run
    seen |= {t["task"] for t in wait_for(lambda: [t for t in tasks(api) if t["task"] not in seen], 10, "its task")}
    updated = api.patch(job, json={"priority": 7})
    assert updated.json()["notes"].startswith("UPDATEJOB by token 'operator-1'")
    assert api.get(job).json()["priority"] == 7
    restarted = api.post(job + "/restart")
    # RESTART as the command wrote it, or, when the store had to settle an unknown outcome (a
    # timeout on a loaded CQL test server) by reading the row back, what the node had made of
    # it meanwhile: WAITING, or already the new run (the new task is checked below).
    assert restarted.json()["status"] in ("RESTART", "WAITING", "IN_PROCESS"), restarted.text
    assert "RESTARTJOB by token" in restarted.json()["notes"], restarted.text

    task = wait_for(lambda: [t for t in tasks(api) if t["task"] not in seen], 20, "the restarted run's task")
    killed = api.post(f"/nodes/w1/tasks/{task[0]['task']}/kill")
    assert killed.status_code == 202 and killed.json()["status"].startswith("KILL sent to node w1")
    wait_for(lambda: "killed by KILL from token 'operator-1'" in api.get(job).json()["notes"], 20,
             lambda: f"the KILL note: {api.get(job).json()} {api.get('/ps').json()} {task}")
    assert api.get(job).json()["kills"] == 1
    api.post(job + "/stop", params={"wait": "true", "timeout": 30})


def tasks(api) -> list[dict]:
    return [t for t in api.get("/ps").json() if "Probe.record" in t["description"]]


def test_wait_is_a_long_poll_that_says_whether_the_job_ended(site, tmp_path):
    api = site.client("operator")
    body = {"type": "USER_JOB", "name": "Probe.record", "uid": "waited", "args": {"log": str(tmp_path / "l"), "seconds": 1}}
    assert api.post("/jobs", json=body).status_code == 201
    job = "/jobs/USER_JOB/Probe.record/waited"
    early = api.get(job + "/wait", params={"timeout": 0}).json()
    assert early["done"] is False and early["job"]["status"] in ("WAITING", "IN_PROCESS")
    late = api.get(job + "/wait", params={"timeout": 30}).json()
    assert late["done"] is True and late["job"]["status"] == "PROCESSED" and late["job"]["runs"] == 1


def test_a_run_can_be_waited_for_by_its_number(site, tmp_path):
    """SMILA's job run id is the run's number (its epoch): .../runs/{n}/wait answers that run
    once it has ended, ``done`` false while the timeout comes first, 404 when it never will."""
    api = site.client("operator")
    body = {"type": "USER_JOB", "name": "Probe.record", "uid": "run-waited", "args": {"log": str(tmp_path / "l"), "seconds": 1}}
    assert api.post("/jobs", json=body).status_code == 201
    runs = "/jobs/USER_JOB/Probe.record/run-waited/runs"
    early = api.get(runs + "/1/wait", params={"timeout": 0}).json()
    assert early == {"done": False, "waited_sec": early["waited_sec"], "run": None}
    late = api.get(runs + "/1/wait", params={"timeout": 30}).json()
    assert late["done"] is True and late["run"]["run"] == 1 and late["run"]["result"] == "OK", late
    never = api.get(runs + "/2/wait", params={"timeout": 30})
    assert never.status_code == 404 and "No recorded run 2" in never.json()["message"], never.text


def test_commands_answer_what_client_fetch_returns(site):
    api = site.client("operator")
    text = "startjob user_job name='Probe.echo' uid='parity' args='{\"value\": 3}';"
    assert api.post("/commands", json={"text": text}).json()["rows"][0]["Status"] == "WAITING"
    site.cluster.wait_job("USER_JOB", "Probe.echo", "parity", lambda j: j.archived)
    query = "set a = 1; jobstatus user_job 'Probe.echo' with uid='parity' details;"
    answer = api.post("/commands", json={"text": query}).json()
    expected = site.cluster.fetch(query)
    assert answer["columns"] == list(expected.columns)
    for got, want in zip(answer["rows"][0].values(), expected.rows[0]):
        assert (datetime.fromisoformat(got) if isinstance(want, datetime) else got) == want
    assert api.post("/commands", json={"text": "-- nothing\n"}).json() == {
        "columns": [], "rows": [], "status": None, "notices": []}
    # An error in the middle of a script: which statement, and that the ones before it ran.
    failed = api.post("/commands", json={"text": "startjob user_job name='Probe.noop' uid='first';"
                                                 "stopjob user_job name='Probe.noop' uid='nothing';"
                                                 "startjob user_job name='Probe.noop' uid='third';"})
    assert failed.status_code == 404 and (failed.json()["statement"], failed.json()["ran"]) == (2, 1), failed.text
    assert site.cluster.job("USER_JOB", "Probe.noop", "first") is not None
    assert site.cluster.job("USER_JOB", "Probe.noop", "third") is None


def test_each_error_status_has_the_languages_type_and_message_and_no_traceback(site, tmp_path):
    api = site.client("admin")
    cases = [
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "priority": 42}), 400, "ValidationError",
         "body.priority"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "x", "nme": 1}), 400,
         "ValidationError", "body.nme"),
        (api.post("/jobs", json={"type": "BATCH", "name": "Probe.noop"}), 400, "ValidationError", "unknown job type 'BATCH'"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "exec_interval": "every tuesday"}), 400,
         "ValidationError", ""),
        (api.get("/jobs/BATCH/x/y"), 400, "ValidationError", "unknown job type"),
        (api.get("/jobs", params={"cursor": "!!"}), 400, "ValidationError", "cursor"),
        (api.get("/jobs", params={"limit": 0}), 400, "ValidationError", "query.limit"),
        (api.post("/commands", json={"text": "startjob user_job nme='x';"}), 400, "CommandSyntaxError", "unexpected 'nme'"),
        (api.get("/jobs/USER_JOB/Probe.noop/nothing"), 404, "JobNotFound", "No such job [type: USER_JOB"),
        (api.post("/nodes/w1/tasks/999999/kill"), 404, "TaskNotFound", "has no task 999999"),
        (api.get("/no/such/route"), 404, "NotFound", ""),
        (api.delete("/jobs"), 405, "MethodNotAllowed", ""),
    ]
    cases += [
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "parallelism": 65}), 400, "ValidationError",
         "PARALLELISM must be a whole number from 2 to 64 (the job's tasks), got '65'"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "if_not_exists": True}), 400,
         "ValidationError", "IF NOT EXISTS needs UID='<uid>'"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "on_failure": "RUN"}), 400,
         "ValidationError", "ON_FAILURE must be <TYPE>.<NAME> of a job, got 'RUN'"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "calendar": "nowhere"}), 404,
         "CalendarNotFound", "No such calendar 'nowhere'"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "delete_on_success": "x"}), 400,
         "JobResolutionError", "DELETE_ON_SUCCESS is disabled"),
        (api.patch("/jobs/USER_JOB/Probe.noop/nothing", json={"hold": False}), 400, "ValidationError",
         "UPDATEJOB takes HOLD=true only: RELEASEJOB releases a held job"),
        (api.put("/calendars/bad name", json={"exclude": ["2026-12-25"]}), 400, "ValidationError", "bad calendar name"),
        (api.put("/calendars/c", json={"exclude": ["2026-02-30"]}), 400, "ValidationError", "is not a date"),
        (api.get("/calendars/nowhere"), 404, "CalendarNotFound", "No such calendar 'nowhere'"),
        (api.get("/runs", params={"recent": 0}), 400, "ValidationError", "RECENT must be a whole number of runs from 1"),
        # Values are taken as the JSON types they are, as the language takes them: no conversion.
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "priority": True}), 400, "ValidationError",
         "body.priority"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "hold": "yes"}), 400, "ValidationError",
         "body.hold"),
        (api.get("/jobs/USER_JOB/Probe.noop/x/runs/9223372036854775808"), 400, "ValidationError", "path.run"),
        (api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "ex1\\"}), 400, "ValidationError",
         "UID must not end with a backslash or have one right before a quote"),
        (api.get("/jobs/USER_JOB/Probe.noop/x/runs/9223372036854775808/log"), 400, "ValidationError", "path.run"),
    ]
    body = {"type": "USER_JOB", "name": "Probe.record", "uid": "busy", "args": {"log": str(tmp_path / "l"), "seconds": 60}}
    cases.append((api.post("/jobs", json=body), 201, None, ""))
    cases.append((api.post("/jobs/USER_JOB/Probe.record/busy/release"), 409, "CommandError", "Job is not held"))
    cases.append((api.post("/jobs/USER_JOB/Probe.record/busy/finish"), 409, "CommandError", "is not a recurring job"))
    cases.append((api.post("/jobs", json=body), 409, "JobAlreadyRunning", "Job is running [type: USER_JOB, name: Probe.record, uid: busy]"))
    cases.append((api.post("/jobs/USER_JOB/Probe.record/busy/resume"), 409, "JobAlreadyRunning", "Job is running"))
    site.cluster.wait_job("USER_JOB", "Probe.record", "busy", lambda j: j.status.value == "IN_PROCESS")
    cases.append((api.delete("/jobs/USER_JOB/Probe.record/busy/runs"), 409, "JobAlreadyRunning",
                  "Job is running [type: USER_JOB, name: Probe.record, uid: busy] (IN_PROCESS)"))
    cases.append((api.post("/jobs/USER_JOB/Probe.record/busy/run"), 409, "JobAlreadyRunning",
                  "Job is running [type: USER_JOB, name: Probe.record, uid: busy] (IN_PROCESS): RUNJOB"))
    cases.append((api.post("/jobs/USER_JOB/Probe.record/nothing/stop"), 404, "JobNotFound",
                  "No active job [type: USER_JOB, name: Probe.record, uid: nothing]"))
    wait = "waitjob user_job 'Probe.record' with uid='busy' timeout 0;"
    cases.append((api.post("/commands", json={"text": wait}), 504, "WaitTimeout", "WAITJOB timed out"))
    for response, status, error, words in cases:
        no_traceback(response)
        assert response.status_code == status, response.text
        if error is not None:
            assert response.json()["error"] == error and words in response.json()["message"], response.text
    syntax = cases[7][0].json()
    assert (syntax["line"], syntax["column"]) == (1, 19) and "NAME=" in syntax["expected"]
    api.post("/jobs/USER_JOB/Probe.record/busy/stop")


def test_the_list_pages_with_a_cursor_and_reads_history_only_when_asked(site):
    api = site.client("operator")
    for i in range(5):
        assert api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.echo", "uid": f"page{i}"}).status_code == 201
    for i in range(5):
        site.cluster.wait_job("USER_JOB", "Probe.echo", f"page{i}", lambda j: j.archived)
    assert api.get("/jobs", params={"name": "Probe.echo"}).json()["jobs"] == []  # live only by default
    seen, cursor = [], None
    while True:
        page = api.get("/jobs", params={"name": "Probe.echo", "scope": "archived", "limit": 2,
                                        **({"cursor": cursor} if cursor else {})}).json()
        seen.append([(j["uid"], j["end_time"]) for j in page["jobs"] if j["uid"].startswith("page")])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    found = sum(seen, [])
    assert sorted(uid for uid, _ in found) == [f"page{i}" for i in range(5)] and all(len(p) <= 2 for p in seen)
    ends = [datetime.fromisoformat(end) for _, end in found]
    assert ends == sorted(ends, reverse=True)  # newest end first
    processed = api.get("/jobs", params={"scope": "all", "status": ["PROCESSED"], "type": "user_job",
                                         "since": "2000-01-01T00:00:00", "until": "2999-01-01T00:00:00Z"}).json()
    assert {f"page{i}" for i in range(5)} <= {j["uid"] for j in processed["jobs"]}


def test_a_cursor_the_api_did_not_give_is_a_400_and_never_reaches_the_store(site):
    """A cursor is base64 of JSON: one forged to hold a lone surrogate would make the store's
    bound parameter fail to encode (a 500) if it got that far."""
    api = site.client("viewer")
    forged = [b'["USER_JOB", "A.b", "\\ud800"]', b'["USER_JOB", 1, "u"]', b'not json']
    for raw in forged:
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        r = api.get("/jobs", params={"cursor": cursor})
        assert r.status_code == 400 and r.json()["error"] == "ValidationError", (raw, r.text)
    # Archived jobs go on from an (End Time, key) cursor: one with no time a store can hold, or
    # of the other kind (a live key's), is refused too.
    for raw in [b'[Infinity, "USER_JOB", "A.b", "u"]', b'[NaN, "USER_JOB", "A.b", "u"]', b'[1e300, "USER_JOB", "A.b", "u"]',
                b'["USER_JOB", "A.b", "u"]']:
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        r = api.get("/jobs", params={"cursor": cursor, "scope": "archived"})
        assert r.status_code == 400 and r.json()["error"] == "ValidationError", (raw, r.text)


def test_a_name_or_uid_with_a_slash_is_one_path_segment(site):
    api = site.client("operator")
    made = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "team/a%b"})
    assert made.headers["Location"] == "/api/v1/jobs/USER_JOB/Probe.noop/" + quote("team/a%b", safe="")
    job = api.get(made.headers["Location"].removeprefix("/api/v1")).json()
    assert (job["uid"], job["name"]) == ("team/a%b", "Probe.noop")


def test_the_openapi_document_lists_every_route_and_the_bearer_scheme(site):
    doc = site.client(None).get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    operations = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    job = "/api/v1/jobs/{type}/{name}/{uid}"
    assert operations >= {
        ("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", job), ("PATCH", job), ("POST", job + "/stop"),
        ("POST", job + "/restart"), ("POST", job + "/resume"), ("GET", job + "/wait"), ("GET", job + "/runs"),
        ("GET", job + "/runs/{run}"), ("GET", job + "/runs/{run}/log"), ("GET", job + "/runs/{run}/wait"), ("GET", job + "/log"), ("GET", "/api/v1/ps"),
        ("GET", "/api/v1/nodes"), ("POST", "/api/v1/nodes/{node}/tasks/{task}/kill"), ("POST", "/api/v1/commands"),
        ("POST", job + "/finish"), ("POST", job + "/run"), ("POST", job + "/release"),
        ("POST", "/api/v1/jobs/{type}/restart-running"), ("GET", "/api/v1/runs"), ("GET", "/api/v1/calendars"),
        ("GET", "/api/v1/calendars/{name}"), ("PUT", "/api/v1/calendars/{name}"), ("DELETE", "/api/v1/calendars/{name}"),
    }
    nodes = {p["name"] for p in doc["paths"]["/api/v1/nodes"]["get"]["parameters"]}
    assert "details" in nodes and "recent" in {p["name"] for p in doc["paths"]["/api/v1/runs"]["get"]["parameters"]}
    bodies = doc["components"]["schemas"]
    assert {"late_action", "on_failure", "calendar", "delete_on_success", "hold", "parallelism", "if_not_exists"} <= set(
        bodies["StartBody"]["properties"])
    assert {"late_action", "on_failure", "calendar", "delete_on_success", "hold"} <= set(bodies["UpdateBody"]["properties"])
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert json.dumps(doc).count("cdn") == 0


def test_a_job_started_through_the_api_is_owned_by_the_tokens_name_and_listed_by_owner_and_requestor(site):
    """DolphinDB's userID and IPF's jobRequestor (docs/explanation/design-choices.md): the owner is the token's name, the
    requestor what the body says; both are in the job's JSON and filter the list."""
    later = "2099-01-01 00:00:00"  # a one-time schedule far off: the jobs stay live (SCHEDULED)
    api, admin = site.client("operator"), site.client("admin")
    made = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "own-a", "requestor": "payments",
                                   "exec_interval": later})
    assert made.status_code == 201, made.text
    admin.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "own-b", "requestor": "billing",
                              "exec_interval": later}).raise_for_status()
    job = api.get("/jobs/USER_JOB/Probe.noop/own-a").json()
    assert (job["owner"], job["requestor"]) == ("operator-1", "payments")

    def listed(**filters):
        page = api.get("/jobs", params={"name": "Probe.noop", **filters})
        assert page.status_code == 200, page.text
        return sorted((j["uid"], j["owner"], j["requestor"]) for j in page.json()["jobs"] if j["uid"].startswith("own-"))

    assert listed(requestor="payments") == [("own-a", "operator-1", "payments")]
    assert listed(owner="admin-1") == [("own-b", "admin-1", "billing")]
    assert listed(owner="operator-1", requestor="billing") == []
    patched = api.patch("/jobs/USER_JOB/Probe.noop/own-a", json={"requestor": "billing"})
    assert patched.status_code == 200, patched.text
    assert listed(requestor="billing") == [("own-a", "operator-1", "billing"), ("own-b", "admin-1", "billing")]
    assert api.get("/jobs/USER_JOB/Probe.noop/own-a").json()["owner"] == "operator-1"  # UPDATEJOB keeps the owner


def test_the_openapi_document_describes_the_owner_and_requestor_filters(site):
    doc = site.client(None).get("/openapi.json").json()
    params = {p["name"]: p for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"]}
    assert "BY '<owner>'" in params["owner"]["description"] and "REQUESTOR" in params["requestor"]["description"]
    schemas = doc["components"]["schemas"]
    assert {"owner", "requestor"} <= set(schemas["Job"]["properties"]) and "requestor" in schemas["StartBody"]["properties"]
    assert {"owner", "requestor"} <= set(schemas["JobDetail"]["properties"]) and "requestor" in schemas["UpdateBody"]["properties"]


def test_a_priority_above_the_tokens_ceiling_is_refused_with_403_and_nothing_written(request, tmp_path):
    """DolphinDB's setMaxJobPriority, refused instead of capped: the token's name is the user."""
    with running_site(request, tmp_path, {"jobs": {"MAX_JOB_PRIORITY_BY_USER": "operator-1=5"}}) as own:
        api = own.client("operator")
        r = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "ceil", "priority": 6})
        no_traceback(r)
        assert r.status_code == 403 and r.json() == {
            "error": "PriorityAboveCeiling", "message": "PRIORITY 6 refused: 'operator-1' may give at most 5 "
                                                       "([jobs] MAX_JOB_PRIORITY / MAX_JOB_PRIORITY_BY_USER)"}
        assert api.get("/jobs/USER_JOB/Probe.noop/ceil").status_code == 404
        made = own.client("admin").post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "ceil",
                                                       "priority": 9, "exec_interval": "2099-01-01 00:00:00"})
        assert made.status_code == 201, made.text  # admin-1 has the default ceiling, 9
        assert api.patch("/jobs/USER_JOB/Probe.noop/ceil", json={"priority": 7}).status_code == 403
        assert api.get("/jobs/USER_JOB/Probe.noop/ceil").json()["priority"] == 9
