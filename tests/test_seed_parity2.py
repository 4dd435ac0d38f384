"""More of what users of the other seed systems expect (issue #22), through ``fabricjobs shell``
on two real node processes on SQLite: SMILA's finish of a recurring job (FINISHJOB, where
STOPJOB is the cancel) and its runOnce (RUNJOB); IPF's late execution handler (LATE_ACTION) and failure command (ON_FAILURE)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone

import pytest

from harness import Cluster, read_records, table_row as row, two_nodes, wait_for


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = two_nodes(tmp_path_factory.mktemp("parity2"))
    yield c
    c.stop_all()


def _records(path, count, timeout=20.0):
    return wait_for(lambda: (lambda r: r if len(r) >= count else None)(read_records(path)), timeout, f"{count} record(s) in {path}")


def _start_recurring(cluster, tmp_path, uid, seconds):
    """Probe.record every second, each run ``seconds`` long; returns once its first run started."""
    log, starts = tmp_path / "ran.log", tmp_path / "starts.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='{uid}' exec_interval='00:00:01' "
                            f"args='{{\"log\": \"{log}\", \"seconds\": {seconds}, \"starts\": \"{starts}\"}}';")
    assert r.returncode == 0, r.stderr
    _records(starts, 1)
    return log, starts


def test_finishjob_lets_the_run_complete_and_fires_no_more(cluster, tmp_path):
    """SMILA: finish lets the active work complete, then the job run ends SUCCEEDED (here
    PROCESSED); every second it would otherwise fire again right after its 6 s run."""
    log, starts = _start_recurring(cluster, tmp_path, "fin", 6)
    # One shell for both statements: the JOBSTATUS must see the run still going, and on a
    # loaded machine two shells' start-ups took longer than a 3 s run (the job was PROCESSED,
    # and so archived, by the time the second one asked).
    r = cluster.shell("-e", "finishjob user_job name='Probe.record' uid='fin'; jobstatus user_job 'Probe.record';")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.record", "fin", "IN_PROCESS", "finishing: this run completes, then no more fires").search(r.stdout)
    assert "None: finishing (FINISHJOB)" in r.stdout, r.stdout

    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='fin' timeout 20;")
    assert r.returncode == 0 and row("USER_JOB", "Probe.record", "fin", "PROCESSED").search(r.stdout), r.stdout + r.stderr
    ended = read_records(log)
    assert [e["aborted"] for e in ended] == [False]  # completed, not cancelled
    assert len(read_records(starts)) == 1  # and nothing fired after it
    history = cluster.shell("-e", "jobhistory user_job 'Probe.record' with uid='fin';")
    assert row("1", "fin").search(history.stdout) and "| OK " in history.stdout and "(1 row)" in history.stdout


def test_stopjob_stays_the_cancel(cluster, tmp_path):
    log, _starts = _start_recurring(cluster, tmp_path, "cancel", 30)
    r = cluster.shell("-e", "stopjob user_job name='Probe.record' uid='cancel' wait timeout 20;")
    assert r.returncode == 0 and row("USER_JOB", "Probe.record", "cancel", "TERMINATED").search(r.stdout), r.stderr
    assert [e["aborted"] for e in read_records(log)] == [True]


def test_finishjob_between_fires_ends_the_job_at_once(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.noop' uid='yearly' exec_interval='0 0 0 1 1 *';"
                            "finishjob user_job name='Probe.noop' uid='yearly' wait timeout 10;")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.noop", "yearly", "SCHEDULED").search(r.stdout)
    assert row("USER_JOB", "Probe.noop", "yearly", "PROCESSED").search(r.stdout)
    history = cluster.shell("-e", "jobhistory user_job 'Probe.noop' with uid='yearly';")
    assert "(0 rows)" in history.stdout  # it never ran


def test_finishjob_refuses_a_one_time_job_and_changes_nothing(cluster, tmp_path):
    log = tmp_path / "started.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.started' uid='once' args='{{\"log\": \"{log}\"}}';")
    assert r.returncode == 0, r.stderr
    _records(log, 1)
    r = cluster.shell("-e", "finishjob user_job name='Probe.started' uid='once';")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == ("[type: USER_JOB, name: Probe.started, uid: once] is not a recurring job: FINISHJOB ends a "
                                "recurring job after its run (a one-time job's run ends it anyway; STOPJOB cancels it)")
    job = cluster.job("USER_JOB", "Probe.started", "once")
    assert job.status.name == "IN_PROCESS" and not job.finishing
    missing = cluster.shell("-e", "finishjob user_job name='Probe.nothing';")
    assert missing.returncode == 1 and missing.stderr.strip() == "No active job [type: USER_JOB, name: Probe.nothing]"
    cluster.shell("-e", "stopjob user_job name='Probe.started' uid='once';")


# -- SMILA's runOnce: RUNJOB ------------------------------------------------------------------

def _next_run_cell(cluster, name):
    out = cluster.shell("-e", f"jobstatus user_job '{name}';").stdout
    header, line = [x for x in out.splitlines() if x.startswith("| ")][:2]
    return dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in line.strip("|").split("|")]))["Next Run"]


def test_runjob_runs_a_fixed_rate_job_once_now_and_keeps_its_rhythm(cluster, tmp_path):
    log = tmp_path / "ran.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='rate' exec_interval='00:00:30' args='{{\"log\": \"{log}\"}}';")
    assert r.returncode == 0, r.stderr
    _records(log, 1)
    before = cluster.wait_job("USER_JOB", "Probe.record", "rate", lambda j: j.status.name == "SCHEDULED" and j.runs == 1)
    shown = _next_run_cell(cluster, "Probe.record")

    r = cluster.shell("-e", "runjob user_job name='Probe.record' uid='rate';")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.record", "rate", "WAITING", f"runs once now; its schedule goes on at {shown}").search(r.stdout), r.stdout
    _records(log, 2)
    after = cluster.wait_job("USER_JOB", "Probe.record", "rate", lambda j: j.status.name == "SCHEDULED" and j.runs == 2)
    assert after.next_run == before.next_run and after.resume_at is None  # the rhythm is the one it had
    assert _next_run_cell(cluster, "Probe.record") == shown
    history = cluster.shell("-e", "jobhistory user_job 'Probe.record' with uid='rate';").stdout
    assert "(2 rows)" in history and history.count("| OK ") == 2
    cluster.shell("-e", "stopjob user_job name='Probe.record' uid='rate';")


def test_runjob_runs_a_cron_job_before_its_first_fire(cluster, tmp_path):
    log = tmp_path / "ran.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='yearly' exec_interval='0 0 0 1 1 *' args='{{\"log\": \"{log}\"}}';"
                            "runjob user_job name='Probe.record' uid='yearly';")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.record", "yearly", "SCHEDULED").search(r.stdout)
    assert row("USER_JOB", "Probe.record", "yearly", "WAITING", "runs once now; its schedule goes on at").search(r.stdout)
    _records(log, 1)
    job = cluster.wait_job("USER_JOB", "Probe.record", "yearly", lambda j: j.status.name == "SCHEDULED" and j.runs == 1)
    assert (job.next_run.month, job.next_run.day) in ((1, 1), (12, 31))  # Jan 1st, local midnight, as before
    assert len(read_records(log)) == 1
    cluster.shell("-e", "stopjob user_job name='Probe.record' uid='yearly';")


def test_runjob_refuses_a_job_whose_run_is_going_on(cluster, tmp_path):
    log = tmp_path / "started.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.started' uid='busy' args='{{\"log\": \"{log}\"}}';")
    assert r.returncode == 0, r.stderr
    _records(log, 1)
    cluster.wait_job("USER_JOB", "Probe.started", "busy", lambda j: j.status.name == "IN_PROCESS")
    r = cluster.shell("-e", "runjob user_job name='Probe.started' uid='busy';")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == ("Job is running [type: USER_JOB, name: Probe.started, uid: busy] (IN_PROCESS): RUNJOB runs a "
                                "job once between its fires")
    assert len(read_records(log)) == 1 and cluster.job("USER_JOB", "Probe.started", "busy").resume_at is None
    cluster.shell("-e", "stopjob user_job name='Probe.started' uid='busy';")


# -- IPF's late execution handler: LATE_ACTION ------------------------------------------------

def _echoed(cluster, uid):
    """The row (JSON) of the Probe.echo job ``uid`` once final, and the ARGS it was given."""
    done = cluster.shell("-e", f"waitjob user_job 'Probe.echo' with uid='{uid}' timeout 20;", "--format", "json")
    assert done.returncode == 0, done.stderr
    (handler,) = json.loads(done.stdout)
    return handler, json.loads(handler["Output"])["args"]


def test_late_action_runs_a_late_fire_or_starts_the_late_handler(tmp_path):
    """Jobs due every second with a 1 s LATE_THRESHOLD, and no node up until their first fire
    is more than a second late: SKIP (the default) skips it, RUN runs it, USER_JOB.Probe.echo
    skips it and starts Probe.echo with the late job's key and due time in its ARGS."""
    c = Cluster(tmp_path)
    try:
        script = "".join(
            f"startjob user_job name='Probe.stamp' uid='{uid}' exec_interval='*/1 * * * * *' late_threshold='00:00:01' "
            f"{action} args='{{\"log\": \"{tmp_path / uid}\"}}';" for uid, action in
            (("skip", ""), ("run", "late_action='RUN'"), ("handled", "late_action='user_job.Probe.echo'")))
        r = c.shell("-e", script)
        assert r.returncode == 0, r.stderr
        due = {uid: c.job("USER_JOB", "Probe.stamp", uid).next_run for uid in ("skip", "run", "handled")}
        wait_for(lambda: time.time() > max(due.values()).timestamp() + 1.5, 5, "the first fires to be late")
        c.start_node("local-1")
        for uid in ("skip", "run", "handled"):
            _records(tmp_path / uid, 1)

        def first_fires():
            """Each job's history lines for its first (late) fire, once every job has one: a
            run's line is written with its outcome, a moment after the run wrote its record."""
            history = {uid: list(c.fetch(f"jobhistory user_job 'Probe.stamp' with uid='{uid}' limit 100;")) for uid in due}
            first = {uid: [h for h in history[uid] if h["Due"] == due[uid]] for uid in due}
            return first if all(first.values()) else None

        first = wait_for(first_fires, 20, "a history line for each job's first (late) fire", interval=0.1)
        assert [h["Result"] for h in first["skip"]] == ["SKIPPED"]
        assert [h["Result"] for h in first["run"]] == ["OK"]  # ran although late
        assert [h["Result"] for h in first["handled"]] == ["SKIPPED"]
        assert first["handled"][0]["Note"].endswith("(LATE_THRESHOLD 00:00:01); started USER_JOB.Probe.echo")

        handler_uid = f"handled.late.{due['handled'].astimezone(timezone.utc):%Y%m%dT%H%M%S.%f}"[:-3]
        handler, args = _echoed(c, handler_uid)
        assert handler["Status"] == "PROCESSED"
        assert args["late_job"] == "USER_JOB.Probe.stamp.handled" and args["uid"] == "handled"
        assert datetime.fromisoformat(args["due"]) == due["handled"] and args["late_seconds"] > 1
        for uid in due:
            c.shell("-e", f"stopjob user_job name='Probe.stamp' uid='{uid}';")
    finally:
        c.stop_all()


@pytest.mark.parametrize("param, bad, says", [
    ("late_action", "LATER", "LATE_ACTION must be SKIP, RUN or <TYPE>.<NAME> of a late-handler job, got 'LATER'"),
    ("late_action", "USER_JOB.os:system", "refused"),
    ("on_failure", "RUN", "ON_FAILURE must be <TYPE>.<NAME> of a job, got 'RUN'"),
    ("on_failure", "USER_JOB.Probe.nothing_here", "nothing_here"),
])
def test_the_job_a_setting_names_is_checked_before_anything_is_written(cluster, param, bad, says):
    r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='bad' {param}='{bad}';")
    assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr
    assert cluster.job("USER_JOB", "Probe.noop", "bad") is None


# -- IPF's failure command: ON_FAILURE --------------------------------------------------------

def test_on_failure_starts_its_job_once_when_a_run_fails_for_good(cluster):
    """Probe.fails_no_retry fails at once; Probe.always_fails after MAX_TRIES (3) tries: each
    starts Probe.echo once, with its key, run (epoch) and error in the ARGS."""
    r = cluster.shell("-e", "startjob user_job name='Probe.fails_no_retry' uid='nr' on_failure='user_job.Probe.echo';"
                            "startjob user_job name='Probe.always_fails' uid='af' on_failure='USER_JOB.Probe.echo';"
                            "waitjob user_job 'Probe.fails_no_retry' with uid='nr' timeout 20;"
                            "waitjob user_job 'Probe.always_fails' with uid='af' timeout 30;")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.fails_no_retry", "nr", "FAILED").search(r.stdout)
    assert row("USER_JOB", "Probe.always_fails", "af", "FAILED").search(r.stdout)
    for failed, uid in (("Probe.fails_no_retry", "nr"), ("Probe.always_fails", "af")):
        job = cluster.job("USER_JOB", failed, uid)
        handler, args = _echoed(cluster, f"{uid}.failed.{job.epoch}")
        assert handler["Status"] == "PROCESSED" and args["failed_job"] == f"USER_JOB.{failed}.{uid}"
        assert args["run"] == job.epoch and args["error"] == job.error_msg and job.error_msg
    echoes = cluster.shell("-e", "jobstatus user_job 'Probe.echo' 1 day ago;", "--format", "json")
    uids = sorted(e["UID"] for e in json.loads(echoes.stdout) if ".failed." in e["UID"])
    assert [u.split(".failed.")[0] for u in uids] == ["af", "nr"]  # one each: a retried try starts none


# -- Fabric's log lines: [node] LOG_FORMAT = FABRIC -----------------------------------------------

FABRIC_LINE = re.compile(r"^(INFO|WARNING|ERROR|DEBUG) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[(LID[0-9a-f]{16})\] \[([^\]]+)\] (\S+) - (.*)$")


def test_fabric_log_lines_carry_a_log_id_per_run(tmp_path):
    """Seed 001's lines (``INFO 2025-01-27 21:49:43,131 [LID...] [thread] logger - message``):
    a run's lines, on the node and in its worker, share one LID; other lines have the node's."""
    c = Cluster(tmp_path, settings={"node": {"LOG_FORMAT": "FABRIC"}})
    try:
        node = c.start_node("local-1")
        r = c.shell("-e", "startjob user_job name='Probe.noop' uid='lid'; waitjob user_job 'Probe.noop' with uid='lid' timeout 20;")
        assert r.returncode == 0, r.stderr
        done = "job USER_JOB.Probe.noop.lid status was updated to PROCESSED."
        text = wait_for(lambda: (lambda t: t if done in t else None)(node.log_path.read_text()), 10, "the run's last line")
        lines = [FABRIC_LINE.match(line) for line in text.splitlines() if line.startswith(("INFO ", "WARNING ", "ERROR "))]
        assert lines and all(lines), [line for line in text.splitlines() if not FABRIC_LINE.match(line)][:3]
        started = next(m for m in lines if "node local-1 started" in m[5])
        finished = next(m for m in lines if m[5] == done)
        run_lines = [m for m in lines if "Probe.noop.lid" in m[5]]
        assert len(run_lines) >= 2 and {m[2] for m in run_lines} == {finished[2]}  # one LID for the run
        assert finished[2] != started[2] and started[4] == "fabricjobs.node"
    finally:
        c.stop_all()


def test_waitjob_run_n_waits_for_that_run_and_answers_its_history_row(cluster, tmp_path):
    """SMILA's job run ids: run n (the epoch, JOBHISTORY's Run) is what WAITJOB ... RUN n waits
    for; a run that never will be is a clear error, at once for an archived job."""
    log, starts = _start_recurring(cluster, tmp_path, "runs", 0.5)
    began = time.monotonic()
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs' run 3 timeout 30;")
    assert r.returncode == 0, r.stderr
    assert re.search(r"\|\s+3\s+\|\s+runs\s+\|\s+\S+\s+\|\s+OK\s+\|", r.stdout), r.stdout
    assert len(read_records(log)) >= 3  # the third run had ended when it answered
    assert time.monotonic() - began >= 1.0  # and it did wait (runs 2 and 3 fire a second apart)
    r = cluster.shell("-e", "stopjob user_job name='Probe.record' uid='runs' wait timeout 20;"
                            "waitjob user_job 'Probe.record' with uid='runs' run 1;")
    assert r.returncode == 0 and re.search(r"\|\s+1\s+\|\s+runs\s+\|", r.stdout), r.stdout + r.stderr

    once = tmp_path / "once.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='runs1' args='{{\"log\": \"{once}\"}}';"
                            "waitjob user_job 'Probe.record' with uid='runs1' run 1 timeout 20;")
    assert r.returncode == 0 and re.search(r"\|\s+1\s+\|\s+runs1\s+\|\s+\S+\s+\|\s+OK\s+\|", r.stdout), r.stdout + r.stderr
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs1' run 2 timeout 20;")
    assert r.returncode == 1 and "No recorded run 2 of" in r.stderr and "archived" in r.stderr, r.stderr
    r = cluster.shell("-e", "waitjob user_job 'Probe.record' with uid='runs1' run 1 timeout x;")
    assert r.returncode == 1 and r.stdout == "", r.stdout


def test_smilas_run_counters_count_failures_for_good_with_and_without_retry_and_cancels(cluster, tmp_path):
    """SMILA's job run counters: started (Runs), successful, retried after error, retried after
    timeout (node loss), failed after retry, failed without retry, canceled; as JOBSTATUS ...
    DETAILS shows them through the shell."""
    def counters(name, uid):
        out = cluster.shell("-e", f"jobstatus user_job '{name}' with uid='{uid}' details;").stdout
        return {k: int(v) for k, v in re.findall(r"^(Runs|Successes|Failures|Retries After Error|Failed After Retry|"
                                                  r"Failed Without Retry|Canceled)\s+\| (\d+)", out, re.M)}

    r = cluster.shell("-e", "startjob user_job name='Probe.always_fails' uid='cnt';"
                            "startjob user_job name='Probe.fails_no_retry' uid='cnt';"
                            f"startjob user_job name='Probe.started' uid='cnt' args='{{\"log\": \"{tmp_path / 's.log'}\"}}';")
    assert r.returncode == 0, r.stderr
    for name in ("Probe.always_fails", "Probe.fails_no_retry"):
        wait_for(lambda: cluster.job("USER_JOB", name, "cnt").status.name == "FAILED", 30, f"{name} to fail for good")
    _records(tmp_path / "s.log", 1)
    r = cluster.shell("-e", "stopjob user_job name='Probe.started' uid='cnt' wait timeout 20;")
    assert r.returncode == 0, r.stderr
    retried = counters("Probe.always_fails", "cnt")
    assert retried["Failed After Retry"] == 1 and retried["Failed Without Retry"] == 0, retried
    assert retried["Runs"] == retried["Failures"] == retried["Retries After Error"] + 1, retried
    assert counters("Probe.fails_no_retry", "cnt") == {"Runs": 1, "Successes": 0, "Failures": 1, "Retries After Error": 0,
                                                       "Failed After Retry": 0, "Failed Without Retry": 1, "Canceled": 0}
    assert counters("Probe.started", "cnt") == {"Runs": 1, "Successes": 0, "Failures": 0, "Retries After Error": 0,
                                                "Failed After Retry": 0, "Failed Without Retry": 0, "Canceled": 1}
