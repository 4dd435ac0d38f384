"""The API answers as its documents say, against a real ``fabricjobs web`` process and node: the
OpenAPI document lists the statuses the server sends (no 422: bad input is a 400 with the
error body every error has; 200 beside 201 for STARTJOB's IF NOT EXISTS; 429 where a request
may wait), a bad time zone or a CALENDAR on a one-time job is a 400 (not a 500, not a 409), a
script sent to ``POST /commands`` may wait once, and a JOBLOG ... FOLLOW through it holds its
token's long-request slot while its lines come."""

from __future__ import annotations

import json
import threading

from harness import wait_for
from web_site import running_site


def test_the_openapi_document_lists_the_statuses_the_server_sends(site):
    doc = site.client(None).get("/openapi.json").json()
    statuses = {(method, path): set(op["responses"]) for path, item in doc["paths"].items() for method, op in item.items()}
    assert not [where for where, sent in statuses.items() if "422" in sent]
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    job = "/api/v1/jobs/{type}/{name}/{uid}"
    assert {"200", "201", "400", "413"} <= statuses[("post", "/api/v1/jobs")]
    for where in (("get", job + "/wait"), ("post", job + "/stop"), ("get", job + "/log"), ("post", "/api/v1/commands")):
        assert "429" in statuses[where], where
    # And what the document says of a bad value is what comes.
    bad = site.client("operator").get("/jobs", params={"limit": "many"})
    assert bad.status_code == 400 and set(bad.json()) >= {"error", "message"}, bad.text


def test_a_bad_time_zone_or_a_calendar_on_a_one_time_job_is_a_400(site):
    operator, admin = site.client("operator"), site.client("admin")
    assert admin.put("/calendars/weekends", json={"exclude": ["* * * * sat,sun"]}).status_code in (200, 201)
    for body, says in (({"tz": "America"}, "unknown time zone 'America'"),  # (a folder of the zone database)
                       ({"tz": "x" * 300}, "unknown time zone"),
                       ({"calendar": "weekends"}, "needs a recurring job")):
        made = operator.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "bad-value", **body})
        assert made.status_code == 400 and says in made.json()["message"], made.text
    assert operator.get("/jobs/USER_JOB/Probe.noop/bad-value").status_code == 404  # nothing was started
    made = operator.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "tz-later",
                                        "exec_interval": "0 0 1 1 *"})
    assert made.status_code == 201, made.text
    changed = operator.patch("/jobs/USER_JOB/Probe.noop/tz-later", json={"tz": "America"})
    assert changed.status_code == 400 and "unknown time zone 'America'" in changed.json()["message"], changed.text
    operator.post("/jobs/USER_JOB/Probe.noop/tz-later/stop")


def test_the_job_lists_filters_are_checked_as_the_statements_values(site):
    viewer = site.client("viewer")
    for params, says in (({"name": "a\x00b", "scope": "all"}, "NAME must not contain control characters"),
                         ({"owner": "x" * 1025}, "BY is 1,025 characters long"),
                         ({"requestor": "a\nb"}, "REQUESTOR must not contain control characters")):
        refused = viewer.get("/jobs", params=params)
        assert refused.status_code == 400 and says in refused.json()["message"], refused.text
    # A misspelt parameter is refused, not ignored (an unfiltered list; a stop that does not wait).
    refused = viewer.get("/jobs", params={"statuses": "FAILED"})
    assert refused.status_code == 400 and "unknown query parameter 'statuses'" in refused.json()["message"]
    assert "status" in refused.json()["message"].split("takes:")[1], refused.text
    anonymous = site.client(None).get("/jobs", params={"statuses": "FAILED"})  # (told nothing of the route)
    assert anonymous.status_code == 401 and "takes" not in anonymous.text, anonymous.text
    operator = site.client("operator")
    assert operator.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "misspelt",
                                        "exec_interval": "0 0 1 1 *"}).status_code == 201
    refused = operator.post("/jobs/USER_JOB/Probe.noop/misspelt/stop", params={"wiat": "true"})
    assert refused.status_code == 400 and "'wiat'" in refused.json()["message"], refused.text
    assert operator.get("/jobs/USER_JOB/Probe.noop/misspelt").json()["status"] == "SCHEDULED"  # not stopped
    assert operator.post("/jobs/USER_JOB/Probe.noop/misspelt/stop", params={"wait": "true"}).status_code == 200


def test_a_script_sent_to_the_api_may_wait_once(site):
    operator = site.client("operator")
    text = ("startjob user_job name='Probe.noop' uid='two-waits';"
            "waitjob user_job 'Probe.noop' with uid='two-waits' timeout 30;"
            "joblog user_job 'Probe.noop' with uid='two-waits' follow timeout 30;")
    refused = operator.post("/commands", json={"text": text})
    assert refused.status_code == 400 and "may wait once (it has 2 waits" in refused.json()["message"], refused.text
    assert operator.get("/jobs/USER_JOB/Probe.noop/two-waits").status_code == 404  # nothing ran
    one = operator.post("/commands", json={"text": text.rsplit("joblog", 1)[0]})
    assert one.status_code == 200 and one.json()["rows"][0]["Status"] == "PROCESSED", one.text


def test_a_follow_through_commands_holds_its_slot_while_its_lines_come(request, tmp_path_factory, tmp_path):
    with running_site(request, tmp_path_factory.mktemp("web"), {"web": {"MAX_WAITS_PER_TOKEN": 1}}) as site:
        viewer, operator = site.client("viewer"), site.client("operator")
        args = json.dumps({"log": str(tmp_path / "started.log")})
        assert operator.post("/jobs", json={"type": "USER_JOB", "name": "Probe.started", "uid": "followed",
                                            "args": json.loads(args)}).status_code == 201
        follow = "joblog user_job 'Probe.started' with uid='followed' follow timeout 20;"
        answers: list[int] = []

        def follow_once_admitted() -> None:  # (a probe below may hold the one slot a moment: ask again)
            for _ in range(100):
                answers.append(site.client("viewer").post("/commands", json={"text": follow}).status_code)
                if answers[-1] != 429:
                    return

        following = threading.Thread(target=follow_once_admitted, daemon=True)
        following.start()
        try:
            # While the follow's lines come, the token's one slot is taken: another follow is a 429.
            refused = wait_for(lambda: (lambda r: r if r.status_code == 429 else None)(
                viewer.get("/jobs/USER_JOB/Probe.started/followed/log", params={"follow": "true", "timeout": 0})),
                15, "a second long request of the token to be refused")
            assert "MAX_WAITS_PER_TOKEN" in refused.json()["message"] and refused.headers["Retry-After"]
            # A follow's timeout may be a fraction of a second, as every other wait's.
            assert site.client("admin").get("/jobs/USER_JOB/Probe.started/followed/log",
                                            params={"follow": "true", "timeout": 0.5}).status_code == 200
        finally:
            operator.post("/jobs/USER_JOB/Probe.started/followed/stop")
            following.join(30)
        assert answers and answers[-1] in (200, 504), answers
