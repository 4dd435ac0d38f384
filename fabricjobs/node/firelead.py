"""The fire lead (docs/explanation/nodes.md, "The scheduler"): how far ahead of its due time
a node prepares a fire, learnt from how long its own fires took to reach a worker.

It is 1.5 x the 99th percentile of the fires of the last 30 s, at least the node's least lead
(FIRE_LEAD, 50 ms on a fast store) and at most FIRE_LEAD_MAX (1 s; on Cassandra a burst of
fires takes several LWT rounds). Not thread-safe: the scheduler calls it under its lock.
"""

from __future__ import annotations

import collections

from .decisions import FIRE_LEAD_MAX

FIRE_LEAD = 0.05  # seconds before its due time a fire is prepared, at least
_LEARN_FROM = 8  # fires measured before the lead moves from its minimum
_LEARN_WINDOW = 30.0  # seconds of fires the lead learns from (a slow round is remembered that long)
_LEARN_MAX = 4096  # ... and how many of them at most
_RELEARN_EVERY = 16  # fires measured between two computations of the lead


class FireLead:
    def __init__(self, least: float = FIRE_LEAD) -> None:
        self.lead = least  # what the recent fires needed
        self.least = least
        # (monotonic, seconds from take to worker) of the fires measured in the learning window
        self._took: collections.deque[tuple[float, float]] = collections.deque(maxlen=_LEARN_MAX)
        self._unlearned = 0  # fires measured since the lead was last computed

    def measured(self, mono: float, took: float) -> None:
        """A fire prepared here reached a worker ``took`` seconds after it was taken."""
        self._took.append((mono, took))
        self._unlearned += 1
        if len(self._took) < 4 * _RELEARN_EVERY or self._unlearned >= _RELEARN_EVERY:
            self._relearn(mono)

    def _relearn(self, mono: float) -> None:
        """1.5 x the 99th percentile of the learning window, so that a slow round of the store
        (on Cassandra a batch now and then takes three times the usual) is covered for a while
        after it, not forgotten with the next batch."""
        self._unlearned = 0
        self._forget(mono)
        ordered = sorted(took for _, took in self._took)
        if len(ordered) >= _LEARN_FROM:
            p99 = ordered[int(0.99 * (len(ordered) - 1))]
            self.lead = min(FIRE_LEAD_MAX, max(self.least, 1.5 * p99))
        elif ordered:  # a node that fires now and then: a few fires may lower the lead, never raise it
            self.lead = max(self.least, min(self.lead, 1.5 * ordered[-1]))

    def _forget(self, mono: float) -> None:
        while self._took and self._took[0][0] < mono - _LEARN_WINDOW:
            self._took.popleft()

    def written(self, mono: float, took: float, rounds: int) -> None:
        """Before enough fires have reached a worker to learn from (:meth:`measured`), a write
        of fires says the least the lead needs: ``rounds`` such writes before a fire reaches a
        worker (a batch written WAITING is claimed after; a fire claimed from its offer is one
        write). Without it a node's first second of fires on Cassandra waited a whole batch for
        its first measurement, and the next second's fires went out with the 50 ms lead too."""
        self._forget(mono)
        if len(self._took) < _LEARN_FROM:
            self.lead = min(FIRE_LEAD_MAX, max(self.lead, 1.5 * rounds * took))
