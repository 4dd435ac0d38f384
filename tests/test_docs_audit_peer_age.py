"""``fabricjobs_peer_heartbeat_age_seconds`` lists the peers that may be silent, not a node
that shut down cleanly (docs/guides/operations/monitoring.md): the FabricjobsPeerSilent
alert fires for a node that is dead, paused or cut off, not for one an operator stopped (its
row stays for K2JOB_ARCHIVING_TIME_HOUR, and the alert with it)."""

from __future__ import annotations

import signal

import pytest

from harness import free_port, scrape_metrics, wait_for

PORT = free_port()
AGE_OF_B = 'fabricjobs_peer_heartbeat_age_seconds{node="b"}'


@pytest.fixture
def node_backend():
    """SQLite: the verdict is the node's, the same on every store."""
    return "sqlite"


@pytest.mark.parametrize("cluster", [{"metrics": {"PORT": PORT}}], indirect=True)
def test_a_peer_stopped_cleanly_leaves_the_age_gauge_and_a_killed_one_stays(cluster):
    cluster.start_node("a")
    quiet = cluster.tmp / "quiet.ini"
    quiet.write_text(cluster.config_path.read_text().replace(f"PORT = {PORT}", "PORT = 0"))
    b = cluster.start_node("b", config=quiet)
    wait_for(lambda: AGE_OF_B in scrape_metrics(PORT), 10, "b's heartbeat age in a's metrics")
    b.signal(signal.SIGTERM)
    b.proc.wait(30)
    wait_for(lambda: AGE_OF_B not in scrape_metrics(PORT), 10, "b, stopped cleanly, to leave the gauge")
    assert cluster.fetch("nodes;").as_dicts()[1]["state"] == "stopped"
    # Back, then killed: silent, so listed, its age growing.
    b = cluster.start_node("b", config=quiet)
    wait_for(lambda: AGE_OF_B in scrape_metrics(PORT), 10, "b back in a's metrics")
    b.signal_group(signal.SIGKILL)
    wait_for(lambda: scrape_metrics(PORT).get(AGE_OF_B, 0) > 1.0, 10, "a killed b's age to grow")
