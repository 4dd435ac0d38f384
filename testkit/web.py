"""A ``fabricjobs web`` process for the benchmarks that time the HTTP API and the console
(``scripts/bench.py web`` and ``console``): started on a config with a token of its own, up once
``/healthz`` answers, ended with its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .rig import free_port, wait_for


class WebProcess:
    """``fabricjobs --config CONFIG web`` on a free loopback port, its output in ``log``; a token
    of ``role`` made for it, and ``http`` (an httpx client) that sends it."""

    def __init__(self, config: Path, log: Path, *, role: str, timeout: float = 30.0, cwd: Path | None = None) -> None:
        import httpx

        exe = [sys.executable, "-m", "fabricjobs", "--config", str(config)]
        self.token = subprocess.run([*exe, "token", "create", "bench", "--role", role], capture_output=True, text=True,
                                    check=True).stdout.strip()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([*exe, "web", "--bind", f"127.0.0.1:{self.port}"], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                         cwd=cwd)
        self.http = httpx.Client(base_url=self.url, timeout=timeout, headers={"Authorization": f"Bearer {self.token}"})
        try:
            wait_for(self._up, timeout, lambda: f"fabricjobs web to answer; its log:\n{log.read_text()}")
        except BaseException:
            self.close()
            raise

    def _up(self) -> bool:
        import httpx

        if self.proc.poll() is not None:
            raise RuntimeError(f"fabricjobs web exited: {self.log.read_text()}")
        if "fabricjobs web: console " not in self.log.read_text(errors="replace"):
            return False  # (announced once its port is bound: until then /healthz may be another's)
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
