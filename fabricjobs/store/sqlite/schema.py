"""The SQLite schema: the tables and the partial indexes that cover exactly the live-row
queries, as numbered migrations, and bringing a database file up to the newest one.

The version is ``PRAGMA user_version``; a file newer than this code knows is refused with a
clear message instead of being misread.
"""

from __future__ import annotations

import sqlite3

from ...errors import SchemaVersionError

SCHEMA_VERSION = 12


_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """
        CREATE TABLE k2_jobs (
            type TEXT NOT NULL,
            name TEXT NOT NULL,
            uid TEXT NOT NULL,
            status TEXT NOT NULL,
            archived INTEGER NOT NULL DEFAULT 0,
            affinity TEXT NOT NULL DEFAULT '',
            arguments TEXT NOT NULL DEFAULT '{}',
            execution_interval TEXT NOT NULL DEFAULT '',
            creation_time REAL NOT NULL,
            start_time REAL,
            end_time REAL,
            next_run REAL,
            hold_until REAL,
            error_msg TEXT NOT NULL DEFAULT '',
            output TEXT,
            tries INTEGER NOT NULL DEFAULT 0,
            worker_id TEXT,
            epoch INTEGER NOT NULL DEFAULT 0,
            revision INTEGER NOT NULL DEFAULT 1,
            priority INTEGER NOT NULL DEFAULT 4,
            PRIMARY KEY (type, name, uid)
        ) WITHOUT ROWID
        """,
        # Claim candidates: WAITING rows by due time.
        "CREATE INDEX k2_jobs_waiting ON k2_jobs (next_run) WHERE status = 'WAITING'",
        # Live rows by status and owner (and due time): control requests, unowned / orphaned
        # work, an owner's scheduled jobs that come due.
        "CREATE INDEX k2_jobs_live_status ON k2_jobs (status, worker_id, next_run) WHERE archived = 0",
        # Live rows by key: JOBSTATUS without touching history.
        "CREATE INDEX k2_jobs_live_key ON k2_jobs (type, name, uid) WHERE archived = 0",
        # History by end time: JOBSTATUS n DAYS AGO and retention.
        "CREATE INDEX k2_jobs_archive ON k2_jobs (end_time) WHERE archived = 1",
        """
        CREATE TABLE nodes (
            name TEXT PRIMARY KEY,
            incarnation TEXT NOT NULL,
            dc TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started REAL NOT NULL,
            version TEXT NOT NULL,
            beat INTEGER NOT NULL,
            beat_time REAL NOT NULL,
            state TEXT NOT NULL,
            running INTEGER NOT NULL,
            info TEXT NOT NULL,
            tasks TEXT NOT NULL
        )
        """,
        """
        CREATE TABLE kill_requests (
            node TEXT NOT NULL,
            task INTEGER NOT NULL,
            requested_at REAL NOT NULL,
            requested_by TEXT NOT NULL,
            PRIMARY KEY (node, task)
        )
        """,
    ),
    # 2: run history, per-job counters (observability); dependencies, zones, misfire policy,
    # directory listeners (scheduling).
    2: (
        *(f"ALTER TABLE k2_jobs ADD COLUMN {c} INTEGER NOT NULL DEFAULT 0"
          for c in ("runs", "successes", "failures", "retries_error", "retries_lost", "kills", "blocked")),
        *(f"ALTER TABLE k2_jobs ADD COLUMN {c} TEXT NOT NULL DEFAULT ''"
          for c in ("depends_on", "time_zone", "late_threshold", "overlap")),
        # Claim candidates, again: never blocked rows; by priority as well as by due time.
        "DROP INDEX k2_jobs_waiting",
        "CREATE INDEX k2_jobs_waiting ON k2_jobs (next_run) WHERE status = 'WAITING' AND blocked = 0",
        "CREATE INDEX k2_jobs_waiting_priority ON k2_jobs (priority DESC, next_run) WHERE status = 'WAITING' AND blocked = 0",
        "CREATE INDEX k2_jobs_blocked ON k2_jobs (next_run) WHERE blocked = 1 AND archived = 0",
        """
        CREATE TABLE k2_listener_files (
            type TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, file TEXT NOT NULL,
            note TEXT NOT NULL, marked_at REAL NOT NULL,
            PRIMARY KEY (type, name, uid, file)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE k2_job_runs (
            type TEXT NOT NULL,
            name TEXT NOT NULL,
            uid TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            node TEXT NOT NULL,
            due REAL,
            start REAL,
            "end" REAL NOT NULL,
            result TEXT NOT NULL,
            status TEXT NOT NULL,
            tries INTEGER NOT NULL,
            error TEXT NOT NULL DEFAULT '',
            output TEXT,
            exit_code INTEGER,
            log TEXT NOT NULL DEFAULT '',
            note TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (type, name, uid, epoch, "end")
        ) WITHOUT ROWID
        """,
        'CREATE INDEX k2_job_runs_end ON k2_job_runs ("end")',
    ),
    # 3: FINISHJOB's flag (a run that completes, and no fire after it: SMILA).
    3: ("ALTER TABLE k2_jobs ADD COLUMN finishing INTEGER NOT NULL DEFAULT 0",),
    # 4: RUNJOB's kept fire (a run once now, the schedule unchanged: SMILA's runOnce).
    4: ("ALTER TABLE k2_jobs ADD COLUMN resume_at REAL",),
    # 5: LATE_ACTION (IPF's late execution handler).
    5: ("ALTER TABLE k2_jobs ADD COLUMN late_action TEXT NOT NULL DEFAULT ''",),
    # 6: ON_FAILURE (IPF's failure command).
    6: ("ALTER TABLE k2_jobs ADD COLUMN on_failure TEXT NOT NULL DEFAULT ''",),
    # 7: a job's owner (DolphinDB's userID) and requestor (IPF's jobRequestor).
    7: tuple(f"ALTER TABLE k2_jobs ADD COLUMN {c} TEXT NOT NULL DEFAULT ''" for c in ("owner", "requestor")),
    # 8: calendars (IPF's job calendar): the job's CALENDAR and the stored calendars.
    8: ("ALTER TABLE k2_jobs ADD COLUMN calendar TEXT NOT NULL DEFAULT ''",
        "CREATE TABLE IF NOT EXISTS k2_calendars (name TEXT PRIMARY KEY, rules TEXT NOT NULL, updated TEXT NOT NULL)"),
    # 9: a running run's log lines as they come (JOBLOG ... FOLLOW); gone with the
    # run records' retention clean-up (by written_at).
    9: (
        """
        CREATE TABLE k2_live_log (
            type TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL, epoch INTEGER NOT NULL,
            seq INTEGER NOT NULL, line TEXT NOT NULL, written_at REAL NOT NULL,
            PRIMARY KEY (type, name, uid, epoch, seq)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX k2_live_log_written ON k2_live_log (written_at)",
    ),
    # 10: DELETE_ON_SUCCESS (RJM's rjm_delete).
    10: ("ALTER TABLE k2_jobs ADD COLUMN delete_on_success TEXT NOT NULL DEFAULT ''",),
    # 11: PARALLELISM (DolphinDB's tasks of a job).
    11: ("ALTER TABLE k2_jobs ADD COLUMN parallelism INTEGER NOT NULL DEFAULT 0",
         "ALTER TABLE k2_jobs ADD COLUMN task_of TEXT NOT NULL DEFAULT ''"),
    # 12: SMILA's counters of failed and cancelled runs (docs/explanation/design-choices.md).
    12: tuple(f"ALTER TABLE k2_jobs ADD COLUMN {c} INTEGER NOT NULL DEFAULT 0" for c in ("failed_after_retry", "failed_without_retry", "canceled")),
}


def not_newer(version: int, path: str) -> None:
    """Refuse a file a newer fabricjobs has migrated."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"SQLite store {path!r} has schema version {version}, newer than this "
            f"fabricjobs understands ({SCHEMA_VERSION}); upgrade fabricjobs"
        )


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Apply the migrations ``conn``'s file has not had yet (inside the caller's write transaction)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    not_newer(version, path)
    for v in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in _MIGRATIONS[v]:
            conn.execute(stmt)
        conn.execute(f"PRAGMA user_version = {v}")
