"""``GET /jobs/{type}/{name}/{uid}/log?follow=true`` (JOBLOG ... FOLLOW) against a
real ``fabricjobs web`` process and a real node: the running run's lines as NDJSON as they
come, the first one while the run still goes on."""

from __future__ import annotations

import json

from harness import wait_for


def test_a_running_jobs_lines_stream_as_they_come_and_the_stream_ends_with_the_run(site, tmp_path):
    gate = tmp_path / "gate"
    api = site.client("operator")
    started = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.log_and_wait", "uid": "api-follow",
                                      "args": {"gate": str(gate)}})
    assert started.status_code == 201, started.text
    job = "/jobs/USER_JOB/Probe.log_and_wait/api-follow"
    seen: list[dict] = []
    with site.client("viewer").stream("GET", job + "/log", params={"follow": "true", "timeout": 60}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
        lines = response.iter_lines()
        for text in lines:
            seen.append(json.loads(text))
            if "first line, before the gate" in seen[-1].get("line", ""):
                break
        assert api.get(job).json()["status"] == "IN_PROCESS" and not gate.exists()  # it came while the run went on
        # Through POST /commands, a follow whose time runs out is a 504 that keeps its lines.
        cut = site.client("viewer").post("/commands", json={
            "text": "joblog user_job 'Probe.log_and_wait' with uid='api-follow' follow timeout 1;"})
        assert cut.status_code == 504 and cut.json()["error"] == "WaitTimeout", cut.text
        assert any("first line, before the gate" in line for line in cut.json()["lines"]), cut.text
        gate.touch()
        seen += [json.loads(text) for text in lines]
    assert seen[0] == {"line": "run 1 of USER_JOB.Probe.log_and_wait.api-follow on w1: following (ends with the run)"}
    assert "second line, after the gate" in seen[-2]["line"]
    assert seen[-1] == {"line": "run 1 of USER_JOB.Probe.log_and_wait.api-follow on w1: OK -> PROCESSED"}
    # Ended: the last run's log, as JOBLOG shows it.
    again = [json.loads(t) for t in site.client("viewer").get(job + "/log?follow=true").text.splitlines()]
    assert again[0] == seen[-1] and any("second line" in x["line"] for x in again)
    # POST /commands answers as Client.fetch does: the lines (a wait bounded as WAITJOB's) in the status.
    answer = site.client("viewer").post("/commands", json={
        "text": "joblog user_job 'Probe.log_and_wait' with uid='api-follow' follow;"}).json()
    assert answer["status"].splitlines()[0] == seen[-1]["line"]


def test_a_follow_that_times_out_ends_its_stream_with_the_error(site):
    api = site.client("operator")
    started = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "api-yearly",
                                      "exec_interval": "0 0 0 1 1 *"})
    assert started.status_code == 201, started.text
    job = "/jobs/USER_JOB/Probe.noop/api-yearly"
    wait_for(lambda: api.get(job).json()["status"] == "SCHEDULED", 10, "scheduled")
    r = site.client("viewer").get(job + "/log", params={"follow": "true", "timeout": 1})
    assert r.status_code == 200
    assert [json.loads(t) for t in r.text.splitlines()] == [
        {"error": "WaitTimeout", "message": "JOBLOG FOLLOW timed out: USER_JOB.Probe.noop.api-yearly is SCHEDULED, no run started"}]
    missing = site.client("viewer").get("/jobs/USER_JOB/Probe.noop/no-such/log?follow=true")
    assert missing.status_code == 404 and missing.json()["error"] == "JobNotFound"
    assert "follow" in str(site.client("viewer").get("/openapi.json").json()["paths"]["/api/v1/jobs/{type}/{name}/{uid}/log"])
