"""RJM's rjmls by status: JOBSTATUS ... WHERE STATUS = '...' / WHERE STATUS IN (...), through
``fabricjobs shell`` on two real nodes. A final status brings in the archived jobs without
n DAYS AGO (the ones kept, newest first); live statuses read live rows only."""

from __future__ import annotations

import re

from harness import module_two_nodes, wait_for

cluster = module_two_nodes("statusfilter")


def _uids(out: str) -> list[str]:
    return [c[2].strip() for c in (line.strip("|").split("|") for line in out.splitlines()
                                   if line.startswith("| ") and not line.startswith("| Type"))]


def test_jobstatus_keeps_the_jobs_in_the_statuses_named_live_and_ended(cluster):
    r = cluster.shell("-e", "startjob user_job name='Probe.always_fails' uid='sf-failed';"
                            "startjob user_job name='Probe.noop' uid='sf-done';"
                            "startjob user_job name='Probe.noop' uid='sf-waiting' affinity='no-such-node';"
                            "startjob user_job name='Probe.noop' uid='sf-later' exec_interval='2099-01-01 00:00:00';")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: cluster.job("USER_JOB", "Probe.always_fails", "sf-failed").status.name == "FAILED", 30, "the failure")
    wait_for(lambda: cluster.job("USER_JOB", "Probe.noop", "sf-done").status.name == "PROCESSED", 30, "the success")

    def uids(where: str) -> list[str]:
        r = cluster.shell("-e", f"jobstatus {where};")
        assert r.returncode == 0, r.stderr
        return sorted(u for u in _uids(r.stdout) if u.startswith("sf-"))

    assert uids("where status = 'FAILED'") == ["sf-failed"]  # archived, found without n DAYS AGO
    assert uids("where status in ('failed', 'Waiting')") == ["sf-failed", "sf-waiting"]
    assert uids("user_job 'Probe.noop' where status in ('PROCESSED','SCHEDULED')") == ["sf-done", "sf-later"]
    assert uids("1 day ago where status='PROCESSED'") == ["sf-done"]
    assert uids("user_job 'Probe.noop' where status = 'FAILED'") == []
    details = cluster.shell("-e", "jobstatus user_job 'Probe.always_fails' where status='FAILED' details;").stdout
    assert re.search(r"^UID\s+\| sf-failed", details, re.M) and re.search(r"^Runs\s+\| [1-9]", details, re.M)
    bad = cluster.shell("-e", "jobstatus where status = 'DONE';")
    assert bad.returncode == 1 and "STATUS must be one of WAITING" in bad.stderr and "got 'DONE'" in bad.stderr
    assert bad.stdout == ""
    cluster.shell("-e", "stopjob user_job name='Probe.noop';")
