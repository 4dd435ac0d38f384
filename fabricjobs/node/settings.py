"""A node's settings: the config keys its parts read, read once, typed."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import Config
from ..errors import ConfigError


@dataclass(frozen=True)
class NodeSettings:
    pool_size: int
    max_tries: int
    retry_delay: float
    reconcile_interval: float
    owner_precedence_ms: int
    lane_patience_ms: int
    stop_grace: float
    shutdown_grace: float
    claim_exceptional_sec: float
    give_up_min_minutes: float
    give_up_max_minutes: float
    archive_hours: float
    heartbeat_interval: float
    heartbeat_miss: int
    output_max: int
    run_log_max: int
    live_log_flush: float  # seconds between a node's flushes of live log lines (0: none)
    live_log_max: int
    worker_idle: float
    priority_aging_sec: float
    dependency_check_sec: float
    repair_rows_per_sec: float = 500.0  # the index repair pass's pace (0: no repair pass), repair.py
    repair_pause: float = 300.0  # seconds between two repair passes
    run_cgroups: bool = True  # [jobs] RUN_CGROUPS (worker/cgroups.py)
    run_memory_mb: int = 0
    run_pids_max: int = 0
    max_output: int = 4 * 1024 * 1024  # [jobs] MAX_OUTPUT_BYTES: what a run prints, passed on live
    start_patience: float = 60.0  # [node] START_PATIENCE_SEC: how long a start-up waits for the store

    @classmethod
    def from_config(cls, c: Config) -> "NodeSettings":
        g = c.get
        return cls(
            pool_size=g("jobs", "K2JOBS_POOL_SIZE"),
            max_tries=g("jobs", "MAX_TRIES"),
            retry_delay=g("jobs", "RETRY_DELAY_SEC"),
            reconcile_interval=g("jobs", "RECONCILE_INTERVAL_MS") / 1000.0,
            owner_precedence_ms=g("jobs", "OWNER_PRECEDENCE_MS"),
            lane_patience_ms=g("jobs", "LANE_PATIENCE_MS"),
            stop_grace=g("jobs", "STOP_GRACE_SEC"),
            shutdown_grace=g("jobs", "SHUTDOWN_GRACE_SEC"),
            claim_exceptional_sec=g("jobs", "CLAIM_EXCEPTIONAL_INTERVAL_SEC"),
            give_up_min_minutes=g("jobs", "MIN_GIVE_UP_EXCEPTIONAL_MINUTES"),
            give_up_max_minutes=g("jobs", "MAX_GIVE_UP_EXCEPTIONAL_MINUTES"),
            archive_hours=g("jobs", "K2JOB_ARCHIVING_TIME_HOUR"),
            heartbeat_interval=g("heartbeat", "FABRIC_HEARTBEAT_INTERVAL_MS") / 1000.0,
            heartbeat_miss=g("heartbeat", "FABRIC_HEARTBEAT_MISS"),
            output_max=g("jobs", "OUTPUT_MAX_BYTES"),
            run_log_max=g("jobs", "RUN_LOG_MAX_BYTES"),
            live_log_flush=g("jobs", "LIVE_LOG_FLUSH_MS") / 1000.0,
            live_log_max=g("jobs", "LIVE_LOG_MAX_BYTES"),
            priority_aging_sec=g("jobs", "PRIORITY_AGING_SEC"),
            dependency_check_sec=g("jobs", "DEPENDENCY_CHECK_SEC"),
            worker_idle=g("jobs", "WORKER_IDLE_SEC"),
            repair_rows_per_sec=g("cassandra", "INDEX_REPAIR_ROWS_PER_SEC"),
            repair_pause=g("cassandra", "INDEX_REPAIR_PAUSE_SEC"),
            run_cgroups=g("jobs", "RUN_CGROUPS") == "AUTO",
            run_memory_mb=g("jobs", "RUN_MEMORY_MB"),
            run_pids_max=g("jobs", "RUN_PIDS_MAX"),
            max_output=g("jobs", "MAX_OUTPUT_BYTES"),
            start_patience=g("node", "START_PATIENCE_SEC"),
        )

    @property
    def dead_after(self) -> float:
        return self.heartbeat_interval * self.heartbeat_miss

    def check(self) -> None:
        from .heartbeat import lease_seconds

        lease = lease_seconds(self.heartbeat_interval, self.heartbeat_miss)
        if lease < self.heartbeat_interval:
            raise ConfigError(
                f"[heartbeat] FABRIC_HEARTBEAT_MISS ({self.heartbeat_miss}) is too small for an interval of "
                f"{self.heartbeat_interval * 1000:.0f} ms: a run's lease ({lease:.2f} s) must outlast one beat"
            )

    def without_grace(self) -> "NodeSettings":
        """A second SIGTERM: running jobs are killed now, not given SHUTDOWN_GRACE_SEC."""
        return replace(self, shutdown_grace=0.0)

