"""node.id: a node's affinity limits (``NAME:recommended [absolute]``) and the job priorities it
serves (``PRIORITIES:low-high``), read once at start; a wrong line is a ConfigError naming it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .errors import ConfigError, not_utf8

ANY = "ANY"
_NODE_ID_LINE = re.compile(r"^([A-Za-z0-9_.@-]+)\s*:\s*(\d+)(?:\s+(\d+))?$")
PRIORITIES = "PRIORITIES"  # node.id's PRIORITIES:low-high (RJM's rjmproc -p): the job priorities served
_PRIORITIES_LINE = re.compile(r"^PRIORITIES\s*:\s*(\S*?)\s*(?:-\s*(\S*))?$", re.IGNORECASE)
ALL_PRIORITIES = (0, 9)


@dataclass(frozen=True)
class AffinityLimit:
    """``NAME:recommended [absolute]``. Without absolute, the recommended count is the cap."""

    name: str
    recommended: int
    absolute: int

    def __str__(self) -> str:
        if self.absolute != self.recommended:
            return f"{self.name}:{self.recommended} {self.absolute}"
        return f"{self.name}:{self.recommended}"


@dataclass(frozen=True)
class NodeId:
    """The parsed node.id: logical names this node answers to, with their limits.

    ANY (jobs without affinity) is on by default with the pool size as its limit; ``ANY:0``
    turns it off.
    """

    limits: Mapping[str, AffinityLimit] = field(default_factory=dict)
    priorities: tuple[int, int] = ALL_PRIORITIES  # the PRIORITY range of the jobs it claims

    def limit(self, name: str, pool_size: int) -> AffinityLimit | None:
        found = self.limits.get(name.upper())
        if found is not None:
            return found
        if name.upper() == ANY:
            return AffinityLimit(ANY, pool_size, pool_size)
        return None

    def names(self) -> tuple[str, ...]:
        return tuple(self.limits)


def _priorities(m: re.Match, where: str) -> tuple[int, int]:
    """PRIORITIES:5-9 (or PRIORITIES:7): whole numbers 0..9, the low one first."""
    bits = [m.group(1), m.group(2) if m.group(2) is not None else m.group(1)]
    if not all(b.isascii() and b.isdigit() and 0 <= int(b) <= 9 for b in bits) or int(bits[0]) > int(bits[1]):
        raise ConfigError(f"{where}: expected 'PRIORITIES:low-high' with 0 <= low <= high <= 9 (e.g. PRIORITIES:5-9 "
                          f"or PRIORITIES:7), got {m.group(0)!r}")
    return int(bits[0]), int(bits[1])


def parse_node_id(text: str, source: str = "node.id") -> NodeId:
    limits: dict[str, AffinityLimit] = {}
    priorities: tuple[int, int] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pm = _PRIORITIES_LINE.match(line)
        if pm:
            if priorities is not None:
                raise ConfigError(f"{source}, line {lineno}: PRIORITIES is given twice")
            priorities = _priorities(pm, f"{source}, line {lineno}")
            continue
        m = _NODE_ID_LINE.match(line)
        if not m:
            raise ConfigError(
                f"{source}, line {lineno}: expected 'NAME:recommended [absolute]' (e.g. HANDLE_MSG:5 10 or ANY:0), got {raw.strip()!r}"
            )
        name, rec, absolute = m.group(1).upper(), int(m.group(2)), m.group(3)
        absolute_n = int(absolute) if absolute is not None else rec
        if absolute_n < rec:
            raise ConfigError(
                f"{source}, line {lineno}: absolute maximum {absolute_n} is below the recommended {rec} for {name}"
            )
        if name in limits:
            raise ConfigError(f"{source}, line {lineno}: {name} is given twice")
        limits[name] = AffinityLimit(name, rec, absolute_n)
    return NodeId(MappingProxyType(limits), priorities or ALL_PRIORITIES)


def load_node_id(path: str | os.PathLike | None) -> NodeId:
    if not path:
        return NodeId()
    p = Path(path)
    if not p.exists():
        return NodeId()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read node.id file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read node.id file {str(p)!r}: {not_utf8(exc)}") from None
    return parse_node_id(text, source=str(p))
