"""Tokens through the real CLI and a real ``fabricjobs web`` process: stored as hashes in a
0600 file, shown once, never logged, revoked from the next request on; a state change names
its token in the job's Notes and in the web process's log; the server's flags (--bind,
--tls-cert/--tls-key) and their refusals."""

from __future__ import annotations

import shutil
import socket
import ssl
import stat
import subprocess

import httpx
import pytest

from harness import Cluster, wait_for
from web_site import WebProcess, make_tokens


@pytest.fixture
def cluster(request, tmp_path):
    c = Cluster(tmp_path, "sqlite", request=request)
    yield c
    c.stop_all()


def test_token_create_list_revoke_and_what_the_file_and_the_log_hold(cluster):
    tokens = make_tokens(cluster)
    path = cluster.tmp / "tokens.json"  # [web] TOKENS_FILE's default: beside config.ini
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert all(t.startswith("fjt_") and t not in text for t in tokens.values())
    listed = cluster.cli("token", "list")
    assert all(f"{r}-1" in listed.stdout for r in tokens) and "fjt_" not in listed.stdout
    again = cluster.cli("token", "create", "viewer-1", "--role", "viewer")
    assert again.returncode == 2 and "exists already" in again.stderr and again.stdout == ""

    web = WebProcess.start(cluster)
    try:
        operator = httpx.Client(base_url=web.url + "/api/v1", headers={"Authorization": f"Bearer {tokens['operator']}"})
        assert operator.post("/jobs", json={"type": "USER_JOB", "name": "Probe.noop", "uid": "t"}).status_code == 201
        note = cluster.fetch("jobstatus user_job 'Probe.noop' with uid='t';").first_row()["Notes"]
        assert note.startswith("STARTJOB by token 'operator-1' on ")
        admin = httpx.Client(base_url=web.url + "/api/v1", headers={"Authorization": f"Bearer {tokens['admin']}"})
        assert admin.delete("/jobs/USER_JOB/Probe.noop/t/runs").json()["deleted_runs"] == 0
        note = cluster.fetch("jobstatus user_job 'Probe.noop' with uid='t';").first_row()["Notes"]
        assert note.startswith("DELETEHISTORY by token 'admin-1' on ")  # a live job with no run going
        assert admin.post("/commands", json={"text": "createcalendar 'audit' exclude '2026-12-25';"}).status_code == 200
        assert admin.post("/jobs/USER_JOB/Probe.noop/none/stop").status_code == 404
        script = "".join(f"startjob user_job name='Probe.noop' uid='s{i}';" for i in range(25))
        assert admin.post("/commands", json={"text": script}).status_code == 200
        failing = "startjob user_job name='Probe.noop' uid='s0' if not exists; stopjob user_job name='Probe.noop' uid='no';"
        assert admin.post("/commands", json={"text": failing}).status_code == 404
        assert admin.get("/jobs/USER_JOB/Probe.noop/t").status_code == 200  # a read: no line
        assert cluster.cli("token", "revoke", "operator-1").stdout.strip() == "token 'operator-1' revoked"
        refused = operator.get("/jobs")
        assert refused.status_code == 401 and refused.json()["message"] == "unknown or revoked API token"
        assert cluster.cli("token", "revoke", "operator-1").returncode == 1
        viewer = httpx.Client(base_url=web.url + "/api/v1", headers={"Authorization": f"Bearer {tokens['viewer']}"})
        assert viewer.get("/jobs").status_code == 200
    finally:
        web.stop()
    assert "GET /api/v1/jobs" in web.log()  # the access log is on ...
    assert not any(t in web.log() or t[4:] in web.log() for t in tokens.values())  # ... and holds no token
    # Who did what, one line per change (a job's Notes are overwritten by its next run):
    assert [line for line in web.log().splitlines() if "audit:" in line] == [
        "INFO audit: token 'operator-1' STARTJOB USER_JOB.Probe.noop.t -> ok",
        "INFO audit: token 'admin-1' DELETEHISTORY USER_JOB.Probe.noop.t -> ok",
        "INFO audit: token 'admin-1' CREATECALENDAR calendar audit -> ok",
        "INFO audit: token 'admin-1' STOPJOB USER_JOB.Probe.noop.none -> JobNotFound",
        # a script's line names its first 20 statements, then how many more
        "INFO audit: token 'admin-1' " + "; ".join(f"STARTJOB USER_JOB.Probe.noop.s{i}" for i in range(20))
        + "; and 5 more -> ok",
        "INFO audit: token 'admin-1' STARTJOB USER_JOB.Probe.noop.s0; STOPJOB USER_JOB.Probe.noop.no -> JobNotFound",
    ], web.log()


def test_the_server_refuses_half_a_tls_pair_and_a_bad_bind(cluster):
    half = cluster.cli("web", "--tls-cert", "cert.pem", timeout=30)
    assert half.returncode == 2 and "needs both a certificate and its key" in half.stderr
    bad = cluster.cli("web", "--bind", "localhost", timeout=30)
    assert bad.returncode == 2 and "--bind: expected HOST:PORT" in bad.stderr


def test_a_tls_pair_that_cannot_be_used_is_one_line_before_anything_is_announced(cluster):
    """A missing file, a file that is not PEM: one line and exit status 2 (a configuration
    error, which the shipped unit does not restart), no console address printed, no traceback."""
    garbage = cluster.tmp / "garbage.pem"
    garbage.write_text("garbage\n")
    for cert, key, says in ((cluster.tmp / "none.pem", cluster.tmp / "none.key", "No such file or directory"),
                            (garbage, garbage, "both must be PEM files")):
        r = cluster.cli("web", "--tls-cert", str(cert), "--tls-key", str(key), timeout=30)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert says in r.stderr and "console" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_address_in_use_is_refused_before_anything_is_announced(cluster):
    """A second web process on the same port: one line that says why, exit status 1 (a failed
    command, which a service manager starts again), and no console address printed as if served."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cluster.cli("web", "--bind", f"127.0.0.1:{port}", timeout=30)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.strip() == f"fabricjobs web: cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_https_with_tls_cert_and_key(cluster):
    cert, key = cluster.tmp / "cert.pem", cluster.tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    web = WebProcess.start(cluster, "--tls-cert", str(cert), "--tls-key", str(key), scheme="https")
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        answer = wait_for(lambda: httpx.get(web.url + "/readyz", verify=trusted), 10, "an HTTPS answer")
        assert answer.json() == {"status": "ready"} and web.url.startswith("https://")
        with pytest.raises(httpx.TransportError):
            httpx.get(web.url.replace("https://", "http://") + "/healthz", timeout=5)
    finally:
        web.stop()
