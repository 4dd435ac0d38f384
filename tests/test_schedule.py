"""EXEC_INTERVAL forms, fixed-rate arithmetic and DST behaviour (docs/guides/schedules.md)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from fabricjobs.errors import ScheduleError
from fabricjobs.model import Status
from fabricjobs.schedule import ScheduleKind, parse_schedule

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def fires(expr: str, zone, start: datetime, n: int) -> list[datetime]:
    s = parse_schedule(expr, zone)
    out, t = [], start
    for _ in range(n):
        t = s.next_fire_after(t)
        out.append(t)
    return out


def local(ts: list[datetime], zone) -> list[str]:
    return [t.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z") for t in ts]


# -- the forms -------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", None, "   "])
def test_empty_means_run_once_now(text):
    s = parse_schedule(text, "UTC")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert s.kind is ScheduleKind.ONCE_NOW and not s.is_recurring
    assert s.initial_status is Status.WAITING
    assert s.first_due(now) == now
    assert s.next_after_run(now, now, now) is None


def test_timestamp_is_one_run_at_that_local_time():
    s = parse_schedule("2026-07-01 09:30:00", BERLIN)
    assert s.kind is ScheduleKind.ONCE_AT and s.initial_status is Status.SCHEDULED
    assert s.first_due(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 7, 1, 7, 30, tzinfo=UTC)
    assert s.next_after_run(s.first_due(datetime.now(UTC)), datetime.now(UTC), datetime.now(UTC)) is None


@pytest.mark.parametrize("fraction, micros", [(".123", 123000), (".5", 500000), (".05", 50000), (".000", 0)])
def test_timestamp_to_the_millisecond(fraction, micros):
    """IPF's singleSchedule: a one-time schedule to millisecond precision."""
    s = parse_schedule(f"2026-07-01 09:30:00{fraction}", BERLIN)
    assert s.kind is ScheduleKind.ONCE_AT
    assert s.first_due(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 7, 1, 7, 30, 0, micros, tzinfo=UTC)


@pytest.mark.parametrize("text, why", [
    ("2026-07-01 09:30:00.1234", "at most 3 decimals (milliseconds), got 4"),
    ("2026-07-01 09:30:00.", "expected HH:MM:SS"),
    ("2026-07-01 09:30:00,123", "expected HH:MM:SS"),
])
def test_timestamp_fractions_beyond_milliseconds_are_refused(text, why):
    with pytest.raises(ScheduleError, match=re.escape(why)):
        parse_schedule(text, "UTC")


def test_interval_is_recurring_and_runs_first_now():
    s = parse_schedule("00:00:01", "UTC")
    assert s.kind is ScheduleKind.INTERVAL and s.is_recurring
    assert s.initial_status is Status.WAITING
    assert s.interval == timedelta(seconds=1)
    assert parse_schedule("36:00:00", "UTC").interval == timedelta(hours=36)


def test_interval_is_fixed_rate_from_the_scheduled_start():
    s = parse_schedule("00:01:00", "UTC")
    due = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)
    # started 200 ms late and ran 5 s: next is due a minute after the *scheduled* start.
    assert s.next_after_run(due, due + timedelta(milliseconds=200), due + timedelta(seconds=5)) == due + timedelta(minutes=1)


def test_interval_overrun_runs_next_right_after_without_a_burst_and_keeps_the_grid():
    s = parse_schedule("00:00:10", "UTC")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    ended = due + timedelta(seconds=35)  # overran three due times
    # one run, due at once (the last fire that passed, 30 s): the next ones stay on the grid
    queued = s.next_after_run(due, due, ended)
    assert queued == due + timedelta(seconds=30)
    assert s.next_after_run(queued, ended + timedelta(milliseconds=5), ended + timedelta(seconds=1)) == due + timedelta(seconds=40)


def test_interval_missed_fires_after_downtime_collapse_into_one():
    s = parse_schedule("00:00:10", "UTC")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    started = due + timedelta(hours=3, seconds=4)  # no node was up for three hours
    nxt = s.next_after_run(due, started, started + timedelta(seconds=1))
    # the run that just happened stood for all missed fires; the next keeps the 10 s grid
    assert nxt == due + timedelta(hours=3, seconds=10)


@pytest.mark.parametrize("expr", ["*/5 * * * *", "0 0 * * 1-5", "23 0-20/2 03 12 2", "@daily"])
def test_five_field_cron_is_scheduled(expr):
    s = parse_schedule(expr, "UTC")
    assert s.kind is ScheduleKind.CRON and s.is_recurring and not s.cron_has_seconds
    assert s.initial_status is Status.SCHEDULED


def test_the_seeds_cron_example():
    # 23 0-20/2 03 12 2: minute 23 of every 2nd hour 0-20, in December, on the 3rd or a
    # Tuesday (standard cron: with both day fields restricted either may match).
    got = fires("23 0-20/2 03 12 2", "UTC", datetime(2026, 1, 1, tzinfo=UTC), 14)
    assert got[0] == datetime(2026, 12, 1, 0, 23, tzinfo=UTC)  # Tuesday 1 December 2026
    assert got[10] == datetime(2026, 12, 1, 20, 23, tzinfo=UTC)
    assert got[11] == datetime(2026, 12, 3, 0, 23, tzinfo=UTC)  # the 3rd (a Thursday)
    assert all(t.minute == 23 and t.hour % 2 == 0 and t.hour <= 20 and t.month == 12 for t in got)
    assert all(t.day == 3 or t.weekday() == 1 for t in got)


def test_six_field_cron_has_seconds_first():
    s = parse_schedule("*/15 * * * * *", "UTC")
    assert s.cron_has_seconds
    t0 = datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)
    assert fires("*/15 * * * * *", "UTC", t0, 3) == [t0.replace(microsecond=0) + timedelta(seconds=s) for s in (15, 30, 45)]
    assert fires("30 10 * * * *", "UTC", t0, 2) == [datetime(2026, 1, 1, 0, 10, 30, tzinfo=UTC), datetime(2026, 1, 1, 1, 10, 30, tzinfo=UTC)]


def test_next_fire_is_strictly_after():
    t = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert parse_schedule("*/5 * * * *", "UTC").next_fire_after(t) == t + timedelta(minutes=5)


def test_cron_missed_fires_collapse_and_never_run_twice_at_once():
    s = parse_schedule("* * * * * *", "UTC")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    started = due + timedelta(hours=3)
    ended = started + timedelta(seconds=2.5)
    # cron skips the fires that came due during the overrun (the default), or queues one:
    assert s.after_run(due, started, ended) == (started + timedelta(seconds=3), 2)
    assert s.after_run(due, started, ended, "QUEUE") == (started + timedelta(seconds=2), 0)  # right after, once
    assert s.next_after_run(due, started, started + timedelta(milliseconds=10)) == started + timedelta(seconds=1)


def test_interval_overlap_policy_skip_keeps_the_grid():
    s = parse_schedule("00:00:10", "UTC")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    assert s.after_run(due, due, due + timedelta(seconds=35), "SKIP") == (due + timedelta(seconds=40), 3)
    assert s.after_run(due, due, due + timedelta(seconds=35)) == (due + timedelta(seconds=30), 0)  # QUEUE: docs/guides/schedules.md


def test_next_due_after_a_late_fire():
    cron = parse_schedule("0 * * * *", "UTC")
    t = datetime(2026, 1, 1, 3, 20, tzinfo=UTC)
    assert cron.next_due_after(t) == datetime(2026, 1, 1, 4, 0, tzinfo=UTC)
    interval = parse_schedule("00:15:00", "UTC")
    grid = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert interval.next_due_after(t, grid_from=grid) == datetime(2026, 1, 1, 3, 35, tzinfo=UTC)


def test_cron_is_evaluated_in_the_schedules_zone():
    got = fires("0 9 * * *", NEW_YORK, datetime(2026, 1, 10, tzinfo=UTC), 1)
    assert got == [datetime(2026, 1, 10, 14, 0, tzinfo=UTC)]


# -- DST -----------------------------------------------------------------------------------------

def test_berlin_spring_gap_fires_once_at_the_end_of_the_gap():
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that day.
    got = fires("30 2 * * *", BERLIN, datetime(2026, 3, 27, tzinfo=UTC), 4)
    assert local(got, BERLIN) == [
        "2026-03-27 02:30:00 CET",
        "2026-03-28 02:30:00 CET",
        "2026-03-29 03:00:00 CEST",  # not skipped: the first instant after the gap
        "2026-03-30 02:30:00 CEST",
    ]


def test_berlin_autumn_repeat_fires_once():
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    got = fires("30 2 * * *", BERLIN, datetime(2026, 10, 23, tzinfo=UTC), 4)
    assert local(got, BERLIN) == [
        "2026-10-23 02:30:00 CEST",
        "2026-10-24 02:30:00 CEST",
        "2026-10-25 02:30:00 CEST",  # first occurrence only
        "2026-10-26 02:30:00 CET",
    ]


def test_every_15_minutes_through_the_new_york_fall_back_hour_each_local_time_once():
    # 2026-11-01: 02:00 EDT falls back to 01:00 EST.
    got = fires("*/15 * * * *", NEW_YORK, datetime(2026, 11, 1, 4, 50, tzinfo=UTC), 10)
    labels = [t.astimezone(NEW_YORK).strftime("%H:%M") for t in got]
    assert labels == ["01:00", "01:15", "01:30", "01:45", "02:00", "02:15", "02:30", "02:45", "03:00", "03:15"]
    assert len(set(labels)) == len(labels)
    assert all(b > a for a, b in zip(got, got[1:]))


def test_new_york_spring_gap_times_coalesce_into_one_fire():
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT. 02:00, 02:20, 02:40 do not exist.
    got = fires("*/20 * * * *", NEW_YORK, datetime(2026, 3, 8, 6, 30, tzinfo=UTC), 4)
    assert local(got, NEW_YORK) == [
        "2026-03-08 01:40:00 EST",
        "2026-03-08 03:00:00 EDT",  # stands for 02:00, 02:20, 02:40 and 03:00
        "2026-03-08 03:20:00 EDT",
        "2026-03-08 03:40:00 EDT",
    ]


def test_daily_cron_across_a_whole_new_york_year_fires_every_day_once():
    got = fires("30 1 * * *", NEW_YORK, datetime(2026, 1, 1, 6, tzinfo=UTC), 365)
    days = [t.astimezone(NEW_YORK).date() for t in got]
    assert len(set(days)) == 365 and days[0].isoformat() == "2026-01-01"
    assert all(t.astimezone(NEW_YORK).strftime("%H:%M") == "01:30" for t in got)


def test_timestamp_inside_a_gap_moves_to_the_gap_end():
    s = parse_schedule("2026-03-29 02:15:00", BERLIN)
    assert s.first_due(datetime(2026, 1, 1, tzinfo=UTC)).astimezone(BERLIN).strftime("%H:%M %Z") == "03:00 CEST"


# -- invalid input ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, words",
    [
        ("00:00:00", "longer than 00:00:00"),
        ("1:2:3", "HH:MM:SS"),
        ("00:60:00", "HH:MM:SS"),
        ("2026-13-01 00:00:00", "month must be in 1..12"),
        ("2026-02-30 10:00:00", "day is out of range"),
        ("61 * * * *", "invalid cron expression"),
        ("* * * *", "5 fields"),
        ("* * * * * * *", "5 fields"),
        ("every day", "5 fields"),
        ("0 0 30 2 *", "never fires"),
        ("a b c d e", "invalid cron expression"),
    ],
)
def test_invalid_text_is_rejected_with_a_clear_reason(text, words):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(text, "UTC")
    assert words in str(err.value)
    assert text.strip() in str(err.value)


def test_unknown_zone_is_rejected():
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Base'"):
        parse_schedule("* * * * *", "Mars/Base")
