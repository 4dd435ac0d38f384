"""The TCP server: one thread per client connection, native protocol v4, fault injection."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Optional

from cassandra import ConsistencyLevel as CL

from . import protocol as W
from .control import ControlServer
from .engine import SERIAL_CLS, BatchPlan, Ctx, Engine, ModPlan, Plan, QueryOptions
from .errors import (SERVER_ERROR, BadCredentials, CasWriteUnknown, CqlError, InvalidRequest, Overloaded, ProtocolError,
                     ReadTimeout, Unavailable, WriteFailure, WriteTimeout, unsupported)
from .faults import FaultInjector, FaultRule, Stats

log = logging.getLogger("cqlserver")
AUTHENTICATOR = "org.apache.cassandra.auth.PasswordAuthenticator"


class CqlTestServer:
    """A loopback CQL (native protocol v4) test double. See the package docstring.

    Args:
        host, port: where to listen; port 0 picks a free port (read ``.port`` after start()).
        username, password: if given, require PasswordAuthenticator (SASL PLAIN) logins.
        clock: callable returning epoch seconds; drives TTL expiry and now()/currentTimestamp().
            ``advance(seconds)`` shifts it further.
        timestamp_clock: callable for server-side write timestamps (LWT ballots, writes without
            a client timestamp). Defaults to time.time and is NOT shifted by advance(), so that
            server timestamps stay comparable with the driver's client-side timestamps.
        control_port: if not None, also open the JSON-lines control port (0 = any free port).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, username: Optional[str] = None,
                 password: Optional[str] = None, clock=time.time, timestamp_clock=time.time,
                 control_port: Optional[int] = None, cluster_name: str = "Test Cluster",
                 release_version: str = "4.0.11"):
        if (username is None) != (password is None):
            raise ValueError("give both username and password, or neither")
        self.host, self.port = host, port
        self.username, self.password = username, password
        self.stats = Stats()
        self.faults = FaultInjector(self.stats)
        self.engine = Engine(clock=clock, timestamp_clock=timestamp_clock, stats=self.stats, host=host,
                             port=port, cluster_name=cluster_name, release_version=release_version)
        self._control_port = control_port
        self.control: Optional[ControlServer] = None
        self._sock = None
        self._conns: set = set()
        self._timers: set = set()
        self._lock = threading.Lock()
        self._accept_thread = None
        self._closed = False

    # lifecycle
    def start(self) -> "CqlTestServer":
        self._sock = socket.create_server((self.host, self.port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.engine.port = self.port
        self._accept_thread = threading.Thread(target=self._accept, name=f"cql-accept-{self.port}", daemon=True)
        self._accept_thread.start()
        if self._control_port is not None:
            self.control = ControlServer(self, self.host, self._control_port)
            self.control.start()
        return self

    def stop(self) -> None:
        self._closed = True
        if self.control:
            self.control.stop()
        if self._sock:
            _close_listener(self._sock)
        with self._lock:
            conns, timers = list(self._conns), list(self._timers)
        for t in timers:
            t.cancel()
        for c in conns:
            c.close()
        if self._accept_thread:
            self._accept_thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # clock control
    def now(self) -> float:
        return self.engine.now()

    def advance(self, seconds: float) -> None:
        """Move the server clock forward (TTLs expire without sleeping)."""
        with self.engine.lock:
            self.engine.time_offset += seconds

    @property
    def time_offset(self) -> float:
        return self.engine.time_offset

    @time_offset.setter
    def time_offset(self, value: float) -> None:
        with self.engine.lock:
            self.engine.time_offset = value

    # internals
    def _accept(self):
        while not self._closed:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, sock)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=conn.run, name=f"cql-conn-{self.port}", daemon=True).start()

    def _later(self, seconds: float, fn) -> None:
        def run():
            with self._lock:
                self._timers.discard(timer)
            fn()
        timer = threading.Timer(seconds, run)
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()


def _close_listener(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept()
    except OSError:
        pass
    sock.close()


def _fault_error(rule: FaultRule, opts: QueryOptions) -> CqlError:
    serial = opts.serial_consistency or CL.SERIAL
    if rule.kind == "write_timeout":
        return WriteTimeout(rule.write_type, serial if rule.write_type == "CAS" else opts.consistency)
    if rule.kind == "write_failure":
        return WriteFailure(rule.write_type, serial if rule.write_type == "CAS" else opts.consistency)
    if rule.kind == "cas_write_unknown":
        return CasWriteUnknown(serial)
    if rule.kind == "read_timeout":
        return ReadTimeout(opts.consistency)
    if rule.kind == "unavailable":
        return Unavailable(serial if rule.at_serial else opts.consistency)
    if rule.kind == "unknown_table":  # as Apache Cassandra 5.0 said it (tests/test_hold_release.py, two nodes at once)
        return CqlError("java.lang.IllegalArgumentException: Unknown CF f4e7c593-aaca-5850-aecc-b5f9d2122fc9", SERVER_ERROR)
    return Overloaded()


class _Connection:
    def __init__(self, server: CqlTestServer, sock):
        self.server, self.engine, self.sock = server, server.engine, sock
        self.keyspace: Optional[str] = None
        self.started = False
        self.authenticated = server.username is None
        self.send_lock = threading.Lock()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, stream: int, opcode: int, body: bytes):
        data = W.frame(stream, opcode, body)
        with self.send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                pass

    def send_error(self, stream: int, err: CqlError):
        self.server.stats.incr("errors")
        self.send(stream, W.ERROR, W.error_body(err))

    def send_outcome(self, stream: int, outcome):
        if isinstance(outcome, CqlError):
            self.send_error(stream, outcome)
        else:
            self.send(stream, W.RESULT, W.result_body(outcome))

    def run(self):
        try:
            while True:
                version, flags, stream, opcode, body = W.read_frame(self.sock)
                if version != W.VERSION:
                    self.send_error(stream, ProtocolError(
                        f"Invalid or unsupported protocol version ({version & 0x7F}); supported versions are (4/v4)"))
                    return
                if flags & W.COMPRESSED:
                    self.send_error(stream, ProtocolError("Compression is not supported by the CQL test server"))
                    continue
                self.dispatch(stream, opcode, body)
        except (EOFError, OSError):
            pass
        except CqlError as e:
            self.send_error(0, e)
        finally:
            with self.server._lock:
                self.server._conns.discard(self)
            self.close()

    def dispatch(self, stream: int, opcode: int, body: bytes):
        try:
            if opcode == W.OPTIONS:
                return self.send(stream, W.SUPPORTED, W.supported_body())
            if opcode == W.STARTUP:
                opts = W.parse_startup(body)
                if opts.get("COMPRESSION"):
                    raise ProtocolError(f"Unknown compression algorithm: {opts['COMPRESSION']}")
                self.started = True
                if not self.authenticated:
                    return self.send(stream, W.AUTHENTICATE, W.authenticate_body(AUTHENTICATOR))
                return self.send(stream, W.READY, b"")
            name = W.OPCODE_NAMES.get(opcode, hex(opcode))
            if not self.started:
                raise ProtocolError(f"Unexpected message {name}, expecting STARTUP or OPTIONS")
            if opcode == W.AUTH_RESPONSE:
                return self.authenticate(stream, W.parse_auth_response(body))
            if not self.authenticated:
                raise ProtocolError(f"Unexpected message {name}, expecting SASL_RESPONSE")
            if opcode == W.REGISTER:
                W.parse_register(body)
                return self.send(stream, W.READY, b"")
            if opcode == W.QUERY:
                return self.query(stream, body)
            if opcode == W.PREPARE:
                return self.prepare(stream, body)
            if opcode == W.EXECUTE:
                return self.execute(stream, body)
            if opcode == W.BATCH:
                return self.batch(stream, body)
            raise ProtocolError(f"Unknown or unexpected opcode {name}")
        except CqlError as e:
            self.send_error(stream, e)
        except Exception as e:  # a bug in the test server: report it as a ServerError
            log.exception("CQL test server internal error")
            self.send_error(stream, CqlError(f"Internal error in the CQL test server: {type(e).__name__}: {e}", 0))

    def authenticate(self, stream: int, token: bytes):
        parts = token.split(b"\x00")
        user, pw = (parts[1], parts[2]) if len(parts) == 3 else (b"", b"")
        if user.decode(errors="replace") == self.server.username and pw.decode(errors="replace") == self.server.password:
            self.authenticated = True
            return self.send(stream, W.AUTH_SUCCESS, W.auth_success_body())
        raise BadCredentials(f"Provided username {user.decode(errors='replace')} and/or password are incorrect")

    # statements
    def query(self, stream: int, body: bytes):
        query, opts = W.parse_query(body)
        self.server.stats.incr("queries")
        plan = self.engine.plan(query, self.keyspace)
        self.run_statement(stream, plan, query, opts, lambda: self.engine.execute(plan, opts))

    def prepare(self, stream: int, body: bytes):
        query = W.parse_prepare(body)
        qid, plan = self.engine.prepare(query, self.keyspace)
        self.server.stats.incr("prepares")
        result_specs = plan.result_specs if plan.kind == "read" else []  # LWT: per-response metadata
        answer = W.prepared_body(qid, plan.bind_specs, plan.pk_indexes, result_specs)
        rule = self.server.faults.take(query, "prepare")  # only rules made with statements="prepare"
        if rule is not None and rule.kind == "delay":
            if rule.applied:
                self.server._later(rule.delay, lambda: self.send(stream, W.RESULT, answer))
            return  # not applied: never answered
        self.send(stream, W.RESULT, answer)

    def execute(self, stream: int, body: bytes):
        qid, opts = W.parse_execute(body)
        self.server.stats.incr("executes")
        self.server.stats.incr("prepared_executions")
        query, plan = self.engine.prepared_plan(qid)
        self.run_statement(stream, plan, query, opts, lambda: self.engine.execute(plan, opts))

    def batch(self, stream: int, body: bytes):
        batch_type, items, opts = W.parse_batch(body)
        if batch_type == 2:
            raise unsupported("Counter batches")
        resolved, texts = [], []
        for prepared, q, values in items:
            if prepared:
                query, plan = self.engine.prepared_plan(q)
                self.server.stats.incr("prepared_executions")
            else:
                query, plan = q, self.engine.plan(q, self.keyspace)
            if not isinstance(plan, ModPlan):
                raise InvalidRequest("Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.")
            if len(values) != len(plan.bind_specs):
                raise InvalidRequest(f"There were {len(plan.bind_specs)} markers(?) in CQL but {len(values)} bound variables")
            resolved.append((plan, Ctx(self.engine, values)))
            texts.append(query)
        if not resolved:
            raise InvalidRequest("Empty batch")
        fake = BatchPlan("lwt" if any(p.is_lwt for p, _ in resolved) else "batch",
                         keyspace=resolved[0][0].keyspace, statements=[p for p, _ in resolved])
        self.run_statement(stream, fake, "; ".join(texts), opts, lambda: self.engine.execute_batch(resolved, opts))

    def account(self, plan: Plan, opts: QueryOptions) -> str:
        """Count the statement; returns its kind for fault matching (read/write/lwt/other)."""
        stats = self.server.stats
        if plan.is_system:
            stats.incr("system_queries")
            return "other"
        if isinstance(plan, BatchPlan):
            stats.incr("batches")
            if plan.kind == "lwt":
                stats.incr("lwts")
                return "lwt"
            stats.incr("writes", len(plan.statements))
            return "write"
        if plan.kind == "read":
            stats.incr("serial_reads" if opts.consistency in SERIAL_CLS else "reads")
        elif plan.kind in ("write", "lwt"):
            stats.incr(plan.kind + "s")
        elif plan.kind == "ddl":
            stats.incr("ddl")
        return plan.kind

    def run_statement(self, stream: int, plan: Plan, text: str, opts: QueryOptions, fn):
        kind = self.account(plan, opts)
        rule = self.server.faults.take(text, kind) if kind in ("read", "write", "lwt") else None
        if rule is None:
            result = fn()
            if plan.kind == "use":
                self.keyspace = result.keyspace
            return self.send(stream, W.RESULT, W.result_body(result))
        outcome = None
        if rule.applied:
            try:
                outcome = fn()
            except CqlError as e:
                outcome = e
        if rule.kind == "disconnect":
            self.close()  # the request may or may not have been carried out: the client cannot know
            return
        if rule.kind == "delay":
            if rule.applied:
                self.server._later(rule.delay, lambda: self.send_outcome(stream, outcome))
            return  # not applied: never executed, never answered
        err = _fault_error(rule, opts)
        if rule.delay > 0:
            self.server._later(rule.delay, lambda: self.send_error(stream, err))
        else:
            self.send_error(stream, err)
