"""SMILA's status codes, DolphinDB's getRecentJobs and Fabric's job types through the API,
against a real ``fabricjobs web`` process and a real node: finishing (or stopping, running,
...) a job that has ended is 410 Gone, one that never was 404; DELETE of run data is
idempotent; RECENT's rows include the runs going on and the jobs waiting for a node, with
user, priority, parallelism and received time; a K2View-platform job type is refused saying
why."""

from __future__ import annotations

import json

from harness import read_records, wait_for


def test_a_change_of_an_ended_job_is_410_and_of_one_that_never_was_404(site):
    api = site.client("operator")
    made = api.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "gone", "exec_interval": "0 0 1 1 *"})
    assert made.status_code == 201, made.text
    finished = api.post("/jobs/USER_JOB/Probe.noop/gone/finish")  # SCHEDULED between fires: PROCESSED at once
    assert finished.status_code == 200 and finished.json()["status"] == "PROCESSED", finished.text
    for action in ("finish", "stop", "run", "restart", "release"):
        again = api.post(f"/jobs/USER_JOB/Probe.noop/gone/{action}")
        assert again.status_code == 410, (action, again.text)
        assert again.json()["error"] == "JobEnded" and "Job has ended [type: USER_JOB, name: Probe.noop, uid: gone]" \
            in again.json()["message"] and "(PROCESSED)" in again.json()["message"]
    assert api.patch("/jobs/USER_JOB/Probe.noop/gone", json={"priority": 2}).status_code == 410
    never = api.post("/jobs/USER_JOB/Probe.noop/never-was/finish")
    assert never.status_code == 404 and never.json()["error"] == "JobNotFound", never.text
    assert "No active job" in never.json()["message"]
    # The shell says the two apart too.
    shell = site.cluster.shell("-e", "finishjob user_job name='Probe.noop' uid='gone';")
    assert shell.returncode == 1 and "Job has ended" in shell.stderr, shell.stderr
    shell = site.cluster.shell("-e", "finishjob user_job name='Probe.noop' uid='never-was';")
    assert shell.returncode == 1 and "No active job" in shell.stderr, shell.stderr


def test_deleting_run_data_is_idempotent(site):
    admin = site.client("admin")
    made = admin.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "wiped"})
    assert made.status_code == 201, made.text
    site.cluster.wait_job("USER_JOB", "Probe.noop", "wiped", lambda j: j.archived, 30)
    runs = "/jobs/USER_JOB/Probe.noop/wiped/runs"
    wait_for(lambda: admin.get(runs).json(), 10, "the run's record")
    first = admin.delete(runs)
    assert first.status_code == 200 and first.json()["deleted_runs"] == 1, first.text
    again = admin.delete(runs)
    assert again.status_code == 200 and again.json()["deleted_runs"] == 0, again.text
    never = admin.delete("/jobs/USER_JOB/Probe.noop/never-was/runs")
    assert never.status_code == 200 and never.json() == {"type": "USER_JOB", "name": "Probe.noop", "uid": "never-was",
                                                         "deleted_runs": 0}, never.text
    shell = site.cluster.shell("-e", "deletehistory user_job 'Probe.noop' with uid='never-was';")
    assert shell.returncode == 1 and "No such job" in shell.stderr  # the shell still says so


def test_recent_runs_include_the_runs_going_on_and_the_jobs_waiting_with_who_and_when(site, tmp_path):
    operator = site.client("operator")
    starts = tmp_path / "starts.jsonl"
    args = {"log": str(tmp_path / "runs.jsonl"), "seconds": 60, "starts": str(starts)}
    for body in ({"uid": "r-going", "name": "Probe.record", "args": args, "priority": 7},
                 {"uid": "r-queued", "name": "Probe.noop", "affinity": "no-such-node", "requestor": "team-a"}):
        made = operator.post("/jobs", json={"type": "USER_JOB", **body})
        assert made.status_code == 201, made.text
    wait_for(lambda: read_records(starts), 20, "the run to begin")
    recent = site.client("viewer").get("/runs", params={"recent": 50})
    assert recent.status_code == 200, recent.text
    mine = {r["uid"]: r for r in recent.json()}  # (other tests' jobs may be listed too)
    going, queued = mine["r-going"], mine["r-queued"]
    assert (going["uid"], going["result"], going["status"], going["user"], going["priority"], going["parallelism"]) == \
        ("r-going", "RUNNING", "IN_PROCESS", "operator-1", 7, 1)
    assert going["run"] == 1 and going["node"] == "w1" and going["start"] and going["end"] is None
    assert (queued["uid"], queued["result"], queued["run"], queued["start"], queued["user"]) == \
        ("r-queued", "PENDING", None, None, "operator-1")
    assert queued["received"] and going["received"] <= going["start"]
    for uid in ("r-going", "r-queued"):
        operator.post(f"/jobs/USER_JOB/{'Probe.record' if uid == 'r-going' else 'Probe.noop'}/{uid}/stop")


def test_a_k2view_platform_job_type_is_refused_saying_why(site):
    api = site.client("operator")
    for kind in ("BROADWAY", "BATCH_JOB"):
        refused = api.post("/jobs", json={"type": kind, "name": "Customer.flow"})
        assert refused.status_code == 400, refused.text
        message = refused.json()["message"]
        assert f"unknown job type '{kind}' (known types: USER_JOB, PROCESS, INTERFACE_LISTENER)" in message
        assert f"{kind} is a job type of the K2View Fabric platform" in message, message
    shell = site.cluster.shell("-e", "startjob broadway_job name='Customer.flow';")
    assert shell.returncode == 1 and "K2View Fabric platform (it runs a Broadway flow)" in shell.stderr, shell.stderr
    plain = api.post("/jobs", json={"type": "NOPE", "name": "x"}).json()["message"]
    assert "K2View" not in plain and json.dumps(plain)
