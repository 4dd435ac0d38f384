"""What the store upgrade tests of both backends check on a row written before the later
schema steps (the columns of docs/explanation/design-choices.md): they read empty, and each is written and read back."""

from __future__ import annotations


def assert_issue_22_columns_round_trip(store, row) -> None:
    """``row``: an old job, read after the upgrade (its owner and requestor already set)."""
    assert row.calendar == "" and store.calendars() == []  # the calendar column and table
    cal = store.cas(row, row.replace(calendar="holidays")).row
    assert cal.calendar == "holidays" and cal.delete_on_success == ""
    cleaned = store.cas(cal, cal.replace(delete_on_success="a.csv,b.tmp")).row
    assert cleaned.delete_on_success == "a.csv,b.tmp" and (cleaned.parallelism, cleaned.task_of) == (0, "")
    part = store.cas(cleaned, cleaned.replace(parallelism=4, task_of="USER_JOB.A.b.p")).row
    assert (part.parallelism, part.task_of) == (4, "USER_JOB.A.b.p") and store.get(row.key) == part
    assert (part.failed_after_retry, part.failed_without_retry, part.canceled) == (0, 0, 0)
    counted = store.cas(part, part.replace(failed_after_retry=1, failed_without_retry=2, canceled=3)).row
    assert store.get(row.key) == counted and counted.canceled == 3
