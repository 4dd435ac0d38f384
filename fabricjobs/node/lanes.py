"""Claim lanes: nodes that see the same new rows at the same moment (rung by the same
doorbell, or polling a busy queue) claim different ones instead of racing for each.

There is one lane per live node (the live nodes sorted by name, as this node's liveness sees
them). A row with no owner falls in one lane by a hash of its key. A row with an owner
(worker_id: a recurring job's fire, a retry) is left to lanes' rules only for passengers: who
may claim it, and when, is owner precedence's business (reconcile.py), as without lanes. A node claims the rows
of its own lane at once. A row of another lane it leaves to that lane's node for a while after
it first saw the row claimable (``patience``, or a few claim rounds on a slow store); then it
takes such rows youngest first, as a work-stealing thief takes from the far end of a deque,
since their own node takes its oldest first; after OVERDUE times that wait it claims them like
its own. A peer
that is busy, slow or dead never holds a row up for long, and a backlog that one node cannot
keep up with is shared without the nodes racing for its head.

A lost race costs a failed compare-and-set (on Cassandra a wasted LWT and an index repair),
never correctness; nodes that see different live sets only collide more.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Sequence

from ..model import Job, JobKey


OVERDUE = 5  # x the wait: a row its lane's node has not taken for this long is taken in order
ROUNDS = 3  # claim rounds a row is left to its lane's node at least
MAX_WAIT = 1.0  # seconds: ... and at most (unless LANE_PATIENCE_MS says more)


def _lane(row: Job, names: list[str]) -> int:
    """The lane of ``row`` among the live ``names`` (sorted)."""
    if row.worker_id in names:
        return names.index(row.worker_id)
    return row.key.lane(len(names))


class Lanes:
    def __init__(self, me: str, patience: float, rng: random.Random | None = None) -> None:
        self.me = me
        self.patience = patience
        self._rng = rng or random.Random()
        self._since: dict[JobKey, float] = {}  # other lanes' rows: first seen claimable (monotonic)
        self._round = 0.0  # a claim round here (read and compare-and-sets): seconds, slowest lately
        self.next_wake: float | None = None  # when the first row left to a peer is due here
        self._dead_since: dict[JobKey, float] = {}  # dead nodes' runs in other lanes: first seen (monotonic)
        self.takeover_wake: float | None = None  # when the first of those is due here
        self._unowned_since: dict[JobKey, float] = {}  # other lanes' unowned SCHEDULED rows: first seen
        self.adopt_wake: float | None = None  # when the first of those is due here

    def claimed(self, seconds: float) -> None:
        """A claim round here took ``seconds``. A peer's rounds take about as long (same store,
        same load), and its lane's rows are left to it for at least ROUNDS of them: on a slow
        store a fixed patience would have nodes steal rows their owner is claiming."""
        self._round = max(seconds, self._round * 0.9)  # up at once, down slowly

    @property
    def wait(self) -> float:
        """How long a row is left to its lane's node: ``patience``, or ROUNDS claim rounds, but
        never more than MAX_WAIT (rounds slowed by a store fault must not hold rows up)."""
        return max(self.patience, min(ROUNDS * self._round, MAX_WAIT))

    @property
    def idle_wait(self) -> float:
        """The wait when this node has nothing of its own to claim: ROUNDS claim rounds (a
        quarter of ``patience`` at least). A node that ran out of work took its peers' rows
        only after the whole patience, which on a queue drained by four nodes left one of them
        idle for 0.2-0.35 s at the end while the others still worked through their lanes."""
        return min(max(ROUNDS * self._round, self.patience / 4), max(self.patience, MAX_WAIT))

    def count(self, alive: Sequence[str]) -> int:
        return len(self._names(alive))

    def is_own(self, row: Job, alive: Sequence[str]) -> bool:
        """Whether ``row`` is in this node's lane (every row is, with lanes off)."""
        names = self._names(alive)
        return self.patience <= 0 or _lane(row, names) == names.index(self.me)

    def _names(self, alive: Sequence[str]) -> list[str]:
        return sorted(set(alive) | {self.me})

    def lane(self, alive: Sequence[str]) -> tuple[int, int] | None:
        """This node's lane as (lanes, index), for a read of its own rows only
        (``JobStore.waiting(lane=...)``); None when lanes are off or it is the only live node."""
        names = self._names(alive)
        if len(names) == 1 or self.patience <= 0:
            return None
        return len(names), names.index(self.me)

    def claimable(self, rows: list[Job], free: int, alive: Sequence[str], now: float,
                  every_lane: bool = True) -> tuple[list[Job], set[JobKey]]:
        """Of ``rows`` (claimable here by every other rule, best first), those this node should
        claim now, in the order to try them, and the keys it prefers (passengers, claimed
        beyond the free slots, come from those only). Within each level of priority:

        1. its own lane's rows, and other lanes' rows seen for OVERDUE x :attr:`wait`, in order;
        2. other lanes' rows seen for :attr:`wait` (:attr:`idle_wait` when none of ``rows`` is
           this node's: it has nothing else to do): those beyond the first ``free`` of their
           lane, youngest first (their own node takes its oldest first); then those first ones,
           at random.

        Rows seen for less than that are left out; :attr:`next_wake` is when the first of
        them is due here. Rows no longer seen are forgotten, unless ``rows`` were read from this
        node's own lane only (``every_lane=False``): then other lanes' rows were not looked at,
        and when each was first seen is kept for the next read of every lane."""
        names = self._names(alive)
        lanes, mine = len(names), names.index(self.me)
        self.next_wake = None
        if lanes == 1 or self.patience <= 0:
            self._since = {}
            return rows, {row.key for row in rows}
        wait = self.wait
        steal = wait if any(row.worker_id is not None or _lane(row, names) == mine for row in rows) else self.idle_wait
        since: dict[JobKey, float] = {}
        position: Counter[int] = Counter()
        out: list[Job] = []
        preferred: set[JobKey] = set()
        for _, group in itertools.groupby(rows, key=lambda row: row.priority):
            first: list[Job] = []
            tails: list[Job] = []
            heads: list[Job] = []
            for row in group:
                if row.worker_id is not None:  # owned: owner precedence (reconcile.py) decides
                    first.append(row)
                    continue
                lane = _lane(row, names)
                if lane == mine:
                    first.append(row)
                    continue
                since[row.key] = seen = self._since.get(row.key, now)
                waited = now - seen
                if waited >= OVERDUE * wait:
                    first.append(row)
                elif waited >= steal:
                    (heads if position[lane] < free else tails).append(row)
                elif self.next_wake is None or seen + steal < self.next_wake:
                    self.next_wake = seen + steal
                position[lane] += 1
            self._rng.shuffle(heads)
            out += first + tails[::-1] + heads
            preferred.update(row.key for row in first)
        if every_lane:
            self._since = since
        return out, preferred

    def takeover(self, rows: list[Job], alive: Sequence[str], now: float) -> list[Job]:
        """Of a dead node's runs (``rows``, best first), those this node takes over now: its own
        lane's at once, another lane's once it has been left to that lane's node for
        :attr:`wait` (that node is slow, or gone too). Every survivor judges a crash at about
        the same moment: without lanes each tried every row, all but one lost every LWT
        (contending with the winner's: a takeover of 20 runs on Apache Cassandra took 0.23 s
        instead of 0.12), and the winner started every run alone. :attr:`takeover_wake` is
        when the first row left to a peer is due here."""
        out, self.takeover_wake, self._dead_since = self._in_turn(rows, alive, now, self._dead_since)
        return out

    def adoptable(self, rows: list[Job], alive: Sequence[str], now: float) -> list[Job]:
        """Of the unowned SCHEDULED rows (a script's new cron jobs), those this node adopts now,
        as :meth:`takeover` does: nodes that all adopted every new row lost half their LWTs to
        each other. :attr:`adopt_wake` is when the first row left to a peer is due here."""
        out, self.adopt_wake, self._unowned_since = self._in_turn(rows, alive, now, self._unowned_since)
        return out

    def _in_turn(self, rows: list[Job], alive: Sequence[str], now: float,
                 seen_before: dict[JobKey, float]) -> tuple[list[Job], float | None, dict[JobKey, float]]:
        """``rows`` of this node's lane, and of other lanes those first seen (``seen_before``)
        at least :attr:`wait` ago; when the first of the others is due; the others' first sightings."""
        names = self._names(alive)
        if len(names) == 1 or self.patience <= 0:
            return rows, None, {}
        mine, wait = names.index(self.me), self.wait
        since: dict[JobKey, float] = {}
        out = []
        wake: float | None = None
        for row in rows:
            if _lane(row, names) == mine:
                out.append(row)
                continue
            since[row.key] = seen = seen_before.get(row.key, now)
            if now - seen >= wait:
                out.append(row)
            elif wake is None or seen + wait < wake:
                wake = seen + wait
        return out, wake, since
