"""Where a job may run (docs/reference/node-id.md): a job's AFFINITY against a node's names and limits.

A job's AFFINITY text is one of

* empty, ``ANY`` or ``{"Affinity":["ANY"]}``: any node whose ANY limit is above 0;
* ``{"Affinity":["HANDLE_MSG", ...]}`` (the seed's form) or a plain name / comma list
  ``HANDLE_MSG`` / ``HANDLE_MSG, LU_SYNC``: nodes answering to any of the names.

A node answers to a name if the name is one of its node.id logical names with an absolute
limit above 0 (the run counts against that name's limit), or is the node's own NAME, its DC
or one of its IP addresses (``[node] ADDRESSES``, default the host's: the course's "node or DC
(IP address)"; the run counts only against the pool size). Names are case-insensitive; an IP
address is compared in its canonical form (``::0:1`` is ``::1``).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import socket
from dataclasses import dataclass, field
from typing import Mapping

from .config import ALL_PRIORITIES, ANY, AffinityLimit, NodeId

_NAME = re.compile(r"^[A-Za-z0-9_.:@-]+$")


@dataclass(frozen=True)
class Affinity:
    names: frozenset[str]  # upper case; {"ANY"} for jobs without affinity

    @property
    def is_any(self) -> bool:
        return ANY in self.names


ANY_AFFINITY = Affinity(frozenset({ANY}))


@functools.lru_cache(maxsize=4096)
def parse_affinity(text: str | None) -> Affinity:
    """Parse an AFFINITY text; ValueError with the reason if it is not one of the forms."""
    raw = (text or "").strip()
    if not raw:
        return ANY_AFFINITY
    if raw.startswith("{"):
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"AFFINITY is not valid JSON: {exc.msg} at char {exc.pos}") from None
        if not isinstance(obj, dict):
            raise ValueError('AFFINITY JSON must be an object like {"Affinity":["HANDLE_MSG"]}')
        keys = {k.lower(): v for k, v in obj.items()}
        if set(keys) != {"affinity"}:
            raise ValueError('AFFINITY JSON must have exactly one key, "Affinity" (e.g. {"Affinity":["HANDLE_MSG"]})')
        names = keys["affinity"]
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError('"Affinity" must be a non-empty list of names, e.g. {"Affinity":["HANDLE_MSG"]}')
    else:
        names = [n for n in re.split(r"\s*,\s*", raw)]
    clean = []
    for n in names:
        n = n.strip()
        if not _NAME.match(n):
            raise ValueError(f"bad affinity name {n!r}: use letters, digits and _ . : @ -")
        clean.append(canonical_address(n) or n.upper())
    return Affinity(frozenset(clean))


def canonical_address(text: str) -> str | None:
    """An IP address as affinities compare it (upper case, IPv6 compressed); None if not one."""
    try:
        return str(ipaddress.ip_address(text.strip())).upper()
    except ValueError:
        return None


def host_addresses() -> tuple[str, ...]:
    """This host's addresses, loopback left out: what its name resolves to, and the source
    address of its outbound route (a UDP socket's connect sends nothing)."""
    found: list[str] = []
    try:
        found += [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)]
    except OSError:
        pass
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                found.append(s.getsockname()[0])
        except OSError:
            pass
    out = {a for a in map(canonical_address, (f.split("%")[0] for f in found)) if a is not None}
    return tuple(sorted(a for a in out if not ipaddress.ip_address(a).is_loopback))


@dataclass(frozen=True)
class NodeAffinity:
    """What one node answers to and how many runs it takes per name."""

    node: str
    dc: str
    pool_size: int
    limits: Mapping[str, AffinityLimit] = field(default_factory=dict)  # logical names incl. ANY
    addresses: frozenset[str] = frozenset()  # canonical IP addresses (canonical_address)
    priorities: tuple[int, int] = ALL_PRIORITIES  # node.id's PRIORITIES:low-high (RJM's rjmproc -p)

    @classmethod
    def from_node_id(cls, node: str, dc: str, node_id: NodeId, pool_size: int,
                     addresses: tuple[str, ...] = ()) -> "NodeAffinity":
        limits = dict(node_id.limits)
        limits.setdefault(ANY, AffinityLimit(ANY, pool_size, pool_size))
        return cls(node, dc, pool_size, limits, frozenset(addresses), node_id.priorities)

    def serves(self, priority: int) -> bool:
        """Whether this node claims a job of ``priority`` (its PRIORITY, not the aged one)."""
        return self.priorities[0] <= priority <= self.priorities[1]

    @property
    def priorities_text(self) -> str:
        low, high = self.priorities
        return f"{low}-{high}" if low != high else str(low)

    def pool_for(self, affinity: Affinity) -> AffinityLimit | None:
        """The limit a run of a job with ``affinity`` counts against here, or None if this node
        may not run it. Among several matching names the one with the most room is used by
        the caller; this returns the first by a fixed order (logical names, then NAME/DC)."""
        matches = self.pools_for(affinity)
        return matches[0] if matches else None

    def pools_for(self, affinity: Affinity) -> list[AffinityLimit]:
        out = []
        for name in sorted(affinity.names):
            lim = self.limits.get(name)
            if lim is not None and lim.absolute > 0:
                out.append(lim)
        for name in sorted(affinity.names):
            if name in (self.node.upper(), self.dc.upper()) or name in self.addresses:
                out.append(AffinityLimit(name, self.pool_size, self.pool_size))
        return out

    def can_run(self, affinity: Affinity) -> bool:
        return bool(self.pools_for(affinity))

    def to_info(self) -> dict:
        return {
            "pool": self.pool_size,
            "limits": {n: [lim.recommended, lim.absolute] for n, lim in sorted(self.limits.items())},
            "addresses": sorted(self.addresses),
            "priorities": list(self.priorities),
        }

    @classmethod
    def from_info(cls, node: str, dc: str, info: Mapping) -> "NodeAffinity":
        pool = int(info.get("pool", 25))
        limits = {n: AffinityLimit(n, int(v[0]), int(v[1])) for n, v in (info.get("limits") or {}).items()}
        limits.setdefault(ANY, AffinityLimit(ANY, pool, pool))
        addresses = info.get("addresses") or ()
        got = info.get("priorities")
        priorities = (int(got[0]), int(got[1])) if isinstance(got, list) and len(got) == 2 else ALL_PRIORITIES
        return cls(node, dc, pool, limits, frozenset(a for a in addresses if isinstance(a, str)), priorities)
