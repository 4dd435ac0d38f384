"""Which statements may be sent to a second host (speculative execution): every one but a
lightweight transaction. A conditional statement sent twice would answer ``[applied]=false``
to its own first copy, and the store would take its own claim for another node's."""

import pytest

from fabricjobs.store.cassandra.session import idempotent


@pytest.mark.parametrize("cql", [
    "UPDATE k2_jobs SET status = ? WHERE type = ? AND name = ? AND uid = ? IF status = ? AND epoch = ? AND worker_id = ? AND revision = ?",
    "INSERT INTO k2_jobs (type, name, uid) VALUES (?, ?, ?) IF NOT EXISTS",
    "UPDATE k2_jobs SET revision = ? WHERE type = ? AND name = ? AND uid = ? IF revision = null",
    "DELETE FROM fabricjobs_schema WHERE id = 'lock' if version = ?",
    "DELETE FROM t WHERE k = ? IF EXISTS",
    "UPDATE t SET a = ? WHERE k = ? IF tries<?",
])
def test_a_lightweight_transaction_is_never_sent_twice(cql):
    assert not idempotent(cql)


@pytest.mark.parametrize("cql", [
    "SELECT name, beat FROM nodes WHERE name = ?",
    "INSERT INTO nodes (name, beat, beat_time) VALUES (?, ?, toTimestamp(now()))",
    "UPDATE k2_jobs_index SET notified = ? WHERE bucket = ? AND shard = ?",  # a column named like a keyword
    "DELETE FROM k2_jobs_index USING TIMESTAMP ? WHERE bucket = ? AND shard = ? AND (next_run) < (?)",
])
def test_reads_and_plain_writes_may_go_to_a_second_host(cql):
    assert idempotent(cql)
