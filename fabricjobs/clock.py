"""Time sources.

Everything that needs "now" receives a :class:`Clock` instead of calling ``time.time()``,
so tests can move time by hand and a node can be given a skewed clock.

Two kinds of time are kept apart on purpose:

* ``now()`` is wall-clock time (an aware UTC datetime). It is written into rows and compared
  with due times. Different hosts may disagree about it.
* ``monotonic()`` only ever moves forward and is only compared with readings taken in the
  same host. Liveness, leases and timeouts use it, never wall time.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Callable, Protocol

UTC = timezone.utc


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall-clock time, timezone-aware, in UTC, whole milliseconds."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (host-local)."""


def utc_from_timestamp(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def shown_time(when: datetime, zone: tzinfo | None) -> str:
    """A time as tables and notes show it: in ``zone`` (None: as it is), to the millisecond.
    A time near either end of the calendar that ``zone`` cannot hold is shown in UTC."""
    try:
        local = when.astimezone(zone) if zone is not None else when
    except OverflowError:
        local = when.astimezone(timezone.utc)
    return (f"{local.year:04d}-{local.month:02d}-{local.day:02d} {local.hour:02d}:{local.minute:02d}:"
            f"{local.second:02d}.{local.microsecond // 1000:03d}")


def to_millis(value: datetime) -> datetime:
    """Truncate to whole milliseconds: the precision every store keeps (Cassandra's timestamp)."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


class SystemClock:
    """The real clock. ``offset`` shifts wall time only (to simulate a node whose clock is off).
    ``wall``: where wall time comes from, the host's clock unless a store has one of its own."""

    def __init__(self, offset: float = 0.0, wall: Callable[[], float] = time.time) -> None:
        self.offset = offset
        self.wall = wall

    def now(self) -> datetime:
        return to_millis(datetime.fromtimestamp(self.wall() + self.offset, UTC))

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return f"SystemClock(offset={self.offset})" if self.offset else "SystemClock()"


def following(clock: Clock | None, wall: Callable[[], float] | None) -> Clock:
    """``clock`` (None: the system's) reading wall time from ``wall``, a store's own clock
    (JobStore.wall_time), when there is one; a clock a test moves by hand stays as it is."""
    clock = clock or SystemClock()
    if wall is not None and isinstance(clock, SystemClock):
        return SystemClock(clock.offset, wall)
    return clock


class ManualClock:
    """A clock that moves only when told to. Both readings advance together."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = to_millis(start.astimezone(UTC))
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float | timedelta) -> datetime:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._now = to_millis(self._now + timedelta(seconds=seconds))
            self._mono += seconds
            return self._now

    def set(self, when: datetime) -> None:
        """Jump wall time to ``when`` (forward only); monotonic moves by the same amount."""
        with self._lock:
            delta = (when.astimezone(UTC) - self._now).total_seconds()
            if delta < 0:
                raise ValueError("time only moves forward")
            self._now = to_millis(when.astimezone(UTC))
            self._mono += delta
