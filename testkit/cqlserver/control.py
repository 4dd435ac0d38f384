"""Side channel to control a CQL test server running in another process: a line-based TCP port
speaking one JSON object per line in each direction.

Requests (``{"cmd": ...}``) and their extra fields:
  ping
  inject        kind, match, and optionally times, applied, delay, write_type, statements, regex
  clear_faults
  faults        -> {"rules": [...]}
  stats         -> {"stats": {...}}
  reset_stats
  advance       seconds  -> {"now": server time}
  now           -> {"now": server time}
Every reply has ``"ok": true`` or ``"ok": false, "error": "..."``.

Example: ``printf '{"cmd":"inject","kind":"write_timeout","match":"UPDATE jobs"}\\n' | nc 127.0.0.1 PORT``
"""

from __future__ import annotations

import json
import socket
import threading


class ControlServer:
    def __init__(self, server, host: str, port: int):
        self.server = server
        self.sock = socket.create_server((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, name="cql-control", daemon=True)
        self._closed = False

    def start(self):
        self._thread.start()

    def stop(self):
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        self.sock.close()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn, conn.makefile("rwb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    reply = {"ok": True, **(self.handle(json.loads(line)) or {})}
                except Exception as e:  # report any error to the client
                    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    def handle(self, req: dict):
        s = self.server
        cmd = req.pop("cmd", None)
        if cmd == "ping":
            return None
        if cmd == "inject":
            kind, match = req.pop("kind"), req.pop("match")
            return {"rule": s.faults.add(kind, match, **req).to_dict()}
        if cmd == "clear_faults":
            s.faults.clear()
            return None
        if cmd == "faults":
            return {"rules": s.faults.rules()}
        if cmd == "stats":
            return {"stats": s.stats.snapshot()}
        if cmd == "reset_stats":
            s.stats.reset()
            return None
        if cmd == "advance":
            s.advance(float(req["seconds"]))
            return {"now": s.now()}
        if cmd == "now":
            return {"now": s.now()}
        raise ValueError(f"unknown cmd {cmd!r}")


class ControlClient:
    """Client for ControlServer: ``ControlClient(host, port).inject("write_timeout", "UPDATE jobs")``."""

    def __init__(self, host: str, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.f = self.sock.makefile("rwb")

    def call(self, cmd: str, **fields) -> dict:
        self.f.write(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")
        self.f.flush()
        reply = json.loads(self.f.readline())
        if not reply.pop("ok"):
            raise RuntimeError(reply.get("error"))
        return reply

    def inject(self, kind: str, match: str, **kw) -> dict:
        return self.call("inject", kind=kind, match=match, **kw)["rule"]

    def clear_faults(self):
        self.call("clear_faults")

    def faults(self) -> list:
        return self.call("faults")["rules"]

    def stats(self) -> dict:
        return self.call("stats")["stats"]

    def reset_stats(self):
        self.call("reset_stats")

    def advance(self, seconds: float) -> float:
        return self.call("advance", seconds=seconds)["now"]

    def close(self):
        self.f.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
