"""The statements the API has routes for besides the first ones (FINISHJOB, RUNJOB, RELEASEJOB,
RESTARTJOB ... RUNNING, the calendars, JOBHISTORY RECENT, NODES DETAILS) and STARTJOB's and
UPDATEJOB's other parameters, against a real ``fabricjobs web`` process and a real node: each
route's effect is what the statement's is, seen through the API, the shell or the stored row."""

from __future__ import annotations

import json

from harness import read_records, wait_for
from web_site import running_site

NEVER = "0 0 1 1 *"  # a recurring job whose next fire is months away: SCHEDULED between fires
LATER = "2099-01-01 00:00:00"  # a one-time job far off: SCHEDULED, live


def job_path(name: str, uid: str) -> str:
    return f"/jobs/USER_JOB/{name}/{uid}"


def start(api, name: str, uid: str, **fields) -> dict:
    made = api.post("/jobs", json={"type": "USER_JOB", "name": name, "uid": uid, **fields})
    assert made.status_code == 201, made.text
    return made.json()


def test_a_held_job_runs_only_once_released_and_its_held_child_with_it(site, tmp_path):
    api = site.client("operator")
    log = str(tmp_path / "held.jsonl")
    held = start(api, "Probe.record", "held", hold=True, args={"log": log})
    child = start(api, "Probe.record", "held-child", hold=True, args={"log": log},
                  depends_on=["USER_JOB.Probe.record.held"])
    assert (held["status"], child["status"]) == ("HELD", "HELD")
    shown = site.cluster.shell_ok("jobstatus user_job 'Probe.record' with uid='held';")
    assert "HELD" in shown, shown
    assert read_records(tmp_path / "held.jsonl") == []  # a HELD job is never fired

    released = api.post(job_path("Probe.record", "held") + "/release")
    assert released.status_code == 200, released.text
    rows = released.json()
    assert [(r["uid"], r["status"]) for r in rows] == [("held", "WAITING"), ("held-child", "WAITING")], rows
    assert rows[0]["notes"].startswith("RELEASEJOB by token 'operator-1'")
    assert "released with USER_JOB.Probe.record.held" in rows[1]["notes"]
    site.cluster.wait_job("USER_JOB", "Probe.record", "held-child", lambda j: j.archived, 30)
    assert sorted(r["key"] for r in read_records(tmp_path / "held.jsonl")) == [
        "USER_JOB.Probe.record.held", "USER_JOB.Probe.record.held-child"]
    again = api.post(job_path("Probe.record", "held") + "/release")
    assert again.status_code == 410 and again.json()["error"] == "JobEnded", again.text  # it has run: Gone


def test_run_runs_a_recurring_job_once_and_finish_ends_it(site, tmp_path):
    api = site.client("operator")
    log = tmp_path / "once.jsonl"
    start(api, "Probe.record", "once", exec_interval=NEVER, args={"log": str(log)})
    job = job_path("Probe.record", "once")
    due = api.get(job).json()["next_run"]
    ran = api.post(job + "/run")
    assert ran.status_code == 200 and ran.json()["notes"].startswith("runs once now; its schedule goes on at"), ran.text
    back = wait_for(lambda: (lambda j: j if j["runs"] == 1 and j["status"] == "SCHEDULED" else None)(api.get(job).json()),
                    30, "the one run, then the job between its fires again")
    assert back["next_run"] == due and len(read_records(log)) == 1  # its schedule unchanged

    finished = api.post(job + "/finish", params={"wait": "true", "timeout": 30})
    assert finished.status_code == 200, finished.text
    assert finished.json()["status"] == "PROCESSED"
    detail = api.get(job).json()
    assert detail["is_archived"] and detail["notes"].startswith("FINISHJOB by token 'operator-1'"), detail
    start(api, "Probe.noop", "one-time", exec_interval=LATER)
    refused = api.post(job_path("Probe.noop", "one-time") + "/finish")
    assert refused.status_code == 409 and "is not a recurring job" in refused.json()["message"], refused.text
    api.post(job_path("Probe.noop", "one-time") + "/stop")


def test_restart_running_restarts_only_the_jobs_with_a_run_going(site, tmp_path):
    api = site.client("operator")
    log = tmp_path / "deploy.jsonl"
    start(api, "Probe.record", "deploy-run", args={"log": str(log), "seconds": 60})
    start(api, "Probe.record", "deploy-idle", exec_interval=NEVER, args={"log": str(log)})
    site.cluster.wait_job("USER_JOB", "Probe.record", "deploy-run", lambda j: j.status.value == "IN_PROCESS", 20)
    epoch = api.get(job_path("Probe.record", "deploy-run")).json()["epoch"]

    answer = api.post("/jobs/USER_JOB/restart-running", params={"name": "Probe.record"})
    assert answer.status_code == 200, answer.text
    restarted = {r["uid"]: r for r in answer.json()}  # (another test's run of Probe.record may be going on)
    assert restarted["deploy-run"]["status"] == "RESTART" and "deploy-idle" not in restarted, answer.text
    assert restarted["deploy-run"]["notes"].startswith("RESTARTJOB by token 'operator-1'")
    wait_for(lambda: api.get(job_path("Probe.record", "deploy-run")).json()["epoch"] > epoch, 30, "the restarted run")
    assert api.get(job_path("Probe.record", "deploy-idle")).json()["status"] == "SCHEDULED"  # idle: left alone
    assert [r["aborted"] for r in wait_for(lambda: read_records(log), 20, "the aborted run's record")] == [True]
    assert api.post("/jobs/PROCESS/restart-running").json() == []  # none running: no error
    for uid in ("deploy-run", "deploy-idle"):
        api.post(job_path("Probe.record", uid) + "/stop", params={"wait": "true", "timeout": 30})


def test_a_calendar_put_is_listed_by_the_api_and_the_shell_and_named_by_jobs(site):
    admin, api = site.client("admin"), site.client("viewer")
    made = admin.put("/calendars/api-holidays", json={"exclude": ["2026-12-25", "* * * * sat,sun"]})
    assert made.status_code == 201 and made.json() == {
        "name": "api-holidays", "rules": "2026-12-25; * * * * sat,sun", "status": "created"}, made.text
    assert {"name": "api-holidays", "rules": "2026-12-25; * * * * sat,sun", "live_jobs": 0} in api.get("/calendars").json()
    assert "api-holidays" in site.cluster.shell_ok("calendars;")
    replaced = admin.put("/calendars/api-holidays", json={"exclude": ["2026-12-24..2026-12-26"]})
    assert replaced.status_code == 200 and replaced.json()["status"] == "replaced", replaced.text
    assert api.get("/calendars/api-holidays").json()["rules"] == "2026-12-24..2026-12-26"

    operator = site.client("operator")
    start(operator, "Probe.noop", "on-calendar", exec_interval=NEVER, calendar="api-holidays")
    assert operator.get(job_path("Probe.noop", "on-calendar")).json()["calendar"] == "api-holidays"
    assert api.get("/calendars/api-holidays").json()["live_jobs"] == 1
    named = admin.delete("/calendars/api-holidays")
    assert named.status_code == 409 and "is named by 1 live job(s)" in named.json()["message"], named.text
    patched = operator.patch(job_path("Probe.noop", "on-calendar"), json={"calendar": ""})
    assert patched.status_code == 200, patched.text
    assert operator.get(job_path("Probe.noop", "on-calendar")).json()["calendar"] == ""
    dropped = admin.delete("/calendars/api-holidays")
    assert dropped.status_code == 200 and dropped.json()["status"] == "dropped", dropped.text
    assert api.get("/calendars/api-holidays").status_code == 404
    assert "api-holidays" not in site.cluster.shell_ok("calendars;")
    operator.post(job_path("Probe.noop", "on-calendar") + "/stop")


def test_the_start_and_update_bodies_take_every_parameter_of_the_statements(site, tmp_path):
    api = site.client("operator")
    job = job_path("Probe.noop", "params")
    start(api, "Probe.noop", "params", exec_interval=NEVER, late_action="run", on_failure="user_job.Probe.echo")
    row = site.cluster.job("USER_JOB", "Probe.noop", "params")
    assert (row.late_action, row.on_failure) == ("RUN", "USER_JOB.Probe.echo")
    shown = api.get(job).json()  # as JOBSTATUS ... DETAILS shows them
    assert (shown["late_action"], shown["on_failure"]) == ("RUN", "USER_JOB.Probe.echo")

    patched = api.patch(job, json={"late_action": "USER_JOB.Probe.echo", "on_failure": "", "hold": True})
    assert patched.status_code == 200 and patched.json()["status"] == "HELD", patched.text
    row = site.cluster.job("USER_JOB", "Probe.noop", "params")
    assert (row.late_action, row.on_failure, row.status.value) == ("USER_JOB.Probe.echo", "", "HELD")
    assert api.get(job).json()["status"] == "HELD"
    api.post(job + "/stop")

    again = {"exec_interval": NEVER, "if_not_exists": True}
    body = {"type": "USER_JOB", "name": "Probe.noop", "uid": "idempotent", **again}
    created, met = api.post("/jobs", json=body), api.post("/jobs", json=body)
    assert (created.status_code, met.status_code) == (201, 200), (created.text, met.text)  # 200: nothing created
    assert created.json() == met.json()  # IF NOT EXISTS: the job as it is, no 409
    assert api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "idempotent"}).status_code == 409
    api.post(job_path("Probe.noop", "idempotent") + "/stop")

    parallel = start(api, "Probe.echo", "split", parallelism=3)
    assert parallel["status"] == "WAITING"
    done = site.cluster.wait_job("USER_JOB", "Probe.echo", "split", lambda j: j.archived, 30)
    assert done.status.value == "PROCESSED"
    detail = api.get(job_path("Probe.echo", "split")).json()
    assert (detail["parallelism"], detail["task_of"]) == (3, "")
    tasks = api.get("/jobs", params={"name": "Probe.echo", "scope": "archived", "limit": 1000}).json()["jobs"]
    assert sorted(t["uid"] for t in tasks if t["uid"].startswith("split/")) == ["split/0", "split/1", "split/2"]


def test_on_failure_given_in_the_body_starts_its_job_when_a_run_fails_for_good(site):
    api = site.client("operator")
    start(api, "Probe.fails_no_retry", "body-failed", on_failure="USER_JOB.Probe.echo")
    failed = site.cluster.wait_job("USER_JOB", "Probe.fails_no_retry", "body-failed", lambda j: j.archived, 30)
    handler = site.cluster.wait_job("USER_JOB", "Probe.echo", f"{failed.key}.failed.{failed.epoch}", lambda j: j.archived, 30)
    assert json.loads(handler.arguments)["failed_job"] == "USER_JOB.Probe.fails_no_retry.body-failed"


def test_delete_on_success_in_the_body_deletes_its_file_after_the_run(request, tmp_path):
    root = tmp_path / "cleanup"
    root.mkdir()
    (root / "scratch.txt").write_text("left by the job")
    with running_site(request, tmp_path, {"jobs": {"CLEANUP_ROOT": str(root)}}) as own:
        api = own.client("operator")
        start(api, "Probe.noop", "tidy", delete_on_success="scratch.txt")
        assert api.get(job_path("Probe.noop", "tidy")).json()["delete_on_success"] == "scratch.txt"
        own.cluster.wait_job("USER_JOB", "Probe.noop", "tidy", lambda j: j.archived, 30)
        wait_for(lambda: not (root / "scratch.txt").exists(), 10, "the file DELETE_ON_SUCCESS named to be deleted")


def test_recent_runs_and_node_details(site):
    api = site.client("viewer")
    operator = site.client("operator")
    start(operator, "Probe.noop", "recent")
    site.cluster.wait_job("USER_JOB", "Probe.noop", "recent", lambda j: j.archived, 30)
    recent = api.get("/runs", params={"recent": 1000})
    assert recent.status_code == 200, recent.text
    mine = [r for r in recent.json() if r["uid"] == "recent"]
    assert [(r["type"], r["name"], r["result"]) for r in mine] == [("USER_JOB", "Probe.noop", "OK")]
    said = [r["UID"] for r in api.post("/commands", json={"text": "jobhistory recent 1000;"}).json()["rows"]]
    listed = [r["uid"] for r in recent.json()]
    # The same list, newest first; a run of an earlier test's job that ended between the two
    # requests can only come first.
    assert said[len(said) - len(listed):] == listed, (said, listed)
    assert len(api.get("/runs", params={"recent": 1}).json()) == 1

    details = wait_for(lambda: (lambda n: n if [(x["node"], x["state"]) for x in n] == [("w1", "alive")] else None)(
        api.get("/nodes", params={"details": "true"}).json()), 20, "w1 to be listed alive")  # (not suspect a while)
    assert details[0]["incarnation"] and details[0]["beat"] >= 1 and "ms x" in details[0]["heartbeat"], details
    assert "incarnation" not in api.get("/nodes").json()[0]
