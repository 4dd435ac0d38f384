"""The deployment guide's Cassandra role (docs/guides/deployment.md): a login role that is not a
superuser, with the grants the guide lists, creates the schema and writes jobs and their history
on an Apache Cassandra 5.0 with password authentication, and Cassandra sends it no warning.

Cassandra's guardrails apply to such a role and not to a superuser (or to the real tier's
AllowAll cluster): a time-window table created without a default TTL drew one
"zero_ttl_on_twcs" warning per table, each counted in fabricjobs_store_server_warnings_total,
so the guide's own alert (deploy/prometheus) fired on every fresh deployment's first start."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from backends import BACKENDS
from fabricjobs.config import load_config
from fabricjobs.model import Job, JobKey, Status
from fabricjobs.store import open_store
from fabricjobs.store.base import RunRecord
from testkit.rig import write_config

pytestmark = [
    pytest.mark.real_cassandra,  # (its tests run in ./scripts/test's real tier, beside that tier's)
    pytest.mark.skipif("cassandra-real" not in BACKENDS, reason="guardrails are Apache Cassandra's (the real tier)"),
]

PASSWORD = "a long secret"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A one-node Cassandra with password authentication, a keyspace and the guide's role."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster
    from testkit.realcassandra import CassandraCluster

    cassandra = CassandraCluster(tmp_path_factory.mktemp("secured") / "cassandra", 1, heap="512m",
                                 authenticator=True).start()
    keyspace = "fj_role_" + uuid.uuid4().hex[:8]
    admin = Cluster(cassandra.hosts, port=cassandra.port, protocol_version=5,
                    auth_provider=PlainTextAuthProvider("cassandra", "cassandra"))
    try:
        s = admin.connect()
        s.execute(f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}}")
        s.execute("CREATE ROLE fabricjobs WITH PASSWORD = %s AND LOGIN = true", (PASSWORD,))
        for grant in (f"SELECT ON KEYSPACE {keyspace}", f"MODIFY ON KEYSPACE {keyspace}", "CREATE ON ALL KEYSPACES",
                      f"ALTER ON KEYSPACE {keyspace}"):
            s.execute(f"GRANT {grant} TO fabricjobs")
    finally:
        admin.shutdown()
    try:
        yield cassandra, keyspace
    finally:
        cassandra.stop(wipe=True)


def test_the_guides_role_creates_the_schema_and_writes_jobs_without_a_warning(secured, tmp_path):
    cassandra, keyspace = secured
    config = write_config(tmp_path / "config.ini", {"store": {"BACKEND": "cassandra"}, "cassandra": {
        "HOSTS": ",".join(cassandra.hosts), "PORT": cassandra.port, "KEYSPACE": keyspace, "PROTOCOL_VERSION": 5,
        "USERNAME": "fabricjobs", "PASSWORD": PASSWORD, "CREATE_SCHEMA": "true",
        "REPLICATION": "NetworkTopologyStrategy:datacenter1=1"}})
    store = open_store(load_config(config))
    try:
        key = JobKey("USER_JOB", "Probe.noop", "role1")
        job = Job(key, Status.WAITING, datetime.now(timezone.utc))
        assert store.insert(job).applied
        end = job.creation_time + timedelta(seconds=1)
        store.add_runs([RunRecord(key, 1, "n1", job.creation_time, job.creation_time, end, "OK", "PROCESSED", 0,
                                  output="done")])
        assert [r.output for r in store.runs(key.type, key.name, key.uid)] == ["done"]
        assert store.stats.server_warnings == 0, "Cassandra warned the guide's role (see the node log)"
    finally:
        store.close()
