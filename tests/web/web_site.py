"""A real ``fabricjobs web`` process for the API tests, and tokens made by the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from backends import BACKENDS
from testkit.rig import same_cpu_priority
from harness import Cluster, free_port, wait_for

ROLES = ("viewer", "operator", "admin")
#: The backends every API test runs on (conftest.py's ``site``): SQLite and the CQL test server.
API_BACKENDS = [b for b in BACKENDS if b != "cassandra-real"]
#: A test that also runs on Apache Cassandra itself, when there is one (FABRICJOBS_CASSANDRA_HOSTS).
on_every_backend = pytest.mark.parametrize("site", BACKENDS, indirect=True)


@dataclass
class WebProcess:
    """``fabricjobs --config CONFIG web --bind 127.0.0.1:PORT``, in a process group of its own."""

    proc: subprocess.Popen
    url: str
    log_path: Path

    @classmethod
    def start(cls, cluster: Cluster, *extra: str, scheme: str = "http") -> "WebProcess":
        port = free_port()
        log_path = cluster.tmp / f"web-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "fabricjobs", "--config", str(cluster.config_path), "web",
                 "--bind", f"127.0.0.1:{port}", *extra],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cluster.tmp,
                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        same_cpu_priority(proc.pid)  # a session of its own: as low a CPU priority as the test's (rig.py)
        web = cls(proc, f"{scheme}://127.0.0.1:{port}", log_path)
        wait_for(web.healthy, 30, lambda: f"fabricjobs web to answer /healthz; its log:\n{web.log()}")
        return web

    def healthy(self) -> bool:
        """Answering /healthz, and this process does: it announces itself once its port is bound."""
        if self.proc.poll() is not None:
            raise AssertionError(f"fabricjobs web exited ({self.proc.returncode}):\n{self.log()}")
        if "fabricjobs web: console " not in self.log():
            return False
        try:
            return httpx.get(self.url + "/healthz", timeout=2, verify=False).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM (uvicorn's clean stop), SIGKILL of the group if it lingers."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@dataclass
class Site:
    """What the API tests share: the cluster, the web process, a token per role."""

    cluster: Cluster
    web: WebProcess
    tokens: dict[str, str]

    def client(self, role: str | None = "admin", token: str | None = None) -> httpx.Client:
        headers = {}
        if token is not None or role is not None:
            headers["Authorization"] = f"Bearer {token if token is not None else self.tokens[role]}"
        return httpx.Client(base_url=self.web.url + "/api/v1", headers=headers, timeout=90)


def make_tokens(cluster: Cluster) -> dict[str, str]:
    tokens = {}
    for role in ROLES:
        made = cluster.cli("token", "create", f"{role}-1", "--role", role)
        assert made.returncode == 0, made.stderr
        tokens[role] = made.stdout.strip()
    return tokens


@contextmanager
def running_site(request, tmp: Path, settings: dict | None = None, backend: str = "sqlite") -> Iterator[Site]:
    """A node ``w1``, a token per role and a web process on a new store of ``backend``
    (tests/backends.py); all stopped after."""
    cluster = Cluster(tmp, backend, settings=settings, request=request)
    try:
        cluster.start_node("w1")
        tokens = make_tokens(cluster)
        web = WebProcess.start(cluster)
        try:
            yield Site(cluster, web, tokens)
        finally:
            web.stop()
    finally:
        cluster.stop_all()
