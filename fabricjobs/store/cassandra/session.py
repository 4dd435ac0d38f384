"""Talking to the cluster: the connection (load balancing, the consistency of each kind of
statement, authentication, TLS), a count of what is sent, statements prepared once, and plain
writes sent in as few requests as they fit in.

It is the layer every other part of the store builds on (rows.py, index.py, queue.py,
history.py, nodes.py): they say what to read and write, this module how it reaches Cassandra.
Statements go out under one of three execution profiles: the default (reads and plain writes
at ``[cassandra] CONSISTENCY``), ``lwt`` (an LWT, its Paxos phase at ``SERIAL_CONSISTENCY``) and
``serial`` (a read at the serial level); the last two never resend (FallthroughRetryPolicy):
an LWT's unknown outcome is settled by the store itself (rows.py).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Sequence

from ...clock import utc_from_timestamp
from ...errors import StoreError, StoreUnavailable
from ..base import StoreStats
from .clock import ClusterClock
from .hosts import Unanswered, policy_avoiding
from .schema import qualify
from .sweep import ENTRY_WRITE_BOUND

# One logger for the whole backend, whichever module logs (operators and tests filter on it).
log = logging.getLogger("fabricjobs.store.cassandra")

_ENTRY_WRITES = 5  # attempts at an index entry write acknowledged within ENTRY_WRITE_BOUND
_BATCH = 8  # statements per unlogged batch (Cassandra warns from 10 partitions in one)


#: The longest an LWT is waited for, whatever REQUEST_TIMEOUT_SEC says; then its outcome is
#: unknown and settled by a SERIAL read through another host, and it is sent again there if it
#: did not apply (rows.py). A live coordinator answers an LWT by itself within its own timeouts
#: (cas_contention_timeout 1 s, then write_request_timeout 2 s, Cassandra's defaults); one that
#: has not by then is paused or cut off, and an LWT sent to it held its sender, a node's whole
#: claim pass with it, for the request timeout (10 s by default): the chaos soak on three
#: Cassandra nodes saw a SIGSTOPped one hold a node's due fires for 5.5 s
#: (docs/explanation/cassandra-data-model.md, "Unknown LWT outcomes").
LWT_TIMEOUT = 4.0


class _DcGuess(logging.Filter):
    """The driver's "Using datacenter ... if incorrect, please specify a local_dc" line, which
    it logs once per policy (several per process) when LOCAL_DC is empty. That is allowed on a
    cluster of one data centre, and checked on one of several (refused: see
    docs/explanation/cassandra-queue.md, "Settings per topology"), so the advice only misleads."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)  # (the driver formats it itself)
        return not (text.startswith("Using datacenter ") and "for DCAwareRoundRobinPolicy" in text)


def _quiet_dc_guess() -> None:
    policies = logging.getLogger("cassandra.policies")
    if not any(isinstance(f, _DcGuess) for f in policies.filters):
        policies.addFilter(_DcGuess())


def execution_profiles(*, consistency: str, serial_consistency: str, local_dc: str, token_aware: bool,
                       request_timeout: float, speculative_delay: float = 0.0,
                       unanswered: Unanswered | None = None) -> dict:
    """The driver's execution profiles: the default one, ``lwt`` and ``serial``; with
    ``unanswered``, hosts that timed out lately are tried last.

    ``speculative_delay``: an idempotent statement (every one but an LWT, see ``_stmt``)
    unanswered after that long goes to the next host of its plan too, and the first answer
    wins. A replica that is down but not yet known to be (a silent partition, a paused JVM)
    otherwise holds each request it coordinates for the whole request timeout, and a
    coordinator that waits on it (a read whose data replica it is) holds it as long: the
    reconcile pass of every node stalled 3-5 s at each such fault (tests/test_partitions.py,
    scripts/chaos.py on 3 Cassandra nodes)."""
    # The driver is imported here, not at module level: choosing SQLite never pays for it.
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import (ConstantSpeculativeExecutionPolicy, DCAwareRoundRobinPolicy,
                                    FallthroughRetryPolicy, NoSpeculativeExecutionPolicy, TokenAwarePolicy)
    from cassandra.query import dict_factory

    cl = ConsistencyLevel.name_to_value[consistency]
    serial = ConsistencyLevel.name_to_value[serial_consistency]
    if not local_dc:
        _quiet_dc_guess()

    def lbp():
        # Token-aware: a statement goes to a replica of its partition, saving the hop from a
        # coordinator that holds no copy (and, for an LWT, a Paxos round's extra latency).
        dc_aware = DCAwareRoundRobinPolicy(local_dc=local_dc or None)
        policy = TokenAwarePolicy(dc_aware) if token_aware else dc_aware
        return policy_avoiding(policy, unanswered) if unanswered is not None else policy

    def speculative():
        if speculative_delay <= 0:
            return NoSpeculativeExecutionPolicy()
        return ConstantSpeculativeExecutionPolicy(speculative_delay, 1)

    return {
        EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=lbp(), consistency_level=cl, row_factory=dict_factory,
            request_timeout=request_timeout, speculative_execution_policy=speculative(),
        ),
        "lwt": ExecutionProfile(
            load_balancing_policy=lbp(), consistency_level=cl, serial_consistency_level=serial,
            retry_policy=FallthroughRetryPolicy(), row_factory=dict_factory,
            request_timeout=min(request_timeout, LWT_TIMEOUT),
        ),
        "serial": ExecutionProfile(
            load_balancing_policy=lbp(), consistency_level=serial, retry_policy=FallthroughRetryPolicy(),
            row_factory=dict_factory, request_timeout=request_timeout, speculative_execution_policy=speculative(),
        ),
    }


def credentials(*, username: str, password: str, tls: bool, tls_ca_file: str, tls_cert_file: str,
                tls_key_file: str, tls_verify: bool) -> dict[str, Any]:
    """The Cluster's options for password authentication and TLS (none: an empty dict)."""
    kwargs: dict[str, Any] = {}
    if username:
        from cassandra.auth import PlainTextAuthProvider

        kwargs["auth_provider"] = PlainTextAuthProvider(username=username, password=password)
    if tls:
        ctx = ssl.create_default_context(cafile=tls_ca_file or None)
        if not tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if tls_cert_file:
            ctx.load_cert_chain(tls_cert_file, tls_key_file or None)
        kwargs["ssl_context"] = ctx
    return kwargs


def new_cluster(hosts: Sequence[str], port: int, *, protocol_version: int, connect_timeout: float,
                token_aware: bool, profiles: dict, timestamps: Callable[[], int] | None = None, **options):
    """The driver's Cluster, not yet connected. ``timestamps``: what stamps every write (in
    microseconds); the store passes Cassandra's time (clock.py), not the host's."""
    from cassandra import UnresolvableContactPoints
    from cassandra.cluster import Cluster

    _quiet_driver_tracebacks()
    try:
        return Cluster(
            list(hosts), port=port, protocol_version=protocol_version, execution_profiles=profiles,
            # Routing by token needs the token ring and the keyspace's replication (schema metadata).
            connect_timeout=connect_timeout, schema_metadata_enabled=token_aware, token_metadata_enabled=token_aware,
            # The control connection's own queries at connect (peers, schema) get the connect
            # timeout too, not the driver's 2 s: a busy server otherwise fails the whole connect.
            control_connection_timeout=connect_timeout,
            # A statement is prepared on the host that answers; another host that meets it first
            # answers UNPREPARED and the driver prepares it there. Preparing on every host at once
            # (the driver's default) waited 10 s on each host cut off by a partition, on the
            # node's main thread, for each statement first used after the cut: a takeover that
            # needed three new statements came 30 s late (tests/test_partitions.py).
            prepare_on_all_hosts=False,
            **({"timestamp_generator": timestamps} if timestamps is not None else {}),
            **options,
        )
    except UnresolvableContactPoints:  # DNS not up yet on a host that just booted, or a wrong name
        raise StoreUnavailable(f"cannot resolve any Cassandra host of [cassandra] HOSTS ({', '.join(hosts)})") from None


_NO_PROFILE = object()


def _bound(value):
    """A value to bind, or the driver's "unset" for None: a bound null writes a tombstone."""
    if value is None:
        from cassandra.query import UNSET_VALUE

        return UNSET_VALUE
    return value


def _result(future):
    try:
        return future.result()
    except Exception as exc:
        raise driver_error(exc, f"Cassandra: {type(exc).__name__}: {exc}") from None


class _DriverWarningEcho(logging.Filter):
    """Drops the driver's own ``Server warning: ...`` line: the store counts each of Cassandra's
    warnings and logs it at most once a minute per kind (``_warned``), where the driver logs
    every one, a line per read that met tombstones (docs/guides/operations/troubleshooting.md)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Server warning: %s"


_DRIVER_ECHO = _DriverWarningEcho()


class _OneLineDriverWarnings(logging.Filter):
    """The driver's lines about hosts it cannot reach (a connection refused while a Cassandra
    host is down, a pool it could not open, a control connection that found no host) come
    with a traceback: routine for a cluster, and printed to a shell user's terminal. Each
    becomes one line, the exception's text appended. (Any other exception the driver logs as
    an error keeps its traceback: that may be a bug.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and (record.levelno <= logging.WARNING or _unreachable(exc)):
            try:
                message = record.getMessage()
            except Exception:  # a bad format: logging's own handling reports it, traceback kept
                return True
            record.msg, record.args = f"{message} ({type(exc).__name__}: {exc})", None
            record.exc_info, record.exc_text = None, None
        return True


def _unreachable(exc: BaseException) -> bool:
    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException

    return isinstance(exc, (OSError, ConnectionException, NoHostAvailable, OperationTimedOut))


def _unanswered(exc: BaseException) -> bool:
    """The cluster did not answer (unreachable, a timeout, too few replicas up, overloaded):
    it may answer again; any other driver error is an answer (a refusal, a bad statement)."""
    from cassandra import AuthenticationFailed, CoordinationFailure, Timeout, Unavailable
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    if isinstance(exc, NoHostAvailable):  # each host's own error: a wrong password is no outage
        return not any(isinstance(e, AuthenticationFailed) and not _auth_unavailable(e) for e in exc.errors.values())
    return _unreachable(exc) or isinstance(exc, (Timeout, Unavailable, CoordinationFailure, OverloadedErrorMessage,
                                                 IsBootstrappingErrorMessage))


def _auth_unavailable(exc: BaseException) -> bool:
    """An authentication that failed because Cassandra could not read its roles (too few
    replicas of system_auth up: a cluster still starting), which it reports as bad credentials
    with this message. It may succeed in a moment, a wrong password never."""
    return "Unable to perform authentication" in str(exc)


def driver_error(exc: BaseException, text: str) -> StoreError:
    """``exc`` of the driver as the store's error saying ``text``: StoreUnavailable if the
    cluster did not answer (a command then exits with status 1, not 2)."""
    return (StoreUnavailable if _unanswered(exc) else StoreError)(text)


def connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in a user's words: each host's last error ("127.0.0.1:9042:
    connection refused"), not the driver's nested reprs."""
    from cassandra.cluster import NoHostAvailable

    errors = getattr(exc, "errors", None) if isinstance(exc, NoHostAvailable) else None
    if not errors:
        return str(exc)
    if len(errors) == 1:
        return _host_failure(next(iter(errors.values())))
    return "; ".join(f"{host}: {_host_failure(error)}" for host, error in errors.items())


def _host_failure(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    text = str(error)
    return text.rsplit("Last error: ", 1)[-1] if "Last error: " in text else text


_ONE_LINE = _OneLineDriverWarnings()


def _quiet_driver_tracebacks() -> None:
    """(A filter on a logger does not apply to its children's records: one on each.)"""
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] == "cassandra" and isinstance(logger, logging.Logger) and _ONE_LINE not in logger.filters:
            logger.addFilter(_ONE_LINE)


class _CountingSession:
    """The driver's session, counting what is sent by kind (StoreStats): the figures of
    scripts/bench_cassandra.py and of the node's metrics are what the cluster was asked."""

    def __init__(self, session, stats: StoreStats, unanswered: Unanswered | None = None,
                 clock: ClusterClock | None = None) -> None:
        from cassandra import DriverException
        from cassandra.query import BatchStatement

        self._s = session
        self._clock = clock
        self._unanswered = unanswered
        self._unfinished = DriverException
        self.stats = stats
        self._batch_type = BatchStatement
        self._last_warned: dict[str, float] = {}
        logging.getLogger("cassandra.protocol").addFilter(_DRIVER_ECHO)  # (added once, however many sessions)

    def _count(self, stmt, profile) -> None:
        """Count a request by kind; a write (an LWT, a batch, any statement but a SELECT) is
        refused first while this host's clock is beyond the bound (clock.py)."""
        if profile == "lwt":
            self._may_write()
            self.stats.lwt_attempts += 1
            return
        if isinstance(stmt, self._batch_type):  # each statement of a batch is a write (one request)
            self._may_write()
            self.stats.writes += len(stmt)
            return
        text = stmt if isinstance(stmt, str) else (getattr(stmt, "query_string", None) or getattr(
            getattr(stmt, "prepared_statement", None), "query_string", "") or "")
        if text.lstrip()[:6].upper() == "SELECT":
            self.stats.reads += 1
            if profile == "serial":
                self.stats.serial_reads += 1
        elif text:
            self._may_write()
            self.stats.writes += 1

    def _may_write(self) -> None:
        if self._clock is not None:
            self._clock.check_write()

    def execute(self, stmt, params=None, execution_profile=_NO_PROFILE, **kw):
        return self.execute_async(stmt, params, execution_profile, **kw).result()

    def execute_async(self, stmt, params=None, execution_profile=_NO_PROFILE, **kw):
        self._count(stmt, execution_profile)
        if execution_profile is _NO_PROFILE:
            future = self._s.execute_async(stmt, params, **kw)
        else:
            future = self._s.execute_async(stmt, params, execution_profile=execution_profile, **kw)
        future.add_callbacks(lambda rows: self._answered(future, rows), self._failed)
        return future

    def _answered(self, future, rows) -> None:
        if isinstance(rows, list):  # a page of a read (called again for each page fetched)
            self.stats.rows_read += len(rows)
        self._warned(future)
        # Answered by a speculative copy (another host) while the first host said nothing for
        # the whole delay: tried after the answering hosts for a while, it costs no further
        # delays; otherwise a third of all requests waited the delay whenever a replica was
        # cut off (each plan starts with a replica of its partition).
        if self._unanswered is None:
            return
        self._unanswered.answered(future.coordinator_host)
        attempted: list = list(future.attempted_hosts or [])
        if len(attempted) > 1 and future.coordinator_host is not attempted[0]:
            self._unanswered.slow(attempted[0])

    def prepare(self, query: str):
        """Prepare on one host, tried in the plan's order (hosts that timed out lately last);
        a host that leaves it unanswered is learned as any other request's would be. The first
        use of a statement after a partition otherwise waited out a cut-off host."""
        try:
            return self._s.prepare(query)
        except Exception as exc:
            self._failed(exc)
            raise

    def _failed(self, exc: BaseException) -> None:
        if self._unanswered is not None:
            self._unanswered.learn(exc)

    def _warned(self, future) -> None:
        """Cassandra's warnings to the client (tombstones met by a read, a batch too large)
        are otherwise dropped by the driver: each is counted and logged, at most once a minute
        per kind, since each points at a data-model problem an operator must see."""
        try:
            warnings = future.warnings
        except self._unfinished:
            # The driver runs a callback added just as the response lands before it marks
            # the future finished, and `warnings` refuses until then; the response's
            # warnings are already stored by that point.
            warnings = getattr(future, "_warnings", None)
        for text in warnings or ():
            self.stats.server_warnings += 1
            kind = " ".join(w for w in text.split()[:6] if not w.isdigit())
            now = time.monotonic()
            if now - self._last_warned.get(kind, float("-inf")) >= 60.0:
                self._last_warned[kind] = now
                log.warning("Cassandra warned: %s", text)

    def __getattr__(self, name):  # prepare, cluster, shutdown, ...
        return getattr(self._s, name)


@dataclass
class _Write:
    """One plain write, to be sent alone or in a batch (Session._send)."""
    stmt: Any
    params: tuple
    what: str = "an index entry"
    big: bool = False  # too big to share a batch
    on_sent: Any = None  # called once the write is acknowledged


def _chunks(writes: Sequence[_Write]) -> list[list[_Write]]:
    """``writes`` as requests: up to ``_BATCH`` small ones together, a big one alone."""
    chunks: list[list[_Write]] = []
    for w in writes:
        if w.big or not chunks or len(chunks[-1]) >= _BATCH or chunks[-1][0].big:
            chunks.append([w])
        else:
            chunks[-1].append(w)
    return chunks


def _request(chunk: list[_Write]):
    """One statement alone, or an unlogged batch of them."""
    from cassandra.query import BatchStatement, BatchType

    if len(chunk) == 1:
        return chunk[0].stmt.bind(chunk[0].params)
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for w in chunk:
        batch.add(w.stmt, w.params)
    batch.is_idempotent = all(w.stmt.is_idempotent for w in chunk)
    return batch


def idempotent(cql: str) -> bool:
    """Whether sending ``cql`` twice does what sending it once does: every statement here but a
    lightweight transaction (``IF ...``), whose second copy would answer ``[applied]=false``
    to its own first. Plain writes carry one client timestamp however often they are sent."""
    return _CONDITION.search(cql) is None


_CONDITION = re.compile(r"\bIF\s+(NOT\s+EXISTS|EXISTS|\w+\s*(=|!=|<|>|IN\b))", re.IGNORECASE)


class Session:
    """The store's connection and what every other part sends through it."""

    keyspace: str
    request_timeout: float
    stats: StoreStats
    _cluster: Any
    _session: _CountingSession
    _prepared: dict[tuple, Any]
    _prep_lock: threading.Lock
    _latency_clock: Callable[[], float]
    _clock: ClusterClock

    def store_time(self) -> datetime:
        """Now, by Cassandra's clock as this process measures it (clock.py): no round trip."""
        return utc_from_timestamp(self._clock.now())

    def _connect(self, cluster, where: str, unanswered: Unanswered | None = None,
                 clock: ClusterClock | None = None) -> None:
        """Connect ``cluster`` (shut down again if that fails); counters and statements start
        empty. ``clock``: the one the cluster stamps writes by, which also vets each write."""
        self._cluster = cluster
        self.stats = StoreStats()
        try:
            session = cluster.connect()
            # What a prepare waits: it takes no profile, only the session's legacy default
            # (10 s, and its setter refuses once profiles are in use), which held the caller
            # that long on a host cut off by a partition, for each statement first used after
            # the cut. Other requests already wait the profiles' request timeout.
            session._default_timeout = getattr(self, "request_timeout", session.default_timeout)
            self._session = _CountingSession(session, self.stats, unanswered, clock)
        except Exception as exc:
            cluster.shutdown()
            raise driver_error(exc, f"cannot connect to Cassandra at {where}: {connect_failure(exc)}") from None
        self._prepared = {}
        self._prep_lock = threading.Lock()
        self._latency_clock = time.monotonic

    def _stmt(self, key: tuple, cql: str):
        stmt = self._prepared.get(key)
        if stmt is None:
            with self._prep_lock:
                stmt = self._prepared.get(key)
                if stmt is None:
                    stmt = self._prepare_statement(qualify(cql, self.keyspace))
                    stmt.is_idempotent = idempotent(cql)  # may go to a second host (speculative execution)
                    self._prepared[key] = stmt
        return stmt

    def _prepare_statement(self, cql: str):
        """Prepare, once more if a host left it unanswered (that host is now tried last)."""
        for attempt in (1, 2):
            try:
                return self._session.prepare(cql)
            except Exception as exc:
                if attempt == 2 or type(exc).__name__ != "OperationTimedOut":
                    raise driver_error(exc, f"Cassandra: cannot prepare a statement: {type(exc).__name__}: {exc}") from None

    def _run(self, stmt, params=(), timeout: float | None = None):
        """Execute a plain statement; a driver error becomes a StoreError with its text."""
        try:
            if timeout is not None:
                return self._session.execute(stmt, params, timeout=timeout)
            return self._session.execute(stmt, params)
        except Exception as exc:
            if isinstance(exc, StoreError):
                raise
            raise driver_error(exc, f"Cassandra: {type(exc).__name__}: {exc}") from None

    def _unpaged(self, stmt, params):
        """Send a read over several partitions unpaged: a paged one makes the coordinator read
        them one after another, an unpaged one all at once."""
        bound = stmt.bind(params)
        bound.fetch_size = None
        return self._session.execute_async(bound)

    def _send(self, writes: Sequence[_Write], *, bounded: bool) -> None:
        """Send plain writes in as few requests as they fit in: unlogged batches of up to
        ``_BATCH`` small statements (fewer partitions than Cassandra's warning threshold for
        unlogged batches, 10); a big one (a run line with its output) alone. With ``bounded``,
        a request acknowledged later than ENTRY_WRITE_BOUND after it was sent is sent again
        (a fresh stamp): an index entry stamped that long before it landed could fall under a
        sweep that read its partition in between (sweep.py). Raises StoreError."""
        pending = [(chunk, *self._send_chunk(chunk)) for chunk in _chunks(writes)]
        for chunk, future, started, acked in pending:
            self._await_chunk(chunk, future, started, acked, bounded)
            for w in chunk:
                if w.on_sent is not None:
                    w.on_sent()

    def _send_chunk(self, chunk: list[_Write]):
        """Send one request; returns its future, when it was sent, and when it was acknowledged
        (filled in by the driver's callback, on the latency clock)."""
        started = self._latency_clock()
        acked: list[float] = []
        future = self._session.execute_async(_request(chunk))
        future.add_callbacks(lambda _rows: acked.append(self._latency_clock()), lambda _exc: None)
        return future, started, acked

    def _await_chunk(self, chunk: list[_Write], future, started: float, acked: list[float], bounded: bool) -> None:
        """Wait for one request; with ``bounded``, send it again while it is acknowledged late."""
        for attempt in range(_ENTRY_WRITES):
            try:
                future.result()
            except Exception as exc:
                raise driver_error(exc, f"Cassandra: cannot write {chunk[0].what}: {type(exc).__name__}: {exc}") from None
            if not bounded or (acked[0] if acked else self._latency_clock()) - started <= ENTRY_WRITE_BOUND:
                break
            self.stats.slow_entry_writes += 1
            if attempt + 1 == _ENTRY_WRITES:
                raise StoreError(f"writes of {chunk[0].what} took longer than {ENTRY_WRITE_BOUND:g} s "
                                 f"{_ENTRY_WRITES} times")
            future, started, acked = self._send_chunk(chunk)

    def _send_quietly(self, writes: Sequence[_Write]) -> None:
        """Tidying writes (index deletes, a fenced run's line): a lost one is met as stale by a
        later reader, so a failure is logged, not raised; while this host may not write (its
        clock, clock.py) they are left to others."""
        if not writes or self._clock.refuses:
            return
        try:
            self._send(writes, bounded=False)
        except StoreError as exc:
            log.warning("could not tidy up after a change (%s); a later reader will", exc)
