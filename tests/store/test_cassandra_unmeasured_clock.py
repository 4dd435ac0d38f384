"""A process that could not measure Cassandra's time (clock.py): it must not write by its own
clock, which is what stranded jobs before Cassandra's time was measured at all
(docs/explanation/cassandra-queue.md, "Whose clock")."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone

import os

import pytest

from backends import CQL_TARGETS, drop_keyspace, real_cluster
from fabricjobs.errors import StoreError
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store.cassandra.store import CassandraStore

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Unanswered(CassandraStore):
    """A shell on a host 30 s behind, whose queries of Cassandra's time all went unanswered
    when it opened the store (every host of its DC timed out: a loaded cluster at start-up)."""

    def _sync_clock(self) -> None:
        from cassandra import OperationTimedOut

        def ask(_host) -> float:
            raise OperationTimedOut("no answer within 2 s")

        self._clock._wall = lambda: time.time() - 30.0
        self._clock.take(self._clock.measure(ask, [None]))


@pytest.fixture(params=CQL_TARGETS)
def place(request, cql_server):
    """(hosts, port, protocol, keyspace): the CQL test server, and Apache Cassandra when at hand."""
    keyspace = "fj_" + uuid.uuid4().hex[:12]
    if request.param == "double":
        yield [cql_server.host], cql_server.port, 4, keyspace
        return
    names, port = real_cluster()
    yield names.split(","), port, int(os.environ.get("FABRICJOBS_CASSANDRA_PROTOCOL", "5")), keyspace
    drop_keyspace(keyspace)


def test_a_process_that_could_not_measure_cassandras_time_strands_no_job(place):
    hosts, port, protocol, keyspace = place
    where = dict(hosts=hosts, port=port, protocol_version=protocol, keyspace=keyspace, connect_timeout=30.0)
    node = CassandraStore(**where)
    shell = Unanswered(**where)
    try:
        assert node.waiting(10) == []  # a node's pass: it reads the WAITING partitions and sweeps them
        job = Job(JobKey("USER_JOB", "A.b", "u1"), Status.WAITING, T0, next_run=T0)
        refused = None
        try:
            shell.insert(job)
        except StoreError as exc:
            refused = str(exc)
        # Whatever the shell did, a job it wrote must be one the nodes can find and claim.
        written = node.get(job.key) is not None
        assert [j.key for j in node.waiting(10)] == ([job.key] if written else []), "a job stranded without its index entry"
        assert refused is not None and "Cassandra's time" in refused, refused
    finally:
        shell.close()
        node.close()
