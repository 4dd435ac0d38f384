"""Who is dead, judged without comparing clocks of different nodes (docs/explanation/nodes.md).

Each node bumps a beat counter in its ``nodes`` row. An observer notes, on its *own*
monotonic clock, when it last saw each node's (incarnation, beat) change; a node whose beat
has not changed for ``interval x miss`` of that node's own settings is dead. A node that
shut down cleanly (state 'stopped') is dead at once. A node the observer has just started
watching gets the full threshold, and so does an owner with no row at all: nobody is judged
on a single reading.

A read is bracketed by two monotonic times, taken just before it was sent and just after it
returned, and each is used where it is the cautious one:

* a beat seen to change counts from the read's *return*: the store may have run the read
  (and the node written that beat) at any moment up to then, however long ago it was sent.
  Counting from the send would age a fresh beat by the read's latency, and an observer paused
  mid-read (a SIGSTOP, a VM stall) would see it seconds old, then dead at its next read;
* verdicts are as of the last read's *send*, never "now": an observer that stalls after
  reading must not declare a node dead that it has not seen stand still for the whole
  threshold.

A caller about to take over a row reads the row first and the nodes after it, so the verdict
is newer than the row it acts on.

A read may cover some nodes only (their rows read one by one, when the whole-table read
failed): a node's verdict is as of the last read that covered *it*, so a node that read did
not ask about is judged on nothing newer than before.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

from ..clock import Clock
from ..model import NodeState
from ..store.base import NodeRow


@dataclass
class _Seen:
    mark: tuple
    changed_at: float  # observer's monotonic clock
    threshold: float
    stopped: bool


class Liveness:
    def __init__(self, me: str, clock: Clock, default_threshold: float) -> None:
        self.me = me
        self.clock = clock
        self.default_threshold = default_threshold
        self._seen: dict[str, _Seen] = {}
        # owner without a row -> (since when, as of a read's return; threshold). A row that
        # vanished keeps its node's own threshold; a name never seen gets the default.
        self._unknown: dict[str, tuple[float, float]] = {}
        self._read_at = self._returned_at = clock.monotonic()  # the last whole-table read
        self._asked: dict[str, tuple[float, float]] = {}  # name -> (sent, returned) of a read of its row alone

    def observe(self, rows: list[NodeRow], read_at: float | None = None, returned_at: float | None = None,
                asked: Collection[str] | None = None) -> None:
        """Take in a read of ``nodes``; ``read_at`` and ``returned_at`` are the monotonic times
        taken before it was sent and after it returned (both default to now). ``asked``: the
        read covered these names only (a name asked and missing from ``rows`` has no row)."""
        now = self.clock.monotonic()
        sent = now if read_at is None else read_at
        returned = now if returned_at is None else returned_at
        if asked is None:
            self._read_at, self._returned_at = sent, returned
            self._asked = {n: t for n, t in self._asked.items() if t[0] > sent}
        else:
            self._asked.update((name, (sent, returned)) for name in asked)
        covered = (lambda name: True) if asked is None else asked.__contains__
        present = set()
        for row in rows:
            present.add(row.name)
            mark = (row.incarnation, row.beat, row.state)
            seen = self._seen.get(row.name)
            threshold = _threshold(row, self.default_threshold)
            if seen is None or seen.mark != mark:
                self._seen[row.name] = _Seen(mark, returned, threshold, row.state == NodeState.STOPPED)
            else:
                seen.threshold = threshold
        for name in list(self._seen):
            if name not in present and covered(name):  # deleted (forgotten): missing from this read's return on
                self._unknown.setdefault(name, (returned, self._seen.pop(name).threshold))
        for name, (since, threshold) in [(n, v) for n, v in self._unknown.items() if covered(n)]:
            # Back with a row; or long gone and forgotten (a node is forgotten only once it owns
            # no live row): stop listing it among the dead, which every full pass looks up rows for.
            if name in present or returned - since > 10 * threshold + 60:
                del self._unknown[name]

    def is_dead(self, name: str | None) -> bool:
        if name is None or name == self.me:
            return False
        seen = self._seen.get(name)
        sent, returned = self._read(name)
        if seen is None:
            first, threshold = self._unknown.setdefault(name, (returned, self.default_threshold))
            return sent - first > threshold
        if seen.stopped:
            return True
        return sent - seen.changed_at > seen.threshold

    def _read(self, name: str) -> tuple[float, float]:
        """(sent, returned) of the last read that covered ``name``."""
        alone = self._asked.get(name)
        return alone if alone is not None and alone[0] > self._read_at else (self._read_at, self._returned_at)

    def watched(self) -> list[str]:
        """The other nodes this one has a verdict to keep on: seen in a read, or owners without a row."""
        return sorted(n for n in {*self._seen, *self._unknown} if n != self.me)

    def next_verdict(self) -> float | None:
        """The monotonic time after which a read could first find a watched node dead (its beat
        unchanged for its whole threshold), or None. The node's loop reads the nodes then,
        rather than at its next periodic pass: a crash is noticed one read after the
        threshold, not up to a whole reconcile period later."""
        times = [s.changed_at + s.threshold for n, s in self._seen.items()
                 if n != self.me and not s.stopped and self._read(n)[0] - s.changed_at <= s.threshold]
        times += [first + threshold for n, (first, threshold) in self._unknown.items()
                  if self._read(n)[0] - first <= threshold]
        return min(times) if times else None

    def is_alive(self, name: str | None) -> bool:
        return name is not None and not self.is_dead(name)

    def dead(self) -> list[str]:
        return sorted(n for n in [*self._seen, *self._unknown] if self.is_dead(n))

    def ages(self) -> dict[str, float]:
        """Seconds since each peer's beat was last seen to change, as of the last read. A peer
        that shut down cleanly is left out: it is not silent, it said goodbye (an alert on the
        age would otherwise fire for every node stopped on purpose, until it is forgotten)."""
        # A copy first: the metrics server's thread asks while the reconcile loop observes.
        return {n: max(0.0, self._read(n)[0] - s.changed_at) for n, s in list(self._seen.items())
                if n != self.me and not s.stopped}

    def alive(self) -> list[str]:
        return sorted(n for n in self._seen if not self.is_dead(n))


def _threshold(row: NodeRow, default: float) -> float:
    try:
        info = json.loads(row.info or "{}")
        return float(info["heartbeat_ms"]) / 1000.0 * int(info["miss"])
    except (ValueError, KeyError, TypeError):
        return default
