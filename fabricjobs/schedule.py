"""EXEC_INTERVAL: parse the text once into a value that answers when a job is due.

Forms (docs/guides/schedules.md):

* ``''``                      run once, now
* ``yyyy-MM-dd HH:mm:ss[.SSS]`` run once at that local time (to the millisecond: IPF's
                              singleSchedule; times are stored with millisecond precision)
* ``HH:MM:SS``                recurring at a fixed rate, first run now (hours may exceed 23)
* 5-field cron                ``min hour day-of-month month day-of-week`` (standard cron: when
                              both day fields are restricted, either may match)
* 6-field cron                seconds first, Quartz/Spring order: ``sec min hour dom mon dow``

Cron expressions are evaluated on the local wall clock of the schedule's time zone, then each
wall-clock time is turned into an instant. That gives the DST rules, in one place:

* a wall-clock time that happens twice (autumn) fires once, at its first occurrence;
* a wall-clock time that does not exist (spring gap) fires at the first instant after the gap;
  several such times in one gap fire once;
* so every local fire time fires exactly once, none is skipped silently.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ScheduleError
from .model import Status

UTC = timezone.utc

_INTERVAL_RE = re.compile(r"^(\d{1,6}):([0-5]\d):([0-5]\d)$")
_TIMESTAMP_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?$")
_MAX_CRON_STEPS = 100_000


class ScheduleKind(StrEnum):
    ONCE_NOW = "once"
    ONCE_AT = "timestamp"
    INTERVAL = "interval"
    CRON = "cron"


@dataclass(frozen=True)
class Schedule:
    text: str
    kind: ScheduleKind
    zone: ZoneInfo
    interval: timedelta | None = None
    at_local: datetime | None = None  # naive wall-clock time for ONCE_AT
    cron: str | None = None
    cron_has_seconds: bool = False

    @property
    def step(self) -> timedelta:
        """The interval of an INTERVAL schedule (set by the parser for that kind only)."""
        assert self.interval is not None, self.kind
        return self.interval

    @property
    def is_recurring(self) -> bool:
        return self.kind in (ScheduleKind.INTERVAL, ScheduleKind.CRON)

    @property
    def initial_status(self) -> Status:
        """WAITING for run-now and intervals, SCHEDULED for timestamps and cron (the seed's rule)."""
        if self.kind in (ScheduleKind.ONCE_NOW, ScheduleKind.INTERVAL):
            return Status.WAITING
        return Status.SCHEDULED

    def start_status(self, calendar: str) -> Status:
        """A job's status as it starts (STARTJOB, RESUMEJOB, RELEASEJOB). With a calendar even
        an interval job's first run is a fire, which the calendar may skip: SCHEDULED, due at
        once (a node adopts it and its scheduler decides)."""
        return Status.SCHEDULED if calendar else self.initial_status

    def first_due(self, now: datetime) -> datetime:
        """When a job started (or resumed) at ``now`` is first due."""
        if self.kind is ScheduleKind.ONCE_AT:
            assert self.at_local is not None
            return _to_instant(self.at_local, self.zone)
        if self.kind is ScheduleKind.CRON:
            return self.next_fire_after(now)
        return now

    def next_fire_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (cron only)."""
        if self.kind is not ScheduleKind.CRON:
            raise TypeError(f"{self.kind} schedules have no fire times")
        assert self.cron is not None
        return _cron_next(self.cron, self.cron_has_seconds, self.zone, after)

    def next_after_run(self, due: datetime, started: datetime, ended: datetime, overlap: str = "") -> datetime | None:
        """When the next run of a recurring job is due, after a run that was due at ``due``,
        started at ``started`` and ended at ``ended``; ``None`` for one-time schedules."""
        return self.after_run(due, started, ended, overlap)[0]

    def after_run(self, due: datetime, started: datetime, ended: datetime, overlap: str = "",
                  most: int = 1000) -> tuple[datetime | None, int]:
        """(next due time, fires skipped while the run went on: at most ``most`` are counted).

        Fixed rate: the next run is due one interval after the previous *scheduled* start
        (cron: the next fire time). Fires missed while no node ran the job (``started`` long
        after ``due``) collapse into the run that just happened. A fire that came due while
        the run was still going is, by ``overlap``:

        * QUEUE (the default for HH:MM:SS intervals, as docs/guides/schedules.md says): the last
          fire that came due runs right when this one ended, keeping its due time (already
          past): no burst of catch-up runs, never two runs at once, and the runs after it stay
          on the job's grid (a fixed rate; with the end as the next due time, one overrun
          shifted every later fire);
        * SKIP (the default for cron): such fires are skipped (and counted); the next run is
          the first fire after the run ended.
        """
        if self.kind is ScheduleKind.INTERVAL:
            step = self.step
            anchor = due
            if started > due:
                anchor = due + step * ((started - due) // step)
            nxt = anchor + step
        elif self.kind is ScheduleKind.CRON:
            nxt = self.next_fire_after(max(due, started))
        else:
            return None, 0
        if nxt >= ended:
            return nxt, 0
        queue = (overlap or ("QUEUE" if self.kind is ScheduleKind.INTERVAL else "SKIP")).upper() == "QUEUE"
        if self.kind is ScheduleKind.INTERVAL:
            passed = (ended - nxt) // self.step  # fires after nxt that came due during the run
            if queue:
                return nxt + self.step * passed, 0
            return nxt + self.step * (passed + 1), passed + 1
        skipped = 0
        while skipped < most:
            following = self.next_fire_after(nxt)
            if queue and following >= ended:
                return nxt, 0
            skipped += 1
            nxt = following
            if nxt >= ended:
                return nxt, 0 if queue else skipped
        # A run that outlasted ``most`` fires (a per-second cron, a run of hours): the fire
        # times are not walked one by one any further (each step costs a croniter).
        if queue:
            return self._last_fire_before(ended, nxt), 0
        return self.next_fire_after(ended - timedelta(microseconds=1)), skipped

    def _last_fire_before(self, ended: datetime, floor: datetime) -> datetime:
        """The last cron fire before ``ended`` (one at ``floor`` or later is known to be)."""
        from croniter import croniter

        assert self.cron is not None
        local = ended.astimezone(self.zone)
        if local.fold:  # in the repeated hour, which fires at its first occurrence only: from its end
            local += local.replace(fold=0).utcoffset() - local.utcoffset()  # type: ignore[operator]
        # (Wall-clock times map to their first occurrence, in order: walking back from there, the
        # first instant before ``ended`` is the last fire before it.)
        it = croniter(self.cron, local.replace(tzinfo=None), second_at_beginning=self.cron_has_seconds)
        for _ in range(_MAX_CRON_STEPS):
            instant = _to_instant(it.get_prev(datetime), self.zone)
            if instant < ended:
                return max(instant, floor)
        return floor

    def collapsed(self, due: datetime, started: datetime, most: int = 1000) -> int:
        """Fires after ``due`` that came due before a run of it started at ``started``: they
        ran as that run (missed fires collapse, after_run). At most ``most`` are counted."""
        if self.kind is ScheduleKind.INTERVAL:
            return min(max((started - due) // self.step, 0), most)
        if self.kind is not ScheduleKind.CRON or started - due < timedelta(seconds=1):
            return 0  # (cron fires are whole seconds apart: none came due within one)
        count, fire = 0, self.next_fire_after(due)
        while fire < started and count < most:
            count += 1
            fire = self.next_fire_after(fire)
        return count

    def next_due_after(self, when: datetime, grid_from: datetime | None = None) -> datetime | None:
        """The first due time strictly after ``when`` (recurring schedules): the next cron fire,
        or the next point of the interval grid that starts at ``grid_from``."""
        if self.kind is ScheduleKind.CRON:
            return self.next_fire_after(when)
        if self.kind is ScheduleKind.INTERVAL:
            base = grid_from or when
            if base > when:
                return base
            return base + self.step * ((when - base) // self.step + 1)
        return None


def parse_schedule(text: str | None, zone: ZoneInfo | str | None = None) -> Schedule:
    """Parse an EXEC_INTERVAL text; raise :class:`ScheduleError` with a clear reason."""
    tz = resolve_zone(zone)
    return _parse(text or "", tz)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, tz: ZoneInfo) -> Schedule:
    raw = text.strip()
    if raw == "":
        return Schedule(text, ScheduleKind.ONCE_NOW, tz)
    m = _INTERVAL_RE.match(raw)
    if m:
        h, mi, s = (int(g) for g in m.groups())
        interval = timedelta(hours=h, minutes=mi, seconds=s)
        if interval <= timedelta(0):
            raise ScheduleError(f"invalid EXEC_INTERVAL {raw!r}: an interval must be longer than 00:00:00")
        return Schedule(text, ScheduleKind.INTERVAL, tz, interval=interval)
    m = _TIMESTAMP_RE.match(raw)
    if m:
        fraction = m.group(7) or ""
        if len(fraction) > 3:  # stored to the millisecond (Cassandra's precision): more would be cut silently
            raise ScheduleError(f"invalid EXEC_INTERVAL {raw!r}: a timestamp has at most 3 decimals "
                                f"(milliseconds), got {len(fraction)}")
        try:
            year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
            at = datetime(year, month, day, hour, minute, second, int(fraction.ljust(3, "0")) * 1000)
        except ValueError as exc:
            raise ScheduleError(f"invalid EXEC_INTERVAL {raw!r}: {exc}") from None
        try:  # at the ends of the calendar a zone's offset leaves the range of dates
            _to_instant(at, tz)
        except OverflowError:
            raise ScheduleError(f"invalid EXEC_INTERVAL {raw!r}: out of the range of dates in time zone "
                                f"{tz.key}") from None
        return Schedule(text, ScheduleKind.ONCE_AT, tz, at_local=at)
    if ":" in raw and not raw.startswith("@"):
        raise ScheduleError(
            f"invalid EXEC_INTERVAL {raw!r}: expected HH:MM:SS (e.g. '00:05:00'), "
            "'yyyy-MM-dd HH:mm:ss[.SSS]', or a cron expression"
        )
    return _parse_cron(text, raw, tz)


def _parse_cron(text: str, raw: str, tz: ZoneInfo) -> Schedule:
    from croniter import croniter  # import on first cron use: keeps shell start-up lean

    fields = raw.split()
    if raw.startswith("@"):
        has_seconds = False
    elif len(fields) == 5:
        has_seconds = False
    elif len(fields) == 6:
        has_seconds = True
    else:
        raise ScheduleError(
            f"invalid EXEC_INTERVAL {raw!r}: a cron expression has 5 fields "
            "(minute hour day-of-month month day-of-week) or 6 with seconds first; "
            f"got {len(fields)}"
        )
    expr = " ".join(fields)
    try:
        croniter(expr, datetime(2000, 1, 1), second_at_beginning=has_seconds)
    except Exception as exc:  # croniter raises several unrelated types for bad text
        raise ScheduleError(f"invalid cron expression {raw!r}: {exc}") from None
    sched = Schedule(text, ScheduleKind.CRON, tz, cron=expr, cron_has_seconds=has_seconds)
    try:  # a valid-looking expression may never match (e.g. 30 February)
        sched.next_fire_after(datetime(2000, 1, 1, tzinfo=UTC))
    except ScheduleError:
        raise
    except Exception:
        raise ScheduleError(f"invalid cron expression {raw!r}: it never fires") from None
    return sched


def _cron_next(expr: str, has_seconds: bool, tz: ZoneInfo, after: datetime) -> datetime:
    from croniter import croniter

    # Iterate wall-clock times from the local time of ``after``. Inside an autumn fold the
    # candidates of the repeated hour map to their first occurrence, which is not after
    # ``after``, so the loop skips them: each wall-clock time fires once.
    local = after.astimezone(tz).replace(tzinfo=None)
    it = croniter(expr, local, second_at_beginning=has_seconds)
    for _ in range(_MAX_CRON_STEPS):
        candidate = it.get_next(datetime)
        instant = _to_instant(candidate, tz)
        if instant > after:
            return instant
    raise ScheduleError(f"cron expression {expr!r} has no fire time after {after.isoformat()}")


def _to_instant(local: datetime, tz: ZoneInfo) -> datetime:
    """A naive wall-clock time in ``tz`` as a UTC instant (first occurrence; gap -> its end)."""
    first = local.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == local:
        return first
    # The wall-clock time falls in a DST gap: fire at the first instant after the gap.
    lo = local.replace(tzinfo=tz, fold=1).astimezone(UTC)
    hi = first
    if lo > hi:
        lo, hi = hi, lo
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).replace(tzinfo=None) >= local:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0) + (timedelta(seconds=1) if hi.microsecond else timedelta(0))


def resolve_zone(zone: ZoneInfo | str | None) -> ZoneInfo:
    if isinstance(zone, ZoneInfo):
        return zone
    if not zone:
        return host_zone()
    try:
        return ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # (OSError: 'America', a folder; a name too long)
        raise ScheduleError(f"unknown time zone {zone!r} (expected an IANA name such as 'Europe/Paris')") from None


@functools.lru_cache(maxsize=1)
def host_zone() -> ZoneInfo:
    """The host's IANA zone: $TZ, /etc/timezone, the /etc/localtime link, else UTC."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        if not name:
            continue
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            continue
    return ZoneInfo("UTC")
