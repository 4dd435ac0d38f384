"""One node: its lifecycle, and the wiring of its parts, built in this order (each from the
ones before it; what flows back goes through signals.Signals):

    board, liveness, pool -> the lease, who is dead, the worker processes
    run table, metrics    -> the node's runs (executor parts share it), what it exports
    scheduler             -> fires owned SCHEDULED jobs at their due time
    executor              -> runs on worker processes, post-execution writes
    heartbeat             -> the nodes row and the lease (fences the node when it cannot write)
    reconcile             -> claims, takeovers, stop/restart/kill (the main thread's loop)

Start-up refuses a name that a live node uses. Shutdown (SIGTERM, Ctrl-C; docs/guides/cluster.md) stops
claiming, aborts running jobs, waits SHUTDOWN_GRACE_SEC, kills what is left, and marks the
node 'stopped' so that other nodes take its work over at once; rows of interrupted runs are
left as they are, to be re-run.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import socket
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, TypeVar

from ..calendar import CalendarCache
from ..affinity import NodeAffinity
from ..clock import Clock, following
from ..config import Config, NodeId, load_node_id
from ..errors import FabricJobsError, PlacementError, StoreError, StoreUnavailable
from ..worker import cgroups
from ..worker.board import Board
from ..worker.spool import spool_dir
from .livelog import LiveLogFlusher
from ..worker.reaper import pid_alive as _pid_alive
from .same_host import process_start, same_process
from .. import __version__, dependencies
from ..about import schema_version
from ..jobs.registry import JobCatalog
from ..model import NodeState, Status
from ..schedule import resolve_zone
from ..store import JobStore, open_store
from ..wakeup import Doorbell
from .executor import EndReason, Executor
from ..sdnotify import notify
from .heartbeat import Heartbeat
from .liveness import Liveness
from .metrics import Metrics, running_by_type
from .parts import ReconcileParts
from .reconcile import Reconciler
from .runs import RunTable
from .scheduler import Scheduler
from .repair import IndexRepairer
from .settings import NodeSettings
from .signals import Signals
from .trains import slot_share
from ..worker.pool import WorkerPool

if TYPE_CHECKING:
    from .listener_requests import ListenerRequests


#: How long a thread may hold the GIL while another waits for it (Python's default: 5 ms).
#: The node's threads mostly wait on pipes and the store; a collector that has a finished
#: run in hand must not wait 5 ms for the reconcile loop to let go.
_SWITCH_INTERVAL = 0.0005
CALENDAR_TTL_SEC = 5.0  # a changed calendar applies to every node's fires within this
_PLACEMENT_EVERY = 30.0  # seconds between checks of this node's store settings beside the others
# ... and to the first one: two nodes started together in two DCs at local levels both passed
# the check at open (neither's row was written yet), and each claims until the younger learns.
_PLACEMENT_FIRST = 3.0
_VERDICT_GAP = 0.002  # seconds after a possible death verdict that the nodes are read again
_OWNED = (Status.IN_PROCESS, Status.SCHEDULED, Status.STOPPING, Status.RESTART)  # rows a node holds
T = TypeVar("T")
_SETTLE_CLAIMS_SEC = 15.0  # seconds a stopping node waits for claims still being written (an LWT, settled, sent again)

log = logging.getLogger("fabricjobs.node")


class NodeStartError(FabricJobsError):
    """The node cannot start (its name is taken by a live node, ...)."""


def next_full_pass(periodic: float, verdict: float | None, now: float) -> float:
    """When the loop's next full pass is due (monotonic): at its period, or just after the
    earliest moment a silent peer could be judged dead if that comes first, so that a crash is
    taken over one read after the threshold. A verdict time already past means the read meant
    to judge it failed (the store is failing): the periodic pass, or its back-off after an
    error, comes next; chasing the past would spin."""
    if verdict is not None and now < verdict < periodic:
        return verdict + _VERDICT_GAP
    return periodic


class Node:
    """A node: its parts, built in dependency order (each from the parts it uses, none handed
    the Node), and its lifecycle. What flows back between parts goes through :class:`Signals`."""

    def __init__(
        self,
        config: Config,
        *,
        name: str | None = None,
        node_id: NodeId | None = None,
        clock: Clock | None = None,
        store: JobStore | None = None,
        log_format: str = "text",
    ) -> None:
        self.config = config
        self.settings = s = NodeSettings.from_config(config)
        s.check()
        self.name = name or config.node_name
        self.dc = config.get("node", "DC")
        self.zone = resolve_zone(config.get("node", "TIME_ZONE") or None)
        self.node_id = node_id if node_id is not None else load_node_id(config.get("node", "NODE_ID_FILE"))
        self.affinity = NodeAffinity.from_node_id(self.name, self.dc, self.node_id, s.pool_size, config.node_addresses)
        self.catalog = JobCatalog.from_config(config)
        self.catalog.check_directories()  # before anything is opened: a refusal leaves nothing behind
        self.signals = Signals()
        # A host may boot before its store: the node waits for it (docs/guides/cluster.md,
        # "Starting a node") rather than exit at once, which a service manager restarting it
        # every few seconds would soon give up on. One budget for the whole start-up:
        # connecting, then the first reads and beat (start()).
        self._start_by = time.monotonic() + s.start_patience
        self.store = store or self._patiently("connect to its store", lambda: open_store(config), self._start_by)
        self.clock = following(clock, self.store.wall_time())  # the store's time on Cassandra
        self.doorbell = Doorbell.for_store(self.store)
        self._started = False
        self._stop_doorbell: Callable[[], None] | None = None
        self._listener_requests: ListenerRequests | None = None  # built at a listener's first request
        self._build_parts(s, log_format)

    def _build_parts(self, s: NodeSettings, log_format: str) -> None:
        """Each part from the ones before it: no callback into a part not yet built."""
        self.board = Board.create(s.pool_size)
        self.liveness = Liveness(self.name, self.clock, s.dead_after)
        run_cgroups, self.isolation = cgroups.for_node(s.run_cgroups, cgroups.Limits(s.run_memory_mb, s.run_pids_max))
        self.pool = WorkerPool(
            self.board, s.pool_size, node=self.name, idle_sec=s.worker_idle,
            log_level=logging.getLogger("fabricjobs").getEffectiveLevel(), log_format=log_format, cgroups=run_cgroups,
        )
        table = RunTable()
        self.metrics = Metrics(
            self.config.get("metrics", "PORT"), self.config.get("metrics", "ADDRESS"),
            running=lambda: running_by_type(table.all()), peer_ages=self.liveness.ages,
            lease_remaining=lambda: max(0.0, self.board.lease_until() - self.clock.monotonic()),
            store_stats=lambda: self.store.stats, clock_skew=self.store.clock_skew,
        )
        self.scheduler = Scheduler(self.store, self.clock, self.name, on_ready=self.signals.wake, zone=self.zone,
                                   max_ahead=max(1, s.pool_size // 2),
                                   slot_share=lambda row: slot_share(self.executor.is_short(row)),
                                   calendars=CalendarCache(self.store.calendar, CALENDAR_TTL_SEC, self.clock.monotonic))
        self.executor = Executor(
            self.store, self.clock, self.pool, self.catalog, me=self.name, max_tries=s.max_tries,
            retry_delay=s.retry_delay, output_max=s.output_max, log_max=s.run_log_max, printed_max=s.max_output,
            zone=self.zone,
            on_scheduled=self.scheduler.add_whole, on_freed=self.signals.wake, on_tasks_changed=self.signals.publish_tasks,
            on_final=self.signals.job_final, on_outcome=self.signals.wake, on_dispatch=self.scheduler.dispatched,
            answer_listener=self._answer_listener, table=table, metrics=self.metrics,
        )
        self.heartbeat = Heartbeat(
            self.store, self.board, self.clock, name=self.name, dc=self.dc,
            interval=s.heartbeat_interval, miss=s.heartbeat_miss,
            info=self._info, tasks=self.executor.tasks, running=self.executor.running,
            on_fenced=self._on_fenced, on_recovered=self._on_recovered,
            on_lapse=self.executor.end_generation, on_displaced=self._on_displaced,
            poked=self.signals.tasks_changed,
        )
        self.live_log = LiveLogFlusher(
            self.store, spool_dir(self.board.path), lambda: {r.task: (r.row.key, r.row.epoch) for r in table.all()},
            self.clock, interval=s.live_log_flush, max_bytes=s.live_log_max)
        self.repairer = IndexRepairer(self.store, self.clock, self._repair_share,
                                      rows_per_sec=s.repair_rows_per_sec, pause=s.repair_pause)
        self.reconciler = Reconciler(self.name, s, ReconcileParts(
            store=self.store, executor=self.executor, scheduler=self.scheduler, liveness=self.liveness,
            affinity=self.affinity, board=self.board, clock=self.clock, metrics=self.metrics,
            signals=self.signals, doorbell=self.doorbell))

    # -- what the parts call back --------------------------------------------------------------------

    def _info(self) -> dict:
        info = self.affinity.to_info()
        info["running"] = self.executor.per_pool()
        info["zone"] = str(self.zone)
        info["isolation"] = self.isolation  # how its runs' processes are ended with them
        if self.pool.cgroups is not None:  # where they are: a peer of this host that takes them over ends them
            info["run_cgroups"] = self.pool.cgroups.home
        ticks = process_start(os.getpid())
        if ticks is not None:
            info["pid_start"] = ticks  # with pid, names this process: a pid alone may be reused
        return info

    def _repair_share(self) -> tuple[int, int]:
        """This node's share of the rows for the index repair pass: its place among the live
        nodes' names, as for claim lanes (repair.py)."""
        names = sorted(set(self.liveness.alive()) | {self.name})
        return len(names), names.index(self.name)

    def _answer_listener(self, listener, op: str, args: tuple):
        """A listener run's store request, answered here (its worker holds no store)."""
        if self._listener_requests is None:
            from ..service import CommandService
            from .listener_requests import ListenerRequests

            self._listener_requests = ListenerRequests(
                CommandService(self.store, self.config, self.clock, catalog=self.catalog, doorbell=self.doorbell))
        return self._listener_requests.answer(listener, op, args)

    def _fence(self, why: str) -> None:
        self.signals.fenced = True
        self.scheduler.paused = True
        for run in self.executor.runs():
            self.executor.kill(run, EndReason.LEASE, why)

    def _on_fenced(self) -> None:
        self._fence("run ended: this node could not renew its lease")

    def _on_displaced(self, row) -> None:
        """Another instance runs under this name now: stop at once, without touching rows."""
        self._fence("run ended: another instance took this node's name")
        self.stop()

    def _check_placement(self) -> None:
        """Two nodes started together in two data centres at local levels both passed the
        store's check at open: the younger one learns of the older here, and stops
        (docs/explanation/cassandra-queue.md, "Settings per topology")."""
        try:
            self.store.check_placement(self.name, self.heartbeat.started)
        except PlacementError as exc:
            log.error("%s: node %s stops", exc, self.name)
            self._fence("run ended: this node's store settings are unsafe beside an older node")
            self.stop()
        except StoreError as exc:  # the store is away: judged at the next check
            log.debug("could not check this node's placement: %s", exc)

    def _on_recovered(self) -> None:
        self.signals.fenced = False
        self.scheduler.paused = False
        self.signals.wake_full()

    # -- start-up ------------------------------------------------------------------------------------

    def _check_name(self) -> None:
        """Refuse a name that a live node uses; wait out a dead predecessor's runs.

        Same host: a running process with the old pid means the name is taken. If that process
        is gone, its runs end within a moment (they watch it) and, at the latest, when its
        lease runs out; the tasks it published are waited for before anything is taken back.
        Another host: there is no way to tell a crash from a partition, so the beat must be seen
        standing still for the old node's own dead threshold before the name is taken.
        """
        row = self.store.node(self.name)
        if row is None or row.state == NodeState.STOPPED:
            return
        self.reconciler.previous_life_seen = row.beat_time  # (the runs it lost ended then, not at this start)
        threshold = _row_threshold(row, self.settings.dead_after)
        if row.host == socket.gethostname() and row.pid != os.getpid():
            if _pid_alive(row.pid) and same_process(row.pid, row.info):
                raise NodeStartError(
                    f"node {self.name!r} is already running (pid {row.pid} on {row.host}); "
                    "give this one another name (--name, or [node] NAME)"
                )
            pids = _task_pids(row)
            deadline = time.monotonic() + threshold
            while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            return  # its process is gone: we are its restart and take its jobs back
        log.warning("node %s: the last instance ran on %s; waiting up to %.0f s to see it is gone",
                    self.name, row.host, threshold)
        deadline = time.monotonic() + threshold
        while time.monotonic() < deadline:
            time.sleep(min(0.2, self.settings.heartbeat_interval / 2))
            now = self.store.node(self.name)
            if now is not None and (now.beat, now.incarnation) != (row.beat, row.incarnation):
                raise NodeStartError(f"node {self.name!r} is alive on host {now.host}; choose another name")

    def _patiently(self, what: str, step: Callable[[], T], deadline: float) -> T:
        """``step`` of the start-up (its result), tried again while the store does not answer
        it, until ``deadline`` (monotonic): a store not up yet, or a Cassandra host killed a
        moment ago, still thought alive by its peers for seconds, through which a read times
        out; the node then waits, it does not exit (docs/guides/cluster.md, "Starting a node").
        Any other store error (this host's clock beyond the bound) ends the start-up at once
        (a full SQLite disk is StoreUnavailable: waited out). A step's False is a store that did not answer."""
        pause = 0.2
        while True:
            try:
                result = step()
                if result is not False:
                    return result
                failure = "it did not answer"
            except StoreUnavailable as exc:
                failure = str(exc)
            if time.monotonic() + pause > deadline:
                # Not a NodeStartError: the store may answer again, and the node's exit status
                # (1, not 2) lets a service manager start it again.
                raise StoreUnavailable(f"node {self.name!r} cannot {what}: {failure} "
                                       f"(tried for {self.settings.start_patience:.0f} s)")
            log.warning("node %s could not %s yet (%s); trying again", self.name, what, failure)
            if self.signals.stop.wait(pause):  # SIGTERM, or another instance took the name
                raise NodeStartError(f"node {self.name!r} stopped while it waited for the store")
            pause = min(pause * 2, 5.0)

    def start(self) -> None:
        deadline = self._start_by
        self._patiently("read its name's row in the store", self._check_name, deadline)
        self._patiently("write its heartbeat to the store", lambda: self.heartbeat.beat_once(patient=True), deadline)
        try:  # once its row is written: from here on the store judges this process as a node
            self.store.check_placement(self.name, self.heartbeat.started)
        except PlacementError as exc:
            raise NodeStartError(f"{exc}: node {self.name} does not start") from None
        except StoreError as exc:  # the store is away: judged at the loop's first check
            log.debug("could not check this node's placement: %s", exc)

        def forget_old_kills() -> None:  # meant for an earlier life of this node
            for req in self.store.kill_requests(self.name):
                self.store.delete_kill_request(self.name, req.task)

        self._patiently("read its kill requests", forget_old_kills, deadline)
        self._patiently("read the nodes table", lambda: self.liveness.observe(self.store.nodes()), deadline)
        self.heartbeat.start()
        self.pool.prewarm()
        self.live_log.start()
        self.repairer.start()
        self.executor.start_collector()
        try:
            self.scheduler.refresh()
        except StoreError as exc:  # a store that failed once, after this node's first beat, is no reason to exit
            log.warning("the scheduler could not read its jobs yet (%s); its loop tries again", exc)
        self.scheduler.start()
        self._stop_doorbell = self.doorbell.listen(self.name, self.signals.wake_full)
        self._started = True
        limits = ", ".join(str(lim) for lim in self.affinity.limits.values())
        log.info(  # (the release and schema: what tells upgraded hosts apart during a rolling upgrade)
            "node %s started (fabricjobs %s, pid %d, dc %s, pool %d, affinity %s, priorities %s, heartbeat %.0f ms "
            "x %d, store %s schema version %d, runs isolated by %s)",
            self.name, __version__, os.getpid(), self.dc, self.settings.pool_size, limits,
            self.affinity.priorities_text, self.settings.heartbeat_interval * 1000, self.settings.heartbeat_miss,
            self.store.backend, schema_version(self.store.backend), self.isolation,
        )

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop` (or a signal); the reconcile loop runs on this thread."""
        sys.setswitchinterval(_SWITCH_INTERVAL)
        if not self._started:
            self.start()
        s = self.settings
        next_full = 0.0
        next_purge = self.clock.monotonic() + random.uniform(1, 5)
        next_placement = self.clock.monotonic() + _PLACEMENT_FIRST
        sig = self.signals
        while not sig.stop.is_set():
            mono = self.clock.monotonic()
            full = sig.full.is_set() or mono >= next_full
            sig.wakeup.clear()
            if full:
                sig.full.clear()
                next_full = mono + s.reconcile_interval
            try:
                began = time.perf_counter()
                self._pass(full)
                self.metrics.reconcile_pass(time.perf_counter() - began)
            except Exception:
                log.exception("reconcile pass failed (retrying)")
                next_full = mono + min(s.reconcile_interval, 1.0)
            if mono >= next_purge:
                next_purge = mono + self._purge_archive()
            if mono >= next_placement:
                next_placement = mono + _PLACEMENT_EVERY
                self._check_placement()
            next_full = next_full_pass(next_full, self.liveness.next_verdict(), self.clock.monotonic())
            takeover = self.reconciler.next_takeover
            if takeover is not None and takeover > self.clock.monotonic():  # (a past one: its pass ran)
                next_full = min(next_full, takeover)
            deadline = self.executor.enforce_deadlines()
            timeout = next_full - self.clock.monotonic()
            if deadline is not None:
                timeout = min(timeout, deadline - self.clock.monotonic())
            if self.reconciler.next_wake is not None:
                until = (self.reconciler.next_wake - self.clock.now()).total_seconds()
                timeout = min(timeout, max(until, 0.01))
            if self.executor.retry_at is not None:
                timeout = min(timeout, max(self.executor.retry_at - self.clock.monotonic(), 0.01))
            if timeout > 0:
                sig.wakeup.wait(timeout)
        self._shutdown()

    def _pass(self, full: bool) -> None:
        """Write the outcomes that are ready, then reconcile. Every write commits by itself, so
        another node waits for the store's write lock only while the statements run (the
        choosing and deciding are done outside it); the outcomes go first, so this pass's claims
        fill the slots they freed. A run starts only once its claim has committed; the runs one
        batch of claims took leave together, short ones in trains."""
        self.executor.flush()
        with self.executor.holding_starts():
            self.reconciler.run_pass(full)

    def _purge_archive(self) -> float:
        """Delete archived rows past K2JOB_ARCHIVING_TIME_HOUR; return seconds until the next try."""
        hours = self.settings.archive_hours
        try:
            # By the store's clock, not this node's: a node whose clock ran a month fast deleted
            # fresh rows. And never a parent that blocked children still wait on: without its
            # row a FAILED parent can no longer be resumed, and its children stay blocked for good
            # (dependencies.py: a missing parent keeps them blocked).
            cutoff = self.store.store_time() - timedelta(hours=hours)
            # Nor a parent of a HELD child (RELEASEJOB finds its parents' outcome then).
            waiting = [*self.store.blocked_jobs(100_000), *self.store.by_status([Status.HELD], limit=100_000)]
            keep = frozenset(p for child in waiting for p in dependencies.parents_of(child)) \
                if self.store.deletes_archived else frozenset()  # (rows that expire by TTL cannot be kept)
            deletes = (("archived job rows", lambda before, limit: self.store.delete_archived(before, limit, keep=keep)),
                       ("run records", self.store.delete_runs))
            for what, delete in deletes:
                total = 0
                while True:
                    n = delete(cutoff, limit=5000)
                    total += n
                    if n < 5000:
                        break
                if total:
                    log.info("deleted %d %s older than %g hours", total, what, hours)
        except Exception:
            log.exception("archive retention failed (retrying later)")
        try:
            self._forget_dead_nodes(timedelta(hours=hours))
        except Exception:
            log.exception("forgetting dead nodes failed (retrying later)")
        return max(0.5, min(300.0, hours * 3600 / 4))

    def _forget_dead_nodes(self, retention: timedelta) -> None:
        """Delete the ``nodes`` rows of nodes gone for longer than the archive retention, so
        NODES and PS ALL do not list every node that ever ran. Two judgments must agree: this
        node has watched the beat stand still (liveness, its own clock), and the last beat is
        older than the retention by the store's clock. And the node owns no live row: its jobs
        were taken over long ago, but one that no live node may run (its affinity) stays with
        it, and a node started later finds dead owners through their rows in ``nodes``. A node
        that comes back writes its row again with its next beat, before it claims anything."""
        cutoff = self.store.store_time() - retention
        for row in self.store.nodes():
            if (row.name != self.name and row.beat_time is not None and row.beat_time < cutoff
                    and self.liveness.is_dead(row.name)
                    and not self.store.by_owner([row.name], _OWNED, limit=1)):
                self.store.delete_node(row)  # only as read: a beat written since survives
                log.info("forgetting node %s: no heartbeat since %s (%g hours)", row.name, row.beat_time,
                         retention.total_seconds() / 3600)

    def stop(self) -> None:
        self.signals.stop.set()
        self.signals.wakeup.set()

    def _shutdown(self) -> None:
        s = self.settings
        self.signals.stopping = True
        notify("STOPPING=1", f"STATUS=node {self.name} stopping")
        log.info("node %s stopping: no new claims; %d running jobs get %.0f s to end",
                 self.name, self.executor.running(), s.shutdown_grace)
        if self._stop_doorbell is not None:
            self._stop_doorbell()
        self.scheduler.stop()
        self.executor.shutting_down = True
        with self.executor.holding_starts():
            # A claim still being written may yet apply: its run is ended before it begins, as
            # the others are ended (not left IN_PROCESS with nothing running it until a takeover).
            self.reconciler.claims.stragglers.settle(_SETTLE_CLAIMS_SEC)
            for run in self.executor.runs():
                self.executor.abort(run, EndReason.SHUTDOWN, s.shutdown_grace, "ended by node shutdown")
        deadline = self.clock.monotonic() + s.shutdown_grace + 5
        while self.executor.running() and self.clock.monotonic() < deadline:
            self.executor.enforce_deadlines()
            self.executor.flush()
            self.signals.wakeup.wait(0.05)
            self.signals.wakeup.clear()
        self.executor.flush()
        self.reconciler.close()
        self.executor.stop_collector()
        self.pool.shutdown(kill=True)  # nothing of ours may run once others see us 'stopped'
        self.live_log.stop()
        self.repairer.stop()
        self.heartbeat.stop()
        self.heartbeat.beat_once(state=NodeState.STOPPED)
        self.board.close(unlink=True)
        self.doorbell.close()
        self.metrics.close()
        self.store.close()
        log.info("node %s stopped", self.name)

    def install_signal_handlers(self) -> None:
        count = {"n": 0}

        def handler(signum, frame):
            count["n"] += 1
            if count["n"] > 1:
                log.warning("second %s: killing running jobs now", signal.Signals(signum).name)
                self.settings = self.settings.without_grace()
                for run in self.executor.runs():
                    self.executor.kill(run, EndReason.SHUTDOWN, "killed by node shutdown")
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        # The terminal or ssh session a foreground node ran in went away: a clean stop, not
        # the default death, which left its runs to be taken over as lost, a try counted each.
        signal.signal(signal.SIGHUP, handler)


def _row_threshold(row, default: float) -> float:

    try:
        info = json.loads(row.info or "{}")
        return float(info["heartbeat_ms"]) / 1000.0 * int(info["miss"])
    except (ValueError, KeyError, TypeError):
        return default


def _task_pids(row) -> list[int]:

    try:
        return [int(t["thread"]) for t in json.loads(row.tasks or "[]") if t.get("thread")]
    except (ValueError, TypeError, AttributeError):
        return []
