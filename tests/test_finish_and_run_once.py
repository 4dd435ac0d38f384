"""SMILA's finish of a recurring job (FINISHJOB, where STOPJOB is the cancel) and its runOnce
(RUNJOB), through ``fabricjobs shell`` on two real nodes."""

from __future__ import annotations

from harness import module_two_nodes, read_records, start_recurring_probe, wait_records
from harness import table_row as row

cluster = module_two_nodes("finishandrun")


def test_finishjob_lets_the_run_complete_and_fires_no_more(cluster, tmp_path):
    """SMILA: finish lets the active work complete, then the job run ends SUCCEEDED (here
    PROCESSED); every second it would otherwise fire again right after its 6 s run."""
    log, starts = start_recurring_probe(cluster, tmp_path, "fin", 6)
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
    log, _starts = start_recurring_probe(cluster, tmp_path, "cancel", 30)
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
    wait_records(log, 1)
    r = cluster.shell("-e", "finishjob user_job name='Probe.started' uid='once';")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == ("[type: USER_JOB, name: Probe.started, uid: once] is not a recurring job: FINISHJOB ends a "
                                "recurring job after its run (a one-time job's run ends it anyway; STOPJOB cancels it)")
    job = cluster.job("USER_JOB", "Probe.started", "once")
    assert job.status.name == "IN_PROCESS" and not job.finishing
    missing = cluster.shell("-e", "finishjob user_job name='Probe.nothing';")
    assert missing.returncode == 1 and missing.stderr.strip() == "No active job [type: USER_JOB, name: Probe.nothing]"
    cluster.shell("-e", "stopjob user_job name='Probe.started' uid='once';")


def _next_run_cell(cluster, name, uid):
    """The Next Run cell JOBSTATUS shows for the job (other jobs of ``name`` may be listed too)."""
    out = cluster.shell("-e", f"jobstatus user_job '{name}' with uid='{uid}';").stdout
    header, line = [x for x in out.splitlines() if x.startswith("| ")][:2]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in line.strip("|").split("|")]))
    assert cells["UID"] == uid, out
    return cells["Next Run"]


def test_runjob_runs_a_fixed_rate_job_once_now_and_keeps_its_rhythm(cluster, tmp_path):
    log = tmp_path / "ran.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.record' uid='rate' exec_interval='00:00:30' args='{{\"log\": \"{log}\"}}';")
    assert r.returncode == 0, r.stderr
    wait_records(log, 1)
    before = cluster.wait_job("USER_JOB", "Probe.record", "rate", lambda j: j.status.name == "SCHEDULED" and j.runs == 1)
    shown = _next_run_cell(cluster, "Probe.record", "rate")

    r = cluster.shell("-e", "runjob user_job name='Probe.record' uid='rate';")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.record", "rate", "WAITING", f"runs once now; its schedule goes on at {shown}").search(r.stdout), r.stdout
    wait_records(log, 2)
    after = cluster.wait_job("USER_JOB", "Probe.record", "rate", lambda j: j.status.name == "SCHEDULED" and j.runs == 2)
    assert after.next_run == before.next_run and after.resume_at is None  # the rhythm is the one it had
    assert _next_run_cell(cluster, "Probe.record", "rate") == shown
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
    wait_records(log, 1)
    job = cluster.wait_job("USER_JOB", "Probe.record", "yearly", lambda j: j.status.name == "SCHEDULED" and j.runs == 1)
    assert (job.next_run.month, job.next_run.day) in ((1, 1), (12, 31))  # Jan 1st, local midnight, as before
    assert len(read_records(log)) == 1
    cluster.shell("-e", "stopjob user_job name='Probe.record' uid='yearly';")


def test_runjob_refuses_a_job_whose_run_is_going_on(cluster, tmp_path):
    log = tmp_path / "started.log"
    r = cluster.shell("-e", f"startjob user_job name='Probe.started' uid='busy' args='{{\"log\": \"{log}\"}}';")
    assert r.returncode == 0, r.stderr
    wait_records(log, 1)
    cluster.wait_job("USER_JOB", "Probe.started", "busy", lambda j: j.status.name == "IN_PROCESS")
    r = cluster.shell("-e", "runjob user_job name='Probe.started' uid='busy';")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == ("Job is running [type: USER_JOB, name: Probe.started, uid: busy] (IN_PROCESS): RUNJOB runs a "
                                "job once between its fires")
    assert len(read_records(log)) == 1 and cluster.job("USER_JOB", "Probe.started", "busy").resume_at is None
    cluster.shell("-e", "stopjob user_job name='Probe.started' uid='busy';")


def test_runjob_refuses_a_job_blocked_by_its_parents_and_changes_nothing(cluster):
    """RUNJOB of a job waiting for its parents said "runs once now" (or "already due: its run
    starts now") and nothing ran; a recurring one was even made WAITING, an extra run queued
    for when its parents are done. It is refused, as FINISHJOB refuses one."""
    cluster.shell_ok("startjob user_job name='Probe.noop' uid='parent' hold=true;"
                     "startjob user_job name='Probe.noop' uid='cron' exec_interval='0 0 3 * * *' "
                     "depends_on='USER_JOB.Probe.noop.parent';"
                     "startjob user_job name='Probe.noop' uid='once' depends_on='USER_JOB.Probe.noop.parent';")
    for uid in ("cron", "once"):
        before = cluster.job("USER_JOB", "Probe.noop", uid)
        r = cluster.shell("-e", f"runjob user_job name='Probe.noop' uid='{uid}';")
        assert r.returncode == 1 and r.stdout == "", (uid, r.stdout)
        assert r.stderr.strip() == (f"Job is blocked [type: USER_JOB, name: Probe.noop, uid: {uid}]: blocked by its parents: "
                                    "it runs once they are PROCESSED, not now (RUNJOB runs a job once between its fires); "
                                    "nothing was changed"), r.stderr
        after = cluster.job("USER_JOB", "Probe.noop", uid)
        assert (after.status, after.next_run, after.resume_at, after.epoch) == (
            before.status, before.next_run, before.resume_at, before.epoch), after
