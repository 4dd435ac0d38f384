"""RJM's rjm_delete (docs/explanation/design-choices.md): DELETE_ON_SUCCESS='<file>,...' through ``fabricjobs shell`` on
two real node processes, on SQLite and on the Cassandra backend. The files go after a
successful run, stay after a failed one, a file already gone is no error, and nothing outside
[jobs] CLEANUP_ROOT may be named."""

from __future__ import annotations

from backends import SEED_BACKENDS
from harness import table_row as row, two_nodes_on_each_backend, wait_for

cluster = two_nodes_on_each_backend("cleanup", lambda where: {"jobs": {"CLEANUP_ROOT": str(where / "work")}},
                                    backends=SEED_BACKENDS)


def _root(cluster):
    root = cluster.tmp / "work"
    (root / "sub").mkdir(parents=True, exist_ok=True)
    return root


def test_the_files_go_after_success_and_stay_after_a_failure(cluster, tmp_path):
    root = _root(cluster)
    for name in ("in.csv", "sub/mid.tmp", "keep.csv", "kept.tmp"):
        (root / name).write_text("data")
    out = cluster.shell_ok(f"startjob user_job name='Probe.record' uid='ok' args='{{\"log\": \"{tmp_path / 'ran.log'}\"}}' "
                           f"delete_on_success='in.csv, sub/mid.tmp, {root / 'kept.tmp'}, never-there.csv';"
                           "startjob user_job name='Probe.fails_no_retry' uid='bad' delete_on_success='keep.csv';")
    assert row("USER_JOB", "Probe.record", "ok", "WAITING").search(out), out
    cluster.wait_job("USER_JOB", "Probe.record", "ok", lambda j: j.status.name == "PROCESSED", 20)
    wait_for(lambda: not (root / "in.csv").exists() and not (root / "sub" / "mid.tmp").exists()
             and not (root / "kept.tmp").exists(), 10, "the listed files to be deleted")
    cluster.wait_job("USER_JOB", "Probe.fails_no_retry", "bad", lambda j: j.status.name == "FAILED", 20)
    assert (root / "keep.csv").read_text() == "data"  # left for diagnosis and a restart
    details = cluster.shell_ok("jobstatus user_job 'Probe.record' with uid='ok' details;")
    assert "in.csv,sub/mid.tmp," in details, details


def test_files_outside_the_root_are_refused_and_nothing_is_written(cluster):
    _root(cluster)
    for files, says in (("/etc/passwd", "outside CLEANUP_ROOT"), ("../escape.csv", "'..' is not allowed")):
        r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='out' delete_on_success='{files}';")
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert "out" not in cluster.shell_ok("jobstatus user_job 'Probe.noop';")
