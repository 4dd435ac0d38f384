"""Trains and passengers: which runs share a worker, and which rows ride beyond the free slots.

Runs of jobs known to be short (their last runs typically took under 2 ms) that are
started together go to one worker as a *train*: one message instead of one per run, and one
process woken. A train runs one run at a time, so besides the runs that hold pool slots it
may carry *passengers*: rows of known-short jobs claimed beyond the free slots (up to
TRAIN_RUNS - 1 per slot-holding short run of the same claim batch), each of which takes over
a slot when a train-mate that holds one is done (runs.py).

The planning here is pure (no store, no lock, no clock): :func:`plan_trains` for the runs
started together, :func:`passenger_room` and :func:`seat_passengers` for a claim pass
(reconcile.py). :class:`ShortJobs` remembers which jobs are short.
"""

from __future__ import annotations

import collections
from typing import Callable, Iterable, Protocol, Sequence, TypeVar

from ..worker.board import TRAIN_RUNS
from ..model import Job, JobType
from .runs import Run

# Seconds: a job whose runs typically take less than this may ride a train. A run measured on
# its own takes far longer than the same run in a train: a worker woken from its pipe runs on
# cold caches (Probe.record: 0.06 ms back to back, 0.5 ms with 50 ms between runs, up to 3 ms
# beside a busy Cassandra), so a 1 ms bound took such a job for a long one now and then. A
# train of 32 runs of 2 ms is still well within its 0.2 s patience.
SHORT_RUN = 0.002
_SHORT_SEEN = 3  # ... once this many of its runs have been seen
_SHORT_WINDOW = 9  # its last runs, whose median is "typically" (one run preempted on a busy host does not count)
PROBE_RUNS = 4  # runs per probe train: a new job's first burst, on a quarter of the workers
_MAX_KNOWN = 10_000  # job names remembered at most (many one-off names: start over)


class ShortJobs:
    """How long each job's last runs took, and so which jobs are short now."""

    def __init__(self) -> None:
        self.durations: dict[tuple[str, str], collections.deque[float]] = {}  # (type, name) -> last runs' seconds
        self.short: set[tuple[str, str]] = set()  # the (type, name)s known to be short now

    def is_short(self, row: Job) -> bool:
        """Whether runs of ``row``'s job are known to be short (they may ride on a train)."""
        return (row.key.type, row.key.name) in self.short

    def observe(self, row: Job, elapsed: float) -> None:
        """Remember how long a run of this job took (one that ran its course)."""
        key = (row.type, row.name)
        if len(self.durations) > _MAX_KNOWN and key not in self.durations:
            self.durations.clear()  # bounded: many one-off names
            self.short.clear()
        self.learn(key, [elapsed])

    def is_new(self, row: Job) -> bool:
        """Whether this node has seen too few runs of ``row``'s job to tell (none of them long):
        its first burst of runs goes out in probe trains (plan_trains)."""
        last = self.durations.get((row.key.type, row.key.name))
        return row.key.type == JobType.USER_JOB and (
            last is None or (len(last) < _SHORT_SEEN and max(last) < SHORT_RUN))

    def ran_long(self, row: Job) -> None:
        """A run of this job held up its train: short again only after most of a window of
        short runs."""
        self.learn((row.type, row.name), [SHORT_RUN * 10] * _SHORT_WINDOW)

    def lost(self, row: Job) -> None:
        """A run of this job was lost with its node and is taken over here: it was still going
        when that node was last heard of, so it counts as one run that was not short (whatever
        the clocks say). A job this node has not seen is then no longer new: its taken-over
        runs go to workers of their own at once, not in probe trains, where a train-mate would
        hold them up for the train's patience."""
        self.learn((row.key.type, row.key.name), [SHORT_RUN])

    def learn(self, key: tuple[str, str], elapsed: list[float]) -> None:
        last = self.durations.get(key)
        if last is None:
            last = self.durations[key] = collections.deque(maxlen=_SHORT_WINDOW)
        last.extend(elapsed)
        if key[0] == JobType.USER_JOB and len(last) >= _SHORT_SEEN and sorted(last)[len(last) // 2] < SHORT_RUN:
            self.short.add(key)
        else:
            self.short.discard(key)


def plan_trains(runs: Iterable[Run], is_short: Callable[[Job], bool],
                is_new: Callable[[Job], bool] = lambda row: False) -> tuple[list[list[Run]], list[Run]]:
    """The trains to send (each a list of runs for one worker) and the passengers left with no
    room (not expected: claims leave them room; they are given back).

    Each run goes alone, except runs of known-short jobs and passengers: those of one pool go
    in trains of up to TRAIN_RUNS, at least 2 (two workers start at once) and no more than they
    hold slots. Cut by start time (a prepared fire's is its due time), each train gets slot
    holders and passengers fill it up, and runs in start-time order. Fires prepared ahead of
    their due time (``Run.prepared``, decided once, by the claim) never share a train with
    runs due now: a passenger inherits a train-mate's slot, and a slot of work due now must
    not go to a fire that waits."""
    trains: list[list[Run]] = []
    short: dict[tuple[str, bool], list[Run]] = {}
    new: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        if not r.holds_slot or is_short(r.row):
            short.setdefault((r.pool, r.prepared), []).append(r)
        elif is_new(r.row):
            new.setdefault((r.pool, r.row.key.type, r.row.key.name), []).append(r)
        else:
            trains.append([r])
    for group in new.values():
        group.sort(key=lambda r: r.facts.started)
        trains.extend(chunks(group, min(len(group), max(2, -(-len(group) // PROBE_RUNS)))))
    no_room: list[Run] = []
    for group in short.values():
        cars, left = _cars(group)
        trains.extend(cars)
        no_room.extend(left)
    return trains, no_room


def _cars(group: list[Run]) -> tuple[list[list[Run]], list[Run]]:
    """The trains of one pool's short runs and passengers, and the passengers left over."""
    # By start time (a prepared fire's is its due time): a train runs in order, so a run must
    # not wait behind one due later (fires of a lead of up to 1 s mix here).
    group.sort(key=lambda r: r.facts.started)
    holders = [r for r in group if r.holds_slot]
    riders = [r for r in group if not r.holds_slot]
    # One run goes alone; more: at least two trains, as few as hold TRAIN_RUNS each.
    count = len(holders) if len(group) < 2 else min(len(holders), max(2, -(-len(group) // TRAIN_RUNS)))
    cars = chunks(holders, count)
    size = min(TRAIN_RUNS, -(-len(group) // count)) if count else 0
    at = 0
    for car in cars:  # passengers fill the cars up to an even size, in claim order
        take = max(0, size - len(car))
        car.extend(riders[at:at + take])
        at += take
    for car in cars:
        car.sort(key=lambda r: r.facts.started)
    return cars, riders[at:]


T = TypeVar("T")


def chunks(items: Sequence[T], count: int) -> list[list[T]]:
    """``items`` in ``count`` contiguous parts of sizes differing by at most one."""
    size, extra = divmod(len(items), count) if count else (0, 0)
    out, at = [], 0
    for i in range(count):
        n = size + (1 if i < extra else 0)
        out.append(list(items[at:at + n]))
        at += n
    return out


class _Limit(Protocol):
    @property
    def name(self) -> str: ...


L = TypeVar("L", bound=_Limit)


def slot_share(short: bool) -> float:
    """The part of a pool slot a fire prepared ahead of its due time holds while it waits: a
    known-short one rides a train (up to TRAIN_RUNS runs on one slot), any other holds one."""
    return 1.0 / TRAIN_RUNS if short else 1.0


def holders_for(riders: int) -> int:
    """The slot holders that seat ``riders`` short runs on trains, the rest as passengers."""
    return -(-riders // TRAIN_RUNS)


def passenger_room(chosen: Iterable[tuple[Job, tuple[_Limit, bool]]], is_short: Callable[[Job], bool]) -> dict[str, int]:
    """Passengers each pool may take, for the rows ``chosen`` to claim as (row, (limit,
    exceptional)): TRAIN_RUNS - 1 per chosen short run of it (not an exceptional one)."""
    room: dict[str, int] = {}
    for row, (lim, exceptional) in chosen:
        if not exceptional and is_short(row):
            room[lim.name] = room.get(lim.name, 0) + TRAIN_RUNS - 1
    return room


def seat_passengers(riders: Iterable[Job], room: dict[str, int],
                    pools_of: Callable[[Job], Iterable[L]]) -> list[tuple[Job, tuple[L, bool], bool]]:
    """Seat ``riders`` (claimable known-short rows, in claim order) within ``room``, each in
    the first of its pools (``pools_of``, in preference order) with room left: the claims as
    (row, (limit, False), True)."""
    room = dict(room)
    left = sum(room.values())
    out: list[tuple[Job, tuple[L, bool], bool]] = []
    for row in riders:
        for lim in pools_of(row):
            if room.get(lim.name, 0) > 0:
                room[lim.name] -= 1
                left -= 1
                out.append((row, (lim, False), True))
                break
        if not left:
            break
    return out


def riding(chosen: Sequence[tuple[Job, tuple[_Limit, bool], bool]], won: Sequence[bool],
           ahead: Callable[[Job], bool] = lambda row: False) -> list[bool]:
    """Whether each claim of ``chosen`` (row, (limit, exceptional), passenger) rides as a
    passenger once ``won`` says which were applied: a passenger takes the slot of a slot
    holder of its pool whose claim was lost (a fire prepared ahead only that of another such
    fire, see plan_trains). The holders are the oldest rows, the ones other nodes go for
    too; a passenger left without any was given back unstarted and claimed again elsewhere
    (four nodes draining one queue: up to 600 in one pass, 15 % of all runs)."""
    lost = collections.Counter((lim.name, ahead(row)) for (row, (lim, exceptional), rides), w in zip(chosen, won)
                               if not w and not rides and not exceptional)
    out = []
    for (row, (lim, _), rides), w in zip(chosen, won):
        if rides and w and lost[(lim.name, ahead(row))] > 0:
            lost[(lim.name, ahead(row))] -= 1
            rides = False
        out.append(rides)
    return out
