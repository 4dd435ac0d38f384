"""The console's plots as data: the server bins and groups, the browser only draws (SVG).

Doing the arithmetic here keeps the page's script small and lets the tests check the numbers
without a browser. Every plot is a JSON object with a ``kind`` the script knows how to draw
(``bars``: stacked bars over time; ``lines``: series of points; ``histogram``) and what it
needs, times as milliseconds since the epoch (UTC), so that the browser shows them in its
own time zone.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from ..model import RunResult
from ..store.base import RunRecord
from .runfeed import RunPoint

#: The order (and so the colours) of results in a stacked bar.
RESULTS = [r.value for r in RunResult]
MAX_LAG_JOBS = 8
MAX_HISTOGRAM_BINS = 20


def ms(when: datetime) -> int:
    return int(when.replace(tzinfo=when.tzinfo or timezone.utc).timestamp() * 1000)


def runs_per_minute(points: Iterable[RunPoint], now: datetime, minutes: int = 30) -> dict[str, Any]:
    """Runs that ended in each of the last ``minutes`` minutes, stacked by result."""
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * minutes)
    for p in points:
        slot = int((p.end - first).total_seconds() // 60)
        if 0 <= slot < minutes:
            counts[p.result][slot] += 1
    order = [r for r in RESULTS if r in counts] + sorted(set(counts) - set(RESULTS))
    return {"kind": "bars", "title": "Runs finished per minute, by result", "unit": "runs",
            "x": [ms(first + timedelta(minutes=i)) for i in range(minutes)],
            "series": [{"name": r, "values": counts[r]} for r in order],
            "empty": "No run has ended in the last %d minutes." % minutes}


def queue_depth(samples: Sequence[tuple[datetime, int, int, int]]) -> dict[str, Any]:
    """Waiting, blocked and running jobs at each sample the web process took."""
    names = ("waiting", "blocked", "running")
    series = [{"name": n, "points": [[ms(s[0]), s[i + 1]] for s in samples]} for i, n in enumerate(names)]
    return {"kind": "lines", "title": "Queue depth (sampled by this web process)", "unit": "jobs",
            "series": series, "empty": "No sample yet."}


def fire_lag(points: Iterable[RunPoint]) -> dict[str, Any]:
    """Each recurring job's fire lag (start minus due time) run by run, the most recently run
    :data:`MAX_LAG_JOBS` jobs."""
    by_job: dict[str, list[list[int]]] = defaultdict(list)
    last: dict[str, datetime] = {}
    for p in points:
        if p.recurring and p.lag_ms is not None:
            name = str(p.key)
            by_job[name].append([ms(p.end), p.lag_ms])
            last[name] = max(p.end, last.get(name, p.end))
    chosen = sorted(by_job, key=lambda n: last[n], reverse=True)[:MAX_LAG_JOBS]
    return {"kind": "lines", "title": "Fire lag of recurring jobs (start minus due time)", "unit": "ms",
            "series": [{"name": n, "points": sorted(by_job[n])} for n in sorted(chosen)],
            "empty": "No recurring job has run in the last hour."}


def durations(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """A job's run durations: their distribution (histogram) and their trend run by run."""
    timed = sorted((r for r in runs if r.start and r.end), key=lambda r: r.end)
    values = [int((r.end - r.start).total_seconds() * 1000) for r in timed]  # type: ignore[operator]
    trend: dict[str, list[list[int]]] = defaultdict(list)
    for r, v in zip(timed, values):
        trend[r.result].append([ms(r.end), v])
    return [
        {"kind": "histogram", "title": "Run durations (distribution)", "unit": "ms", **histogram(values),
         "empty": "No timed run yet."},
        {"kind": "lines", "title": "Run durations (trend, by result)", "unit": "ms", "dots": True,
         "series": [{"name": k, "points": v} for k, v in sorted(trend.items())], "empty": "No timed run yet."},
    ]


def job_lag(runs: Sequence[RunRecord]) -> dict[str, Any]:
    """One recurring job's fire lag, run by run."""
    points = sorted([ms(r.end), int((r.start - r.due).total_seconds() * 1000)] for r in runs if r.start and r.due)
    return {"kind": "lines", "title": "Fire lag (start minus due time)", "unit": "ms", "dots": True,
            "series": [{"name": "lag", "points": points}] if points else [], "empty": "No fire recorded yet."}


def histogram(values: Sequence[int]) -> dict[str, Any]:
    """Equal-width bins from the least to the greatest value (at most MAX_HISTOGRAM_BINS)."""
    if not values:
        return {"edges": [], "counts": []}
    low, high = min(values), max(values)
    bins = max(1, min(MAX_HISTOGRAM_BINS, len(set(values))))
    width = max(1.0, (high - low) / bins)
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / width))] += 1
    return {"edges": [round(low + i * width) for i in range(bins + 1)], "counts": counts}
