"""Shared fixtures. Backends are listed in ``tests/backends.py``; every store test is run once
per backend through the ``store_config`` fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
# The node, web and shell processes the tests start import fabricjobs from this checkout, like
# the tests themselves: a venv installed from another checkout (a git worktree sharing it)
# would otherwise run that checkout's code in every subprocess.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from backends import BACKENDS, NODE_BACKENDS, make_backend_config  # noqa: E402


def pytest_configure(config):
    """An xdist worker started at a low CPU priority (./scripts/test runs most tests at nice 15,
    beside the tests that assert latency bounds) moves to a session of its own at that priority.
    With the kernel's autogroup scheduling the CPU is shared between sessions first: in the
    session of ./scripts/test the four workers (the in-process CQL test server, hypothesis: 41 %
    of phase 1's CPU) weighed as much, together, as a "timing" test's node, whatever their nice
    value. Their own processes that start no session of their own go with them."""
    if os.environ.get("PYTEST_XDIST_WORKER") and os.getpriority(os.PRIO_PROCESS, 0) > 0:
        from testkit.rig import same_cpu_priority

        try:
            os.setsid()
        except OSError:  # already a session or group leader: it stays where it is
            return
        same_cpu_priority(os.getpid())


def pytest_collection_modifyitems(items):
    """Mark every test that runs on Apache Cassandra itself ("real_cassandra"), so that
    ./scripts/test can give that tier a phase of its own."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "cassandra-real" in params.values():
            item.add_marker(pytest.mark.real_cassandra)


@pytest.fixture(scope="module")
def cql_server():
    """One CQL test server per test module (each test gets its own keyspace). Not one per run:
    keyspaces are never dropped, and a connecting driver reads every keyspace's schema, so on
    one server for a whole xdist worker a store took 13 s to open by its 80th keyspace (the
    first took 0.4 s), and the in-process tests of phase 1 took 444 s run alone."""
    from testkit.cqlserver import CqlTestServer

    server = CqlTestServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _drop_emptied_keyspaces():
    """Keyspaces kept for reuse (backends.empty_keyspace) are dropped when this process's tests
    end: on a cluster of the user's (--cassandra host:port) nothing is left behind."""
    yield
    import backends

    while backends._emptied:
        backends.drop_keyspace(backends._emptied.pop())
    while backends._set_aside:
        backends.drop_keyspace(backends._set_aside.pop()[1])
    backends.close_admin()


@pytest.fixture(params=BACKENDS)
def store_config(request, tmp_path):
    """A config.ini (path) for a fresh, empty store of each backend (on the real cluster, in
    a keyspace an earlier test emptied: these tests' writers end with them)."""
    return make_backend_config(request, request.param, tmp_path, reuse=True)


@pytest.fixture(params=NODE_BACKENDS)
def node_backend(request):
    """The backend node processes of an end-to-end test share (each test runs once per backend)."""
    return request.param


@pytest.fixture
def cluster(tmp_path, request, node_backend):
    """Node processes on the test's backend (tests/harness.py), all killed at the end. Settings
    come by indirect parametrization: @pytest.mark.parametrize("cluster", [{...}], indirect=True).
    A module with other needs defines its own."""
    from harness import Cluster

    c = Cluster(tmp_path, backend=node_backend, settings=getattr(request, "param", None), request=request)
    yield c
    c.stop_all()


@pytest.fixture
def store(store_config):
    from fabricjobs.config import load_config
    from fabricjobs.store import open_store

    s = open_store(load_config(store_config))
    yield s
    s.close()


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs of the test's own, mounted and removed here: a store that can fill up
    (tests/harness.py, fill_up). Needs root."""
    if os.geteuid() != 0:
        pytest.skip("a tmpfs of the test's own needs root (mount -t tmpfs)")
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def pytest_sessionfinish(session, exitstatus):
    """The run cgroups of nodes a test killed together with their fork server: no process of
    theirs was left to remove them (a node's next start would), so the run removes them."""
    from fabricjobs.worker import cgroups

    root = cgroups.here()
    if root is not None:
        cgroups.remove_stale(root)
