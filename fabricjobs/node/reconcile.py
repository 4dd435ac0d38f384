"""The reconcile loop (docs/explanation/nodes.md, the seed's JobReconcile): one pass reads the rows this node
may act on, and acts.

A *full* pass (every RECONCILE_INTERVAL_MS, or at once when a shell rings the doorbell):

1. carries out KILL requests addressed to this node;
2. acts on STOPPING / RESTART rows: aborts its own runs, finishes rows of dead owners;
3. takes over the work of dead nodes (and its own orphans after a restart);
4. claims WAITING jobs;
5. takes ownership of unowned SCHEDULED jobs and hands them to the scheduler.

6. hands back runs claimed beyond a recommended count once another live node has free
   recommended slots for that affinity (after a random MIN_/MAX_GIVE_UP_EXCEPTIONAL delay).

A *claim* pass (a slot freed, a job came due) does only 4. Every read goes through an index
over live rows; nothing here reads history or another node's healthy scheduled work.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import logging
import time
import random
import socket
from datetime import datetime, timedelta
from typing import Callable, Sequence

from ..affinity import parse_affinity
from ..errors import StoreError
from .. import dependencies, parallel
from ..model import Event, Job, RunResult, Status, advance
from ..logs import job_extra
from ..store.base import CasResult, Version
from ..worker import cgroups
from .claims import MAX_PAGES, Claims, write_failed
from .decisions import lost_run_record, take_over
from .executor import EndReason
from .parts import ReconcileParts, UsesParts
from .same_host import end_dead_peer_runs
from .settings import NodeSettings
from .writeback import PATIENCE, start_on_failure

log = logging.getLogger("fabricjobs.node.reconcile")

_CONTROL = (Status.STOPPING, Status.RESTART)
_ORPHANABLE = (Status.IN_PROCESS, Status.STOPPING, Status.RESTART)
_ADOPT_BATCH = 1000
_ADOPT_WRITES = 128  # adoptions sent at once (a script of 100 cron STARTJOBs: one round)
_CONTROL_BATCH = 5000  # STOPPING/RESTART rows (and own runs lost in a restart) read per pass, at most
_TAKEOVER_SLICE = 0.1  # seconds of takeover writes per pass before the pass moves on
_TAKEOVER_BATCH = 32  # rows taken over in one round of concurrent writes
_SLOW_PASS = 0.5  # seconds; a pass slower than this is logged with its steps' times
_WHOLE_READ_RETRY = 5.0  # seconds between tries of a whole-table read of the nodes that keeps failing
_READ_POLL = 0.02  # seconds: how often a pass waiting for a read of the nodes looks for claims to make
#: A job given back is left to the others for at least this many of their full passes (a pass
#: missed while busy, and the one after it), and at least this long.
GIVE_BACK_PASSES, GIVE_BACK_MIN_SEC = 3, 1.0


class Reconciler(UsesParts):
    def __init__(self, me: str, settings: NodeSettings, parts: ReconcileParts) -> None:
        super().__init__(me, settings, parts)
        self.peers: list = []  # the nodes rows read by the last full pass
        self.judged_at = self.clock.now()  # when the last read of the nodes began (liveness is judged as of then)
        self._whole_read_failing: float | None = None  # since when the nodes table is read row by row (_observe)
        self._next_dependency_check = 0.0
        self._announced = False  # whether this node has rung the nodes it first saw (run_pass)
        self._blocked_from: datetime | None = None  # where the next dependency check reads on
        self.claims = Claims(me, settings, parts)
        self._born = self.clock.now()  # KILL requests from before are an earlier life's (_kill_requests)
        #: When this node's previous life was last seen (its row's last beat, read at start-up
        #: before this life's first beat overwrote it): the end of the runs it lost.
        self.previous_life_seen: datetime | None = None
        # Reads of the nodes table run here while the pass serves claims (_meanwhile).
        self._reader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nodes-read")
        self._host = socket.gethostname()
        self._ended_here: set[tuple[str, str, int]] = set()  # (name, incarnation, beat) of dead peers ended

    @property
    def next_wake(self) -> datetime | None:
        """When an owner-precedence or lane window that kept a row from a claim ends."""
        return self.claims.next_wake

    @property
    def next_takeover(self) -> float | None:
        """When (monotonic) a dead node's run, or a new SCHEDULED row, left to a peer's lane is
        due here: a full pass then takes it if the peer did not (lanes.py)."""
        wakes = [w for w in (self.claims.lanes.takeover_wake, self.claims.lanes.adopt_wake) if w is not None]
        return min(wakes, default=None)

    def ring_peers(self) -> None:
        """Wake the other nodes on this host (jobs became claimable)."""
        if self.doorbell.enabled:
            self.doorbell.ring(r.name for r in self.peers if r.name != self.me)

    # -- the pass ----------------------------------------------------------------------------------

    def run_pass(self, full: bool) -> None:
        now = self.clock.now()
        steps: list[tuple[str, float]] = []
        began = mark = time.perf_counter()

        def step(name: str, fn, *args) -> None:
            nonlocal mark
            fn(*args)
            self.executor.launch_held()  # a full pass: what a step claimed starts now, not at its end
            t = time.perf_counter()
            steps.append((name, t - mark))
            mark = t

        try:
            self.claims.stragglers.act()  # writes that answered since the last pass (also while fenced)
            if full:
                # What the store keeps between reads (where WAITING rows may be) is read afresh
                # here, and kept for this node's claim passes until the next full pass.
                self.store.refresh(keep_for=self.s.reconcile_interval)
                step("nodes", self._observe)
                if not self._announced and self.peers:
                    # This node's first read of the nodes: ring them, so that they count it in
                    # their claim lanes now rather than at their next full pass (of four nodes
                    # launched together, the first up claimed with two lanes for a second).
                    self._announced = True
                    self.ring_peers()
                step("kills", self._kill_requests)
                step("stop/restart", self._control, now)
            if self.signals.fenced or self.signals.stopping:
                return
            if full:
                step("takeover", self._take_over, now)
            if full or self.signals.parents_changed.is_set():
                step("dependencies", self._unblock, now)
            step("claim", self.claims.claim, now, full)
            if full:  # after the claims: a script's new cron jobs are due later than its run-now ones
                step("adopt", self._adopt_scheduled, now)
                step("give-up", self._give_up, now)
        finally:
            took = time.perf_counter() - began
            if took > _SLOW_PASS:
                # A pass this slow delays this node's own due jobs: say where the time went.
                log.warning("slow %s reconcile pass: %.2f s (%s)", "full" if full else "claim", took,
                            ", ".join(f"{name} {secs:.2f}" for name, secs in steps) or "interrupted")

    def _observe(self) -> bool:
        """Read the nodes table; judge liveness as of just before that read, and count the beats
        it shows as of just after it (see liveness.py). False if the read failed or took longer
        than two beats (at least 1 s), and so did the fallback below: the claims of this pass
        must not wait on it. A missed read judges nobody dead: liveness counts a beat standing
        still only between reads that returned."""
        timeout = min(self.s.dead_after, max(2 * self.s.heartbeat_interval, 1.0))
        self.judged_at = self.clock.now()  # what a takeover's log line says its verdict is as of
        read_at = self.clock.monotonic()
        if self._whole_read_failing is not None and read_at < self._whole_read_failing + _WHOLE_READ_RETRY:
            return self._observe_one_by_one(timeout, None)  # not another timeout per read meanwhile
        try:
            peers = self._meanwhile(lambda: self.store.nodes(timeout=timeout))
        except StoreError as exc:
            return self._observe_one_by_one(timeout, exc)
        if self._whole_read_failing is not None:
            log.warning("reading the nodes table works again")
            self._whole_read_failing = None
        self.peers = peers
        self.liveness.observe(self.peers, read_at, self.clock.monotonic())
        return True

    def _observe_one_by_one(self, timeout: float, failure: StoreError | None) -> bool:
        """The whole-table read failed (``failure``; None: it failed lately and is tried again
        only every ``_WHOLE_READ_RETRY`` s): read the rows of the nodes already watched one at
        a time, and judge those. On Cassandra the whole-table read is a range read, and a range
        read waits out a replica that is down but not yet known to be (no speculative retry),
        for as long as gossip takes to convict it: 10 s and more, during which no dead node
        would be judged (tests/test_partitions.py, scenario 2). A read of one row does get a
        speculative retry, from the coordinator and from the driver.

        The reads share one deadline, ``timeout``; a node whose row was not read by then (or
        whose read failed) is not judged on this one. A node that appeared since the last
        whole read is not watched yet: it is judged, and rung, once a whole read works again."""
        names = self.liveness.watched()
        read_at = self.clock.monotonic()
        if failure is not None:
            if self._whole_read_failing is None:
                log.warning("reading the nodes table failed (%s): judging the %d known nodes by their rows, read"
                            " one at a time, until it works again", failure, len(names))
            self._whole_read_failing = read_at

        def read() -> tuple[list, list[str], StoreError | None]:
            rows, asked, error = [], [], None
            for name in names:
                left = read_at + timeout - self.clock.monotonic()
                if left <= 0:
                    break
                try:
                    row = self.store.node(name, timeout=left)
                except StoreError as exc:
                    error = exc
                    continue
                asked.append(name)
                if row is not None:
                    rows.append(row)
            return rows, asked, error

        rows, asked, error = self._meanwhile(read)
        if names and not asked:
            log.warning("reading the nodes table failed (nobody is judged this pass): %s; row by row: %s",
                        failure or "lately", error or "out of time")
            return False
        self.liveness.observe(rows, read_at, self.clock.monotonic(), asked=asked)
        self.peers = sorted([r for r in self.peers if r.name not in asked] + rows, key=lambda r: r.name)
        return True

    def _meanwhile(self, read):
        """``read()`` (of the nodes table) on the reader thread; meanwhile this thread serves
        the claims asked for (a slot freed, a fire offered) as a claim pass would. On
        Cassandra a read of the nodes waits out a replica that is down but not yet known to be,
        up to its timeout (about 2 s), and it is read again before a takeover: a due fire
        waited behind both, over 5 s, although its claim needs none of it
        (docs/explanation/nodes.md, "The reconcile loop")."""
        future = self._reader.submit(read)
        while True:
            try:
                return future.result(timeout=_READ_POLL)
            except concurrent.futures.TimeoutError:
                if future.done():
                    raise  # the read's own error
            sig = self.signals
            if sig.wakeup.is_set() and not (sig.fenced or sig.stopping):
                sig.wakeup.clear()
                try:
                    self.executor.flush()  # the outcomes first: their slots are free for these claims
                    self.claims.claim(self.clock.now(), False)
                except StoreError as exc:
                    log.warning("claims during a read of the nodes failed (the pass goes on): %s", exc)
                self.executor.launch_held()

    def close(self) -> None:
        """The node stops: a read of the nodes still under way is left to end on its own."""
        self._reader.shutdown(wait=False, cancel_futures=True)

    def _still_dead(self, rows: list[Job]) -> list[Job]:
        """Rows of (apparently) dead owners, re-judged by a read of the nodes made *after* the
        rows were read: a verdict older than the row could take a live node's new run over."""
        others = [r for r in rows if r.worker_id != self.me]
        if others and not self._observe():
            return [r for r in rows if r.worker_id == self.me]
        return [r for r in rows if r.worker_id == self.me or self.liveness.is_dead(r.worker_id)]

    # -- 1. KILL ---------------------------------------------------------------------------------

    def _kill_requests(self) -> None:
        for req in self.store.kill_requests(self.me):
            # A request older than this node is for an earlier life of its name, whose task
            # numbers this one may reuse (one a lagging replica brought back after its delete).
            run = None if req.requested_at < self._born else \
                next((r for r in self.executor.runs() if r.task == req.task), None)
            if run is not None:
                log.warning("KILL of task %s ('%s') requested by %s", req.task, run.key, req.requested_by)
                self.executor.kill(run, EndReason.KILL, f"killed by KILL from {req.requested_by}")
            self.store.delete_kill_request(self.me, req.task)

    # -- 2. STOPPING / RESTART ------------------------------------------------------------------------

    def _control(self, now: datetime) -> None:
        rows = self.store.by_status(_CONTROL, limit=_CONTROL_BATCH)
        if any(r.worker_id != self.me and self.liveness.is_dead(r.worker_id) for r in rows):
            rows = [r for r in rows if r.worker_id == self.me] + self._still_dead(
                [r for r in rows if r.worker_id != self.me])
        left = self.claims.stragglers
        for row in rows:
            if row.key in left:
                continue  # its run starts, or not, when its write answers: looked at next pass
            if row.worker_id == self.me:
                run = self.executor.run_for(row.key)
                if run is not None and run.facts.epoch == row.epoch:
                    reason = EndReason.STOP if row.status is Status.STOPPING else EndReason.RESTART
                    if run.end_reason not in (EndReason.STOP, EndReason.RESTART, EndReason.KILL) or (
                            run.end_reason, reason) == (EndReason.RESTART, EndReason.STOP):
                        log.info("'%s' is %s: aborting its run", row.key, row.status.value)
                        self.executor.abort(run, reason, self.s.stop_grace, f"ended by {row.status.value}")
                    continue
                if run is not None:
                    continue  # an older run of ours is still finishing; it writes its own outcome
                self._finish_orphan(row, now)  # ours from before a restart: no run to wait for
            elif not self.signals.fenced and self.liveness.is_dead(row.worker_id):
                self._finish_orphan(row, now)

    def _take(self, rows: list[Job], now: datetime, then: Callable[[Job, CasResult], None],
              slots: Sequence[str | None] | None = None) -> None:
        """Take ``rows`` over by CAS, each recording its lost run: one read and one round of
        writes for all of them; ``then(row, result)`` for each one taken, at once or, for a
        write that straggles, when it answers (holding the pool slot ``slots[i]`` meanwhile,
        stragglers.py). A row no longer as ``row`` says (index rows carry no counters, so the
        full row is read) is left alone."""
        if not rows:
            return
        at, pairs, records = [], [], []
        seen = {p.name: p.beat_time for p in self.peers if p.name != self.me}  # (a dead peer's last beat)
        seen[self.me] = self.previous_life_seen  # (its own runs from before a crash: its last life's)
        for i, (row, full) in enumerate(zip(rows, self.store.get_many([r.key for r in rows]))):
            if full is None or Version.of(full) != Version.of(row):
                continue
            event, new = take_over(full, self.me, now, max_tries=self.s.max_tries)
            new = advance(full, event, new)
            at.append(i)
            pairs.append((full, new))
            records.append(lost_run_record(full, new, now, seen.get(full.worker_id or "")))
        # (Not whole: that would make a failed send a re-send, keeping its lost-run line.)
        written = self.store.cas_each_within(pairs, records, write_failed, patience=PATIENCE)
        for i, res in zip(at, written):
            answered = functools.partial(self._taken, rows[i], then)
            if isinstance(res, concurrent.futures.Future):
                self.claims.stragglers.leave(rows[i], res, answered, slot=slots[i] if slots else None)
            else:
                answered(res)

    def _taken(self, row: Job, then: Callable[[Job, CasResult], None], res: CasResult | None) -> None:
        if res is None or not res.applied:
            return
        # Its LOST history line was written with the takeover: counted here, by the node that
        # wrote it, as its own node cannot (docs/reference/metrics.md).
        self.metrics.execution(row.type, RunResult.LOST.value)
        if res.stored.status is Status.FAILED:
            # Its node was lost, and no tries were left: the run that failed is the lost one,
            # the epoch of the row as read (the takeover wrote epoch + 1).
            start_on_failure(self.store, res.stored, self.clock.now(), run=row.epoch)
        then(row, res)

    def _finish_orphan(self, row: Job, now: datetime) -> None:
        self._take([row], now, lambda row, res: log.info("job %s status was updated to %s.", row.key, res.stored.status.value))

    # -- 3. dead nodes and orphans -------------------------------------------------------------------

    def _take_over(self, now: datetime) -> None:
        dead = self.liveness.dead()
        left = self.claims.stragglers  # ours, with runs to come once their writes answer
        rows = [r for r in self.store.by_owner([self.me], [Status.IN_PROCESS], limit=_CONTROL_BATCH)
                if self.executor.run_for(r.key) is None and r.key not in left]
        if dead:
            rows += [r for r in self._still_dead(self.store.by_owner(dead, [Status.IN_PROCESS, Status.SCHEDULED],
                                                                     limit=_ADOPT_BATCH)) if r.key not in left]
        generation = self.claims.claimable()
        if generation is None:
            return
        self.claims.takeover_waits = []  # (until a run below finds no room)
        if dead:
            self._end_dead_peers_here()
        budget = time.perf_counter() + _TAKEOVER_SLICE
        # Runs first (their jobs are down until taken), in batches: one round of concurrent
        # writes per batch, not one per job. Then the dead node's schedules.
        running = [r for r in rows if r.status is not Status.SCHEDULED]
        running = [r for r in running if r.worker_id == self.me] + self.claims.lanes.takeover(
            [r for r in running if r.worker_id != self.me], self.liveness.alive(), self.clock.monotonic())
        for i in range(0, len(running), _TAKEOVER_BATCH):
            if i and time.perf_counter() > budget:
                # A big takeover on a slow store must not hold up this node's own due jobs and
                # outcomes: do the rest in the next pass, at once.
                self.signals.wake_full()
                return
            self._take_runs(running[i:i + _TAKEOVER_BATCH], now, generation)
            self.executor.launch_held()  # each batch starts at once, not at the end of the pass
        schedules = [r for r in rows if r.status is Status.SCHEDULED and self.affinity.can_run(parse_affinity(r.affinity))]
        for i in range(0, len(schedules), _TAKEOVER_BATCH):
            if time.perf_counter() > budget:
                self.signals.wake_full()
                return
            self._adopt(schedules[i:i + _TAKEOVER_BATCH], now)

    def _end_dead_peers_here(self) -> None:
        """Before a dead peer's runs are taken over, here or by any node: what a dead peer of
        this host left in its run cgroups, stopped with it or running on (same_host.py), is
        killed. Judged on the last read of the nodes (``peers``, the verdicts of the same read),
        once per beat a peer was last seen at: one frozen, woken and frozen again is ended again."""
        judged = {(r.name, r.incarnation, r.beat) for r in self.peers}
        self._ended_here &= judged  # (what no longer describes a dead peer's row)
        killed = []
        for row in self.peers:
            mark = (row.name, row.incarnation, row.beat)
            if row.name != self.me and mark not in self._ended_here and self.liveness.is_dead(row.name):
                self._ended_here.add(mark)
                home = end_dead_peer_runs(row, self._host)
                if home is not None:
                    killed.append(home)
                    log.warning("node %s (pid %d on this host) is dead: what was left in its run cgroups is killed "
                                "before its runs are taken over", row.name, row.pid)
        # Gone, not only signalled, before the takeover (a SIGKILL ends a process once it is
        # next scheduled: on a loaded host, a while later); all waited for at once.
        cgroups.wait_empty(killed, cgroups.EMPTY_WAIT)

    def _take_runs(self, rows: list[Job], now: datetime, generation: int) -> None:
        """Take over IN_PROCESS rows of dead owners, or of this node's previous life, that there
        is room for here; start the runs of those taken."""
        taken: dict[str, int] = {}
        chosen = []
        for row in rows:
            if row.worker_id != self.me and not self.affinity.serves(row.priority):
                continue  # node.id's PRIORITIES: a dead peer's run of another priority is another node's
            pool = self.claims.pool_for(row, now, taken)
            if pool is None:
                # No room (or not allowed) here; another node or a later pass takes it. With
                # room to come, the next freed slot here is this run's, not a WAITING row's.
                if self.claims.could_run(row):
                    self.claims.takeover_waits.append(row)
                continue
            taken[pool[0].name] = taken.get(pool[0].name, 0) + 1
            chosen.append((row, pool))
        pools = {row.key: pool for row, pool in chosen}
        judged = self.judged_at

        def started(row: Job, res: CasResult) -> None:
            if row.worker_id == self.me:
                log.warning("%s took over '%s' from this node before its restart (epoch %d)", self.me, row.key,
                            res.stored.epoch)
            else:  # (the verdict's time: the write and this line come after it, by as long as the write took)
                log.warning("%s took over '%s' from dead node %s (epoch %d; judged dead by the read of the nodes at %s)",
                            self.me, row.key, row.worker_id, res.stored.epoch, judged.isoformat(timespec="milliseconds"))
            if res.stored.status is Status.IN_PROCESS and self.claims.claimable() != generation:
                log.warning("the takeover of '%s' applied after this node lost its lease; its row is left to be "
                            "taken over", row.key)  # (a takeover that answered late)
            elif res.stored.status is Status.IN_PROCESS:
                limit, exceptional = pools[row.key]
                self.executor.start(res.stored, limit.name, exceptional, generation, taken_over=True)
            else:
                log.info("job %s status was updated to %s.", row.key, res.stored.status.value)

        self._take([row for row, _ in chosen], now, started, slots=[pool[0].name for _, pool in chosen])

    # -- 5. unowned scheduled jobs ------------------------------------------------------------------

    def _adopt_scheduled(self, now: datetime) -> None:
        left = self.claims.stragglers  # adoptions still being written
        rows = [row for row in self.store.by_owner([None], [Status.SCHEDULED], limit=_ADOPT_BATCH)
                if row.key not in left and self.affinity.can_run(parse_affinity(row.affinity))]
        rows = self.claims.lanes.adoptable(rows, self.liveness.alive(), self.clock.monotonic())
        # One due within a second is not adopted first: its fire's claim makes this node its
        # owner in the same write (Scheduler.take_unowned), from the row read whole. Another
        # lane's is taken after the lane wait, as adoptions are: its node may be slow to fire
        # it (in the burst of a script's first fires, one node's were 2.1 s late when the
        # others left them to it until due), and of two claims of one fire one applies.
        soon = [row for row in rows if self.scheduler.fires_unowned(row)]
        if soon:
            keys = {row.key for row in soon}
            new = [row for row in soon if not self.scheduler.holds(row)]  # (not read again each pass)
            whole: Sequence[Job | None] = new
            if new and not self.store.candidates_whole:
                whole = self.store.get_many([row.key for row in new])
            for row in whole:
                if row is not None:
                    self.scheduler.take_unowned(row)  # (one moved on since is left to the next pass)
            rows = [row for row in rows if row.key not in keys]
        for i in range(0, len(rows), _ADOPT_WRITES):  # (the store's pool is not flooded: claims go out meanwhile)
            self._adopt(rows[i:i + _ADOPT_WRITES], now)

    def _adopt(self, rows: list[Job], now: datetime) -> None:
        """Own SCHEDULED rows (unowned, or of a dead node) and hand them to the scheduler: one
        cas_each for all (a script of 100 cron STARTJOBs was 100 commits, ahead of this pass's
        claims of due work)."""
        pairs = []
        for row in rows:
            event, new = take_over(row, self.me, now, max_tries=self.s.max_tries)
            pairs.append((row, advance(row, event, new)))
        for row, res in zip(rows, self.store.cas_each_within(pairs, on_error=write_failed, patience=PATIENCE)):
            answered = functools.partial(self._adopted, row)
            if isinstance(res, concurrent.futures.Future):
                self.claims.stragglers.leave(row, res, answered)
            else:
                answered(res)

    def _adopted(self, row: Job, res: CasResult | None) -> None:
        if res is not None and res.applied:
            note = f" (from dead node {row.worker_id})" if row.worker_id else ""
            log.info("%s is managed to claim ownership on cron job '%s'%s", self.me, row.key, note)
            self.scheduler.add_whole(res.stored)  # (read back whole: its first fire's claim needs no read)

    # -- dependencies --------------------------------------------------------------------------------

    def _unblock(self, now: datetime) -> None:
        """Free blocked jobs whose parents are all PROCESSED; keep the Notes of the others true.
        Runs when a job ended here (a parent may have finished) and every DEPENDENCY_CHECK_SEC."""
        mono = self.clock.monotonic()
        if not self.signals.parents_changed.is_set() and mono < self._next_dependency_check:
            return
        self.signals.parents_changed.clear()
        self._next_dependency_check = mono + self.s.dependency_check_sec
        cache: dict = {}
        freed = 0
        # Page through the blocked rows (longest due first), up to MAX_PAGES per check and on
        # from there at the next: children that stay blocked (a failed parent) must not hide
        # the ones behind them. A page starts at the last one's due time (its rows are read
        # again, harmless), one ms later if a whole page had that due time.
        since = self._blocked_from
        for _ in range(MAX_PAGES):
            page = self.store.blocked_jobs(_ADOPT_BATCH, since)
            for row in page:
                blockers = dependencies.blocking(self.store, dependencies.parents_of(row), cache)
                decision = parallel.checked(row, blockers, cache, now) if parallel.is_parent(row) else (
                    None if blockers and dependencies.note(blockers) == row.error_msg
                    else (Event.UPDATE, row.replace(blocked=bool(blockers), error_msg=dependencies.note(blockers))))
                if decision is None:
                    continue
                res = self.store.cas(row, advance(row, *decision), whole=True)  # (blocked_jobs: whole rows)
                if res.applied and res.stored.archived:  # a parallel job whose task failed for good
                    log.info("'%s' failed: %s", row.key, res.stored.error_msg, extra=job_extra(row.key, row.epoch))
                    start_on_failure(self.store, res.stored, now, run=parallel.failed_task_run(row, cache, self.store))
                elif res.applied and not blockers:
                    freed += 1
                    log.info("'%s' unblocked: its parents are PROCESSED", row.key, extra=job_extra(row.key, row.epoch))
            last = page[-1].next_run if len(page) == _ADOPT_BATCH else None
            if last is None:
                since = None  # the end: the next check starts from the first again
                break
            since = last if since is None or last > since else last + timedelta(milliseconds=1)
        self._blocked_from = since
        if freed:
            self.ring_peers()

    # -- 6. give back exceptional runs ---------------------------------------------------------------

    def _give_up(self, now: datetime) -> None:
        extras: dict[str, list] = {}
        for run in self.executor.runs():
            if run.exceptional and run.end_reason is None and run.outcome is None:
                extras.setdefault(run.pool, []).append(run)
        for pool, runs in extras.items():
            lim = self.affinity.limits.get(pool)
            # Runs only: a claim still being written may not apply, and is no run to give back for.
            over = self.executor.slots_running(pool) - (lim.recommended if lim else 0)
            if over <= 0 or not self._peer_has_room(pool):
                for run in runs:
                    self.executor.update_run(run, give_up_at=None)
                continue
            runs.sort(key=lambda r: r.started_mono, reverse=True)  # the newest go first
            for run in runs[:over]:
                if run.give_up_at is None:
                    at = now + self._give_up_delay()
                    self.executor.update_run(run, give_up_at=at)
                    log.info("'%s' runs beyond the recommended %s count; giving it back at %s unless that changes",
                             run.key, pool, at.isoformat(timespec="seconds"))
                elif now >= run.give_up_at:
                    hold = self._give_back_hold()
                    self.executor.update_run(run, facts=dataclasses.replace(run.facts, hold_for=hold))
                    log.warning("giving '%s' back: another node has free %s slots (this node leaves it to the others "
                                "for %.1f s once it is given back)", run.key, pool, hold.total_seconds())
                    self.executor.abort(run, EndReason.RELEASE, self.s.stop_grace, f"released to a node with free {pool} slots")

    def _give_up_delay(self) -> timedelta:
        return timedelta(minutes=random.uniform(self.s.give_up_min_minutes, self.s.give_up_max_minutes))

    def _give_back_hold(self) -> timedelta:
        """How long a job given back is left to the other nodes (counted from the moment it is
        given back): a give-up delay, and at least long enough for every other node to have made
        a full pass, which claims it, whatever the give-up delay is (docs/explanation/nodes.md)."""
        chance = max(GIVE_BACK_PASSES * self.s.reconcile_interval, GIVE_BACK_MIN_SEC)
        return max(self._give_up_delay(), timedelta(seconds=chance))

    def _peer_has_room(self, pool: str) -> bool:
        """Whether another live node has a free *recommended* slot for ``pool``."""
        for row in self.peers:
            if row.name == self.me or not self.liveness.is_alive(row.name):
                continue
            try:
                info = json.loads(row.info or "{}")
                rec, _abs = info.get("limits", {}).get(pool, (0, 0))
                running = int((info.get("running") or {}).get(pool, 0))
            except (ValueError, TypeError):
                continue
            if running < int(rec):
                return True
        return False
