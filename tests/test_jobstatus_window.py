"""JOBSTATUS n DAYS AGO on a long history, through ``fabricjobs shell`` on the store itself:
a window of a busy cluster holds millions of ended jobs, so the shell prints the 1,000 that
ended last and a notice that says there are more and how to see them
(docs/guides/watching-jobs.md), and reads the store's bounded search rather than the whole
window. The history is written the fastest way the store allows (testkit/bulk.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from harness import Cluster
from testkit import bulk

NOW = datetime.now(timezone.utc).replace(microsecond=0)
ENDED = 3_000


def _history() -> list[Job]:
    """``ENDED`` jobs that ended over the last day, a0000000 the newest; one FAILED Report.monthly."""
    jobs = []
    for i in range(ENDED):
        end = NOW - timedelta(seconds=1 + i * 20)
        name, status = ("Report.monthly", Status.FAILED) if i == ENDED - 1 else ("Nightly.load", Status.PROCESSED)
        jobs.append(Job(key=JobKey("USER_JOB", name, f"a{i:07d}"), status=status, creation_time=end - timedelta(minutes=1),
                        start_time=end - timedelta(seconds=30), end_time=end, archived=True, worker_id="old-node",
                        epoch=1, runs=1))
    return jobs


def _uids(out: str) -> list[str]:
    return [c[2].strip() for c in (line.strip("|").split("|") for line in out.splitlines()
                                   if line.startswith("| ") and not line.startswith("| Type"))]


def test_a_window_of_more_ended_jobs_than_a_person_reads_prints_the_last_ones_and_says_so(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        bulk.archived_sqlite(load_config(cluster.config_path).get("store", "SQLITE_PATH"), _history())

        out = cluster.shell_ok("jobstatus 2 days ago;")
        uids = _uids(out)
        assert len(uids) == 1000 and set(uids) == {f"a{i:07d}" for i in range(1000)}  # the newest, sorted by key
        assert uids == sorted(uids)
        assert "the 1,000 jobs that ended last, down to" in out and "GET /api/v1/jobs?scope=archived" in out, out[-600:]

        # Narrowed by name and status, the one old job is found, and nothing is said to be missing.
        narrowed = cluster.shell_ok("jobstatus user_job 'Report.monthly' 2 days ago where status = 'FAILED';")
        assert _uids(narrowed) == [f"a{ENDED - 1:07d}"] and "ended last" not in narrowed
        # A window that holds fewer than the cap shows all of it, without a notice.
        recent = cluster.shell_ok("jobstatus 0 days ago;")
        assert _uids(recent) == [] and "ended last" not in recent
    finally:
        cluster.stop_all()
