"""Prometheus metrics of one node, served on a loopback port (``[metrics] PORT``; 0 = off).

The seed's JMX stats and more:

    fabricjobs_running_jobs{type, affinity}              gauge    runs going on (systemJobs)
    fabricjobs_executions_total{type, result}            counter  ended runs by result (systemJobsExecution)
    fabricjobs_claim_attempts_total                      counter  claim CAS attempts
    fabricjobs_claim_conflicts_total                     counter  claims another node won
    fabricjobs_claim_unwritten_total                     counter  claims of rows not written yet (Cassandra)
    fabricjobs_reconcile_pass_seconds                    histogram
    fabricjobs_fire_lag_seconds                          histogram  due time -> run start
    fabricjobs_peer_heartbeat_age_seconds{node}          gauge    since each peer's beat last changed (this node's clock)
    fabricjobs_lease_remaining_seconds                   gauge    this node's own lease
    fabricjobs_store_lwt_attempts_total                  counter  conditional writes sent (Cassandra)
    fabricjobs_store_lwt_contention_retries_total        counter  LWTs sent again after contention
    fabricjobs_store_lwt_unknown_outcomes_total          counter  LWT outcomes settled by a SERIAL read
    fabricjobs_store_index_repairs_total                 counter  stale index entries removed
    fabricjobs_store_index_sweeps_total                  counter  range deletes over index tombstones
    fabricjobs_store_slow_entry_writes_total             counter  index entries written again (acknowledged late)
    fabricjobs_store_server_warnings_total               counter  warnings Cassandra sent (tombstones met, big batches)
    fabricjobs_store_index_restored_total                counter  live rows given back their lost index entry (repair pass)
    fabricjobs_store_repair_rows_total                   counter  rows the index repair pass read
    fabricjobs_store_clock_skew_seconds                  gauge    this host's clock minus the store's (Cassandra)

prometheus_client is imported only when the port is set; a disabled Metrics is free.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from ..errors import ConfigError

log = logging.getLogger("fabricjobs.node.metrics")

_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_PASS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


#: The store's own counters (store.base.StoreStats), read at each scrape.
_STORE_COUNTERS = (
    ("fabricjobs_store_lwt_attempts", "lwt_attempts", "Conditional writes (LWTs) sent to the store"),
    ("fabricjobs_store_lwt_contention_retries", "contention_retries",
     "LWTs sent again after an unknown outcome on an unchanged row (contention)"),
    ("fabricjobs_store_lwt_unknown_outcomes", "unknown_outcomes", "LWT outcomes that had to be settled by a SERIAL read"),
    ("fabricjobs_store_index_repairs", "index_repairs", "Stale index entries removed by whoever met them"),
    ("fabricjobs_store_index_sweeps", "index_sweeps", "Range deletes sent over the tombstones of an index partition"),
    ("fabricjobs_store_slow_entry_writes", "slow_entry_writes",
     "Index entries written again because their write was acknowledged too late to be safe"),
    ("fabricjobs_store_server_warnings", "server_warnings",
     "Warnings Cassandra sent with its answers (tombstones met by a read, batches too large)"),
    ("fabricjobs_store_index_restored", "index_restored",
     "Live rows the index repair pass found without their index entry and gave one"),
    ("fabricjobs_store_repair_rows", "repair_rows", "Rows the index repair pass read"),
)


class Metrics:
    def __init__(
        self,
        port: int,
        address: str,
        *,
        running: Callable[[], Iterable[tuple[str, str, int]]],
        peer_ages: Callable[[], dict[str, float]],
        lease_remaining: Callable[[], float],
        store_stats: Callable[[], object] = lambda: None,
        clock_skew: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.enabled = port > 0
        self.port = port
        self._server = None
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.registry = CollectorRegistry()
        self._executions = Counter("fabricjobs_executions", "Ended runs, by job type and result",
                                   ["type", "result"], registry=self.registry)
        self._claims = Counter("fabricjobs_claim_attempts", "Claim CAS attempts", registry=self.registry)
        self._conflicts = Counter("fabricjobs_claim_conflicts", "Claims another node won", registry=self.registry)
        self._unwritten = Counter("fabricjobs_claim_unwritten", "Claims of rows whose insert was not written yet",
                                  registry=self.registry)
        self._pass = Histogram("fabricjobs_reconcile_pass_seconds", "Duration of a reconcile pass",
                               buckets=_PASS_BUCKETS, registry=self.registry)
        self._lag = Histogram("fabricjobs_fire_lag_seconds", "Delay from a run's due time to its start",
                              buckets=_LAG_BUCKETS, registry=self.registry)

        class _State:
            def collect(self_inner):
                g = GaugeMetricFamily("fabricjobs_running_jobs", "Runs going on, by job type and affinity",
                                      labels=["type", "affinity"])
                for job_type, affinity, n in running():
                    g.add_metric([job_type, affinity], n)
                yield g
                ages = GaugeMetricFamily("fabricjobs_peer_heartbeat_age_seconds",
                                         "Seconds since each peer's beat was last seen to change", labels=["node"])
                for node, age in sorted(peer_ages().items()):
                    ages.add_metric([node], age)
                yield ages
                yield GaugeMetricFamily("fabricjobs_lease_remaining_seconds", "This node's lease left",
                                        value=lease_remaining())
                yield GaugeMetricFamily("fabricjobs_store_clock_skew_seconds",
                                        "This host's clock minus the store's (Cassandra: as last measured)",
                                        value=clock_skew())
                stats = store_stats()
                for name, field, text in _STORE_COUNTERS:
                    yield CounterMetricFamily(name, text, value=getattr(stats, field, 0) if stats is not None else 0)

        # Registered after the counters, so a scrape reads fabricjobs_executions_total before
        # fabricjobs_running_jobs: the executor counts a run only once it left the gauge, so no
        # scrape shows a run as ended and still running.
        self.registry.register(_State())
        try:
            self._server, _thread = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:  # in use, or an address this host does not have
            raise ConfigError(f"[metrics] PORT = {port} (ADDRESS {address}): cannot serve metrics there: "
                              f"{exc.strerror or exc}; choose a free port, or 0 for no metrics") from None
        log.info("metrics on http://%s:%d/metrics", address, port)

    def execution(self, job_type: str, result: str) -> None:
        if self.enabled:
            self._executions.labels(job_type, result).inc()

    def claims(self, attempts: int, conflicts: int, unwritten: int = 0) -> None:
        """``unwritten``: lost claims that found no row (on Cassandra an insert's index entry
        is written before its row); counted apart, since no other node won them."""
        if self.enabled:
            self._claims.inc(attempts)
            if conflicts:
                self._conflicts.inc(conflicts)
            if unwritten:
                self._unwritten.inc(unwritten)

    def reconcile_pass(self, seconds: float) -> None:
        if self.enabled:
            self._pass.observe(seconds)

    def fire_lag(self, seconds: float) -> None:
        if self.enabled:
            self._lag.observe(max(0.0, seconds))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def running_by_type(runs: Iterable) -> list[tuple[str, str, int]]:
    """(job type, pool, runs) for the running gauge, from a node's runs."""
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        counts[(run.row.type, run.pool)] = counts.get((run.row.type, run.pool), 0) + 1
    return [(t, a, n) for (t, a), n in sorted(counts.items())]
