"""What deploy/ ships: systemd units that systemd itself accepts, a node that tells its
service manager when it is ready (sd_notify), and Prometheus alert rules that name only
metrics a node serves (docs/guides/deployment.md, docs/guides/operations/monitoring.md)."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fabricjobs.model import JobKey, Status
from fabricjobs.node.metrics import METRICS
from fabricjobs.store.cassandra.schema import SCHEMA_WAIT
from fabricjobs.store import open_store
from fabricjobs.config import KEYS, load_config
from testkit.rig import Rig, write_config

ROOT = Path(__file__).resolve().parent.parent
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
NODE_UNIT = ROOT / "deploy" / "systemd" / "fabricjobs-node@.service"
KEYS_BY_NAME = {(k.section, k.name): k for k in KEYS}


def test_the_systemd_units_verify_clean(tmp_path):
    """systemd-analyze verify checks every directive and that the binaries the units run exist:
    the copies here run this environment's fabricjobs instead of /opt/fabricjobs's."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    exe = Path(sys.executable).with_name("fabricjobs")
    assert exe.exists(), exe
    assert [u.name for u in UNITS] == ["fabricjobs-node@.service", "fabricjobs-web.service"]
    copies = []
    for unit in UNITS:
        text = unit.read_text()
        assert "/opt/fabricjobs/bin/fabricjobs " in text
        copy = tmp_path / unit.name
        copy.write_text(text.replace("/opt/fabricjobs/bin/fabricjobs", str(exe)))
        copies.append(str(copy))
    r = subprocess.run([analyze, "verify", *copies], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
    node = NODE_UNIT.read_text()
    for line in ("Type=notify", "Delegate=yes", "Restart=on-failure", "RestartPreventExitStatus=2", "KillMode=mixed"):
        assert line in node.splitlines(), line


def test_a_node_tells_its_service_manager_ready_after_its_first_heartbeat_and_stopping_at_sigterm(tmp_path):
    """Type=notify: READY=1 comes once the node's row is in the store (the cluster sees it),
    STOPPING=1 when SIGTERM begins its clean shutdown, and the node then exits 0."""
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(60)
    config = write_config(tmp_path / "config.ini", {"store": {"SQLITE_PATH": str(tmp_path / "jobs.db")},
                                                      "heartbeat": {"FABRIC_HEARTBEAT_INTERVAL_MS": 500}})
    rig = Rig(tmp_path, config)
    store = None
    try:
        node = rig.spawn("n1", env={"NOTIFY_SOCKET": address})
        ready = listener.recv(4096).decode()
        store = open_store(load_config(config))
        row = store.node("n1")  # read right when READY=1 arrived
        assert "READY=1" in ready.splitlines() and f"MAINPID={node.pid}" in ready, ready
        assert row is not None and row.pid == node.pid
        node.signal(signal.SIGTERM)
        stopping = listener.recv(4096).decode()
        assert "STOPPING=1" in stopping.splitlines(), stopping
        assert node.proc.wait(timeout=30) == 0
    finally:
        listener.close()
        if store is not None:
            store.close()
        rig.kill_all()


def _unit_settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_a_store_down_at_boot_never_makes_systemd_give_up_on_the_node():
    """systemd stops restarting a unit started StartLimitBurst times within
    StartLimitIntervalSec. A node that cannot reach its store waits START_PATIENCE_SEC before
    it exits (status 1), so that however long the store stays down, its restarts stay under
    the limit and it comes up once the store does, without an operator."""
    unit = _unit_settings(NODE_UNIT.read_text())
    patience = KEYS_BY_NAME[("node", "START_PATIENCE_SEC")].default
    cycle = patience + float(unit["RestartSec"])  # at least this between two starts while the store is down
    starts_in_window = int(float(unit["StartLimitIntervalSec"]) // cycle) + 1
    assert starts_in_window < int(unit["StartLimitBurst"]), (cycle, starts_in_window)
    # ... and systemd lets a start wait that long, then for another node's schema change, with
    # a connect timeout and a request timeout to spare, before it calls the start failed
    spare = KEYS_BY_NAME[("cassandra", "CONNECT_TIMEOUT_SEC")].default + KEYS_BY_NAME[("cassandra", "REQUEST_TIMEOUT_SEC")].default
    assert patience + SCHEMA_WAIT + spare <= float(unit["TimeoutStartSec"])


def test_a_node_started_before_its_store_waits_for_it_then_runs_jobs(tmp_path):
    """A host that boots before Cassandra: its node says it waits, one warning a try, and
    once the store answers it starts and runs jobs (no restart, no operator)."""
    from fabricjobs.client import Client
    from testkit.cqlserver import CqlTestServer
    from testkit.rig import wait_for

    taken = socket.socket()  # the port, held (bound, not listening: connects are refused) until the store opens it
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    config = write_config(tmp_path / "config.ini", {
        "node": {"START_PATIENCE_SEC": 120},
        "store": {"BACKEND": "cassandra"},
        "cassandra": {"HOSTS": "127.0.0.1", "PORT": port, "KEYSPACE": "fj_boot", "PROTOCOL_VERSION": 4,
                      "CONNECT_TIMEOUT_SEC": 5, "REQUEST_TIMEOUT_SEC": 5, "TOKEN_AWARE": "false"},
        "jobs": {"USER_JOBS_DIR": str(ROOT / "tests" / "jobs"), "RECONCILE_INTERVAL_MS": 200},
    })
    rig = Rig(tmp_path, config)
    server = client = None
    try:
        node = rig.spawn("n1")
        wait_for(lambda: node.log().count("could not connect to its store yet") >= 2, 60,
                 "the node to say twice that it waits for its store", check=rig.check_nodes)
        taken.close()
        server = CqlTestServer(port=port).start()
        rig.wait_started(node, timeout=90)
        assert node.alive()
        client = Client.from_config(config)
        client.fetch("startjob user_job name='Probe.noop' uid='after-boot';")
        wait_for(lambda: (j := client.store.get(JobKey("USER_JOB", "Probe.noop", "after-boot"))) is not None
                 and j.status is Status.PROCESSED, 30, "the job to be PROCESSED", check=rig.check_nodes)
        assert "Traceback" not in node.log()
    finally:
        taken.close()
        if client is not None:
            client.close()
        rig.kill_all()
        if server is not None:
            server.stop()


def test_the_example_alert_rules_parse_and_name_only_metrics_a_node_serves():
    yaml = pytest.importorskip("yaml")
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "fabricjobs-alerts.yml").read_text())
    served = {m.exposed for m in METRICS}
    alerts = [r for group in rules["groups"] for r in group["rules"]]
    assert len(alerts) >= 8
    for rule in alerts:
        assert rule["alert"].startswith("Fabricjobs") and rule["annotations"]["summary"]
        for name in re.findall(r"\b(fabricjobs_\w+)", rule["expr"]):
            assert re.sub(r"_(bucket|sum|count)$", "", name) in served, (rule["alert"], name)
