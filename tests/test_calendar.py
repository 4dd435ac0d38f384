"""Calendars (IPF): the rules a calendar is made of, what each excludes, and the node's cache."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from fabricjobs.calendar import CalendarCache, CalendarError, from_text, make_calendar


def test_dates_ranges_and_cron_rules_exclude_what_they_say():
    cal = make_calendar("holidays", ["2026-12-25,2027-01-01", "2026-12-28..2026-12-30", "* * * * sat,sun", "* 12 * * *"])
    assert [r.text for r in cal.rules] == ["2026-12-25", "2027-01-01", "2026-12-28..2026-12-30", "* * * * sat,sun",
                                           "* 12 * * *"]
    assert cal.excluding(datetime(2026, 12, 25, 23, 59)).text == "2026-12-25"
    assert cal.excluding(datetime(2026, 12, 29, 8, 0)).text == "2026-12-28..2026-12-30"
    assert cal.excluding(datetime(2026, 11, 28, 10, 3, 7)).text == "* * * * sat,sun"  # a Saturday
    assert cal.excluding(datetime(2026, 11, 26, 12, 30)).text == "* 12 * * *"
    assert cal.excluding(datetime(2026, 11, 26, 11, 59, 59)) is None  # a Thursday morning
    assert cal.excluding(datetime(2026, 12, 31, 9, 0)) is None


def test_a_stored_calendar_reads_back_the_same():
    cal = make_calendar("c", ["2026-12-25", "0 9 * * mon"])
    again = from_text("c", cal.text)
    assert again == cal and again.rules[0].first == date(2026, 12, 25)


@pytest.mark.parametrize("name, rules, says", [
    ("c", [], "at least one EXCLUDE rule"),
    ("c", ["2026-13-01"], "is not a date"),
    ("c", ["2026-12-30..2026-12-01"], "ends before it starts"),
    ("c", ["tomorrow"], "expected a date"),
    ("c", ["* * * * funday"], "not a valid cron"),
    ("c", ["*/5 * * * * *"], "expected a date"),  # six fields: calendars are about days and hours
    ("bad name!", ["2026-12-25"], "bad calendar name"),
    ("c", ["2026-12-25,soon"], "expected a date"),
])
def test_bad_rules_and_names_say_why(name, rules, says):
    with pytest.raises(CalendarError, match=says):
        make_calendar(name, rules)


def test_the_cache_rereads_a_calendar_after_its_ttl():
    reads, now = [], [0.0]
    stored = {"c": make_calendar("c", ["2026-12-25"])}

    def read(name):
        reads.append(name)
        return stored.get(name)

    cache = CalendarCache(read, ttl=5.0, monotonic=lambda: now[0])
    assert cache.get("c") == stored["c"] and cache.get("c") == stored["c"] and reads == ["c"]
    stored["c"] = make_calendar("c", ["2026-12-26"])
    now[0] = 5.0
    assert cache.get("c").rules[0].text == "2026-12-26" and reads == ["c", "c"]
    assert cache.get("gone") is None
