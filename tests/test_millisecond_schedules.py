"""IPF's one-time schedule to the millisecond through ``fabricjobs shell`` on two real nodes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from harness import module_two_nodes
from harness import table_row as row

cluster = module_two_nodes("milliseconds")


def test_a_one_time_schedule_to_the_millisecond(cluster):
    """IPF's singleSchedule: EXEC_INTERVAL='yyyy-MM-dd HH:mm:ss.SSS' is due at that millisecond."""
    # 11 to 12 s ahead: its owner makes it WAITING up to 1 s early (the fire lead), after which
    # JOBSTATUS shows "Ready to be executed"; two shell starts fit before that even under load
    # (over 3 s each seen on a loaded machine).
    at = (datetime.now(timezone.utc) + timedelta(seconds=12)).replace(microsecond=437000)
    text = at.strftime("%Y-%m-%d %H:%M:%S") + ".437"
    r = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='ms' exec_interval='{text}' tz='UTC';")
    assert r.returncode == 0 and row("USER_JOB", "Probe.noop", "ms", "SCHEDULED").search(r.stdout), r.stderr
    status = json.loads(cluster.shell("--format", "json", "-e", "jobstatus user_job 'Probe.noop' with uid='ms';").stdout)
    assert datetime.fromisoformat(status[0]["Next Run"]) == at
    done = cluster.shell("-e", "waitjob user_job 'Probe.noop' with uid='ms' timeout 30;", timeout=45)
    assert done.returncode == 0 and "PROCESSED" in done.stdout, done.stderr
    (run,) = json.loads(cluster.shell("--format", "json", "-e", "jobhistory user_job 'Probe.noop' with uid='ms';").stdout)
    assert datetime.fromisoformat(run["Due"]) == at and datetime.fromisoformat(run["Start"]) >= at
    bad = cluster.shell("-e", f"startjob user_job name='Probe.noop' uid='us' exec_interval='{text}123';")
    assert bad.returncode == 1 and "at most 3 decimals (milliseconds), got 6" in bad.stderr
    assert cluster.job("USER_JOB", "Probe.noop", "us") is None
