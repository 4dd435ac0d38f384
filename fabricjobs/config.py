"""config.ini and node.id.

Every key is declared once in :data:`KEYS` (section, name, parser, default, help). The parser,
the documentation in ``config.ini.example`` and its test are all driven by that table, so a key
cannot exist in one place and be missing in another. Keys are upper case as in the seed and
matched case-insensitively; every key is optional; an unknown key is a warning; a bad value
is a :class:`ConfigError` that names ``[section] KEY``.

Relative paths are taken relative to the directory of the config file.
"""

from __future__ import annotations

import configparser
import logging
import math
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .errors import ConfigError, not_utf8

log = logging.getLogger(__name__)

CONFIG_ENV = "FABRICJOBS_CONFIG"


# -- value parsers ---------------------------------------------------------------------------
# Each says what it takes in ``kind`` (docs/reference/configuration.md is made from KEYS).

def _kind(kind: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    parse.kind = kind  # type: ignore[attr-defined]
    return parse


def kind_of(key: "Key") -> str:
    """What a key's value may be, in words ("" where its parser does not say)."""
    return getattr(key.parse, "kind", "")


def _int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum}, got {value}")
        return value

    if minimum is not None and maximum is not None:
        return _kind(f"integer from {minimum} to {maximum:,}", parse)
    return _kind(f"integer, {minimum} or more" if minimum is not None else "integer", parse)


def _float(minimum: float = 0.0) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):  # (nan passed every bound: a grace of nan seconds was none)
            raise ValueError(f"expected a finite number, got {text.strip()!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return _kind(f"number, {minimum:g} or more", parse)


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _str(text: str) -> str:
    return text.strip()


_bool.kind = "true or false"  # type: ignore[attr-defined]
_str.kind = "text"  # type: ignore[attr-defined]


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        t = text.strip().upper()
        if t not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return t

    return _kind("one of " + ", ".join(choices), parse)


def _consistency(text: str) -> str:
    """A Cassandra consistency level that is a quorum: with ONE a heartbeat or a claim read
    may miss the write a quorum made, and a live node would be judged dead."""
    t = text.strip().upper()
    if t in ("ONE", "LOCAL_ONE", "ANY", "TWO", "THREE"):
        raise ValueError(f"{t} is refused: reads at {t} can miss a quorum's writes (a live node's heartbeat, "
                         "a claimed job), so use LOCAL_QUORUM (one DC), QUORUM or EACH_QUORUM")
    return _choice("QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL")(text)


def _lower_choice(*choices: str) -> Callable[[str], str]:
    upper = _choice(*(c.upper() for c in choices))
    return _kind("one of " + ", ".join(choices), lambda text: upper(text).lower())


def _list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in re.split(r"[,\s]+", text) if p.strip())


_list.kind = "list, comma separated"  # type: ignore[attr-defined]


def _addresses(text: str) -> tuple[str, ...]:
    from .affinity import canonical_address

    out = []
    for part in _list(text):
        address = canonical_address(part)
        if address is None:
            raise ValueError(f"not an IP address: {part!r}")
        out.append(address)
    return tuple(out)


def _ceilings(text: str) -> Mapping[str, int]:
    """'alice=6, ci-bot=3': each user's highest PRIORITY (DolphinDB's setMaxJobPriority)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        user, eq, level = (x.strip() for x in part.partition("="))
        if not eq or not user or not re.fullmatch(r"[0-9]", level):
            raise ValueError(f"expected user=0..9, got {part!r}")
        if user in out:
            raise ValueError(f"user {user!r} is given twice")
        out[user] = int(level)
    return MappingProxyType(out)


def _zone(text: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    t = text.strip()
    if t:
        try:
            ZoneInfo(t)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # (OSError: 'America', a folder; a name too long)
            raise ValueError(f"unknown time zone {t!r} (expected an IANA name such as Europe/Paris)") from None
    return t


def _name(text: str) -> str:
    t = text.strip()
    if t and not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,200}", t):
        raise ValueError(f"node names may use letters, digits and _ . : @ - only, got {text!r}")
    return t


def parse_bind(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:9470) -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9470), got {text!r}")
    return host, int(port)


def _bind(text: str) -> str:
    parse_bind(text)
    return text.strip()


_consistency.kind = "LOCAL_QUORUM, QUORUM, EACH_QUORUM or ALL"  # type: ignore[attr-defined]
_addresses.kind = "IP addresses, comma separated"  # type: ignore[attr-defined]
_ceilings.kind = "user=0..9, comma separated"  # type: ignore[attr-defined]
_zone.kind = "IANA time zone name"  # type: ignore[attr-defined]
_name.kind = "name: letters, digits, _ . : @ -"  # type: ignore[attr-defined]
#: A node, DC or keyspace name as config.ini's keys take it (``node --name`` too).
parse_name = _name
_bind.kind = "HOST:PORT"  # type: ignore[attr-defined]


# -- the key table ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    section: str
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    path: bool = False  # resolved against the config file's directory


KEYS: tuple[Key, ...] = (
    # [node]
    Key("node", "NAME", _name, "", "This node's id in the cluster (worker_id of its jobs). Default: the host name."),
    Key("node", "DC", _name, "DC1", "Data centre name; a job's AFFINITY may name it."),
    Key("node", "TIME_ZONE", _zone, "", "IANA zone for cron and timestamp schedules and for times shown. Default: the host's zone."),
    Key("node", "ADDRESSES", _addresses, (), "This node's IP addresses, which a job's AFFINITY may name (the course's "
        "'node (IP address)'). Default: the host's own, found from its name and its outbound route (loopback left out)."),
    Key("node", "LOG_FORMAT", _choice("TEXT", "JSON", "FABRIC"), "TEXT", "Node log lines: TEXT (this project's), JSON (one "
        "object per line) or FABRIC (Fabric's, with a [LID...] log id: one per job run, else one per node), for "
        "operators who grep Fabric logs. The node's --log-format overrides it."),
    Key("node", "NODE_ID_FILE", _str, "node.id", "The node.id file with affinity limits (missing file: ANY only).", path=True),
    Key("node", "START_PATIENCE_SEC", _float(0.0), 60.0, "Seconds a starting node waits for its store to answer (the "
        "connection, its first reads, its first heartbeat) before it exits with status 1 for its service manager to "
        "start it again. A node started before its store (a host booted before Cassandra, its DNS not up yet, Cassandra's "
        "roles not readable yet) waits, with a warning each try."),
    # [jobs]
    Key("jobs", "K2JOBS_POOL_SIZE", _int(1, 4096), 25, "Runs at once on this node."),
    Key("jobs", "K2JOB_ARCHIVING_TIME_HOUR", _float(0.0), 720.0, "Hours an archived job row is kept before it is deleted."),
    Key("jobs", "CLAIM_EXCEPTIONAL_INTERVAL_SEC", _float(0.0), 60.0, "A node at its recommended count for an affinity claims more (up to absolute) only for jobs waiting this long."),
    Key("jobs", "MIN_GIVE_UP_EXCEPTIONAL_MINUTES", _float(0.0), 1.0, "Lower bound of the random delay before a node over its recommended count gives a run back."),
    Key("jobs", "MAX_GIVE_UP_EXCEPTIONAL_MINUTES", _float(0.0), 1440.0, "Upper bound of that delay."),
    Key("jobs", "MAX_TRIES", _int(1), 10, "Runs of a failing job before it is FAILED (retry-until-max mode)."),
    Key("jobs", "RETRY_DELAY_SEC", _float(0.0), 60.0, "A failed job is not re-claimed by the node that failed it for this long; others may take it at once."),
    Key("jobs", "RECONCILE_INTERVAL_MS", _int(10), 1000, "Poll period of the reconcile loop (local events wake it sooner)."),
    Key("jobs", "OWNER_PRECEDENCE_MS", _int(0), 2000, "A due job whose owner is alive is left to that owner this long before other nodes may claim it."),
    Key("jobs", "LANE_PATIENCE_MS", _int(0), 200, "A new job in another live node's claim lane is left to that node this long after this node first saw it (0: no lanes)."),
    Key("jobs", "STOP_GRACE_SEC", _float(0.0), 10.0, "STOPJOB: seconds a run may take to notice the abort before it is killed."),
    Key("jobs", "SHUTDOWN_GRACE_SEC", _float(0.0), 10.0, "SIGTERM: seconds running jobs get to end before they are killed."),
    Key("jobs", "USER_JOBS_DIR", _str, "", "Directory of user job modules: NAME 'Customer.userJob1' runs userJob1() of Customer.py.", path=True),
    Key("jobs", "USER_JOB_MODULES", _list, (), "Allowlist of modules or packages whose functions may be named as 'package.module:function' (empty: none)."),
    Key("jobs", "REQUIRE_JOB_DECORATOR", _bool, False, "Only functions decorated @job (fabricjobs.jobs.context) may run as USER_JOBs from USER_JOBS_DIR and USER_JOB_MODULES (entry points are declared already)."),
    Key("jobs", "PROCESS_JOBS_DIR", _str, "", "Directory of executables for PROCESS jobs; nothing outside it may run.", path=True),
    Key("jobs", "PROCESS_TIME_LIMIT_SEC", _float(0.0), 0.0, "Longest a PROCESS run may take (wall clock) before its process group is ended and the run fails (0: no limit); a job's ARGS time_limit_sec may lower it."),
    Key("jobs", "PROCESS_MEMORY_MB", _int(0, 1 << 30), 0, "Address space (RLIMIT_AS) of each process of a PROCESS run, in MiB (0: no limit); a job's ARGS memory_mb may lower it."),
    Key("jobs", "RUN_CGROUPS", _choice("AUTO", "OFF"), "AUTO", "AUTO: each worker slot's runs go in a cgroup v2 of their own, so that a run's end ends every "
        "process it started (needs root, or a systemd unit with Delegate=yes; without, the node says why and ends runs by process "
        "group and descendants). OFF: never. See docs/guides/run-isolation.md."),
    Key("jobs", "RUN_MEMORY_MB", _int(0, 1 << 30), 0, "memory.max of each worker slot's cgroup in MiB, counting the worker itself (0: no limit); "
        "applied where the memory controller can be enabled."),
    Key("jobs", "RUN_PIDS_MAX", _int(0), 4096, "pids.max of each worker slot's cgroup: processes and threads a run may have at once, "
        "its worker's included (0: no limit); applied where the pids controller can be enabled."),
    Key("jobs", "PROCESS_ENV", _list, (), "Node environment variables PROCESS jobs see besides PATH, HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TZ, TMPDIR, TERM."),
    Key("jobs", "LISTENER_ROOT", _str, "", "Directory under which INTERFACE_LISTENER jobs may watch (empty: none).", path=True),
    Key("jobs", "CLEANUP_ROOT", _str, "", "Directory under which a job's DELETE_ON_SUCCESS files may be (RJM's rjm_delete; empty: none may be given).", path=True),
    Key("jobs", "MAX_JOB_PRIORITY", _int(0, 9), 9, "The highest PRIORITY a user not in MAX_JOB_PRIORITY_BY_USER may give a job (STARTJOB, UPDATEJOB); "
        "a higher one is refused. A STARTJOB without PRIORITY gets min(4, the user's ceiling), as DolphinDB's interactive jobs."),
    Key("jobs", "MAX_JOB_PRIORITY_BY_USER", _ceilings, MappingProxyType({}), "Per-user ceilings, 'user=n, user=n' (DolphinDB's "
        "setMaxJobPriority): a user is a job's owner, the OS user of a shell or program or an HTTP API token's name."),
    Key("jobs", "PRIORITY_AGING_SEC", _float(0.01), 60.0, "A waiting job gains one priority level per this many seconds it waits (no starvation)."),
    Key("jobs", "DEPENDENCY_CHECK_SEC", _float(0.05), 5.0, "How often a node re-checks blocked jobs' parents (they are also checked as soon as a parent ends)."),
    Key("jobs", "OUTPUT_MAX_BYTES", _int(1024), 65536, "Cap on a run's stored output and on captured PROCESS stdout/stderr."),
    Key("jobs", "MAX_ARGS_BYTES", _int(1024), 1024 * 1024, "Longest ARGS a job may have (STARTJOB, UPDATEJOB), in bytes: a longer one is "
        "refused before it is parsed. Big data goes in a file whose name is in ARGS."),
    Key("jobs", "MAX_COMMAND_BYTES", _int(1024), 8 * 1024 * 1024, "Longest command text (one statement in the shell; a script given to "
        "Client.fetch or POST /api/v1/commands), in bytes: a longer one is refused before it is parsed."),
    Key("jobs", "MAX_OUTPUT_BYTES", _int(1024), 4 * 1024 * 1024, "What a run prints (a USER_JOB's or a PROCESS job's stdout and stderr, "
        "and its log lines): bytes of it passed on as they come (JOBLOG ... FOLLOW) per run; the rest is counted and dropped, and the "
        "run's log ends with a line saying how much ('... 1,017 MB more not kept'). Its record keeps the head and tail (RUN_LOG_MAX_BYTES)."),
    Key("jobs", "RUN_LOG_MAX_BYTES", _int(1024), 65536, "Log lines kept per run for JOBLOG (the job's logger, a PROCESS job's stdout/stderr): head and tail."),
    Key("jobs", "LIVE_LOG_FLUSH_MS", _int(0), 1000, "A node passes its running runs' new log lines to the store this often, for JOBLOG ... FOLLOW (0: never; JOBLOG then shows a run's log once it has ended)."),
    Key("jobs", "LIVE_LOG_MAX_BYTES", _int(16384), 65536, "Log bytes per run a node passes on per flush for JOBLOG ... FOLLOW; lines beyond are counted and shown as '[n lines skipped]'."),
    Key("jobs", "WORKER_IDLE_SEC", _float(0.0), 60.0, "A worker process idle this long exits (started again on demand)."),
    # [heartbeat]
    Key("heartbeat", "FABRIC_HEARTBEAT_INTERVAL_MS", _int(10), 5000, "Every node writes its heartbeat this often."),
    Key("heartbeat", "FABRIC_HEARTBEAT_MISS", _int(3), 12, "A node is dead after this many missed beats (observed on the observer's own clock)."),
    # [store]
    Key("store", "BACKEND", _lower_choice("sqlite", "cassandra"), "sqlite", "sqlite (one host, any number of nodes) or cassandra."),
    Key("store", "SQLITE_PATH", _str, "./fabricjobs.db", "The SQLite database file.", path=True),
    Key("store", "SQLITE_SYNCHRONOUS", _choice("FULL", "NORMAL", "EXTRA"), "FULL", "FULL: an accepted STARTJOB survives a power cut. NORMAL is faster but may lose the last commits on power loss."),
    Key("store", "SQLITE_BUSY_TIMEOUT_MS", _int(0), 10000, "How long a writer waits for the database lock."),
    # [cassandra]
    Key("cassandra", "HOSTS", _list, ("127.0.0.1",), "Contact points, comma separated."),
    Key("cassandra", "PORT", _int(1, 65535), 9042, "Native protocol port."),
    Key("cassandra", "KEYSPACE", _name, "k2system", "Keyspace of k2_jobs and nodes."),
    Key("cassandra", "REPLICATION", _str, "", "Used when the keyspace is created: 'SimpleStrategy:<factor>' or 'NetworkTopologyStrategy:DC1=3,DC2=3'. Empty: one replica, taken only on a one-node Cassandra cluster (a larger one needs it set)."),
    Key("cassandra", "LOCAL_DC", _str, "", "The Cassandra data centre this host is in (DC-aware load balancing, LOCAL_* levels); required when the cluster has several."),
    Key("cassandra", "CONSISTENCY", _consistency, "QUORUM", "Consistency of reads and writes (and of the LWT commit): QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL (ONE and LOCAL_ONE are refused: heartbeat and claim reads must see a quorum's writes; LOCAL_QUORUM is refused while fabricjobs nodes run in more than one data centre)."),
    Key("cassandra", "SERIAL_CONSISTENCY", _choice("SERIAL", "LOCAL_SERIAL"), "SERIAL", "Consistency of the Paxos phase of lightweight transactions. LOCAL_SERIAL (like LOCAL_QUORUM) is refused while fabricjobs nodes run in more than one data centre."),
    Key("cassandra", "USERNAME", _str, "", "Password authentication user (empty: none)."),
    Key("cassandra", "PASSWORD", _str, "", "Password authentication password."),
    Key("cassandra", "TLS", _bool, False, "Connect with TLS."),
    Key("cassandra", "TLS_CA_FILE", _str, "", "CA bundle to verify the server certificate.", path=True),
    Key("cassandra", "TLS_CERT_FILE", _str, "", "Client certificate (mutual TLS).", path=True),
    Key("cassandra", "TLS_KEY_FILE", _str, "", "Client private key (mutual TLS).", path=True),
    Key("cassandra", "TLS_VERIFY", _bool, True, "Verify the server certificate and host name."),
    Key("cassandra", "CONNECT_TIMEOUT_SEC", _float(0.1), 10.0,
        "Connection timeout; also how long each read of opening the store (schema, the nodes' data centres) may wait."),
    Key("cassandra", "REQUEST_TIMEOUT_SEC", _float(0.1), 10.0, "Client-side request timeout. An LWT is waited for 4 s at most (less if this is less), then settled by a SERIAL read through another host: a coordinator that is paused or cut off never answers it."),
    Key("cassandra", "SPECULATIVE_DELAY_MS", _int(0), 300, "A read or plain write unanswered after this long is sent to a second host as well (0: never). LWTs are never sent twice."),
    Key("cassandra", "TOKEN_AWARE", _bool, True, "Send each statement to a replica of its partition (reads the token ring and schema metadata at connect)."),
    Key("cassandra", "CREATE_SCHEMA", _bool, True, "Create the keyspace and tables on first use."),
    Key("cassandra", "INDEX_REPAIR_ROWS_PER_SEC", _float(0.0), 500.0, "Pace of the index repair pass, which reads every row (each node its share) and gives a live row that lost its k2_jobs_index entry a new one (0: no repair pass)."),
    Key("cassandra", "INDEX_REPAIR_PAUSE_SEC", _float(0.0), 300.0, "Rest between two index repair passes of a node."),
    Key("cassandra", "MAX_CLOCK_SKEW_SEC", _float(1.0), 60.0, "Bound on this host's clock against Cassandra's: beyond it nothing is written (the store measures the difference; within it, writes and due times follow Cassandra's clock, not the host's)."),
    Key("cassandra", "PROTOCOL_VERSION", _int(3), 4, "Native protocol version (4 for the bundled test server and Cassandra 3.x; 5 for 4.x/5.x)."),
    # [metrics]
    Key("metrics", "PORT", _int(0, 65535), 0, "Serve Prometheus metrics on this port (0: off). Several nodes on one host need different ports."),
    Key("metrics", "ADDRESS", _str, "127.0.0.1", "Address the metrics port binds (loopback by default)."),
    # [web]
    Key("web", "BIND", _bind, "127.0.0.1:9470", "HOST:PORT the HTTP API (fabricjobs web) listens on; loopback by default ([::1]:PORT for IPv6)."),
    Key("web", "TOKENS_FILE", _str, "tokens.json", "The API tokens file (hashes only; created 0600 by 'fabricjobs token create'). Default: beside this config file.", path=True),
    Key("web", "OPENAPI_NEEDS_TOKEN", _bool, False, "Serve the OpenAPI document (/api/v1/openapi.json) only to requests with a valid token."),
    Key("web", "TLS_CERT_FILE", _str, "", "Serve HTTPS with this certificate (PEM; --tls-cert overrides). Empty: plain HTTP, e.g. behind a TLS proxy.", path=True),
    Key("web", "TLS_KEY_FILE", _str, "", "The certificate's private key (PEM; --tls-key overrides).", path=True),
    Key("web", "SESSION_KEY_FILE", _str, "session.key", "The key that signs the web console's session cookies (created 0600 on first use). Web processes behind one load balancer share it. Default: beside this config file.", path=True),
    Key("web", "SESSION_HOURS", _float(0.01), 8.0, "A console login lasts this long (revoking its token ends it at once)."),
    Key("web", "SECURE_COOKIE", _bool, False, "Mark the console's cookie Secure over plain HTTP too: set it behind a TLS-terminating proxy (with --tls-cert it always is)."),
    Key("web", "MAX_BODY_BYTES", _int(1024), 16 * 1024 * 1024, "Largest HTTP request body, in bytes: a longer one is answered 413 before "
        "it is read (and a request without a token 401 before any of its body is read)."),
    Key("web", "MAX_WAITS_PER_TOKEN", _int(1, 90), 8, "Long requests (WAITJOB, STOPJOB ... WAIT, JOBLOG ... FOLLOW) one token may have open at once; "
        "one more is answered 429."),
    Key("web", "MAX_WAITS", _int(1, 90), 64, "Long requests all tokens together may have open at once (each holds one of the web process's 100 "
        "server threads while it waits; at most 90, so that 10 stay for the rest); one more is answered 429, so that short "
        "requests always find a thread."),
    Key("web", "CONSOLE_INTERVAL_SEC", _float(0.1), 2.0, "How often the console's shared view reads the store (the jobs, nodes and queue depth all browsers see)."),
)

SECTIONS = tuple(dict.fromkeys(k.section for k in KEYS))
_BY_NAME = {(k.section, k.name): k for k in KEYS}


@dataclass(frozen=True)
class Config:
    """Parsed configuration. ``values`` maps (section, KEY) to a typed value."""

    values: Mapping[tuple[str, str], Any]
    source: Path | None = None
    warnings: tuple[str, ...] = ()

    def get(self, section: str, name: str) -> Any:
        return self.values[(section, name.upper())]

    # Short accessors for the keys used everywhere.
    @property
    def node_name(self) -> str:
        return self.get("node", "NAME") or socket.gethostname()

    @property
    def node_addresses(self) -> tuple[str, ...]:
        from .affinity import host_addresses

        return self.get("node", "ADDRESSES") or host_addresses()

    @property
    def store_backend(self) -> str:
        return self.get("store", "BACKEND")

    def with_overrides(self, **overrides: Any) -> "Config":
        """A copy with ``section__KEY=value`` overrides (already typed), for tests and the CLI."""
        values = dict(self.values)
        for dotted, value in overrides.items():
            section, name = dotted.split("__", 1)
            key = (section, name.upper())
            if key not in _BY_NAME:
                raise KeyError(f"no such config key [{section}] {name}")
            values[key] = value
        return Config(MappingProxyType(values), self.source, self.warnings)

    def section(self, section: str) -> dict[str, Any]:
        return {name: v for (sec, name), v in self.values.items() if sec == section}


def defaults() -> Config:
    return Config(MappingProxyType({(k.section, k.name): k.default for k in KEYS}))


def load_config(path: str | os.PathLike | None) -> Config:
    """Read ``path`` (None: the built-in defaults). Bad values raise ConfigError."""
    if path is None:
        return _resolve_paths(defaults(), Path.cwd())
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r}: {not_utf8(exc)}") from None
    return parse_config(text, source=p)


def parse_config(text: str, source: Path | None = None) -> Config:
    # No [DEFAULT] section of configparser's own: its keys would join every section unseen
    # (or vanish where there is none). Here it is a section like any other: unknown, warned of.
    parser = configparser.ConfigParser(interpolation=None, strict=True, default_section="\0")
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keep case; we compare case-insensitively ourselves
    where = str(source) if source else "config"
    try:
        parser.read_string(text, source=where)
    except configparser.Error as exc:
        raise ConfigError(f"{where}: {exc}".replace("\n", " ")) from None
    values = {(k.section, k.name): k.default for k in KEYS}
    warnings: list[str] = []
    seen: dict[tuple[str, str], str] = {}  # (keys, and sections, are case-insensitive: [jobs] and [Jobs] are one)
    for section in parser.sections():
        sec = section.strip().lower()
        if sec not in SECTIONS:
            warnings.append(f"{where}: unknown section [{section}] ignored")
            continue
        for raw_name, raw_value in parser.items(section):
            name = raw_name.strip().upper()
            if (sec, name) in seen:  # (MAX_TRIES and max_tries are one key)
                raise ConfigError(f"{where}: [{sec}] {name} is given twice ({seen[sec, name]!r} and {raw_name!r})")
            seen[sec, name] = raw_name
            comment = re.search(r"\s[#;]", raw_value)
            if comment:  # (configparser keeps it: TIME_ZONE = Europe/Paris  # ... named no zone)
                warnings.append(f"{where}: [{sec}] {name}: {comment.group().strip()!r} after a space is part of the "
                                "value, not a comment (a comment is a line of its own)")
            key = _BY_NAME.get((sec, name))
            if key is None:
                warnings.append(f"{where}: unknown key [{sec}] {raw_name} ignored")
                continue
            try:
                values[(sec, name)] = key.parse(raw_value)
            except ValueError as exc:
                raise ConfigError(f"{where}: [{sec}] {name}: {exc}") from None
    for w in warnings:
        log.warning("%s", w)
    base = source.parent if source else Path.cwd()
    cfg = Config(MappingProxyType(values), source, tuple(warnings))
    _check_cross(cfg, where)
    return _resolve_paths(cfg, base)


def _check_cross(cfg: Config, where: str) -> None:
    if cfg.store_backend == "sqlite" and not cfg.get("store", "SQLITE_PATH").strip():
        raise ConfigError(f"{where}: [store] SQLITE_PATH is empty: name the SQLite file (BACKEND is sqlite)")
    lo = cfg.get("jobs", "MIN_GIVE_UP_EXCEPTIONAL_MINUTES")
    hi = cfg.get("jobs", "MAX_GIVE_UP_EXCEPTIONAL_MINUTES")
    if lo > hi:
        raise ConfigError(
            f"{where}: [jobs] MIN_GIVE_UP_EXCEPTIONAL_MINUTES ({lo}) is larger than MAX_GIVE_UP_EXCEPTIONAL_MINUTES ({hi})"
        )


def _resolve_paths(cfg: Config, base: Path) -> Config:
    values = dict(cfg.values)
    for k in KEYS:
        v = values[(k.section, k.name)]
        if k.path and v:
            values[(k.section, k.name)] = str((base / os.path.expanduser(v)).resolve())
    return Config(MappingProxyType(values), cfg.source, cfg.warnings)


def find_config(explicit: str | None) -> Path | None:
    """--config, else $FABRICJOBS_CONFIG, else ./config.ini if present, else None (defaults)."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    local = Path("config.ini")
    return local if local.exists() else None


# -- node.id ------------------------------------------------------------------------------------


# node.id: its own module (nodeid.py), named here too, where the config's readers look for it.
from .nodeid import ALL_PRIORITIES, ANY, PRIORITIES, AffinityLimit, NodeId, load_node_id, parse_node_id  # noqa: E402,F401
