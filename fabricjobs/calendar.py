"""Calendars (IPF's job calendar): named sets of times when a recurring job does not fire.

A calendar is a name and its exclusion rules, stored in the store so that every node agrees.
A rule is one of:

    2026-12-25               that day (in the job's time zone)
    2026-12-24..2027-01-01   those days, both ends included
    * * * * sat,sun          a five-field cron expression: every fire whose time matches it
                             (here, every fire on a weekend; ``* 12 * * *`` the noon hour)

A fire that a rule of its job's calendar excludes is skipped and recorded as SKIPPED with the
rule that excluded it, as a fire too late for its LATE_THRESHOLD is (node/decisions.py).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import date, datetime
from typing import Callable

from .names import unroutable

MAX_RULES = 500
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class CalendarError(ValueError):
    """A calendar name or rule that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One exclusion: a day range (``first``..``last``) or a cron expression."""

    text: str
    first: date | None = None
    last: date | None = None
    cron: str = ""

    def excludes(self, local: datetime) -> bool:
        if self.cron:
            from croniter import croniter  # as schedule.py: imported on first cron use

            return bool(croniter.match(self.cron, local.replace(second=0, microsecond=0, tzinfo=None)))
        assert self.first is not None and self.last is not None
        return self.first <= local.date() <= self.last


@dataclass(frozen=True, slots=True)
class Calendar:
    name: str
    rules: tuple[Rule, ...]

    @property
    def text(self) -> str:
        """The rules as stored and shown: one per line."""
        return "\n".join(r.text for r in self.rules)

    def excluding(self, local: datetime) -> Rule | None:
        """The first rule that excludes a fire at ``local`` (the job's zone), or None."""
        return next((r for r in self.rules if r.excludes(local)), None)


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise CalendarError(f"bad calendar name {name!r}: 1-64 letters, digits, '_', '.' or '-'")
    return name


def parse_rule(text: str) -> Rule:
    text = " ".join(text.split())
    if ".." in text:
        first, _, last = text.partition("..")
        a, b = _day(first.strip(), text), _day(last.strip(), text)
        if b < a:
            raise CalendarError(f"bad calendar rule {text!r}: the range ends before it starts")
        return Rule(f"{a}..{b}", first=a, last=b)
    if _DATE.match(text):
        day = _day(text, text)
        return Rule(str(day), first=day, last=day)
    fields = text.split(" ")
    if len(fields) != 5:
        raise CalendarError(f"bad calendar rule {text!r}: expected a date (YYYY-MM-DD), a range "
                            "(YYYY-MM-DD..YYYY-MM-DD) or a five-field cron expression")
    from croniter import croniter

    if not croniter.is_valid(text):
        raise CalendarError(f"bad calendar rule {text!r}: not a valid cron expression")
    return Rule(text, cron=text)


def _day(text: str, rule: str) -> date:
    if not _DATE.match(text):
        raise CalendarError(f"bad calendar rule {rule!r}: {text!r} is not a YYYY-MM-DD date")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CalendarError(f"bad calendar rule {rule!r}: {text!r} is not a date") from None


def make_calendar(name: str, rules: list[str] | tuple[str, ...]) -> Calendar:
    """A calendar from its name and rule texts (a text may list dates separated by commas)."""
    why = unroutable("a calendar name", name)  # (made, not named: one made before stays reachable)
    if why is not None:
        raise CalendarError(why)
    return Calendar(check_name(name), parse_rules(rules))


def parse_rules(rules: list[str] | tuple[str, ...]) -> tuple[Rule, ...]:
    """A calendar's rules from their texts: at least one, at most :data:`MAX_RULES`."""
    parsed: list[Rule] = []
    for text in rules:
        parts = [p for p in text.split(",")] if _is_date_list(text) else [text]
        parsed.extend(parse_rule(p) for p in parts)
    if not parsed:
        raise CalendarError("a calendar needs at least one EXCLUDE rule")
    if len(parsed) > MAX_RULES:
        raise CalendarError(f"a calendar has at most {MAX_RULES} rules")
    return tuple(parsed)


def _is_date_list(text: str) -> bool:
    return "," in text and all(_DATE.match(p.strip()) or ".." in p for p in text.split(","))


def from_text(name: str, text: str) -> Calendar:
    """A stored calendar (``Calendar.text``) read back."""
    return Calendar(name, tuple(parse_rule(line) for line in text.splitlines() if line.strip()))


class CalendarCache:
    """A node's view of the stored calendars, each re-read at most every ``ttl`` seconds: a
    changed calendar applies to the fires of every node within that time."""

    def __init__(self, read: Callable[[str], Calendar | None], ttl: float = 5.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl = ttl
        self._monotonic = monotonic
        self._entries: dict[str, tuple[float, Calendar | None]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Calendar | None:
        now = self._monotonic()
        with self._lock:
            entry = self._entries.get(name)
        if entry is not None and now - entry[0] < self._ttl:
            return entry[1]
        calendar = self._read(name)
        with self._lock:
            self._entries[name] = (now, calendar)
        return calendar
