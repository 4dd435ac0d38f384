"""DolphinDB's tasks of a job (docs/explanation/design-choices.md): STARTJOB USER_JOB ... PARALLELISM=n through
``fabricjobs shell`` on two real node processes, on SQLite and on the Cassandra backend. Each
task runs once with its own index; the job is PROCESSED only after all of them, its output their
outputs in index order; a task failing for good fails the job; JOBSTATUS shows the progress;
STOPJOB of the job stops its tasks; bad input is refused and nothing is written."""

from __future__ import annotations

import json

from backends import SEED_BACKENDS
from harness import read_records, table_row as row, two_nodes_on_each_backend, wait_for

cluster = two_nodes_on_each_backend("parallel", backends=SEED_BACKENDS)


def _args(**kw) -> str:
    return json.dumps(kw)


def test_each_task_runs_once_with_its_index_and_the_job_ends_after_all(cluster, tmp_path):
    log, gate = tmp_path / "parts.log", tmp_path / "gate"
    out = cluster.shell_ok(f"startjob user_job name='Probe.part' uid='p4' parallelism=4 "
                           f"args='{_args(log=str(log), gate=str(gate), gate_index=3)}';")
    assert row("USER_JOB", "Probe.part", "p4", "WAITING").search(out), out
    # Tasks 0..2 end, task 3 waits for the gate: the job waits, its Notes say how far it is.
    wait_for(lambda: "tasks: 3 of 4 PROCESSED, 1 IN_PROCESS" in cluster.shell_ok(
        "jobstatus user_job 'Probe.part' with uid='p4';"), 20, "the progress of the tasks in JOBSTATUS")
    assert cluster.job("USER_JOB", "Probe.part", "p4").status.name == "WAITING"
    gate.write_text("go")
    job = cluster.wait_job("USER_JOB", "Probe.part", "p4", lambda j: j.status.name == "PROCESSED", 20)
    records = read_records(log)
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3], records
    assert all(r["ctx_index"] == r["index"] and r["count"] == r["ctx_count"] == 4 for r in records), records
    assert {r["key"] for r in records} == {f"USER_JOB.Probe.part.p4/{i}" for i in range(4)}
    tasks = [cluster.job("USER_JOB", "Probe.part", f"p4/{i}") for i in range(4)]
    assert all(t.status.name == "PROCESSED" and t.task_of == "USER_JOB.Probe.part.p4" for t in tasks), tasks
    assert job.end_time >= max(t.end_time for t in tasks)
    summary = json.loads(job.output)
    assert summary["tasks"] == 4 and [o["index"] for o in summary["outputs"]] == [0, 1, 2, 3], summary
    assert [o["node"] for o in summary["outputs"]] == [r["node"] for r in sorted(records, key=lambda r: r["index"])]
    assert len(read_records(log)) == 4  # the job itself ran no user code


def test_a_task_failing_for_good_fails_the_job_with_its_error(cluster, tmp_path):
    log, mended = tmp_path / "parts.log", tmp_path / "mended"
    cluster.shell_ok(f"startjob user_job name='Probe.part' uid='f3' parallelism=3 on_failure='USER_JOB.Probe.echo' "
                     f"args='{_args(log=str(log), fail_index=1, mended=str(mended))}';")
    job = cluster.wait_job("USER_JOB", "Probe.part", "f3", lambda j: j.status.name == "FAILED", 20)
    assert job.error_msg == "task 1 failed: part 1 broke", job.error_msg
    for i, status in ((0, "PROCESSED"), (1, "FAILED"), (2, "PROCESSED")):  # the others went on
        cluster.wait_job("USER_JOB", "Probe.part", f"f3/{i}", lambda j, s=status: j.status.name == s, 20)
    # ON_FAILURE names the run that failed: the task's (the job has none of its own: it said 0).
    task = cluster.job("USER_JOB", "Probe.part", "f3/1")
    handler = cluster.wait_job("USER_JOB", "Probe.echo", f"USER_JOB.Probe.part.f3.failed.{task.epoch}", lambda j: j.archived, 20)
    given = json.loads(handler.output)["args"]
    assert (given["failed_job"], given["run"], given["error"]) == ("USER_JOB.Probe.part.f3", task.epoch, job.error_msg)
    assert cluster.client().store.run(task.key, task.epoch) is not None  # (a run the task's JOBHISTORY has)
    out = cluster.shell_ok("jobstatus user_job 'Probe.part' with uid='f3';")
    assert "task 1 failed: part 1 broke" in out, out
    # Resumed while its task is still FAILED, the job fails again; once the task succeeds, it ends.
    cluster.shell_ok("resumejob user_job name='Probe.part' uid='f3';")
    cluster.wait_job("USER_JOB", "Probe.part", "f3", lambda j: j.status.name == "FAILED" and j.epoch > job.epoch, 20)
    mended.write_text("yes")
    cluster.shell_ok("resumejob user_job name='Probe.part' uid='f3/1';")
    cluster.wait_job("USER_JOB", "Probe.part", "f3/1", lambda j: j.status.name == "PROCESSED", 20)
    cluster.shell_ok("resumejob user_job name='Probe.part' uid='f3';")
    done = cluster.wait_job("USER_JOB", "Probe.part", "f3", lambda j: j.status.name == "PROCESSED", 20)
    assert [o["index"] for o in json.loads(done.output)["outputs"]] == [0, 1, 2], done.output


def test_stopjob_of_the_job_stops_its_tasks(cluster, tmp_path):
    log, gate = tmp_path / "parts.log", tmp_path / "never"
    cluster.shell_ok(f"startjob user_job name='Probe.part' uid='s2' parallelism=2 "
                     f"args='{_args(log=str(log), gate=str(gate), gate_index=1)}';")
    cluster.wait_job("USER_JOB", "Probe.part", "s2/1", lambda j: j.status.name == "IN_PROCESS", 20)
    cluster.shell_ok("stopjob user_job name='Probe.part' uid='s2' wait timeout 20;")
    assert cluster.job("USER_JOB", "Probe.part", "s2").status.name == "TERMINATED"
    cluster.wait_job("USER_JOB", "Probe.part", "s2/1", lambda j: j.status.name == "TERMINATED", 20)


def test_bad_parallelism_is_refused_and_nothing_is_written(cluster):
    for text, says in (
        ("startjob user_job name='Probe.noop' uid='bad' parallelism=1;", "PARALLELISM must be a whole number from 2 to 64"),
        ("startjob user_job name='Probe.noop' uid='bad' parallelism=65;", "PARALLELISM must be a whole number from 2 to 64"),
        ("startjob process name='true' uid='bad' parallelism=2;", "PARALLELISM is for USER_JOB jobs only"),
        ("startjob user_job name='Probe.noop' uid='bad' parallelism=2 exec_interval='00:01:00';",
         "PARALLELISM cannot be given with EXEC_INTERVAL"),
    ):
        r = cluster.shell("-e", text)
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, (text, r.stderr)
    assert cluster.job("USER_JOB", "Probe.noop", "bad") is None
    assert cluster.job("USER_JOB", "Probe.noop", "bad/0") is None
    assert cluster.job("PROCESS", "true", "bad") is None


def test_a_job_whose_tasks_ended_unannounced_is_ended_by_the_dependency_check(cluster):
    """A node that died right after writing a task's outcome told no node: the job is not left
    waiting for good, every node's periodic dependency check (DEPENDENCY_CHECK_SEC) ends it. The
    rows are written here as that node left them; no node wrote an outcome, so none was told."""
    from datetime import datetime, timezone

    from fabricjobs.model import Job, JobKey, Status

    store, now = cluster.client().store, datetime.now(timezone.utc)
    for uid, ends in (("lone-ok", [Status.PROCESSED, Status.PROCESSED]), ("lone-bad", [Status.PROCESSED, Status.FAILED])):
        key = JobKey("USER_JOB", "Probe.part", uid)
        tasks = [Job(key=JobKey(key.type, key.name, f"{uid}/{i}"), status=s, creation_time=now, end_time=now, archived=True,
                     output=json.dumps({"index": i}) if s is Status.PROCESSED else None,
                     error_msg="boom" if s is Status.FAILED else "", parallelism=2, task_of=str(key))
                 for i, s in enumerate(ends)]
        parent = Job(key=key, status=Status.WAITING, creation_time=now, next_run=now, parallelism=2, blocked=True,
                     depends_on=",".join(str(t.key) for t in tasks))
        assert all(r.applied for r in store.insert_many([*tasks, parent]))
    done = cluster.wait_job("USER_JOB", "Probe.part", "lone-ok", lambda j: j.status.name == "PROCESSED", 20)
    assert json.loads(done.output) == {"tasks": 2, "outputs": [{"index": 0}, {"index": 1}]}
    failed = cluster.wait_job("USER_JOB", "Probe.part", "lone-bad", lambda j: j.status.name == "FAILED", 20)
    assert failed.error_msg == "task 1 failed: boom"
