"""The Cassandra store: k2_jobs with lightweight-transaction CAS, for a cluster that spans hosts.

Data model (keyspace ``[cassandra] KEYSPACE``, default ``k2system``)

``k2_jobs``          one partition per job key, so LWT contention is per job. Every change
                     of a row is a prepared LWT (``IF NOT EXISTS`` or ``IF status = ? AND
                     epoch = ? AND worker_id = ? AND revision = ?``), never a plain write.
                     Archived rows are written ``USING TTL`` (K2JOB_ARCHIVING_TIME_HOUR).
``k2_jobs_index``    where a reconcile pass finds the rows it may act on without scanning:
                     one entry per live row, in a *bucket* named after its status (and owner
                     for IN_PROCESS / SCHEDULED: ``SCHEDULED|node-a``), spread over
                     ``SHARDS`` partitions and clustered by due time, so "the oldest WAITING
                     jobs" and "node-a's SCHEDULED jobs due before T" are range reads.
                     Plain writes (no LWT on this table); the tombstones that moving entries
                     leave are swept up by range deletes (sweep.py).
``k2_jobs_owners``   the owners that have had index entries (to list IN_PROCESS/SCHEDULED buckets).
``k2_job_run_history`` run history, a partition per job and RUN_BUCKET runs; ``k2_job_run_keys``
                     which (uid, bucket) have runs, by job name and day (JOBHISTORY, JOBLOG).
``k2_jobs_archived`` archived keys by day (16 shards a day) and end time (JOBSTATUS n DAYS AGO),
                     with TTL; ``k2_jobs_archive`` (one partition a day) is only read, until
                     the TTL has emptied it after an upgrade from schema version 3.
``nodes``            one row per node, plain writes by that node only; ``beat_time`` is set by
                     the coordinator's clock (``toTimestamp(now())``).
``kill_requests``    KILL requests per node.
``fabricjobs_schema`` the schema version.

The modules, one concept each, each building on the ones above it:

``hosts.py``     which hosts a request tries first (those that left requests unanswered: last)
``session.py``   the connection, consistency profiles, counted statements, batched plain writes
``rows.py``      k2_jobs rows: to and from a Job, reads by key, the LWT and its unknown outcomes
``index.py``     k2_jobs_index entries: buckets, shards, intents, deleting stale entries
``queue.py``     reading the index: scans, one candidate per key, the reconcile pass's reads
``history.py``   run history, archived keys by day, listener file marks (all with a TTL)
``nodes.py``     node rows and KILL requests
``store.py``     CassandraStore: the parts together, and inserts and CAS across them
``schema.py``    the tables, their storage options, creating and upgrading them safely
``sweep.py``     range deletes that keep the index free of tombstones
"""

from .schema import SCHEMA, SCHEMA_VERSION, parse_replication, schema_cql
from .session import _CountingSession
from .store import CassandraStore

__all__ = ["SCHEMA", "SCHEMA_VERSION", "CassandraStore", "_CountingSession", "parse_replication", "schema_cql"]
