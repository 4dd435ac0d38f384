"""Prometheus metrics of one node, served on a loopback port (``[metrics] PORT``; 0 = off).

The seed's JMX stats and more, each declared once in :data:`METRICS` (which also makes the
reference page docs/reference/metrics.md). prometheus_client is imported only when the port is
set; a disabled Metrics is free.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import ConfigError

log = logging.getLogger("fabricjobs.node.metrics")

_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_PASS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True)
class MetricInfo:
    """One metric as a scrape shows it: ``name`` without the ``_total`` a counter gets."""

    name: str
    kind: str  # counter, gauge or histogram
    help: str
    labels: tuple[str, ...] = ()
    store_field: str = ""  # a store counter (store.base.StoreStats) read at each scrape

    @property
    def exposed(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name


METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("fabricjobs_running_jobs", "gauge", "Runs going on, by job type and affinity (the seed's systemJobs)",
               ("type", "affinity")),
    MetricInfo("fabricjobs_executions", "counter", "Ended runs, by job type and result (the seed's systemJobsExecution); "
               "a run lost with its node (LOST) is counted by the node that took it over", ("type", "result")),
    MetricInfo("fabricjobs_claim_attempts", "counter", "Claim CAS attempts"),
    MetricInfo("fabricjobs_claim_conflicts", "counter", "Claims another node won"),
    MetricInfo("fabricjobs_claim_unwritten", "counter",
               "Claims of rows whose insert was not written yet (on Cassandra an insert's index entry is written "
               "just before its row)"),
    MetricInfo("fabricjobs_reconcile_pass_seconds", "histogram", "Duration of a reconcile pass"),
    MetricInfo("fabricjobs_fire_lag_seconds", "histogram", "Delay from a run's due time to its start"),
    MetricInfo("fabricjobs_peer_heartbeat_age_seconds", "gauge",
               "Seconds since each peer's beat was last seen to change, on this node's clock (a peer that "
               "stopped cleanly is not listed)", ("node",)),
    MetricInfo("fabricjobs_lease_remaining_seconds", "gauge", "This node's lease left"),
    MetricInfo("fabricjobs_store_lwt_attempts", "counter", "Conditional writes (LWTs) sent to the store (Cassandra; 0 on SQLite)",
               store_field="lwt_attempts"),
    MetricInfo("fabricjobs_store_lwt_contention_retries", "counter",
               "LWTs sent again after an unknown outcome on an unchanged row (contention)",
               store_field="contention_retries"),
    MetricInfo("fabricjobs_store_lwt_unknown_outcomes", "counter", "LWT outcomes that had to be settled by a SERIAL read",
               store_field="unknown_outcomes"),
    MetricInfo("fabricjobs_store_index_repairs", "counter",
               "Stale index entries removed by whoever met them (a crash's leftovers, a lost delete)",
               store_field="index_repairs"),
    MetricInfo("fabricjobs_store_index_sweeps", "counter", "Range deletes sent over the tombstones of an index partition",
               store_field="index_sweeps"),
    MetricInfo("fabricjobs_store_slow_entry_writes", "counter",
               "Index entries written again because their write was acknowledged too late to be safe",
               store_field="slow_entry_writes"),
    MetricInfo("fabricjobs_store_server_warnings", "counter",
               "Warnings Cassandra sent with its answers (tombstones met by a read, batches too large)",
               store_field="server_warnings"),
    MetricInfo("fabricjobs_store_index_restored", "counter",
               "Live rows the index repair pass found without their index or listing entry, and gave one",
               store_field="index_restored"),
    MetricInfo("fabricjobs_store_repair_rows", "counter", "Rows the index repair pass read", store_field="repair_rows"),
    MetricInfo("fabricjobs_store_clock_skew_seconds", "gauge",
               "This host's clock minus the store's, as last measured (Cassandra; 0 on SQLite): beyond "
               "[cassandra] MAX_CLOCK_SKEW_SEC the node writes nothing"),
)
_BY_NAME = {m.name: m for m in METRICS}


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
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry()
        self._make_counters()
        # Registered after the counters, so a scrape reads fabricjobs_executions_total before
        # fabricjobs_running_jobs: the executor counts a run only once it left the gauge, so no
        # scrape shows a run as ended and still running.
        self.registry.register(_State(running, peer_ages, lease_remaining, store_stats, clock_skew))
        try:
            self._server, _thread = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:  # in use, or an address this host does not have
            raise ConfigError(f"[metrics] PORT = {port} (ADDRESS {address}): cannot serve metrics there: "
                              f"{exc.strerror or exc}; choose a free port, or 0 for no metrics") from None
        log.info("metrics on http://%s:%d/metrics", address, port)

    def _make_counters(self) -> None:
        from prometheus_client import Counter, Histogram

        def counter(name: str) -> Counter:
            m = _BY_NAME[name]
            return Counter(m.name, m.help, list(m.labels), registry=self.registry)

        def histogram(name: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, _BY_NAME[name].help, buckets=buckets, registry=self.registry)

        self._executions = counter("fabricjobs_executions")
        self._claims = counter("fabricjobs_claim_attempts")
        self._conflicts = counter("fabricjobs_claim_conflicts")
        self._unwritten = counter("fabricjobs_claim_unwritten")
        self._pass = histogram("fabricjobs_reconcile_pass_seconds", _PASS_BUCKETS)
        self._lag = histogram("fabricjobs_fire_lag_seconds", _LAG_BUCKETS)

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


class _State:
    """The gauges and the store's counters, read from the node at each scrape."""

    def __init__(self, running, peer_ages, lease_remaining, store_stats, clock_skew) -> None:
        self.running, self.peer_ages = running, peer_ages
        self.lease_remaining, self.store_stats, self.clock_skew = lease_remaining, store_stats, clock_skew

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name: str, **kwargs) -> GaugeMetricFamily:
            m = _BY_NAME[name]
            return GaugeMetricFamily(m.name, m.help, labels=list(m.labels) or None, **kwargs)

        g = gauge("fabricjobs_running_jobs")
        for job_type, affinity, n in self.running():
            g.add_metric([job_type, affinity], n)
        yield g
        ages = gauge("fabricjobs_peer_heartbeat_age_seconds")
        for node, age in sorted(self.peer_ages().items()):
            ages.add_metric([node], age)
        yield ages
        yield gauge("fabricjobs_lease_remaining_seconds", value=self.lease_remaining())
        yield gauge("fabricjobs_store_clock_skew_seconds", value=self.clock_skew())
        stats = self.store_stats()
        for m in METRICS:
            if m.store_field:
                yield CounterMetricFamily(m.name, m.help, value=getattr(stats, m.store_field, 0) if stats is not None else 0)


def running_by_type(runs: Iterable) -> list[tuple[str, str, int]]:
    """(job type, pool, runs) for the running gauge, from a node's runs."""
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        counts[(run.row.type, run.pool)] = counts.get((run.row.type, run.pool), 0) + 1
    return [(t, a, n) for (t, a), n in sorted(counts.items())]
