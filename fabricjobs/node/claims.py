"""Claims (step 4 of a reconcile pass): which WAITING rows this node takes now, in which
order, against which affinity limit, and the compare-and-sets that take them.

Rows are read in pages, best first by effective priority (PRIORITY plus aging); owner
precedence leaves a live owner's due row to it for a moment, lanes (lanes.py) leave a peer's
new rows to it, and short runs take passengers on their trains (trains.py). A lost race costs
a failed compare-and-set, never correctness.
"""

from __future__ import annotations

import collections
import logging
import time
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, TypeVar

from ..affinity import parse_affinity
from ..config import ALL_PRIORITIES, AffinityLimit
from ..logs import job_extra
from ..model import Job, JobKey, Status, advance
from ..store.base import CasResult
from .decisions import claim
from .lanes import Lanes
from .stragglers import Stragglers
from .parts import ReconcileParts, UsesParts
from .trains import holders_for, passenger_room, riding, seat_passengers
from .writeback import PATIENCE

if TYPE_CHECKING:
    from .settings import NodeSettings

log = logging.getLogger("fabricjobs.node.reconcile")
T = TypeVar("T")

MAX_PAGES = 10  # pages of rows one read goes through at most (claims, dependency checks)


def write_failed(expected: Job) -> None:
    log.exception("write of '%s' failed; it is looked at again in a later pass", expected.key)


def _member(keys: set[JobKey]) -> Callable[[Job], bool]:
    return lambda row: row.key in keys


class Claims(UsesParts):
    def __init__(self, me: str, settings: NodeSettings, parts: ReconcileParts) -> None:
        super().__init__(me, settings, parts)
        self.next_wake: datetime | None = None  # an owner-precedence or lane window that ends later
        self.lanes = Lanes(self.me, patience=self.s.lane_patience_ms / 1000)
        self._preferred: set = set()  # keys the last _choose preferred (lanes.py): passengers' pool
        self._every_lane_read = float("-inf")  # monotonic: the last read of every lane's rows
        self._peers_refreshed = float("-inf")  # monotonic: the last full pass asked for by lost claims
        self._left_ahead: list[Job] = []  # prepared fires the last _choose left to ride or to wait
        self._ahead_unanswered: dict[JobKey, datetime] = {}  # prepared fires' claims still being written: due when
        # Runs of dead nodes (or of this node's last life) the last takeover had no room for:
        # a freed slot that one of them fits is theirs before the WAITING rows' (Reconciler._take_runs).
        self.takeover_waits: list[Job] = []
        # Writes still being settled: claims, and the reconciler's takeovers and adoptions.
        self.stragglers = Stragglers(lambda: self.signals.wake(), write_failed,
                                     lambda slot, count: self.executor.reserve(slot, count))

    def claimable(self) -> int | None:
        """The lease generation to claim under, or None while the lease is not valid."""
        board = self.board
        generation = board.generation()
        if self.signals.fenced or not board.lease_valid(self.clock.monotonic(), generation):
            return None
        return generation

    def claim(self, now: datetime, full: bool = True) -> None:
        """Claim rows for the free slots. A claim pass (``full`` False: woken by ended runs)
        reads this node's own lane first (:meth:`_choose_in_lane`); a full pass reads every lane.
        While interrupted runs wait for a slot here, a claim pass that has room for one of them
        is a full pass instead: its takeover comes before the claims, so the backlog of WAITING
        rows does not take every freed slot first (docs/explanation/nodes.md, "Heartbeat and takeover")."""
        self.stragglers.act()
        if self.takeover_waits and not full and any(self.pool_for(row, now) for row in self.takeover_waits):
            self.signals.wake_full()
            return
        reread = False
        for _ in range(4):
            free = self.s.pool_size - self.executor.slots_used()
            generation = self.claimable()
            if free <= 0 or generation is None or (not reread and self.scheduler.writing()):
                return
            began = time.perf_counter()
            batches = self.scheduler.batches_begun()
            self._left_ahead = []
            chosen = None if full else self._choose_in_lane(free, now)
            if chosen is None:
                chosen = self._choose_paged(free, now)
            picked = {row.key for row, _, _ in chosen}
            for row in self._left_ahead:
                if row.key not in picked:  # no room on a train of prepared fires: claimed when due
                    self._wake_at(row.next_run or now)
            if not reread and self.scheduler.batches_begun() != batches:
                # A batch of fires began during the reads: they may hold part of it. Once per
                # call: wait for it to be written, then read it whole (Scheduler.batches_begun).
                self.scheduler.wait_written()
                reread = True
                continue
            if not chosen:
                return
            results, tried, offered = self._claim_each([row for row, _, _ in chosen], now)
            self.lanes.claimed(time.perf_counter() - began)
            lost = unwritten = 0
            ahead = {row.key for row, _, _ in chosen if self._rides_ahead(row, now)}  # decided once
            # A claim still being written holds its slot: as if it applied (_claim_later).
            rides_now = riding(chosen, [isinstance(res, Future) or (res is not None and res.applied) for res in results],
                               ahead=_member(ahead))
            for (row, pool, _), res, rides in zip(chosen, results, rides_now):
                if isinstance(res, Future):
                    self._claim_later(row, pool, rides, row.key in ahead, row.key in offered, generation, res)
                elif res is not None and res.applied:
                    if log.isEnabledFor(logging.INFO):  # the hot path: no log record built at WARNING
                        if row.worker_id is None and row.status is Status.SCHEDULED:  # (Scheduler.take_unowned)
                            log.info("%s is managed to claim ownership on cron job '%s' (with its first fire)", self.me,
                                     row.key, extra=job_extra(row.key, res.stored.epoch))
                        log.info("'%s' is now IN_PROCESS by %s", row.key, self.me, extra=job_extra(row.key, res.stored.epoch))
                    self.executor.start(res.stored, pool[0].name, pool[1], generation, passenger=rides,
                                        prepared=row.key in ahead)
                else:
                    lost += 1
                    if res is not None and res.current is None:  # an insert's index entry, ahead of its row
                        unwritten += 1
            lost -= len(chosen) - tried  # offers gone back to the store meanwhile were not sent
            self.metrics.claims(tried, lost - unwritten, unwritten)
            if lost > unwritten and not full:
                self._look_at_peers()
            self.executor.launch_held()
            if not lost:
                return  # everything chosen was claimed; a freed slot wakes the next pass

    def _claim_each(self, rows: list[Job], now: datetime) -> tuple[list, int, set[JobKey]]:
        """The compare-and-sets of the claims of ``rows``: a result each (None: not written; a
        Future: not answered within PATIENCE), how many were sent, and which of them were
        offered fires.
        A SCHEDULED row is a fire this node's scheduler offered (offers.py): claimed only if
        the offer is still there to take (the scheduler writes WAITING those it took back)."""
        taken = self.scheduler.offers.take(row.key for row in rows if row.status is Status.SCHEDULED)
        kept = [i for i, row in enumerate(rows) if row.status is not Status.SCHEDULED or row.key in taken]
        pairs, whole = [], []
        for i in kept:
            row = rows[i]
            full = self.scheduler.whole_row(row) if row.key in taken else None
            expected = full or row
            event, new = claim(expected, self.me, now, prepared=self.scheduler.prepared(row))
            pairs.append((expected, advance(expected, event, new)))
            whole.append(full is not None)
        began = self.clock.monotonic()
        # One write for all: those of whole rows are answered without reading the rows back.
        written = self.store.cas_each_within(pairs, on_error=write_failed, whole=whole, patience=PATIENCE)
        results: list = [None] * len(rows)
        for i, res in zip(kept, written):
            results[i] = res
        answered = [(row, None if res is None else res.applied) for row, res in zip(rows, results)
                    if row.key in taken and not isinstance(res, Future)]
        if answered:  # (a write that straggled held the call for PATIENCE: no usual write's time)
            straggled = any(isinstance(res, Future) for res in written)
            self.scheduler.claimed(answered, None if straggled else self.clock.monotonic() - began)
        return results, len(pairs), taken

    def _claim_later(self, row: Job, pool: tuple[AffinityLimit, bool], rides: bool, prepared: bool, offered: bool,
                     generation: int, write: Future) -> None:
        """A claim not answered within PATIENCE: it holds its slot (unless it rides as a
        passenger) and its run starts when it applies (stragglers.py)."""

        def answered(res: CasResult | None) -> None:
            self._ahead_unanswered.pop(row.key, None)
            if offered:
                self.scheduler.claimed([(row, None if res is None else res.applied)], None)
            if res is None or not res.applied:
                unwritten = res is not None and res.current is None
                self.metrics.claims(0, 0 if unwritten else 1, 1 if unwritten else 0)
                return
            if self.claimable() != generation:  # fenced meanwhile: no new run (its row is taken over)
                log.warning("the claim of '%s' applied after this node lost its lease; its row is left to be "
                            "taken over", row.key, extra=job_extra(row.key, res.stored.epoch))
                return
            log.info("'%s' is now IN_PROCESS by %s (its claim answered late)", row.key, self.me,
                     extra=job_extra(row.key, res.stored.epoch))
            # A passenger rode on the train of runs claimed with it, gone by now: it takes a slot
            # of its own if there is one, else it is given back unstarted (trains.py).
            alone = rides and self.pool_for(row, self.clock.now()) is None
            self.executor.start(res.stored, pool[0].name, pool[1], generation, passenger=alone, prepared=prepared)

        self.stragglers.leave(row, write, answered, slot=None if rides else pool[0].name)
        if offered and not rides and row.next_run is not None:  # a fire prepared ahead holds its slot till due
            self._ahead_unanswered[row.key] = row.next_run

    def _with_offers(self, page: list[Job]) -> list[Job]:
        """``page`` and the fires this node's scheduler offers (offers.py) that it does not hold.
        A row blocked by its parents is not claimable from an offer either: it goes WAITING
        (blocked) when its offer expires, as every fire did before offers."""
        offered = self.scheduler.offers.rows()
        if not offered:
            return page
        seen = {row.key for row in page}
        return page + [row for row in offered if row.key not in seen and not row.blocked]

    def _look_at_peers(self) -> None:
        """Another node won claims this claim pass (which reads no nodes) made: the live nodes
        this node's lanes go by may be out of date, a node started since its last full pass,
        say: read them again in a full pass, now (once per lane wait at most). Four nodes
        launched together: the first one up went on with two lanes for a second, until its
        next full pass, and lost 317 of 608 claims in one pass."""
        mono = self.clock.monotonic()
        if mono - self._peers_refreshed >= self.lanes.wait:
            self._peers_refreshed = mono
            self.signals.wake_full()

    def _choose_in_lane(self, free: int, now: datetime) -> list | None:
        """Claim candidates from this node's own lane and the owned rows only, when lanes are on
        and other nodes are alive: with n nodes a read of every lane reads and decodes n rows
        for each one this node takes (profiled: the largest cost that four nodes on one SQLite
        file added per job). None when that read does not fill the free slots by itself (too few
        rows, or a higher priority waiting elsewhere), once per lane wait (lanes.py), and on a
        store that would read every lane for it anyway (Cassandra's index has no lanes): then
        every lane is read, as a full pass always does, so that other lanes' rows are still seen
        and a busy, slow or dead peer's rows are taken over in time, also while this node's own
        lane keeps it busy."""
        if not self.store.reads_lanes:
            return None
        alive = self.liveness.alive()
        lane = self.lanes.lane(alive)
        if lane is None or self.clock.monotonic() - self._every_lane_read >= self.lanes.wait:
            return None
        self.next_wake = None
        size = max(2 * free, 16)
        page = self.store.waiting(size, priorities=self._served, lane=lane)
        if not self._oldest_are_first(page):
            return None
        candidates = sorted(self._with_offers(page), key=self._order(now))
        chosen = self._choose(candidates, free, now, alive=alive, every_lane=False)
        if len(chosen) < free:
            return None
        return self._with_passengers(chosen, candidates, page, size, now, lane)

    def _order(self, now: datetime):
        """The claim order: effective priority, then longest due, then key."""
        return lambda j: (-self.effective_priority(j, now), j.next_run or now, j.key)

    def _choose_paged(self, free: int, now: datetime) -> list:
        """Claim candidates: the longest-waiting rows and the highest-priority ones, taken in
        order of effective priority (below), as (row, (limit, exceptional), passenger). Reads
        on past pages of rows this node cannot take (other affinities, holds, owner
        precedence), so those never hide claimable ones. Short runs among those chosen make
        room for passengers (trains.py): then the rows after the page are read for them."""
        page_size = max((self.lanes.count(self.liveness.alive()) + 1) * free, 16)
        after = None
        self.next_wake = None
        self._every_lane_read = self.clock.monotonic()
        for page_no in range(MAX_PAGES):
            page = self.store.waiting(page_size, after=after, priorities=self._served)
            candidates = page
            # An empty first page: no row is WAITING in these priorities, so none by priority
            # either (on a busy Cassandra node, most claim passes; docs/explanation/cassandra-queue.md).
            if page_no == 0 and page and not self._oldest_are_first(page):
                seen = {j.key for j in page}
                candidates = page + [j for j in self.store.waiting_by_priority(page_size, self._served) if j.key not in seen]
            if page_no == 0:
                candidates = self._with_offers(candidates)
            candidates.sort(key=self._order(now))
            chosen = self._choose(candidates, free, now)
            if chosen or len(page) < page_size:
                return self._with_passengers(chosen, candidates, page, page_size, now)
            after = (page[-1].next_run or now, page[-1].key)
        return []

    def _with_passengers(self, chosen: list, candidates: list[Job], page: list[Job], size: int, now: datetime,
                         lane: tuple[int, int] | None = None) -> list:
        """``chosen`` as claims, and the passengers their short runs make room for (trains.py):
        from ``candidates``, and from the rows after a full ``page`` (of ``lane`` only, if the
        page was of one lane)."""
        rooms = {ahead: passenger_room(part, self.executor.is_short)
                 for ahead, part in self._apart(chosen, now, lambda c: c[0]).items()}
        wanted = sum(sum(room.values()) for room in rooms.values())
        if wanted and len(page) == size:
            seen = {j.key for j in candidates}
            more = self.store.waiting(wanted, after=(page[-1].next_run or now, page[-1].key),
                                      priorities=self._served, lane=lane)
            candidates = candidates + sorted((j for j in more if j.key not in seen), key=self._order(now))
        return [(row, pool, False) for row, pool in chosen] + self._passengers(candidates, chosen, rooms, now)

    @property
    def _served(self) -> tuple[int, int] | None:
        """node.id's PRIORITIES, for the store's reads (None: every priority, the usual case)."""
        served = self.affinity.priorities
        return None if served == ALL_PRIORITIES else served

    def _oldest_are_first(self, page: list[Job]) -> bool:
        """The longest-waiting rows all have the highest priority any waiting row has: then
        no other row can be ahead of them (it has no more priority and has waited less), and
        the read by priority is skipped (the usual case: every job at the default priority)."""
        if not page or any(j.priority != page[0].priority for j in page):
            return False
        top = self.store.waiting_by_priority(1, self._served)
        return not top or top[0].priority <= page[0].priority

    def effective_priority(self, job: Job, now: datetime) -> float:
        """PRIORITY (0-9) plus one level per PRIORITY_AGING_SEC waited since the job was due:
        higher priorities go first, and a waiting job of any priority is eventually first
        (a priority-0 job passes fresh priority-9 jobs after 9 x PRIORITY_AGING_SEC)."""
        waited = max(0.0, (now - (job.next_run or now)).total_seconds())
        return job.priority + waited / self.s.priority_aging_sec

    def _choose(self, candidates: list[Job], free: int, now: datetime, alive: list[str] | None = None,
                every_lane: bool = True) -> list[tuple[Job, tuple[AffinityLimit, bool]]]:
        """Up to ``free`` of ``candidates`` (best first) that this node may claim now, each with
        the affinity limit its run counts against (``every_lane`` False: the candidates were
        read from this node's lane only, see Lanes.claimable)."""
        mono = self.clock.monotonic()
        candidates = [row for row in candidates if self._may_claim(row, now)]
        candidates, self._preferred = self.lanes.claimable(
            candidates, free, self.liveness.alive() if alive is None else alive, mono, every_lane)
        if self.lanes.next_wake is not None:
            self._wake_at(now + timedelta(seconds=self.lanes.next_wake - mono))
        ahead = self._ahead_holders(candidates, now)
        taken: dict[str, int] = {}
        chosen = []
        for row in candidates:
            group = self._group(row) if self._rides_ahead(row, now) else None
            if group is not None and ahead.get(group, 0) <= 0:
                self._left_ahead.append(row)  # a passenger of the fires chosen, or woken for when due
                continue
            pool = self.pool_for(row, now, taken)
            if pool is not None:
                chosen.append((row, pool))
                taken[pool[0].name] = taken.get(pool[0].name, 0) + 1
                if group is not None:
                    ahead[group] -= 1
                if len(chosen) >= free:
                    break
        return chosen

    def _rides_ahead(self, row: Job, now: datetime) -> bool:
        """A known-short fire this node's scheduler prepared ahead of its due time: its run
        waits on a train until then."""
        return (self.scheduler.prepared(row) and row.next_run is not None and row.next_run > now
                and self.executor.is_short(row))

    def _apart(self, items: list[T], now: datetime, row_of: Callable[[T], Job]) -> dict[bool, list[T]]:
        """``items`` by whether each is a fire prepared ahead: those ride only on trains of such
        fires, the others on trains of work due now (trains.plan_trains)."""
        out: dict[bool, list[T]] = {False: [], True: []}
        for item in items:
            out[self._rides_ahead(row_of(item), now)].append(item)
        return out

    def _ahead_holders(self, candidates: list[Job], now: datetime) -> dict[str, int]:
        """The slots the prepared short fires may take, per pool they go to (``_group``): as
        few as seat them all on trains (those among ``candidates`` and those the scheduler is
        still preparing, which may come after this page), and with the prepared fires already
        waiting at most the scheduler's ``max_ahead`` (half the pool), so that a burst of cron
        fires prepared ahead leaves the rest of the pool to work due now
        (docs/explanation/nodes.md)."""
        riders = collections.Counter(self._group(row) for row in candidates if self._rides_ahead(row, now))
        if not riders:
            return {}
        for affinity, count in self.scheduler.preparing(now).items():
            group = self._group_of(affinity)
            riders[group] = max(riders[group], count)
        cap = self.scheduler.max_ahead if self.scheduler.max_ahead is not None else self.s.pool_size
        waiting = self.executor.slots_ahead(now) + sum(1 for due in self._ahead_unanswered.values() if due > now)
        left = max(0, cap - waiting)
        holders: dict[str, int] = {}
        for group, count in riders.most_common():
            holders[group] = min(holders_for(count), left)
            left -= holders[group]
        return holders

    def _group(self, row: Job) -> str:
        return self._group_of(row.affinity)

    def _group_of(self, affinity: str) -> str:
        """The pool a row of this AFFINITY goes to first here: its fires' trains are its."""
        pools = self._pools_for(affinity)
        return pools[0].name if pools else ""

    def _passengers(self, candidates: list[Job], chosen: list, rooms: dict[bool, dict[str, int]], now: datetime) -> list:
        """Known-short rows beyond the free slots, within ``rooms`` (of runs due now, and of
        fires prepared ahead: each rides with its own kind): they ride on the trains of the
        chosen short runs of their pool and take a slot only when a train-mate is done with
        one, so the pool's limit on runs going on at once holds."""
        if not any(rooms.values()):
            return []
        ex = self.executor
        picked = {row.key for row, _ in chosen}
        alive = self.liveness.alive()  # rows read after the page: this node's lane only
        riders = [row for row in candidates
                  if row.key not in picked
                  and (row.key in self._preferred or self.lanes.is_own(row, alive) or self.scheduler.prepared(row))
                  and ex.is_short(row) and self._may_claim(row, now)]
        apart = self._apart(riders, now, lambda row: row)
        return [seat for ahead, room in rooms.items() for seat in seat_passengers(apart[ahead], room, self._pools_of)]

    def could_run(self, row: Job) -> bool:
        """Whether a pool of this node may ever run ``row`` (room or not)."""
        return bool(self._pools_of(row))

    def _pools_of(self, row: Job) -> list[AffinityLimit]:
        """The pools a run of ``row`` may count against here, in preference order."""
        return self._pools_for(row.affinity)

    def _pools_for(self, text: str) -> list[AffinityLimit]:
        try:
            affinity = parse_affinity(text)
        except ValueError:
            return []
        return self.affinity.pools_for(affinity)

    def _may_claim(self, row: Job, now: datetime) -> bool:
        if row.key in self.stragglers:  # its claim is still being written
            return False
        if not self.affinity.serves(row.priority):  # node.id's PRIORITIES (RJM's rjmproc -p)
            return False
        owner = row.worker_id
        if owner == self.me:
            return row.hold_until is None or row.hold_until <= now  # retry delay / give-up delay
        if owner is not None and row.hold_until is None and self.liveness.is_alive(owner):
            # A job due for a live owner is left to it for a short window (owner precedence).
            until = (row.next_run or now) + timedelta(milliseconds=self.s.owner_precedence_ms)
            if now < until:
                self._wake_at(until)
                return False
        return True

    def _wake_at(self, when: datetime) -> None:
        if self.next_wake is None or when < self.next_wake:
            self.next_wake = when

    def pool_for(self, row: Job, now: datetime, taken: dict[str, int] | None = None) -> tuple[AffinityLimit, bool] | None:
        """The affinity limit a run of ``row`` would count against here and whether the claim
        is exceptional (beyond the recommended count); None if there is no room."""
        if self.executor.slots_used() + sum((taken or {}).values()) >= self.s.pool_size:
            return None
        waited = (now - (row.next_run or now)).total_seconds()
        for lim in self._pools_of(row):
            used = self.executor.slots_used(lim.name) + (taken or {}).get(lim.name, 0)
            if used < lim.recommended:
                return lim, False
            if used < lim.absolute and waited >= self.s.claim_exceptional_sec:
                return lim, True
        return None
