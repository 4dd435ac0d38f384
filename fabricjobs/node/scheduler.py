"""The scheduler thread (docs/explanation/nodes.md, the seed's JobScheduler).

A time-ordered heap of the SCHEDULED jobs this node owns that come due within a horizon. At
the due time a job is "marked as ready": offered to this node's claims, which take it
straight from SCHEDULED to IN_PROCESS in one compare-and-set (offers.py); a fire they cannot
seat by a moment after its due time is written WAITING, for any node (owner precedence then
leaves it to this node a while longer). Jobs due later than the horizon stay in the store and
are loaded when their time approaches, so a node owning 100,000 far-future jobs holds none of
them in memory.

A fire is prepared ``lead`` seconds before its due time (firelead.py): offered, claimed and
handed to a worker, which starts the job at the due time itself, not before. So the store
write and the hand-over of a burst of fires happen ahead of the second they are due for, and
the jobs start on time rather than one store round after it. A prepared fire holds a pool
slot while its worker waits for the due time, so the lead is also kept short enough that the
fires of one lead take at most ``max_ahead`` slots (half the pool) at the rate this node has
been firing. A fire of a job known to be short takes a share of a slot (``slot_share``): it
rides a train of such runs, and the claims hold only as many slots as seat them all
(claims.py).
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
from datetime import datetime, timedelta
from typing import Callable

from ..calendar import Calendar, CalendarCache
from ..clock import Clock
from ..errors import StoreError
from ..logs import job_extra
from ..model import Event, Job, JobKey, Status, advance
from ..store.base import JobStore, RunRecord, Version
from .decisions import FIRE_LEAD_MAX, adopted, calendar_fire, fire, late_fire, late_handler
from .firelead import FIRE_LEAD, FireLead
from .offers import Offers

log = logging.getLogger("fabricjobs.node.scheduler")

FIRE_WRITE_WAIT = 0.5  # seconds claims wait at most for a batch of fires being written (writing)
_RATE_WINDOW = 2.0  # seconds of fires the firing rate is measured over
OFFER_GRACE = 0.25  # seconds past its due time a fire waits for its own node's claims (offers.py)


class Scheduler:
    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        me: str,
        *,
        on_ready: Callable[[], None],
        zone=None,
        horizon: float = 60.0,
        batch: int = 5000,
        lead: float = FIRE_LEAD,
        max_ahead: int | None = None,
        slot_share: Callable[[Job], float] = lambda row: 1.0,
        calendars: CalendarCache | None = None,
    ) -> None:
        self._lead_of = FireLead(lead)  # what the recent fires needed (see dispatched)
        self.max_ahead = max_ahead
        self.slot_share = slot_share  # the part of a slot a prepared fire of a row holds while it waits
        # (monotonic, slots the fires hold while they wait) of the last 2 s
        self._fired: collections.deque[tuple[float, float]] = collections.deque()
        self.zone = zone
        self.calendars = calendars  # a job's CALENDAR, read when its fire is due
        self.store = store
        self.clock = clock
        self.me = me
        self.on_ready = on_ready
        self.horizon = timedelta(seconds=horizon)
        self.batch = batch
        self._heap: list[tuple[float, int, JobKey]] = []
        # fired ahead: key -> (due, monotonic time it was taken; None once it reached a worker)
        self._prepared: dict[JobKey, tuple[datetime, float | None]] = {}
        # of those, the short ones not yet on a worker: key -> (due, AFFINITY) (see preparing)
        self._riding: dict[JobKey, tuple[datetime, str]] = {}
        self._handlers: dict[JobKey, Job] = {}  # late-handler jobs of the skips being written (LATE_ACTION)
        self._rows: dict[JobKey, Job] = {}
        # Rows as a read or a whole write returned them (arguments and all), for the claims of
        # their fires (whole_row); a row of the index (Cassandra's due_scheduled) lacks those.
        self._whole: dict[JobKey, tuple[float, Job]] = {}  # key -> (monotonic, row)
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._refresh_due = 0.0  # monotonic time of the next store refresh
        self._retry_at = 0.0  # after a store error: fire nothing before this (monotonic)
        self._thread: threading.Thread | None = None
        self.paused = False  # while fenced: fire nothing
        self._writing_since: float | None = None  # monotonic: a batch of fires is being written
        self._claims_waited = False  # a claim pass waited for that batch (see writing)
        self._batches = 0  # batches of fires begun (see batches_begun)
        self._claims_held = False  # writing() held the last claim pass (see writing)
        self.offers = Offers(OFFER_GRACE)  # due fires this node's claims take from SCHEDULED
        self._recheck: set[JobKey] = set()  # offers whose claim did not apply: read again

    # -- feeding ---------------------------------------------------------------------------------

    def add(self, row: Job, force: bool = False, unowned: bool = False) -> None:
        """A SCHEDULED row this node now owns (taken over, or back from a recurring run); with
        ``unowned``, also a row nobody owns yet, which its fire's claim takes (take_unowned)."""
        if row.status is not Status.SCHEDULED or not self._takes(row, unowned) or row.next_run is None:
            return
        if row.next_run > self.clock.now() + self.horizon:
            return  # loaded by a refresh when it gets close
        if not force and self.offers.holds(row):
            return  # its fire is on offer to the claims (a refresh read it before that)
        with self._cond:
            kept = self._whole.get(row.key)
            if kept is not None and kept[1].revision != row.revision:
                del self._whole[row.key]  # the row moved on: what was kept is not it
            known = self._rows.get(row.key)
            if known is not None and known.revision >= row.revision and not force:
                return
            self._rows[row.key] = row
            heapq.heappush(self._heap, (row.next_run.timestamp(), next(self._seq), row.key))
            self._cond.notify()

    def add_whole(self, row: Job, force: bool = False, unowned: bool = False) -> None:
        """As :meth:`add`, ``row`` being the whole row as a read or a whole write returned it:
        the claim of its fire then needs no read of it (whole_row). Kept only while its fire is
        within the horizon, as the heap's rows are (the far-future ones stay in the store)."""
        if (row.status is Status.SCHEDULED and self._takes(row, unowned) and row.next_run is not None
                and row.next_run <= self.clock.now() + self.horizon):
            with self._cond:
                self._whole.pop(row.key, None)  # (re-inserted last: the oldest go first below)
                self._whole[row.key] = (self.clock.monotonic(), row)
                while len(self._whole) > self.batch:  # jobs stopped or taken elsewhere meanwhile
                    del self._whole[next(iter(self._whole))]
        self.add(row, force, unowned)

    def _takes(self, row: Job, unowned: bool) -> bool:
        """Whether ``row``'s owner is one this scheduler fires for: this node, or (``unowned``) nobody."""
        return row.worker_id == self.me or (unowned and row.worker_id is None)

    def fires_unowned(self, row: Job) -> bool:
        """Whether ``row`` is a SCHEDULED row nobody owns (a new cron job) due within
        FIRE_LEAD_MAX: one this scheduler fires without adopting it first (take_unowned)."""
        return (row.status is Status.SCHEDULED and row.worker_id is None and not row.blocked
                and row.next_run is not None and row.next_run <= self.clock.now() + timedelta(seconds=FIRE_LEAD_MAX))

    def holds(self, row: Job) -> bool:
        """Whether this scheduler has ``row`` at its revision still to fire, or on offer now
        (a fire already taken or expired whose row is unchanged was not written: it is not
        held, and is taken again)."""
        with self._cond:
            known = self._rows.get(row.key)
        return (known is not None and known.revision >= row.revision) or self.offers.offering(row)

    def take_unowned(self, row: Job) -> bool:
        """Fire ``row``, a whole row that :meth:`fires_unowned`, without adopting it first: the
        claim of its fire makes this node its owner in the same write (on Cassandra one LWT
        where adopting and then firing took two). Nothing is written until then, so another
        node may adopt it meanwhile: then this claim does not apply and the row, read again,
        is not this node's (docs/explanation/nodes.md). False if ``row`` is not such a row."""
        if not self.fires_unowned(row):
            return False
        self.add_whole(row, force=True, unowned=True)  # (a fire of it that went unwritten: again)
        return True

    def whole_row(self, row: Job) -> Job | None:
        """The whole row of ``row`` (a fire the claims take from its offer), if this scheduler
        was given it at the very revision ``row`` is at, within the horizon: the revision
        proves nothing changed since, so the claim's write returns the row without reading it
        back (on Cassandra a read per fire, on the fire's way to its worker). Used once."""
        with self._cond:
            kept = self._whole.pop(row.key, None)
        if kept is None:
            return None
        at, whole = kept
        fresh = self.clock.monotonic() - at <= self.horizon.total_seconds()
        return whole if fresh and Version.of(whole) == Version.of(row) else None

    def refresh(self) -> None:
        """Load owned SCHEDULED rows due within the horizon from the store, whole: a fire is
        decided by the row's schedule, time zone, calendar and late threshold, which a
        candidate of Cassandra's index lacks (with none, a restarted node ran a fire its late
        threshold skips, and every fire a calendar excludes). Rows not held at their revision
        are read, once per revision."""
        rows = self.store.due_scheduled(self.me, self.clock.now() + self.horizon, self.batch)
        if self.store.candidates_whole:
            for row in rows:
                self.add(row)
        else:
            with self._cond:
                held = {key: row.revision for key, row in self._rows.items()}
            unknown = [row.key for row in rows if held.get(row.key, -1) < row.revision and not self.offers.holds(row)]
            for whole in self.store.get_many(unknown) if unknown else []:
                if whole is not None:
                    self.add_whole(whole)
        with self._cond:
            # A full batch means more may be due soon: look again sooner.
            period = self.horizon.total_seconds() / (10 if len(rows) >= self.batch else 3)
            self._refresh_due = self.clock.monotonic() + period

    def prepared(self, row: Job) -> bool:
        """This scheduler marked ``row`` ready ahead of its due time (its claim waits for it)."""
        entry = self._prepared.get(row.key)
        return entry is not None and entry[0] == row.next_run

    def preparing(self, now: datetime) -> collections.Counter[str]:
        """Fires of short jobs prepared ahead, due after ``now``, that have not reached a
        worker yet, by AFFINITY: the riders the claims seat on trains (claims.py)."""
        with self._cond:  # (those left behind are dropped at the next batch of fires)
            return collections.Counter(affinity for due, affinity in self._riding.values() if due > now)

    def writing(self) -> bool:
        """A batch of fires is being written WAITING, and a claim pass should wait for it: on
        Cassandra each row is its own LWT, so a pass now would see part of the batch and take
        its rows out of priority order (a PRIORITY 9 fire started after the others due that
        second, seen on Apache Cassandra) and without their train-mates. The batch's end wakes
        the loop. At most FIRE_WRITE_WAIT: a long write of a big batch does not stop claims.

        Never twice in a row: a node with many recurring jobs on Cassandra writes batch after
        batch, and a pass woken by one batch's end found the next one begun. A pass held for
        the batch before waits for this one instead (``wait_written``) and goes on (False)."""
        with self._cond:
            left = self._hold_left()
            if left is None or left < 0:
                self._claims_held = False
                return False
            if not self._claims_held:
                self._claims_held = self._claims_waited = True
                return True
            self._claims_held = False
        self.wait_written()
        return False

    def batches_begun(self) -> int:
        """How many batches of fires this scheduler has begun to write. A claim pass compares it
        before and after its reads: one begun in between (``writing`` said no at the pass's
        start) may be half in what it read, its PRIORITY 9 fire missing (seen on Apache
        Cassandra), so the pass waits for it (``wait_written``) and reads again, once: under a
        steady stream of fires (batch after batch, on Cassandra) a pass that read again for
        every batch would never claim."""
        with self._cond:
            return self._batches

    def wait_written(self) -> None:
        """Block until the batch being written is (at most FIRE_WRITE_WAIT after it began): a
        claim pass that read while a batch began waits for it once, then reads again."""
        with self._cond:
            while (left := self._hold_left()) is not None and left > 0:
                self._cond.wait(left)

    def _hold_left(self) -> float | None:
        """Seconds the batch being written may still hold claims (FIRE_WRITE_WAIT after it
        began; negative once past), None if none is (under the lock)."""
        since = self._writing_since
        return None if since is None else FIRE_WRITE_WAIT - (self.clock.monotonic() - since)

    def _written(self) -> bool:
        """The batch is written: whether a claim pass waited for it (then the loop is woken)."""
        with self._cond:
            waited, self._claims_waited, self._writing_since = self._claims_waited, False, None
            self._cond.notify_all()  # a pass in wait_written
            return waited

    def dispatched(self, key: JobKey, due: datetime | None) -> None:
        """A run of ``key`` for ``due`` reached a worker. If this scheduler prepared that fire,
        learn from how long it took: the lead must cover it for the job to start on time."""
        entry = self._prepared.get(key)
        if entry is None or entry[0] != due or entry[1] is None:
            return
        with self._cond:
            self._riding.pop(key, None)
            self._prepared[key] = (due, None)  # measured once: a run bounced from a train, or taken
            # back after a restart, goes to a worker again, but its preparation was not slower
            mono = self.clock.monotonic()
            self._lead_of.measured(mono, mono - entry[1])

    def _learn_from_write(self, took: float, rounds: int = 2) -> None:
        with self._cond:
            self._lead_of.written(self.clock.monotonic(), took, rounds)

    @property
    def lead(self) -> float:
        """Seconds ahead of its due time a fire is prepared now (before the pool's cap)."""
        return self._lead_of.lead

    @lead.setter
    def lead(self, seconds: float) -> None:
        self._lead_of.lead = seconds

    def size(self) -> int:
        with self._cond:
            return len(self._rows)

    # -- the thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="JobsScheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.offers.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except Exception:  # never let the scheduler die: its jobs would never fire again
                log.exception("scheduler error (continuing in 1 s)")
                with self._cond:
                    self._retry_at = self.clock.monotonic() + 1.0
                    self._cond.wait(1.0)

    def _step(self) -> bool:
        """One round: fire what is due, else wait for it (or for a refresh); True to stop."""
        with self._cond:
            if self._stop:
                return True
            due = self._take_due()
            held = self._held()
            expired = [] if held else self.offers.expired(self.clock.now())
            recheck: set[JobKey] = set()
            if not held:  # after a store error: not before _retry_at
                recheck, self._recheck = self._recheck, set()
            refresh = False
            if not (due or expired or recheck):
                self._cond.wait(self._wait_time())
                refresh = self.clock.monotonic() >= self._refresh_due
        if recheck:
            self._read_again(recheck)
        if expired:  # fires this node could not seat in time: WAITING, for any node
            self._write(expired, [(row, advance(row, *fire(row))) for row in expired], [])
        if due:
            self._fire(due)
        elif refresh and not self.paused:
            try:
                self.refresh()
            except Exception:
                log.exception("scheduler refresh failed; retrying")
                with self._cond:
                    self._refresh_due = self.clock.monotonic() + 1.0
        return False

    def _held(self) -> bool:
        return self.paused or self.clock.monotonic() < self._retry_at

    def _forget_old_fires(self) -> None:
        cutoff = self.clock.monotonic() - _RATE_WINDOW
        while self._fired and self._fired[0][0] < cutoff:
            self._fired.popleft()

    def _lead(self) -> float:
        """How far ahead to prepare fires now: what they need, within the slots they may hold
        (caller holds the lock)."""
        lead = self._lead_of.lead
        self._forget_old_fires()
        if self.max_ahead is not None and self._fired:
            rate = sum(n for _, n in self._fired) / _RATE_WINDOW
            if rate > 0:
                lead = min(lead, self.max_ahead / rate)
        return max(self._lead_of.least, lead)

    def _take_due(self) -> list[Job]:
        """Pop the rows whose time has come (caller holds the lock)."""
        due: list[Job] = []
        now_ts = self.clock.now().timestamp() + self._lead()
        while self._heap and self._heap[0][0] <= now_ts and not self._held():
            _, _, key = heapq.heappop(self._heap)
            row = self._rows.pop(key, None)
            if row is not None and _due(row).timestamp() <= now_ts:
                due.append(row)
            elif row is not None:  # rescheduled to a later time meanwhile: keep it
                self._rows[key] = row
        return due

    def _wait_time(self) -> float:
        wait = self._refresh_due - self.clock.monotonic()
        if self._held():
            wait = min(wait, max(self._retry_at - self.clock.monotonic(), 0.05))
        elif self._heap:
            wait = min(wait, self._heap[0][0] - self._lead() - self.clock.now().timestamp())
        if not self._held() and (expiry := self.offers.next_expiry()) is not None:
            wait = min(wait, (expiry - self.clock.now()).total_seconds())
        return min(max(wait, 0.0), 1.0)

    def _fire(self, rows: list[Job]) -> None:
        now = self.clock.now()
        try:
            pairs, skipped = self._transitions(rows, now)
        except StoreError:  # a calendar could not be read: fire nothing rather than a fire it excludes
            log.exception("could not read the calendars of %d due jobs; retrying in 1 s", len(rows))
            self._retry_later(rows)
            return
        if len(self._prepared) > 4 * self.batch:  # bounded: only fires still ahead matter
            self._prepared = {key: entry for key, entry in self._prepared.items() if entry[0] > now}
        shares = [self.slot_share(row) for row in rows]
        taken = self.clock.monotonic()
        with self._cond:
            self._fired.append((taken, sum(shares)))
            self._forget_old_fires()
            # fires that never reached a worker here (stopped, claimed elsewhere) are past
            self._riding = {key: entry for key, entry in self._riding.items() if entry[0] > now}
        # A plain fire is offered (this node's claims take it straight from SCHEDULED,
        # offers.py); a fire skipped (a calendar, too late) is written, rescheduled.
        offered = [row for row, (_, new) in zip(rows, pairs) if new.status is Status.WAITING]
        ahead = {row.key for row in offered if _due(row) > now}
        # Marked before the offer: the claims may take it at once, and a claim that does not
        # know the fire was prepared ahead seats it among work due now.
        self._prepared.update((row.key, (_due(row), taken)) for row in offered if row.key in ahead)
        with self._cond:
            self._riding.update((row.key, (_due(row), row.affinity)) for row, share in zip(rows, shares)
                                if share < 1.0 and row.key in ahead)
        if offered:
            self.offers.put(offered, now)
            if log.isEnabledFor(logging.INFO):
                for row in offered:
                    log.info("cron job '%s' marked as ready", row.key, extra=job_extra(row.key, row.epoch))
            self.on_ready()
        skips = [(row, pair) for row, pair in zip(rows, pairs) if pair[1].status is not Status.WAITING]
        if skips:
            self._write([row for row, _ in skips], [pair for _, pair in skips], skipped)

    def _write(self, rows: list[Job], pairs: list[tuple[Job, Job]], skipped: list[RunRecord]) -> None:
        """Write a batch of fires: skips (rescheduled) and fires no claim took (WAITING)."""
        taken = self.clock.monotonic()
        with self._cond:
            self._writing_since = taken
            self._batches += 1
        try:
            results = self.store.cas_many(pairs)
        except Exception:
            for row in rows:
                self._prepared.pop(row.key, None)
            with self._cond:
                for row in rows:
                    self._riding.pop(row.key, None)
            log.exception("could not write %d due jobs; retrying in 1 s", len(rows))
            self._retry_later(rows)
            if self._written():
                self.on_ready()
            return
        self._learn_from_write(self.clock.monotonic() - taken)
        waited = self._written()
        if skipped:
            try:
                self.store.add_runs(skipped)
            except Exception:
                log.exception("could not record %d skipped fires", len(skipped))
            self._start_handlers(rows, results)
        if self._settle(rows, results) or waited:
            self.on_ready()

    def _transitions(self, rows: list[Job], now: datetime) -> tuple[list[tuple[Job, Job]], list[RunRecord]]:
        """Each due row to WAITING; one its calendar excludes, or too late to run, skipped instead
        (recorded, rescheduled)."""
        pairs = []
        skipped: list[RunRecord] = []
        for row in rows:
            # A skip of a row nobody owns yet (take_unowned) makes this node its owner in the
            # same write, as its fire's claim would: it is scheduled here from then on.
            decided = row if row.worker_id is not None else adopted(row, self.me)
            excluded = calendar_fire(decided, self._calendar(row), now, self.zone)
            if excluded is not None:
                new, record = excluded
                pairs.append((row, advance(row, Event.UPDATE, new)))
                skipped.append(record)
                log.info("%s", record.note.replace("fire due", f"fire of '{row.key}' due"), extra=job_extra(row.key, row.epoch))
                continue
            late = late_fire(decided, now, self.zone)
            if late is not None:
                new, record = late
                handler = late_handler(row, now)
                if handler is not None:
                    self._handlers[row.key] = advance(None, Event.START, handler)
                pairs.append((row, advance(row, Event.UPDATE, new)))
                skipped.append(record)
                log.warning("%s", record.note.replace("fire due", f"fire of '{row.key}' due"), extra=job_extra(row.key, row.epoch))
                continue
            event, new = fire(row)
            pairs.append((row, advance(row, event, new)))
        return pairs, skipped

    def _calendar(self, row: Job) -> Calendar | None:
        if not row.calendar or self.calendars is None:
            return None
        calendar = self.calendars.get(row.calendar)
        if calendar is None:
            log.warning("'%s' names calendar '%s', which is not stored: its fire is not skipped", row.key, row.calendar,
                        extra=job_extra(row.key, row.epoch))
        return calendar

    def _start_handlers(self, rows: list[Job], results: list) -> None:
        """LATE_ACTION='TYPE.NAME': the late-handler job of each skip that was written."""
        for row, res in zip(rows, results):
            handler = self._handlers.pop(row.key, None)
            if handler is None or not res.applied:
                continue
            try:
                started = self.store.insert(handler).applied
            except Exception:
                log.exception("could not start the late handler of '%s'", row.key)
                continue
            if started:
                log.info("late handler '%s' started for '%s'", handler.key, row.key, extra=job_extra(row.key, row.epoch))
                self.on_ready()

    def claimed(self, offered: list[tuple[Job, bool | None]], took: float | None) -> None:
        """The claims took these offered fires (``True``: the claim applied; None: its write
        failed) in ``took`` seconds (None: a claim that straggled, which teaches nothing about
        the usual write): learn the lead from it as from a batch's write, and read
        again those whose claim did not apply (an UPDATEJOB, a STOPJOB or a takeover came
        first), after a second if a write failed (the store is down: no re-read, re-fire and
        failed claim in a loop)."""
        if took is not None:
            self._learn_from_write(took, rounds=1)
        missed = {row.key for row, applied in offered if not applied}
        if missed:
            with self._cond:
                self._recheck |= missed
                if any(applied is None for _, applied in offered):
                    self._retry_at = self.clock.monotonic() + 1.0
                self._cond.notify()

    def _read_again(self, keys: set[JobKey]) -> None:
        try:
            rows = self.store.get_many(sorted(keys))
        except Exception:
            log.exception("cannot re-read %d jobs; trying again in 1 s", len(keys))
            with self._cond:
                self._recheck |= keys
                self._retry_at = self.clock.monotonic() + 1.0
            return
        for row in rows:
            if row is not None:
                # (an unowned fire whose claim failed is fired again while due, else adopted)
                self.add_whole(row, force=True, unowned=self.fires_unowned(row))  # (as read)

    def _retry_later(self, rows: list[Job]) -> None:
        with self._cond:
            self._retry_at = self.clock.monotonic() + 1.0
        for row in rows:
            self.add(row, force=True, unowned=self.fires_unowned(row))

    def _settle(self, rows: list[Job], results: list) -> int:
        """After the write: a skipped fire's next due time is scheduled, a row changed meanwhile
        (UPDATEJOB, STOPJOB, a takeover) is re-read and decided again. Returns the rows ready."""
        ready = 0
        for row, res in zip(rows, results):
            if not res.applied or res.stored.status is not Status.WAITING:
                self._prepared.pop(row.key, None)
                with self._cond:
                    self._riding.pop(row.key, None)
            if res.applied and res.stored.status is Status.SCHEDULED:
                self.add_whole(res.stored)  # a skipped fire: its next due time (the row as written, read back)
            elif res.applied:
                ready += 1
            else:
                try:
                    current = self.store.get(row.key)
                except Exception:
                    log.exception("cannot re-read %s; trying again in 1 s", row.key)
                    self._retry_later([row])
                    continue
                if current is not None:
                    self.add_whole(current)
        return ready


def _due(row: Job) -> datetime:
    """A scheduled row's due time (every row the scheduler holds has one)."""
    assert row.next_run is not None, row.key
    return row.next_run

