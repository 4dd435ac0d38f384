"""IPF's job calendars (docs/explanation/design-choices.md), through ``fabricjobs shell`` on two real node processes, on
SQLite and on the Cassandra backend: CREATECALENDAR, CALENDAR= on a recurring job, a fire on an
excluded day skipped and recorded with the rule, a replaced calendar taking effect on the
nodes, CALENDARS, and DROPCALENDAR refused while a job names the calendar."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from backends import SEED_BACKENDS
from harness import read_records, table_row as row, two_nodes_on_each_backend, wait_for


cluster = two_nodes_on_each_backend("calendars", backends=SEED_BACKENDS)


def _ok(cluster, text):
    return cluster.shell_ok(text)


def _skips(cluster, uid):
    out = _ok(cluster, f"jobhistory user_job 'Probe.record' with uid='{uid}';")
    return re.findall(r"\| SKIPPED .*?calendar '(\S+)' excludes it \(([^)]*)\)", out)


def test_fires_on_excluded_days_are_skipped_with_the_rule_until_the_calendar_changes(cluster, tmp_path):
    today = datetime.now(timezone.utc).date()  # the job's TZ is UTC: today and tomorrow cover the test
    days = f"{today}..{today + timedelta(days=1)}"
    out = _ok(cluster, f"createcalendar 'days-off' exclude '{days}';")
    assert row("days-off", days, "created").search(out), out
    starts = tmp_path / "starts.log"
    _ok(cluster, f"startjob user_job name='Probe.record' uid='cal' exec_interval='00:00:01' tz='UTC' "
                 f"calendar='days-off' args='{{\"log\": \"{tmp_path / 'ran.log'}\", \"starts\": \"{starts}\"}}';")
    wait_for(lambda: len(_skips(cluster, "cal")) >= 3, 30, "three fires skipped by the calendar")
    assert set(_skips(cluster, "cal")) == {("days-off", days)} and not starts.exists()
    status = _ok(cluster, "jobstatus user_job 'Probe.record' with uid='cal' details;")
    assert re.search(r"Calendar\s+\| days-off", status) and re.search(r"Status\s+\| SCHEDULED", status), status

    # Replaced: within the nodes' 5 s cache the fires run again.
    out = _ok(cluster, "createcalendar 'days-off' exclude '2000-01-01';")
    assert row("days-off", "2000-01-01", "replaced").search(out), out
    wait_for(lambda: len(read_records(starts)) >= 2, 30, "runs once the calendar no longer excludes today")

    # A cron rule: every minute of every day.
    _ok(cluster, "createcalendar 'always' exclude '* * * * *';"
                 "updatejob user_job name='Probe.record' uid='cal' calendar='always';")
    ran = len(read_records(starts))
    wait_for(lambda: ("always", "* * * * *") in _skips(cluster, "cal"), 30, "a fire skipped by the cron rule")
    assert len(read_records(starts)) <= ran + 1  # (a fire already due when the job changed may run)

    out = _ok(cluster, "calendars;")
    assert row("always", "* * * * *", "1").search(out) and row("days-off", "2000-01-01", "0").search(out), out
    r = cluster.shell("-e", "dropcalendar 'always';")
    assert r.returncode == 1 and "named by 1 live job(s)" in r.stderr and "nothing was dropped" in r.stderr, r.stderr
    out = _ok(cluster, "updatejob user_job name='Probe.record' uid='cal' calendar='';"
                       "dropcalendar 'always'; calendars;")
    assert row("always", "* * * * *", "dropped").search(out) and "always " not in out.split("dropped")[-1], out
    _ok(cluster, "stopjob user_job name='Probe.record' uid='cal' wait timeout 20; dropcalendar 'days-off';")


@pytest.mark.parametrize("text, says", [
    ("startjob user_job name='Probe.noop' uid='c1' exec_interval='00:00:05' calendar='nope';", "No such calendar 'nope'"),
    ("startjob user_job name='Probe.noop' uid='c2' calendar='weekdays';", "needs a recurring job"),
    ("createcalendar 'weekdays' exclude 'mondays';", "expected a date (YYYY-MM-DD)"),
    ("createcalendar 'weekdays' exclude '2026-02-30';", "is not a date"),
    ("dropcalendar 'nope';", "No such calendar 'nope'"),
    ("createcalendar '..' exclude '2026-12-25';", "a calendar name must not be '.' or '..'"),
])
def test_bad_calendar_input_says_why_and_changes_nothing(cluster, text, says):
    _ok(cluster, "createcalendar 'weekdays' exclude '* * * * sat,sun';")
    r = cluster.shell("-e", text)
    assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "c1" not in _ok(cluster, "jobstatus user_job 'Probe.noop';")
    assert row("weekdays", "* * * * sat,sun").search(_ok(cluster, "calendars;"))
