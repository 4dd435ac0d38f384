"""RJM's idempotent set-up through ``fabricjobs shell`` on two real nodes: STARTJOB ... IF NOT
EXISTS answers an existing job as it is, so a set-up script may run again."""

from __future__ import annotations

from harness import module_two_nodes
from harness import table_row as row

cluster = module_two_nodes("idempotentse")


SETUP = ("startjob user_job name='Probe.started' uid='parent' args='{{\"log\": \"{log}\"}}' if not exists;\n"
         "startjob user_job name='Probe.noop' uid='child' depends_on='USER_JOB.Probe.started.parent' if not exists;\n")


def test_a_set_up_script_runs_again_and_returns_the_jobs_as_they_are(cluster, tmp_path):
    """RJM: setting up a job is idempotent, so a script that set up a graph can be re-run."""
    script = SETUP.format(log=tmp_path / "started.log")
    first = cluster.shell("-e", script)
    assert first.returncode == 0, first.stderr
    assert row("USER_JOB", "Probe.started", "parent", "WAITING").search(first.stdout)
    assert row("USER_JOB", "Probe.noop", "child", "WAITING", "waiting for USER_JOB.Probe.started.parent").search(first.stdout)
    parent = cluster.wait_job("USER_JOB", "Probe.started", "parent", lambda j: j.status.name == "IN_PROCESS")

    again = cluster.shell("-e", script)
    assert again.returncode == 0 and again.stderr == ""
    assert row("USER_JOB", "Probe.started", "parent", "IN_PROCESS").search(again.stdout)  # not "Job is running"
    assert row("USER_JOB", "Probe.noop", "child", "WAITING").search(again.stdout)
    now = cluster.job("USER_JOB", "Probe.started", "parent")
    assert (now.epoch, now.creation_time, now.arguments) == (parent.epoch, parent.creation_time, parent.arguments)

    plain = cluster.shell("-e", "startjob user_job name='Probe.started' uid='parent';")
    assert plain.returncode == 1 and plain.stderr.strip() == "Job is running [type: USER_JOB, name: Probe.started, uid: parent]"

    stop = cluster.shell("-e", "stopjob user_job name='Probe.started' uid='parent' wait timeout 20;")
    assert stop.returncode == 0, stop.stderr
    archived = cluster.shell("-e", "startjob user_job name='Probe.started' uid='parent' if not exists;")
    assert archived.returncode == 0 and row("USER_JOB", "Probe.started", "parent", "TERMINATED").search(archived.stdout)
    assert cluster.job("USER_JOB", "Probe.started", "parent").status.name == "TERMINATED"  # not started again


def test_if_not_exists_needs_a_uid_and_changes_nothing_without_one(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.echo' if not exists;")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("Invalid command at line 1, column 37: IF NOT EXISTS needs UID='<uid>'")
    assert "Probe.echo" not in cluster.shell("-e", "jobstatus 1 day ago;").stdout
