"""Fault injection rules and statement counters.

A rule fires on the next ``times`` statements whose CQL text matches ``match`` (a regular
expression searched in the text, or a plain substring with ``regex=False``), optionally only
for one statement kind ("lwt", "write", "read"). System-table queries never match. For a
BATCH the text is the statements' texts joined with "; ".

Kinds and what the client sees:
  write_timeout      error 0x1100 WriteTimeout, ``write_type`` "CAS" (default) or "SIMPLE", ...
  write_failure      error 0x1500 WriteFailure (v4 body), ``write_type`` as above
  disconnect         the connection is closed instead of answering (the driver sees it lost
                     with the request in flight)
  cas_write_unknown  error 0x1700 (protocol v5 CAS_WRITE_UNKNOWN) sent bare; the driver raises
                     a plain cassandra.protocol.ErrorMessage with .code == 0x1700
  read_timeout       error 0x1200 ReadTimeout
  unavailable        error 0x1000 Unavailable (at the statement's consistency, or with
                     at_serial=True the serial one: Paxos itself lacked replicas)
  overloaded         error 0x1001 Overloaded
  delay              the response is held back ``delay`` seconds (provokes the client-side
                     OperationTimedOut). With applied=False the statement is never executed and
                     never answered.
``applied`` says whether the statement is executed (its mutation persisted) before the error
is returned; ``delay`` also delays error replies.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field

KINDS = ("write_timeout", "write_failure", "disconnect", "cas_write_unknown", "read_timeout", "unavailable", "overloaded", "delay",
         "unknown_table")  # unknown_table: the Server error Cassandra gives while a new table's schema is settling
WRITE_TYPES = ("SIMPLE", "BATCH", "UNLOGGED_BATCH", "COUNTER", "BATCH_LOG", "CAS", "VIEW", "CDC")
STAT_KEYS = ("queries", "prepares", "executes", "batches", "prepared_executions", "reads", "serial_reads",
             "writes", "lwts", "lwts_applied", "lwts_not_applied", "ddl", "system_queries", "errors",
             "faults_fired")


@dataclass
class FaultRule:
    kind: str
    match: str
    times: int = 1
    applied: bool = False
    delay: float = 0.0
    write_type: str = "CAS"
    at_serial: bool = False  # unavailable: at the Paxos round's serial level, not the commit's
    statements: str = "any"  # any / lwt / write / read / prepare (prepare: only when named)
    regex: bool = True
    id: int = 0
    fired: int = 0
    _pattern: object = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {KINDS}")
        if self.write_type not in WRITE_TYPES:
            raise ValueError(f"unknown write_type {self.write_type!r}")
        if self.statements not in ("any", "lwt", "write", "read", "prepare"):
            raise ValueError("statements must be any, lwt, write, read or prepare")
        if self.kind == "delay" and self.delay <= 0:
            raise ValueError("a delay rule needs delay > 0")
        self._pattern = re.compile(self.match if self.regex else re.escape(self.match), re.I | re.S)

    def matches(self, text: str, kind: str) -> bool:
        return (self.fired < self.times and (self.statements == kind or (self.statements == "any" and kind != "prepare"))
                and self._pattern.search(text) is not None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("_pattern", None)
        d["remaining"] = self.times - self.fired
        return d


class FaultInjector:
    """Thread-safe set of fault rules. Use the helpers (write_timeout, cas_write_unknown,
    delay, ...) or add(kind=..., ...)."""

    def __init__(self, stats: "Stats | None" = None):
        self._lock = threading.Lock()
        self._rules: list = []
        self._ids = itertools.count(1)
        self._stats = stats

    def add(self, kind: str, match: str, **kw) -> FaultRule:
        rule = FaultRule(kind, match, **kw)
        with self._lock:
            rule.id = next(self._ids)
            self._rules.append(rule)
        return rule

    def write_timeout(self, match: str, write_type: str = "CAS", applied: bool = False, **kw) -> FaultRule:
        return self.add("write_timeout", match, write_type=write_type, applied=applied, **kw)

    def cas_write_unknown(self, match: str, applied: bool = False, **kw) -> FaultRule:
        return self.add("cas_write_unknown", match, applied=applied, **kw)

    def read_timeout(self, match: str, **kw) -> FaultRule:
        return self.add("read_timeout", match, **kw)

    def unavailable(self, match: str, **kw) -> FaultRule:
        return self.add("unavailable", match, **kw)

    def overloaded(self, match: str, **kw) -> FaultRule:
        return self.add("overloaded", match, **kw)

    def delay(self, match: str, seconds: float, applied: bool = True, **kw) -> FaultRule:
        return self.add("delay", match, delay=seconds, applied=applied, **kw)

    def take(self, text: str, kind: str):
        """The first live rule matching this statement (consuming one firing), or None."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(text, kind):
                    rule.fired += 1
                    if self._stats is not None:
                        self._stats.incr("faults_fired")
                    return rule
        return None

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list:
        with self._lock:
            return [r.to_dict() for r in self._rules]

    def pending(self) -> int:
        """How many firings are still armed."""
        with self._lock:
            return sum(r.times - r.fired for r in self._rules)


class Stats:
    """Counters of statements seen, by kind (see STAT_KEYS). Batches count once in "batches"; the
    statements inside count as "writes", or a conditional batch counts once in "lwts"."""

    def __init__(self):
        self._lock = threading.Lock()
        self._c = Counter()

    def incr(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._c[name] += n

    def snapshot(self) -> dict:
        with self._lock:
            out = {k: 0 for k in STAT_KEYS}
            out.update(self._c)
            return out

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._c[name]

    def reset(self) -> None:
        with self._lock:
            self._c.clear()
