"""DEPENDS_ON through the commands that start a job again or change it while it runs
(docs/guides/dependencies.md): RESUMEJOB of a child waits for its parents as a STARTJOB does,
FINISHJOB never ends a blocked job PROCESSED ahead of its parents, new parents given to a
running recurring job hold back its next run, and RESUMEJOB / RELEASEJOB of an interval job
with a calendar let the calendar decide its first fire. Real node processes on each backend."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from fabricjobs.model import Status
from harness import read_records, wait_for

pytestmark = pytest.mark.slow


def rec(log, seconds=0.2, starts=None, until=None) -> str:
    args = {"log": str(log), "seconds": seconds}
    if starts:
        args["starts"] = str(starts)
    if until:
        args["until"] = str(until)
    return json.dumps(args)


def test_resumejob_of_a_child_waits_for_its_parent_run_again(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.record' uid='P' args='{rec(log, 1.5)}';"
                  f"startjob user_job name='Probe.record' uid='K' depends_on='USER_JOB.Probe.record.P' args='{rec(log)}';")
    cluster.wait_job("USER_JOB", "Probe.record", "K", lambda j: j.status is Status.PROCESSED, 20)

    cluster.fetch("resumejob user_job name='Probe.record' uid='P';")
    child = cluster.fetch("resumejob user_job name='Probe.record' uid='K';").first_row()
    assert child["Status"] == "WAITING" and child["Notes"].startswith("waiting for USER_JOB.Probe.record.P"), child
    cluster.wait_job("USER_JOB", "Probe.record", "K", lambda j: j.status is Status.PROCESSED, 20)
    runs = [(r["key"].rsplit(".", 1)[1], r["start"], r["end"]) for r in read_records(log)]
    assert [uid for uid, _, _ in runs] == ["P", "K", "P", "K"], runs
    assert runs[3][1] >= runs[2][2], "the resumed child ran before its parent's new run ended"


def test_finishjob_of_a_blocked_recurring_job_is_refused_and_frees_nothing(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    counter = json.dumps({"counter": str(tmp_path / "c")})
    cluster.fetch(f"startjob user_job name='Probe.fail_once_no_retry' uid='P' args='{counter}';")
    assert cluster.wait_job("USER_JOB", "Probe.fail_once_no_retry", "P", lambda j: j.archived).status is Status.FAILED
    cluster.fetch(f"startjob user_job name='Probe.record' uid='R' exec_interval='0 0 1 1 *' "
                  f"depends_on='USER_JOB.Probe.fail_once_no_retry.P' args='{rec(log)}';"
                  f"startjob user_job name='Probe.record' uid='G' depends_on='USER_JOB.Probe.record.R' args='{rec(log)}';")
    out = cluster.shell("-e", "finishjob user_job name='Probe.record' uid='R';")
    assert out.returncode == 1 and "Job is blocked" in out.stderr and "nothing was changed" in out.stderr, out.stderr
    r = cluster.job("USER_JOB", "Probe.record", "R")
    assert (r.status, r.blocked, r.finishing, r.archived) == (Status.SCHEDULED, True, False, False), r
    time.sleep(1.0)  # (a PROCESSED R would free G at once: the node that wrote it checks its children)
    assert read_records(log) == [] and cluster.job("USER_JOB", "Probe.record", "G").blocked


def test_new_parents_of_a_running_recurring_job_hold_back_its_next_run(cluster, tmp_path):
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    gate_r, gate_l = tmp_path / "R-may-end", tmp_path / "L-may-end"
    cluster.start_node("n1")
    # R's first run lasts until the test has changed it (its runs after that end at once); L's,
    # until R has had the time to fire twice more, were its new parent not holding it back.
    cluster.fetch(f"startjob user_job name='Probe.record' uid='L' args='{rec(log, 60, until=gate_l)}';"
                  f"startjob user_job name='Probe.record' uid='R' exec_interval='00:00:01' "
                  f"args='{rec(log, 60, starts, until=gate_r)}';")
    cluster.wait_job("USER_JOB", "Probe.record", "L", lambda j: j.status is Status.IN_PROCESS, 20)
    cluster.wait_job("USER_JOB", "Probe.record", "R", lambda j: j.status is Status.IN_PROCESS, 20)
    said = cluster.fetch("updatejob user_job name='Probe.record' uid='R' depends_on='USER_JOB.Probe.record.L';").first_row()
    going = cluster.job("USER_JOB", "Probe.record", "R").epoch  # the run going on when it changed
    assert said["Notes"].startswith("running; its next run waiting for USER_JOB.Probe.record.L"), said
    # Finishing it now would end it PROCESSED before its new parent: refused, as between fires.
    refused = cluster.shell("-e", "finishjob user_job name='Probe.record' uid='R';")
    assert refused.returncode == 1 and "Job is blocked" in refused.stderr, refused.stderr
    assert not cluster.job("USER_JOB", "Probe.record", "R").finishing
    gate_r.touch()
    wait_for(lambda: any(r["key"].endswith(".R") for r in read_records(log)), 20, "R's run to end")
    time.sleep(2.0)  # (R fires every second: held back by L, it does not fire meanwhile)
    gate_l.touch()
    parent = cluster.wait_job("USER_JOB", "Probe.record", "L", lambda j: j.archived, 20)
    assert parent.status is Status.PROCESSED
    ended = [r["end"] for r in read_records(log) if r["key"].endswith(".L")][0]  # (this host's clock, as starts')
    wait_for(lambda: any(s["start"] > ended for s in read_records(starts) if s["key"].endswith(".R")), 20,
             "R to fire again once its new parent ended")
    early = [s["start"] for s in read_records(starts) if s["key"].endswith(".R") and s["epoch"] > going
             and s["start"] < ended]
    assert early == [], f"R fired {len(early)} time(s) while its new parent was still running"
    cluster.fetch("stopjob user_job name='Probe.record' uid='R';")


@pytest.mark.parametrize("how", ["resumejob", "releasejob"])
def test_an_interval_job_with_a_calendar_started_again_lets_the_calendar_decide_its_first_fire(cluster, tmp_path, how):
    starts = tmp_path / "starts.jsonl"
    cluster.start_node("n1")
    today = datetime.now(timezone.utc).date()  # the job's TZ is UTC: today and tomorrow cover the test
    cluster.fetch(f"createcalendar 'off' exclude '{today}..{today + timedelta(days=1)}';")
    job = "user_job name='Probe.record' uid='c'"
    args = f"args='{rec(tmp_path / 'runs.jsonl', 0, starts)}'"
    if how == "resumejob":
        cluster.fetch(f"startjob {job} exec_interval='00:00:05' tz='UTC' calendar='off' {args};"
                      f"stopjob {job} wait timeout 20;")
    else:
        cluster.fetch(f"startjob {job} exec_interval='00:00:05' tz='UTC' calendar='off' hold=true {args};")
    again = cluster.fetch(f"{how} {job};").first_row()
    assert again["Status"] == "SCHEDULED", again
    history = lambda: cluster.shell_ok("jobhistory user_job 'Probe.record' with uid='c';")  # noqa: E731
    wait_for(lambda: re.search(r"\| SKIPPED .*calendar 'off' excludes it", history()), 20,
             "the first fire after it started again skipped by the calendar")
    assert not starts.exists(), read_records(starts)
