"""IPF's late execution handler (LATE_ACTION) and failure command (ON_FAILURE), through
``fabricjobs shell`` on real nodes."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from harness import Cluster, module_two_nodes, wait_for, wait_records
from harness import table_row as row

cluster = module_two_nodes("lateandfailu")


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
            wait_records(tmp_path / uid, 1)

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

        handler_uid = f"USER_JOB.Probe.stamp.handled.late.{due['handled'].astimezone(timezone.utc):%Y%m%dT%H%M%S.%f}"[:-3]
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
    # (a listener runs until it is stopped: it was accepted, and ran with ARGS it cannot take)
    ("on_failure", "INTERFACE_LISTENER.Probe.handle_file", "ON_FAILURE must name a USER_JOB or a PROCESS job"),
    # (it said "must be HH:MM:SS", which 00:00:00 is)
    ("late_threshold", "00:00:00", "LATE_THRESHOLD must be longer than 00:00:00 (no threshold: '' or none), got '00:00:00'"),
])
def test_the_job_a_setting_names_is_checked_before_anything_is_written(cluster, param, bad, says):
    r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='bad' {param}='{bad}';")
    assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr
    assert cluster.job("USER_JOB", "Probe.noop", "bad") is None


def test_on_failure_starts_its_job_once_when_a_run_fails_for_good(cluster):
    """Probe.fails_no_retry fails at once; Probe.always_fails after MAX_TRIES (3) tries: each
    starts Probe.echo once, with its key, run (epoch) and error in the ARGS. The two share a
    UID: their handlers' UIDs, made of the failed job's key, do not (once only one ran)."""
    r = cluster.shell("-e", "startjob user_job name='Probe.fails_no_retry' uid='d' on_failure='user_job.Probe.echo';"
                            "startjob user_job name='Probe.always_fails' uid='d' on_failure='USER_JOB.Probe.echo';"
                            "waitjob user_job 'Probe.fails_no_retry' with uid='d' timeout 20;"
                            "waitjob user_job 'Probe.always_fails' with uid='d' timeout 30;")
    assert r.returncode == 0, r.stderr
    assert row("USER_JOB", "Probe.fails_no_retry", "d", "FAILED").search(r.stdout)
    assert row("USER_JOB", "Probe.always_fails", "d", "FAILED").search(r.stdout)
    for failed in ("Probe.fails_no_retry", "Probe.always_fails"):
        job = cluster.job("USER_JOB", failed, "d")
        handler, args = _echoed(cluster, f"USER_JOB.{failed}.d.failed.{job.epoch}")
        assert handler["Status"] == "PROCESSED" and args["failed_job"] == f"USER_JOB.{failed}.d"
        assert args["run"] == job.epoch and args["error"] == job.error_msg and job.error_msg
    echoes = cluster.shell("-e", "jobstatus user_job 'Probe.echo' 1 day ago;", "--format", "json")
    uids = sorted(e["UID"] for e in json.loads(echoes.stdout) if ".failed." in e["UID"])
    # One each: a retried try starts none.
    assert [u.split(".failed.")[0] for u in uids] == ["USER_JOB.Probe.always_fails.d", "USER_JOB.Probe.fails_no_retry.d"]


def test_a_process_on_failure_job_gets_what_happened_as_its_arguments(cluster):
    """A PROCESS job takes arguments by position (ARGS "0", "1", ...): a handler's ARGS by
    name reached it as no argument at all. It gets the same values, in the same order."""
    r = cluster.shell("-e", "startjob user_job name='Probe.fails_no_retry' uid='pf' on_failure='PROCESS.print_args.sh';")
    assert r.returncode == 0, r.stderr
    failed = cluster.wait_job("USER_JOB", "Probe.fails_no_retry", "pf", lambda j: j.archived, 20)
    handler = cluster.wait_job("PROCESS", "print_args.sh", f"USER_JOB.Probe.fails_no_retry.pf.failed.{failed.epoch}",
                               lambda j: j.archived, 20)
    assert handler.status.name == "PROCESSED", handler.error_msg
    assert json.loads(handler.output).splitlines() == ["USER_JOB.Probe.fails_no_retry.pf", "USER_JOB", "Probe.fails_no_retry", "pf",
                                           str(failed.epoch), failed.error_msg], handler.output


@pytest.mark.slow
def test_on_failure_after_a_lost_node_names_the_lost_run_as_jobhistory_numbers_it(tmp_path, request):
    """MAX_TRIES=1 and the run's node SIGKILLed: the node that takes over writes the job FAILED
    ("no tries left") with epoch + 1, and the failure job's ARGS and UID name the run that was
    lost (run 1, JOBHISTORY's number), not the takeover's epoch."""
    import signal

    from fabricjobs.model import Status

    c = Cluster(tmp_path, settings={"jobs": {"MAX_TRIES": 1}}, request=request)
    try:
        doomed = c.start_node("a")
        c.fetch(f"startjob user_job name='Probe.record' uid='lost' on_failure='USER_JOB.Probe.echo' "
                f"args='{json.dumps({'log': str(tmp_path / 'r'), 'seconds': 600})}';")
        c.wait_job("USER_JOB", "Probe.record", "lost", lambda j: j.status is Status.IN_PROCESS)
        c.start_node("b")
        doomed.signal_group(signal.SIGKILL)
        killed = datetime.now(timezone.utc)
        failed = c.wait_job("USER_JOB", "Probe.record", "lost", lambda j: j.status is Status.FAILED, 30)
        assert failed.epoch == 2 and "no tries left" in failed.error_msg, failed
        handler, args = _echoed(c, "USER_JOB.Probe.record.lost.failed.1")
        assert handler["Status"] == "PROCESSED" and args["run"] == 1, args
        from fabricjobs.model import JobKey
        lost = c.client().store.run(JobKey("USER_JOB", "Probe.record", "lost"), 1)
        assert lost is not None and lost.result == "LOST", lost  # the run the ARGS name
        # It ended when its node was last seen (its last beat, before the kill), not when the
        # takeover came a dead threshold (4 s here) later.
        assert lost.end <= killed < failed.end_time and (failed.end_time - killed).total_seconds() > 2, (lost, killed)
    finally:
        c.stop_all()
