"""Scheduling power beyond Fabric (docs/guides/schedules.md): dependencies, priorities, time zones and misfire
policy, directory listener jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from fabricjobs.errors import ValidationError
from fabricjobs.worker.runner import OK, Outcome
from fabricjobs.model import Event, Job, JobKey, Status, advance
from fabricjobs.node.decisions import RunFacts, after_run, claim, fire, late_fire
from harness import Cluster, read_records, start_inbox_listener, wait_for

UTC = timezone.utc
NEW_YORK = ZoneInfo("America/New_York")
Z_UTC = ZoneInfo("UTC")


def rec(log, seconds=0.3, starts=None):
    args = {"log": str(log), "seconds": seconds}
    if starts:
        args["starts"] = str(starts)
    return json.dumps(args)


# -- dependencies --------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_diamond_runs_in_a_valid_order_across_three_nodes_each_once(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    for n in ("n1", "n2", "n3"):
        cluster.start_node(n)
    client = cluster.client()
    client.fetch(f"startjob user_job name='Probe.record' uid='A' args='{rec(log, 0.5)}';")
    r = client.fetch(f"startjob user_job name='Probe.record' uid='B' depends_on='USER_JOB.Probe.record.A' args='{rec(log)}';"
                     f"startjob user_job name='Probe.record' uid='C' depends_on='USER_JOB.Probe.record.A' args='{rec(log)}';"
                     f"startjob user_job name='Probe.record' uid='D' args='{rec(log)}' "
                     "depends_on='USER_JOB.Probe.record.B,USER_JOB.Probe.record.C';")
    assert r.first_row()["Notes"].startswith("waiting for USER_JOB.Probe.record.B")
    d = cluster.fetch("jobstatus user_job 'Probe.record' with uid='D';").first_row()
    assert d["Status"] == "WAITING" and d["Next Run"] == "Blocked by its parents"
    wait_for(lambda: len(read_records(log)) == 4, 20, "the four jobs to run")
    runs = {r["key"].rsplit(".", 1)[1]: r for r in read_records(log)}
    assert set(runs) == {"A", "B", "C", "D"}  # each exactly once
    assert runs["A"]["end"] <= runs["B"]["start"] and runs["A"]["end"] <= runs["C"]["start"]
    assert max(runs["B"]["end"], runs["C"]["end"]) <= runs["D"]["start"]
    for uid in "ABCD":
        job = cluster.wait_job("USER_JOB", "Probe.record", uid, lambda j: j.archived)
        assert job.status is Status.PROCESSED and job.epoch == 1


@pytest.mark.slow
def test_a_failed_parent_blocks_its_child_until_it_is_resumed_and_succeeds(cluster, tmp_path):
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.fail_once_no_retry' uid='P' args='{json.dumps({'counter': str(tmp_path / 'c')})}';")
    cluster.fetch(f"startjob user_job name='Probe.record' uid='K' depends_on='USER_JOB.Probe.fail_once_no_retry.P' args='{rec(log)}';")
    parent = cluster.wait_job("USER_JOB", "Probe.fail_once_no_retry", "P", lambda j: j.archived)
    assert parent.status is Status.FAILED
    child = wait_for(lambda: (lambda j: "is FAILED" in j.error_msg and j)(cluster.job("USER_JOB", "Probe.record", "K")),
                     10, "the child's note to say its parent failed")
    assert child.status is Status.WAITING and child.blocked
    assert "resumed" in child.error_msg
    time.sleep(0.5)
    assert read_records(log) == []  # never ran
    cluster.fetch("resumejob user_job name='Probe.fail_once_no_retry' uid='P';")
    child = cluster.wait_job("USER_JOB", "Probe.record", "K", lambda j: j.status is Status.PROCESSED, 15)
    assert not child.blocked and len(read_records(log)) == 1


def test_a_stopped_parent_blocks_its_child_with_a_note(cluster, tmp_path):
    """A parent that ends TERMINATED (STOPJOB) leaves its child blocked, as a FAILED one does
    (RJM): the child never runs, and its Notes say why."""
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.record' uid='P' args='{rec(log, 3600)}';")
    cluster.wait_job("USER_JOB", "Probe.record", "P", lambda j: j.status is Status.IN_PROCESS)
    cluster.fetch(f"startjob user_job name='Probe.record' uid='K' depends_on='USER_JOB.Probe.record.P' args='{rec(log)}';")
    cluster.fetch("stopjob user_job name='Probe.record' uid='P';")
    assert cluster.wait_job("USER_JOB", "Probe.record", "P", lambda j: j.archived).status is Status.TERMINATED
    child = wait_for(lambda: (lambda j: "is TERMINATED" in j.error_msg and j)(cluster.job("USER_JOB", "Probe.record", "K")),
                     10, "the child's note to say its parent was stopped")
    assert child.status is Status.WAITING and child.blocked
    assert [r["key"] for r in read_records(log)] == ["USER_JOB.Probe.record.P"]  # only the parent's (stopped) run


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOB_ARCHIVING_TIME_HOUR": 0.0005, "DEPENDENCY_CHECK_SEC": 0.2}}],
                         indirect=True)
def test_a_child_stays_blocked_when_its_failed_parents_row_expires(cluster, tmp_path):
    """Issue #18, item 8: a parent's archived row goes after the retention (Cassandra: its TTL,
    1.8 s here; SQLite keeps it, so the test deletes it as an expiry would). A missing parent
    counted as done, so the child of a FAILED parent then ran."""
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.fail_once_no_retry' uid='P' args='{json.dumps({'counter': str(tmp_path / 'c')})}';")
    cluster.fetch(f"startjob user_job name='Probe.record' uid='K' depends_on='USER_JOB.Probe.fail_once_no_retry.P' args='{rec(log)}';")

    def child():
        row = cluster.job("USER_JOB", "Probe.record", "K")
        assert row is not None and not row.archived, "the child ran (its parent's missing row counted as done)"
        return row

    # It learns its parent failed, or, where the dependency check came only after the 1.8 s
    # TTL (a loaded machine), that its row is gone: blocked either way, never run.
    wait_for(lambda: any(s in child().error_msg for s in ("is FAILED", "is gone")), 15,
             "the child to learn its parent failed")
    if cluster.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(cluster._sqlite_path()) as db:
            db.execute("DELETE FROM k2_jobs WHERE uid = 'P'")
    wait_for(lambda: cluster.job("USER_JOB", "Probe.fail_once_no_retry", "P") is None, 15, "the parent's row to expire")
    kid = wait_for(lambda: (lambda j: "is gone" in j.error_msg and j)(child()), 10, "the child's note to say its parent's row is gone")
    assert kid.status is Status.WAITING and kid.blocked
    assert "USER_JOB.Probe.fail_once_no_retry.P is gone" in kid.error_msg and "STOPJOB" in kid.error_msg
    assert read_records(log) == []  # never ran


def test_cycles_self_dependencies_and_unknown_parents_are_rejected(tmp_path, request, node_backend):
    cluster = Cluster(tmp_path, backend=node_backend, request=request)
    try:
        client = cluster.client()
        client.fetch("startjob user_job name='Probe.noop' uid='a';")
        client.fetch("startjob user_job name='Probe.noop' uid='b' depends_on='USER_JOB.Probe.noop.a';")
        client.fetch("startjob user_job name='Probe.noop' uid='c' depends_on='USER_JOB.Probe.noop.b';")
        with pytest.raises(ValidationError, match="would make a cycle: USER_JOB.Probe.noop.a -> USER_JOB.Probe.noop.c -> "
                                                  "USER_JOB.Probe.noop.b -> USER_JOB.Probe.noop.a"):
            client.fetch("updatejob user_job name='Probe.noop' uid='a' depends_on='USER_JOB.Probe.noop.c';")
        with pytest.raises(ValidationError, match="cannot depend on itself"):
            client.fetch("startjob user_job name='Probe.noop' uid='s' depends_on='USER_JOB.Probe.noop.s';")
        with pytest.raises(ValidationError, match="DEPENDS_ON: no job USER_JOB.Probe.noop.zz"):
            client.fetch("startjob user_job name='Probe.noop' uid='d' depends_on='USER_JOB.Probe.noop.zz';")
        assert {j.uid for j in client.store.live_jobs()} == {"a", "b", "c"}
        assert client.store.get(JobKey("USER_JOB", "Probe.noop", "a")).depends_on == ""
    finally:
        cluster.stop_all()


# -- priorities ----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOBS_POOL_SIZE": 1}}], indirect=True)
def test_with_a_pool_of_one_waiting_jobs_run_in_priority_order(cluster, tmp_path):
    log, starts, gate = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl", tmp_path / "all-queued"
    cluster.start_node("n1")
    client = cluster.client()
    # The blocker holds the one slot until all 20 are queued (on Cassandra a script's STARTJOBs
    # are not written at once: the node could otherwise claim the first before the last is in).
    blocker = json.dumps({"log": str(log), "seconds": 60, "starts": str(starts), "until": str(gate)})
    client.fetch(f"startjob user_job name='Probe.record' uid='blocker' args='{blocker}';")
    wait_for(lambda: len(read_records(starts)) == 1, 10, "the blocker to hold the one slot")
    prios = [3, 9, 0, 5, 7, 1, 9, 4, 6, 2, 8, 0, 5, 3, 7, 6, 1, 4, 2, 8]
    client.fetch("".join(f"startjob user_job name='Probe.record' uid='p{i:02d}' priority={p} args='{rec(log, 0.02, starts)}';"
                         for i, p in enumerate(prios)))
    gate.touch()
    wait_for(lambda: len(read_records(starts)) == 21, 30, "all 20 to run")
    order = [r["key"].rsplit(".", 1)[1] for r in sorted(read_records(starts), key=lambda r: r["start"])][1:]
    ran = [prios[int(uid[1:])] for uid in order]
    assert ran == sorted(prios, reverse=True), ran
    assert cluster.fetch("jobstatus user_job 'Probe.record' with uid='p01';").first_row()["Priority"] == 9


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"jobs": {"K2JOBS_POOL_SIZE": 1, "PRIORITY_AGING_SEC": 0.25}}], indirect=True)
def test_a_waiting_priority_0_job_is_not_starved(cluster, tmp_path):
    """The rule: effective priority = PRIORITY + seconds waited / PRIORITY_AGING_SEC, so a
    priority-0 job passes fresh priority-9 jobs once it has waited 9 x 0.25 s = 2.25 s."""
    log, starts = tmp_path / "runs.jsonl", tmp_path / "starts.jsonl"
    cluster.start_node("n1")
    client = cluster.client()
    client.fetch(f"startjob user_job name='Probe.record' uid='blocker' args='{rec(log, 3.0, starts)}';")
    wait_for(lambda: len(read_records(starts)) == 1, 10, "the blocker")
    client.fetch(f"startjob user_job name='Probe.record' uid='low' priority=0 args='{rec(log, 0.05, starts)}';")
    time.sleep(2.5)  # low has now waited longer than 9 aging steps
    client.fetch("".join(f"startjob user_job name='Probe.record' uid='hi{i}' priority=9 args='{rec(log, 0.05, starts)}';"
                         for i in range(5)))
    wait_for(lambda: len(read_records(starts)) == 7, 20, "all to run")
    order = [r["key"].rsplit(".", 1)[1] for r in sorted(read_records(starts), key=lambda r: r["start"])]
    assert order[:2] == ["blocker", "low"], order


# -- time zones and misfires (a controlled clock, driving the node's own decisions) -------------

def _simulate(job: Job, until: datetime, outage: tuple[datetime, datetime] | None = None, zone=Z_UTC):
    """Drive one job through fire -> claim -> run -> next, as a node does, at the times the
    schedule asks for; no node is up during ``outage``. Returns fires and skipped records."""
    fires, skipped = [], []
    row = job
    while row.next_run <= until:
        now = row.next_run
        if outage and outage[0] <= now < outage[1]:
            now = outage[1]  # the first node back sees the job overdue
        late = late_fire(row, now, zone)
        if late is not None:
            row, record = late
            skipped.append(record)
            continue
        _, row = fire(row)
        _, claimed = claim(row, "n1", now)
        facts = RunFacts("n1", claimed.epoch, claimed.next_run, now)
        event, row = after_run(claimed, facts, Outcome(OK, output="null"), now + timedelta(seconds=1),
                               max_tries=3, retry_delay=timedelta(seconds=60), zone=zone)
        fires.append(now)
    return fires, skipped


def _cron_job(expr, start, zone, **kw):
    from fabricjobs.schedule import parse_schedule

    first = parse_schedule(expr, zone).first_due(start)
    return Job(JobKey("USER_JOB", "A.b", "c"), Status.SCHEDULED, start, execution_interval=expr, next_run=first,
               worker_id="n1", time_zone=str(zone), **kw)


def test_cron_in_new_york_across_both_dst_changes_fires_each_local_time_once():
    start = datetime(2026, 1, 1, 5, tzinfo=UTC)
    job = _cron_job("30 1,2 * * *", start, NEW_YORK)
    fires, skipped = _simulate(job, datetime(2027, 1, 1, 5, tzinfo=UTC), zone=NEW_YORK)
    local = [f.astimezone(NEW_YORK) for f in fires]
    per_day = Counter(t.date() for t in local)
    assert len(per_day) == 365 and set(per_day.values()) == {2}  # every day both fires, none missed
    assert len(set(fires)) == len(fires)  # none twice
    spring = sorted(t.strftime("%H:%M %Z") for t in local if t.date().isoformat() == "2026-03-08")
    fall = sorted(t.strftime("%H:%M %Z") for t in local if t.date().isoformat() == "2026-11-01")
    assert spring == ["01:30 EST", "03:00 EDT"]  # 02:30 does not exist: the end of the gap
    assert fall == ["01:30 EDT", "02:30 EST"]  # 01:30 happens twice: once
    assert skipped == []


def test_late_threshold_skips_a_fire_after_a_3_hour_outage_and_records_it():
    start = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    job = _cron_job("*/15 * * * *", start, Z_UTC, late_threshold="00:05:00")
    outage = (datetime(2026, 5, 1, 1, 0, tzinfo=UTC), datetime(2026, 5, 1, 4, 7, tzinfo=UTC))
    fires, skipped = _simulate(job, datetime(2026, 5, 1, 5, 0, tzinfo=UTC), outage=outage)
    assert [f.strftime("%H:%M") for f in fires] == ["00:15", "00:30", "00:45", "04:15", "04:30", "04:45", "05:00"]
    assert len(skipped) == 1 and skipped[0].result == "SKIPPED"
    assert "skipped: 11220 s late (LATE_THRESHOLD 00:05:00)" in skipped[0].note
    # A skip barely past its threshold says by how much (it said "1 s late" of LATE_THRESHOLD 00:00:01).
    from fabricjobs.node.decisions import late_fire

    due = datetime(2026, 5, 1, 0, 0, 5, tzinfo=UTC)
    every = Job(JobKey("USER_JOB", "A.b", "c"), Status.SCHEDULED, start, execution_interval="*/5 * * * * *",
                next_run=due, late_threshold="00:00:01")
    _row, record = late_fire(every, due + timedelta(milliseconds=1011), Z_UTC)
    assert "skipped: 1.011 s late (LATE_THRESHOLD 00:00:01)" in record.note, record.note


def test_late_action_run_runs_the_late_fire_and_a_handler_gets_the_fire_in_its_args():
    """LATE_ACTION (IPF's lateExecute): RUN runs a late fire as if it were on time;
    TYPE.NAME skips it as SKIP does and names the handler job to start, once per fire."""
    from fabricjobs.node.decisions import late_handler

    start = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    outage = (datetime(2026, 5, 1, 1, 0, tzinfo=UTC), datetime(2026, 5, 1, 4, 7, tzinfo=UTC))
    run = _cron_job("*/15 * * * *", start, Z_UTC, late_threshold="00:05:00", late_action="RUN")
    fires, skipped = _simulate(run, datetime(2026, 5, 1, 5, 0, tzinfo=UTC), outage=outage)
    assert skipped == [] and "04:07" in [f.strftime("%H:%M") for f in fires]
    handled = _cron_job("*/15 * * * *", start, Z_UTC, late_threshold="00:05:00", late_action="USER_JOB.Probe.echo")
    row = handled.replace(next_run=datetime(2026, 5, 1, 1, 0, tzinfo=UTC))
    _new, record = late_fire(row, outage[1], Z_UTC)
    assert record.note.endswith("(LATE_THRESHOLD 00:05:00); started USER_JOB.Probe.echo")
    job = late_handler(row, outage[1])
    assert job.key == JobKey("USER_JOB", "Probe.echo", "USER_JOB.A.b.c.late.20260501T010000.000") and job.status is Status.WAITING
    assert json.loads(job.arguments) == {"late_job": "USER_JOB.A.b.c", "type": "USER_JOB", "name": "A.b", "uid": "c",
                                         "due": "2026-05-01T01:00:00.000+00:00", "late_seconds": 11220.0}
    assert late_handler(row.replace(late_action="SKIP"), outage[1]) is None


def test_a_lost_run_whose_job_has_new_parents_is_not_run_again_until_they_are_processed():
    """UPDATEJOB DEPENDS_ON during a run holds back the next try: the node that takes over a
    lost run of such a job writes it WAITING (blocked, a try counted), not running on itself."""
    from fabricjobs.node.decisions import take_over

    t = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    running = Job(JobKey("USER_JOB", "A.b", "c"), Status.IN_PROCESS, t, worker_id="dead", epoch=4, blocked=True,
                  depends_on="USER_JOB.A.b.parent")
    event, new = take_over(running, "me", t, max_tries=3)
    taken = advance(running, event, new)
    assert (taken.status, taken.worker_id, taken.epoch, taken.tries, taken.blocked) == (Status.WAITING, None, 5, 1, True)
    free = running.replace(blocked=False)
    event, new = take_over(free, "me", t, max_tries=3)
    assert (new.status, new.worker_id) == (Status.IN_PROCESS, "me")  # (as before: run again here)


def test_a_run_ended_by_its_nodes_lost_lease_counts_as_a_retry_after_node_loss_not_after_error():
    """A node whose lease ran out ends its runs itself (the workers see it first) and, its
    lease back and the row still its own, writes their outcome: the retry is one after the
    loss of a node (JOBSTATUS DETAILS' Retries After Node Loss), as a takeover's is."""
    from fabricjobs.node.decisions import RunFacts, after_run
    from fabricjobs.worker.protocol import ERROR, LEASE_LOST, Outcome

    t = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    running = Job(JobKey("USER_JOB", "A.b", "c"), Status.IN_PROCESS, t, worker_id="me", epoch=4, runs=2)
    facts = RunFacts("me", 4, t, t)
    for kind, lost, error in ((LEASE_LOST, 1, 0), (ERROR, 0, 1)):
        _event, new = after_run(running, facts, Outcome(kind, error="run ended"), t, max_tries=3,
                                retry_delay=timedelta(seconds=1), zone=UTC)
        assert (new.status, new.tries, new.runs, new.failures) == (Status.WAITING, 1, 3, 1)
        assert (new.retries_lost, new.retries_error) == (lost, error), kind


def test_a_job_that_failed_for_good_names_its_on_failure_job_with_run_and_error():
    """ON_FAILURE (IPF's failure command): one job per failed run, nothing before."""
    from fabricjobs.node.decisions import failure_job

    t = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    row = Job(JobKey("USER_JOB", "A.b", "c"), Status.FAILED, t, epoch=3, error_msg="ValueError: no", on_failure="USER_JOB.Probe.echo")
    job = failure_job(row, t)
    assert job.key == JobKey("USER_JOB", "Probe.echo", "USER_JOB.A.b.c.failed.3") and job.status is Status.WAITING and job.next_run == t
    assert json.loads(job.arguments) == {"failed_job": "USER_JOB.A.b.c", "type": "USER_JOB", "name": "A.b", "uid": "c",
                                         "run": 3, "error": "ValueError: no"}
    assert failure_job(row.replace(status=Status.WAITING), t) is None  # a retry is not a failure for good
    assert failure_job(row.replace(on_failure=""), t) is None
    owned = failure_job(row.replace(owner="alice", requestor="payments"), t)
    assert (owned.owner, owned.requestor) == ("alice", "payments")  # on behalf of the failed job's owner
    # A UID at the limit: the failure job's UID stays within it, so that a statement can name it.
    longest = failure_job(row.replace(key=JobKey("USER_JOB", "A.b", "u" * 1024)), t)
    assert len(longest.key.uid) == 1024 and longest.key.uid.endswith(".failed.3")
    # Two jobs of one UID that fail: one handler each (with the UID alone, only one was started).
    other = failure_job(row.replace(key=JobKey("USER_JOB", "A.other", "c")), t)
    assert other.key.uid == "USER_JOB.A.other.c.failed.3" != job.key.uid
    assert failure_job(row.replace(key=JobKey("USER_JOB", "A.other", "u" * 1024)), t).key != longest.key


def test_without_a_late_threshold_missed_fires_coalesce_into_one_run():
    start = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    job = _cron_job("*/15 * * * *", start, Z_UTC)
    outage = (datetime(2026, 5, 1, 1, 0, tzinfo=UTC), datetime(2026, 5, 1, 4, 7, tzinfo=UTC))
    fires, skipped = _simulate(job, datetime(2026, 5, 1, 5, 0, tzinfo=UTC), outage=outage)
    assert [f.strftime("%H:%M") for f in fires] == ["00:15", "00:30", "00:45", "04:07", "04:15", "04:30", "04:45", "05:00"]
    assert skipped == []  # twelve missed fires became one run at 04:07


@pytest.mark.slow
def test_a_late_fire_is_skipped_and_shown_in_the_history_on_a_real_node(cluster, tmp_path):
    cluster.fetch(f"startjob user_job name='Probe.stamp' uid='late' exec_interval='*/1 * * * * *' late_threshold='00:00:01' "
                  f"args='{json.dumps({'log': str(tmp_path / 'l')})}';")
    first_due = cluster.job("USER_JOB", "Probe.stamp", "late").next_run
    time.sleep(3.2)  # no node is up: the first fire is more than a second late when one comes
    cluster.start_node("n1")
    wait_for(lambda: len(read_records(tmp_path / "l")) >= 2, 10, "runs after the skip")
    hist = list(cluster.fetch("jobhistory user_job 'Probe.stamp' with uid='late' limit 100;"))
    # (a later fire a loaded node starts over a second late is skipped too: only the first counts)
    skipped = [r for r in hist if r["Result"] == "SKIPPED" and r["Due"] == first_due]
    assert len(skipped) == 1
    assert all(r["start"] > first_due.timestamp() + 3 for r in read_records(tmp_path / "l"))


@pytest.mark.slow
def test_a_late_fire_is_skipped_after_its_owner_restarts(cluster, tmp_path):
    """The owner, SIGKILLed and started again 3 s later, reads its schedules from the store
    (on Cassandra from the index, which does not hold a job's schedule, time zone, calendar
    or late threshold): its first fire, 3 s late, is skipped by its LATE_THRESHOLD of 1 s as
    it would have been before the restart, not run. Before, a schedule the scheduler had read
    from the index fired with none of those, on Cassandra: every calendar and late threshold
    of a job due more than a minute after its last run was ignored."""
    log = tmp_path / "l"
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.stamp' uid='back' exec_interval='00:00:05' late_threshold='00:00:01' "
                  f"args='{json.dumps({'log': str(log)})}';")
    wait_for(lambda: len(read_records(log)) >= 1, 10, "a first run")
    wait_for(lambda: cluster.job("USER_JOB", "Probe.stamp", "back").status.value == "SCHEDULED", 10, "the next fire's schedule")
    cluster.nodes["n1"].signal_group(signal.SIGKILL)
    row = cluster.job("USER_JOB", "Probe.stamp", "back")
    assert row.status.value == "SCHEDULED"  # (its next fire is 5 s after the first)
    due = row.next_run
    wait_for(lambda: time.time() > due.timestamp() + 3, 10, "the fire to be 3 s late")
    cluster.start_node("n1")
    wait_for(lambda: any(r["Result"] == "SKIPPED" for r in cluster.fetch("jobhistory user_job 'Probe.stamp' with uid='back' limit 100;")),
             10, "the late fire to be skipped")
    skipped = [r for r in cluster.fetch("jobhistory user_job 'Probe.stamp' with uid='back' limit 100;") if r["Result"] == "SKIPPED"]
    assert [r["Due"] for r in skipped] == [due]
    assert not any(due.timestamp() - 0.5 < r["start"] < due.timestamp() + 4 for r in read_records(log))


def test_updatejob_to_a_later_time_during_a_run_schedules_the_job_for_it_when_the_run_ends(cluster, tmp_path):
    """UPDATEJOB's new schedule of a running job applies when its run ends: a timestamp there
    ("run once at that time") left the job PROCESSED, archived, with nothing due then."""
    log, starts, gate = tmp_path / "l", tmp_path / "s", tmp_path / "gate"
    cluster.start_node("n1")
    args = json.dumps({"log": str(log), "starts": str(starts), "seconds": 60, "until": str(gate)})
    cluster.fetch(f"startjob user_job name='Probe.record' uid='later' exec_interval='00:00:30' args='{args}';")
    wait_for(lambda: read_records(starts), 20, "the run to start")
    cluster.fetch("updatejob user_job name='Probe.record' uid='later' exec_interval='2030-01-01 00:00:00' tz='UTC';")
    gate.touch()
    row = cluster.wait_job("USER_JOB", "Probe.record", "later", lambda j: j.runs == 1, 20)
    assert (row.status, row.archived, row.next_run) == (Status.SCHEDULED, False, datetime(2030, 1, 1, tzinfo=UTC)), row
    # Its schedule unchanged, a timestamp job run early (RESTARTJOB of it idle) ends with the run:
    # it is no new time to run at.
    cluster.fetch("startjob user_job name='Probe.noop' uid='early' exec_interval='2030-01-01 00:00:00' tz='UTC';"
                  "restartjob user_job name='Probe.noop' uid='early';")
    assert cluster.wait_job("USER_JOB", "Probe.noop", "early", lambda j: j.archived, 20).status is Status.PROCESSED
    # A one-time job at a time: its run ends it (the run stood for that time).
    cluster.fetch(f"startjob user_job name='Probe.noop' uid='at' exec_interval='{datetime.now(UTC) + timedelta(seconds=1):%Y-%m-%d %H:%M:%S}' tz='UTC';")
    assert cluster.wait_job("USER_JOB", "Probe.noop", "at", lambda j: j.archived, 20).status is Status.PROCESSED


@pytest.mark.slow
@pytest.mark.timing  # a queued run must start right after the one before it
def test_overlap_skip_and_queue(cluster, tmp_path):
    cluster.start_node("n1")
    for policy in ("SKIP", "QUEUE"):
        args = json.dumps({"log": str(tmp_path / policy), "seconds": 1.6})
        cluster.fetch(f"startjob user_job name='Probe.record' uid='{policy}' exec_interval='*/1 * * * * *' overlap='{policy}' args='{args}';")
    wait_for(lambda: all(len(read_records(tmp_path / p)) >= 3 for p in ("SKIP", "QUEUE")), 20, "three runs of each")
    runs = read_records(tmp_path / "QUEUE")[:3]
    gaps = [b["start"] - a["end"] for a, b in zip(runs, runs[1:])]
    assert all(g < 0.35 for g in gaps), gaps  # the queued fire starts right after the run before it
    # SKIP: each run stands for a fire due after the run before it ended (the fires due while it
    # ran were skipped), on a whole second. Read from the history, not from start - end gaps: a
    # start comes after its due time by however long the store takes (on a real Cassandra the
    # gap to the next whole second was 0.19 s once).
    done = sorted((r for r in cluster.fetch("jobhistory user_job 'Probe.record' with uid='SKIP' limit 100;")
                   if r["Result"] == "OK"), key=lambda r: r["Due"])
    assert len(done) >= 2
    for a, b in zip(done, done[1:]):
        assert b["Due"] >= a["End"] and b["Due"].microsecond == 0, (a, b)
    hist = list(cluster.fetch("jobhistory user_job 'Probe.record' with uid='SKIP';"))
    assert any("fire(s) skipped while this run was still going (OVERLAP=SKIP)" in r["Note"] for r in hist)
    assert not any(r["Note"] for r in cluster.fetch("jobhistory user_job 'Probe.record' with uid='QUEUE';"))
    # QUEUE: each queued run stands for the last fire that came due while the one before it ran,
    # with that fire's due time: the job stays on its grid of whole seconds.
    queued = [r for r in cluster.fetch("jobhistory user_job 'Probe.record' with uid='QUEUE' limit 100;") if r["Result"] == "OK"]
    assert len(queued) >= 2 and all(r["Due"].microsecond == 0 for r in queued), queued


@pytest.mark.slow
def test_an_interval_job_that_overran_runs_the_fire_it_passed_and_stays_on_its_grid(cluster, tmp_path):
    """OVERLAP QUEUE, the default for intervals (docs/guides/schedules.md): the first run of an
    every-2-seconds job takes 2.5 s; the fire due at 2 s runs once, right after it, as the fire
    due at 2 s; the fires after it are due at 4 s, 6 s, ... from the first (a fixed rate). When
    the queued run was due at the overrun's end instead, every later fire was off the grid by
    the overrun (0.5 s here), and the fire lag of a cluster's interval jobs grew with each."""
    log = tmp_path / "runs.jsonl"
    cluster.start_node("n1")
    args = json.dumps({"log": str(log), "first": 2.5})
    cluster.fetch(f"startjob user_job name='Probe.overrun_first' uid='grid' exec_interval='00:00:02' args='{args}';")
    wait_for(lambda: len(read_records(log)) >= 4, 30, "four runs")
    runs = read_records(log)[:4]
    offsets = [r["due"] - runs[0]["due"] for r in runs]
    assert offsets[1] == pytest.approx(2.0, abs=0.002), offsets  # the fire that passed: queued, once
    assert all(o == pytest.approx(2 * round(o / 2), abs=0.002) for o in offsets), offsets  # on the grid
    assert runs[1]["start"] >= runs[0]["end"]  # never two runs at once


# -- directory listeners -------------------------------------------------------------------------

@pytest.mark.slow
def test_a_listener_handles_each_of_50_files_exactly_once_across_a_sigkill(tmp_path, request, node_backend):
    inbox = tmp_path / "root" / "inbox"
    inbox.mkdir(parents=True)
    (inbox / "old.csv").write_text("present before the listener started")
    outside = tmp_path / "root" / "staging"  # files written long ago, moved in later (mv keeps their time)
    outside.mkdir()
    for name in ("moved1.csv", "moved2.csv"):
        (outside / name).write_text("an old file")
        os.utime(outside / name, (time.time() - 86400, time.time() - 86400))
    expected = {f"f{i:02d}.csv" for i in range(50)} | {"moved1.csv", "moved2.csv"}
    log = tmp_path / "handled.jsonl"
    cluster = Cluster(tmp_path, backend=node_backend, request=request,
                      settings={"jobs": {"LISTENER_ROOT": str(tmp_path / "root")}})
    try:
        a = cluster.start_node("a")
        start_inbox_listener(cluster, log)
        for i in range(25):
            (inbox / f"f{i:02d}.csv").write_text(f"row {i}")
            (inbox / f"f{i:02d}.txt").write_text("not a csv")
            time.sleep(0.02)
        os.rename(outside / "moved1.csv", inbox / "moved1.csv")
        wait_for(lambda: len(read_records(log)) >= 10, 15, "some files handled on a")
        a.signal_group(signal.SIGKILL)  # the listener's node dies midway
        for i in range(25, 50):
            (inbox / f"f{i:02d}.csv").write_text(f"row {i}")
            time.sleep(0.02)
        os.rename(outside / "moved2.csv", inbox / "moved2.csv")
        cluster.start_node("b")
        # 60 s: b first waits out a's dead threshold, then re-runs the listener, which starts a
        # job per file left. Two runs beside other heavy test runs (load average 9-11) took
        # more than 30 s; the message says what was missing, and where the listener was.
        wait_for(lambda: len({r["file"] for r in read_records(log)}) == 52, 60,
                 lambda: (f"all 52 files handled; missing {sorted(expected - {r['file'] for r in read_records(log)})}; "
                          f"listener {cluster.job('INTERFACE_LISTENER', 'Probe.handle_file', 'inbox')}"))
        time.sleep(1.0)  # nothing more comes
        records = read_records(log)
        assert {r["file"] for r in records} == expected  # not old.csv, no .txt
        # Exactly one job per file, each PROCESSED once ...
        store = cluster.client().store

        def children():
            return [j for j in store.live_jobs() + store.archived_since(datetime.now(UTC) - timedelta(hours=1))
                    if j.key.uid.startswith("inbox/")]
        assert sorted(j.key.uid for j in children()) == sorted(f"inbox/{f}" for f in expected)
        # The last file's record is written by its job, before its node writes the outcome: a
        # loaded run (CI beside other work) saw that write later than the second above.
        wait_for(lambda: all(j.status is Status.PROCESSED for j in children()), 30,
                 lambda: f"every file's job PROCESSED; not yet: {[j for j in children() if j.status is not Status.PROCESSED]}")
        # ... and a file ran twice only when its first run was on the killed node (at-least-once
        # after a crash, with a new epoch), never because the listener started it twice.
        by_file: dict = {}
        for r in records:
            by_file.setdefault(r["file"], []).append(r)
        for file, runs in by_file.items():
            if len(runs) > 1:
                assert len(runs) == 2 and runs[0]["node"] == "a" and runs[1]["epoch"] > runs[0]["epoch"], runs
        listener = cluster.job("INTERFACE_LISTENER", "Probe.handle_file", "inbox")
        assert listener.worker_id == "b" and listener.status is Status.IN_PROCESS
        assert cluster.job("USER_JOB", "Probe.handle_file", "inbox/f07.csv").status is Status.PROCESSED
        stopped = cluster.fetch("stopjob interface_listener name='Probe.handle_file' uid='inbox' wait timeout 15;")
        assert stopped.first_row()["Status"] == "TERMINATED"
    finally:
        cluster.stop_all()


@pytest.mark.slow
def test_a_listener_resumes_after_a_clean_restart_of_its_node(tmp_path, request, node_backend):
    """docs/guides/cluster.md: a listener only ends when asked to. A SIGTERM of its node hands it back
    (WAITING, no try), and files dropped after the restart are handled; so are the files dropped
    while it was stopped, once RESUMEJOB resumes it (docs/guides/writing-jobs.md)."""
    inbox = tmp_path / "root" / "inbox"
    inbox.mkdir(parents=True)
    log = tmp_path / "handled.jsonl"
    cluster = Cluster(tmp_path, backend=node_backend, request=request,
                      settings={"jobs": {"LISTENER_ROOT": str(tmp_path / "root")}})
    try:
        a = cluster.start_node("a")
        start_inbox_listener(cluster, log)
        (inbox / "before.csv").write_text("1")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"before.csv"}, 15, "before.csv handled")
        a.signal(signal.SIGTERM)
        assert a.proc.wait(timeout=20) == 0
        row = cluster.job("INTERFACE_LISTENER", "Probe.handle_file", "inbox")
        assert (row.status, row.tries) == (Status.WAITING, 0), row  # not PROCESSED: it resumes
        cluster.start_node("a")
        cluster.wait_job("INTERFACE_LISTENER", "Probe.handle_file", "inbox", lambda j: j.status is Status.IN_PROCESS)
        (inbox / "after.csv").write_text("2")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"before.csv", "after.csv"}, 15,
                 "after.csv handled after the restart")

        # RESUMEJOB goes on where STOPJOB left it: files dropped while it was stopped are new.
        stopped = cluster.fetch("stopjob interface_listener name='Probe.handle_file' uid='inbox' wait timeout 15;")
        assert stopped.first_row()["Status"] == "TERMINATED"
        (inbox / "while-stopped.csv").write_text("3")
        cluster.fetch("resumejob interface_listener name='Probe.handle_file' uid='inbox';")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"before.csv", "after.csv", "while-stopped.csv"},
                 15, "the file dropped while the listener was stopped handled after RESUMEJOB")
        assert len(read_records(log)) == 3  # and nothing handled twice
    finally:
        cluster.stop_all()


def test_a_listener_whose_directory_is_gone_for_a_while_goes_on_once_it_is_back(tmp_path, request):
    """A listener only ends when asked to (docs/guides/writing-jobs.md): its directory removed for
    a while (a remount, a rotation) is logged and looked at again, not a failed run that no
    retry follows, also by a run that begins meanwhile, and the files dropped once it is back
    are handled."""
    root = tmp_path / "root"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    log = tmp_path / "handled.jsonl"
    cluster = Cluster(tmp_path, backend="sqlite", request=request, settings={"jobs": {"LISTENER_ROOT": str(root)}})
    try:
        a = cluster.start_node("a")
        start_inbox_listener(cluster, log)
        (inbox / "before.csv").write_text("1")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"before.csv"}, 15, "before.csv handled")
        shutil.rmtree(inbox)
        wait_for(lambda: "cannot scan its directory" in a.log(), 15, "the listener to notice its directory gone")
        a.signal(signal.SIGTERM)  # a run that begins while the directory is away waits for it too
        assert a.proc.wait(timeout=20) == 0
        a = cluster.start_node("a")
        wait_for(lambda: "cannot scan its directory" in a.log(), 15, "the listener's next run to wait for it")
        inbox.mkdir()
        (inbox / "after.csv").write_text("2")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"before.csv", "after.csv"}, 30,
                 "after.csv handled once the directory is back")
        row = cluster.job("INTERFACE_LISTENER", "Probe.handle_file", "inbox")
        assert row.status is Status.IN_PROCESS and row.tries == 0, row
        assert "scans again" in a.log()
    finally:
        cluster.stop_all()


def test_a_file_whose_job_is_refused_is_left_where_it_is_and_the_listener_goes_on(tmp_path, request):
    """A file whose job STARTJOB refuses for good (here: its ARGS, the file's long path and name
    twice, over [jobs] MAX_ARGS_BYTES) is logged and left; the files after it are handled, and the
    listener goes on (docs/guides/writing-jobs.md). It stopped at that file for good, or failed."""
    root = tmp_path / "root"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    deep = tmp_path / ("p" * 200) / ("q" * 200)  # (the log's path is in the listener's ARGS and its files')
    deep.mkdir(parents=True)
    log = deep / "handled.jsonl"
    cluster = Cluster(tmp_path, backend="sqlite", request=request,
                      settings={"jobs": {"LISTENER_ROOT": str(root), "MAX_ARGS_BYTES": 1024}})
    try:
        a = cluster.start_node("a")
        start_inbox_listener(cluster, log)
        long = "a" * 200 + ".csv"
        (inbox / long).write_text("1")
        (inbox / "b.csv").write_text("2")
        wait_for(lambda: {r["file"] for r in read_records(log)} == {"b.csv"}, 20, "b.csv handled after the refused file")
        assert "cannot start the job of the file" in a.log() and "MAX_ARGS_BYTES" in a.log()
        row = cluster.job("INTERFACE_LISTENER", "Probe.handle_file", "inbox")
        assert row.status is Status.IN_PROCESS and row.tries == 0, row
        assert (inbox / long).exists()
    finally:
        cluster.stop_all()


def test_after_runjobs_extra_run_the_schedule_goes_on_with_its_kept_fire():
    """RUNJOB (docs/explanation/design-choices.md): the fire kept aside is next; one that came due during the extra run
    is queued (run right away) or skipped, by OVERLAP, as during a scheduled run."""
    from fabricjobs.node.decisions import resumed_due
    from fabricjobs.schedule import parse_schedule

    t = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    every_10s = parse_schedule("00:00:10", "UTC")
    assert resumed_due(every_10s, t + timedelta(seconds=10), t + timedelta(seconds=2), "") == t + timedelta(seconds=10)
    assert resumed_due(every_10s, t, t + timedelta(seconds=25), "") == t  # QUEUE: the missed fire runs now
    assert resumed_due(every_10s, t, t + timedelta(seconds=25), "SKIP") == t + timedelta(seconds=30)
    hourly = parse_schedule("0 0 * * * *", "UTC")
    assert resumed_due(hourly, t, t + timedelta(minutes=5), "") == t + timedelta(hours=1)  # cron skips by default
    once = parse_schedule("2026-05-01 12:00:00", "UTC")
    assert resumed_due(once, t, t + timedelta(minutes=5), "SKIP") == t  # a one-time fire is never skipped


def test_a_run_that_started_after_later_fires_came_due_says_how_many_it_stands_for():
    """Fires missed while no node ran the job (its owner paused, or dead until taken over) run
    as one: the run's history line says how many came due before it started, as it says how
    many OVERLAP=SKIP skipped."""
    from fabricjobs.node.decisions import run_record

    due = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    for interval in ("*/1 * * * * *", "00:00:01"):
        job = Job(JobKey("USER_JOB", "A.b", "c"), Status.SCHEDULED, due, execution_interval=interval, next_run=due,
                  worker_id="n2", epoch=2)
        late = RunFacts("n2", 2, due, due + timedelta(seconds=3.5))  # 12:00:01, :02 and :03 came due meanwhile
        record = run_record(late, job.key, Outcome(OK), job, due + timedelta(seconds=4), Z_UTC)
        assert record.note == "3 later fire(s) came due before this run started and ran as this one", (interval, record.note)
        on_time = run_record(RunFacts("n2", 2, due, due + timedelta(milliseconds=30)), job.key, Outcome(OK), job,
                             due + timedelta(seconds=0.5), Z_UTC)
        assert on_time.note == ""
    days = _cron_job("* * * * * *", due, Z_UTC)
    record = run_record(RunFacts("n2", 2, due, due + timedelta(days=2)), days.key, Outcome(OK), days,
                        due + timedelta(days=2, seconds=1), Z_UTC)
    assert record.note.startswith("1,000+ later fire(s)")  # counted so far, no further


def test_a_cron_run_that_outlasts_a_thousand_fires_is_followed_by_the_right_fire():
    """A per-second cron whose run took two days: the next fire is the first after the run
    ended (SKIP) or the last one during it (QUEUE), found without stepping through each of the
    172,800 fires between (each a croniter); the note counts a thousand and says there were more."""
    from fabricjobs.node.decisions import run_record
    from fabricjobs.schedule import parse_schedule

    due = datetime(2026, 1, 1, tzinfo=UTC)
    ended = due + timedelta(days=2, milliseconds=500)
    cron = parse_schedule("* * * * * *", "Europe/Berlin")
    assert cron.after_run(due, due, ended, "SKIP") == (datetime(2026, 1, 3, 0, 0, 1, tzinfo=UTC), 1000)
    assert cron.after_run(due, due, ended, "QUEUE") == (datetime(2026, 1, 3, 0, 0, 0, tzinfo=UTC), 0)
    assert cron.after_run(due, due, due + timedelta(seconds=2.5), "SKIP") == (due + timedelta(seconds=3), 2)
    # Ended in the second pass of an autumn hour, which fires at its first pass only: the last
    # fire before the end is the first pass's last second (as walking every fire finds it).
    paris, autumn = parse_schedule("* * * * * *", "Europe/Paris"), datetime(2024, 10, 27, tzinfo=UTC)
    assert paris.after_run(autumn, autumn, datetime(2024, 10, 27, 1, 30, tzinfo=UTC), "QUEUE") == (
        datetime(2024, 10, 27, 0, 59, 59, tzinfo=UTC), 0)
    job = _cron_job("* * * * * *", due, Z_UTC)
    record = run_record(RunFacts("n2", 2, due, due), job.key, Outcome(OK), job, ended, Z_UTC)
    assert "1,000+ fire(s) skipped while this run was still going" in record.note, record.note


def test_a_listeners_file_swapped_after_it_was_seen_is_not_handed_to_the_job(tmp_path):
    """Between the listener's look and its job's run, whoever may write the drop directory could
    swap the file for a symlink (to /etc/passwd) or another file: the run is refused (FAILED, no
    retry) rather than handed it. A file gone is left to the job (a retry after it moved it)."""
    from fabricjobs.worker.listener import changed_since_seen, file_version

    seen = tmp_path / "r.csv"
    seen.write_text("a,b\n")
    os.link(seen, tmp_path / "kept")  # (its inode stays taken: a new file cannot be given the same number)
    args = {"listener": "INTERFACE_LISTENER.Files.count.race", "file": str(seen), "name": "r.csv",
            "version": file_version(os.lstat(seen))}
    assert changed_since_seen(args, first=True) is None
    assert changed_since_seen({"file": str(seen)}, first=True) is None  # not a listener's job
    seen.unlink()
    assert changed_since_seen(args, first=False) is None  # gone: the job decides
    seen.symlink_to("/etc/passwd")
    assert "is no longer a regular file (a symlink?)" in changed_since_seen(args, first=False)
    seen.unlink()
    other = tmp_path / "other.csv"
    other.write_text("another file under the same name\n")
    other.rename(seen)  # (a new inode under the name)
    assert "was replaced since its listener saw it" in changed_since_seen(args, first=False)
    args["version"] = file_version(os.lstat(seen))
    with open(seen, "a") as f:
        f.write("appended by the job's first try\n")
    assert changed_since_seen(args, first=False) is None  # the same file, changed in place: its retry runs
    # Before its first run, the same inode is not enough: a file deleted and written again under
    # the name may get the freed inode at once (ext4), and the listener starts a job for that one.
    assert "was replaced or changed since its listener saw it" in changed_since_seen(args, first=True)


def _symlinked(seen, tmp_path) -> None:
    os.link(seen, tmp_path / "kept")
    seen.unlink()
    seen.symlink_to("/etc/passwd")


def _written_again(seen, tmp_path) -> None:
    seen.write_text("written again: c,d,e\n")  # (the same inode, another size)


@pytest.mark.parametrize("swap, why", [(_symlinked, "is no longer a regular file (a symlink?)"),
                                       (_written_again, "was replaced or changed since its listener saw it")])
def test_a_listeners_job_whose_file_was_swapped_before_its_first_run_fails_without_running(cluster, tmp_path, swap, why):
    """The check runs as the run begins, on a real node: the job's function never sees the file.
    Swapped: a symlink now, or the file deleted and written again under its name while its job
    waited (ext4 may give it the same inode): that version has a job of its own, and the waiting
    job must not hand it to the function as well (its content would be handled twice)."""
    from fabricjobs.worker.listener import file_version

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    seen = inbox / "r.csv"
    seen.write_text("a,b\n")
    version = file_version(os.lstat(seen))
    swap(seen, tmp_path)
    log = tmp_path / "handled.jsonl"
    args = {"file": str(seen), "name": "r.csv", "listener": "INTERFACE_LISTENER.Probe.handle_file.inbox",
            "version": version, "log": str(log)}
    cluster.start_node("n1")
    cluster.fetch(f"startjob user_job name='Probe.handle_file' uid='inbox/r.csv' args='{json.dumps(args)}';")
    job = cluster.wait_job("USER_JOB", "Probe.handle_file", "inbox/r.csv", lambda j: j.archived, 20)
    assert job.status is Status.FAILED and why in job.error_msg, job
    assert job.tries <= 1 and not log.exists()  # no retry, and the function never ran
