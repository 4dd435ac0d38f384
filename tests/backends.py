"""The store backends every contract test runs against.

sqlite            always.
cassandra         the Cassandra backend through the real cassandra-driver, against the CQL
                  test server (testkit/cqlserver; a test double, not Cassandra), in every run.
cassandra-real    the same against Apache Cassandra itself, when FABRICJOBS_CASSANDRA_HOSTS=host[:port][,host...]
                  is set: ./scripts/test starts a single-node Cassandra 5.0 for the whole run and
                  sets it (or --cassandra host:port names a cluster of yours). Each test uses a
                  keyspace of its own, dropped when the test ends.
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from testkit.rig import config_text, write_config

BACKENDS = ["sqlite", "cassandra"]
if os.environ.get("FABRICJOBS_CASSANDRA_HOSTS"):
    BACKENDS.append("cassandra-real")
# FABRICJOBS_BACKENDS=sqlite (./scripts/test --quick): these backends only, for every kind below.
_ONLY = [b.strip() for b in os.environ.get("FABRICJOBS_BACKENDS", "").split(",") if b.strip()]
if _ONLY:
    BACKENDS = [b for b in BACKENDS if b in _ONLY]
# End-to-end node tests (the node_backend fixture): node processes on SQLite and on Cassandra.
# With Apache Cassandra at hand they run on it alone, not on the CQL test server as well: the
# test server is a stand-in, kept for what only it can do (exact fault injection, a clock that
# moves, a run without Java) and for the store contract suite, which is cheap on it. Running the
# same node tests on both cost phase 1 of ./scripts/test a third of its time and proved nothing
# the real tier does not.
NODE_BACKENDS = ["sqlite", "cassandra-real" if "cassandra-real" in BACKENDS else "cassandra"]
# The other seeds' features (docs/explanation/design-choices.md: HOLD, calendars, owners, JOBLOG FOLLOW, DELETE_ON_SUCCESS)
# end to end: on SQLite and the CQL test server, in phase 1 of ./scripts/test, whose xdist half
# has room. What they add to the store is proven on Apache Cassandra by the store contract
# suite (tests/store/test_contract.py), which runs on every backend; on the real tier these
# modules cost a minute the suite's 15-minute budget does not have.
SEED_BACKENDS = [b for b in ("sqlite", "cassandra") if not _ONLY or b in _ONLY]
if _ONLY:
    NODE_BACKENDS = [b for b in NODE_BACKENDS if b in _ONLY]
# Tests of the CQL test server's dialect through the driver (testkit/cqlserver): on the server, and
# with the same assertions on Apache Cassandra when one is at hand (what keeps the double honest).
CQL_TARGETS = ["double"] + (["real"] if os.environ.get("FABRICJOBS_CASSANDRA_HOSTS") else [])


def add_sections(path: Path, sections: dict[str, dict[str, object]]) -> Path:
    """Sections a test needs beside the store's, appended to a config.ini (e.g. store_config)."""
    path.write_text(path.read_text(encoding="utf-8") + "\n" + config_text(sections), encoding="utf-8")
    return path


def real_cluster() -> tuple[str, int]:
    hosts, port = [], 9042
    for part in os.environ["FABRICJOBS_CASSANDRA_HOSTS"].split(","):
        host, _, p = part.strip().partition(":")
        hosts.append(host)
        if p:
            port = int(p)
    return ",".join(hosts), port


def make_backend_config(request, backend: str, tmp_path: Path, extra: dict | None = None, *,
                        reuse: bool = False, nodes: bool = False) -> Path:
    """A config.ini for an empty store of ``backend``. ``reuse``: on the real cluster, the
    keyspace may be one an earlier test of this process emptied (its tables truncated) rather
    than a new one: for tests whose writers have all ended when the test does (in-process
    stores, helpers they wait for). Creating a keyspace is a dozen schema changes, 1.6 s on an
    idle test server and 8-10 s beside the rest of the tier; emptying one is a fraction.

    ``nodes``: for a test whose node processes are killed when it ends (tests/harness.py's
    Cluster). Its keyspace is set aside at the end and emptied only when a later test of this
    process takes it, at least QUIET_SEC later, so that a request a killed node had already
    sent has long landed before the truncation (and is gone with it). The real tier made a
    keyspace per node test before: their schema changes, which Cassandra applies one at a time,
    were most of its time."""
    sections: dict[str, dict[str, object]] = {}
    keyspace = "fj_" + uuid.uuid4().hex[:12]
    if backend == "cassandra-real" and reuse and _emptied:
        keyspace = _emptied.pop()
    elif backend == "cassandra-real" and nodes:
        keyspace = _reclaim() or keyspace
    if backend == "sqlite":
        sections["store"] = {"BACKEND": "sqlite", "SQLITE_PATH": str(tmp_path / "jobs.db")}
    elif backend == "cassandra":
        server = request.getfixturevalue("cql_server")
        sections["store"] = {"BACKEND": "cassandra"}
        sections["cassandra"] = {"HOSTS": server.host, "PORT": server.port, "KEYSPACE": keyspace,
                                 "PROTOCOL_VERSION": 4, "CONSISTENCY": "QUORUM", "REQUEST_TIMEOUT_SEC": 5,
                                 # The server is a thread of this (niced) test process: on a loaded
                                 # machine its connect answers came later than the default 10 s.
                                 "CONNECT_TIMEOUT_SEC": 30,
                                 "TOKEN_AWARE": "false"}  # one node: nothing to route, and no schema reads
    elif backend == "cassandra-real":
        hosts, port = real_cluster()
        sections["store"] = {"BACKEND": "cassandra"}
        sections["cassandra"] = {"HOSTS": hosts, "PORT": port, "KEYSPACE": keyspace,
                                 "PROTOCOL_VERSION": int(os.environ.get("FABRICJOBS_CASSANDRA_PROTOCOL", "5")),
                                 "CONSISTENCY": "QUORUM",
                                 # One node: nothing to route. With it on, every node process of
                                 # every test would read (and, at each test's DDL, re-read) the
                                 # schema of all the tests' keyspaces: a CPU storm on 2 cores.
                                 # tests/store/test_cassandra_lifecycle.py tests routing itself.
                                 "TOKEN_AWARE": "false"}
        request.addfinalizer(lambda: empty_keyspace(keyspace) if reuse else
                             _set_aside.append((time.monotonic(), keyspace)) if nodes else drop_keyspace(keyspace))
    else:
        raise ValueError(backend)
    for section, keys in (extra or {}).items():
        sections.setdefault(section, {}).update(keys)
    return write_config(tmp_path / "config.ini", sections)


_admin = None
_emptied: list[str] = []  # keyspaces of this process's earlier tests, tables truncated, schema kept
_set_aside: list[tuple[float, str]] = []  # (when, keyspace) of node tests that ended, not yet emptied
QUIET_SEC = 2.0


def _reclaim() -> str | None:
    """A keyspace a node test of this process set aside QUIET_SEC ago or more, emptied now."""
    for i, (when, keyspace) in enumerate(_set_aside):
        if time.monotonic() - when >= QUIET_SEC:
            del _set_aside[i]
            if empty_keyspace(keyspace, keep=False):
                return keyspace
            return None
    return None


def _admin_session():
    global _admin
    if _admin is None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import RoundRobinPolicy

        hosts, port = real_cluster()
        profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy(), request_timeout=60)
        _admin = Cluster(hosts.split(","), port=port, protocol_version=5, schema_metadata_enabled=False,
                         token_metadata_enabled=False, execution_profiles={EXEC_PROFILE_DEFAULT: profile}).connect()
    return _admin


_drops: list = []  # the drops sent and not yet waited for (close_admin waits for them)


def drop_keyspace(keyspace: str) -> None:
    """Drop a test's keyspace on the real cluster (thousands of leftover tables would fill the
    server's heap). Not waited for: the next test need not pay for it."""
    try:
        _drops.append(_admin_session().execute_async(f"DROP KEYSPACE IF EXISTS {keyspace}"))
    except Exception:  # a leftover keyspace costs only memory on a test server
        pass
    del _drops[:-16]  # those sent long ago have long been answered


def close_admin() -> None:
    """Wait for the drops sent, then shut the admin connection down. A driver Cluster left open
    when the interpreter exits prints a traceback ("cannot schedule new futures after
    shutdown": its scheduler outlives the thread pools that the interpreter ends first)."""
    global _admin
    for future in _drops:
        try:
            future.result()
        except Exception:  # as in drop_keyspace
            pass
    _drops.clear()
    if _admin is not None:
        _admin.cluster.shutdown()
        _admin = None


def empty_keyspace(keyspace: str, keep: bool = True) -> bool:
    """Truncate every table of a test's keyspace but the schema version, for the next test of
    this process (make_backend_config's ``reuse``: ``keep`` adds it to those); drop it if that
    fails. Whether it is empty now."""
    try:
        session = _admin_session()
        tables = [r.table_name for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))]
        if "k2_jobs" not in tables:  # never created (the test failed first), or not ours
            raise LookupError(keyspace)
        for future in [session.execute_async(f"TRUNCATE {keyspace}.{t}") for t in tables if t != "fabricjobs_schema"]:
            future.result()
        if keep:
            _emptied.append(keyspace)
        return True
    except Exception:
        drop_keyspace(keyspace)
        return False


@contextmanager
def cql_session(target: str, keyspace_prefix: str):
    """A driver session in a new keyspace of ``target`` (a CQL_TARGETS name): a CQL test server
    of its own, or the real cluster (protocol FABRICJOBS_CASSANDRA_PROTOCOL, 5 by default),
    where the keyspace is dropped at the end."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy
    from testkit.cqlserver import CqlTestServer

    server = None
    if target == "double":
        server = CqlTestServer().__enter__()
        hosts, port, protocol = [server.host], server.port, 4
    else:
        names, port = real_cluster()
        hosts, protocol = names.split(","), int(os.environ.get("FABRICJOBS_CASSANDRA_PROTOCOL", "5"))
    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy(hosts), request_timeout=30)
    cluster = Cluster(hosts, port=port, protocol_version=protocol, schema_metadata_enabled=False,
                      token_metadata_enabled=False, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    keyspace = keyspace_prefix + uuid.uuid4().hex[:10]
    try:
        session = cluster.connect()
        session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', "
                        "'replication_factor': 1}")
        session.set_keyspace(keyspace)
        yield session
    finally:
        cluster.shutdown()
        if server is not None:
            server.__exit__(None, None, None)
        else:
            drop_keyspace(keyspace)
