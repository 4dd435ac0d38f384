"""CQL types and values: parsing type names, converting literals and bound bytes to canonical
Python values, serializing them back (through the driver's own ``cassandra.cqltypes`` codecs),
and ordering them the way Cassandra's comparators do.

Canonical values: text/ascii/inet -> str; int types -> int; float/double -> float;
boolean -> bool; timestamp -> int milliseconds since the epoch; uuid/timeuuid -> uuid.UUID;
blob -> bytes; list -> tuple; set -> sorted tuple; map -> tuple of (key, value) sorted by key.
An empty non-frozen collection is null, as in Cassandra.
"""

from __future__ import annotations

import calendar
import re
import struct
import uuid
from dataclasses import dataclass

from cassandra import cqltypes as ct
from cassandra.marshal import int64_pack, int64_unpack
from cassandra.protocol import ResultMessage, write_short

from .errors import InvalidRequest, unsupported

_SIMPLE = {
    "ascii": ct.AsciiType, "bigint": ct.LongType, "blob": ct.BytesType, "boolean": ct.BooleanType,
    "double": ct.DoubleType, "float": ct.FloatType, "int": ct.Int32Type, "smallint": ct.ShortType,
    "tinyint": ct.ByteType, "text": ct.UTF8Type, "timestamp": ct.DateType, "uuid": ct.UUIDType,
    "timeuuid": ct.TimeUUIDType, "varint": ct.IntegerType, "inet": ct.InetAddressType,
}
_ALIASES = {"varchar": "text"}
_KNOWN_UNSUPPORTED = {"counter", "decimal", "date", "time", "duration", "tuple"}
_CODES = {cls: code for code, cls in ResultMessage.type_codes.items() if isinstance(cls, type)}
_FIXED = {"int": (4, "Expected 4 or 0 byte int ({})"), "bigint": (8, "Expected 8 or 0 byte long ({})"),
          "smallint": (2, "Expected 2 bytes for a smallint ({})"), "tinyint": (1, "Expected 1 byte for a tinyint ({})"),
          "double": (8, "Expected 8 or 0 byte value for a double ({})"),
          "float": (4, "Expected 4 or 0 byte value for a float ({})"),
          "timestamp": (8, "Expected 8 or 0 byte long for date ({})"),
          "boolean": (1, "Expected 1 or 0 byte value ({})"),
          "uuid": (16, "UUID should be 16 or 0 bytes ({})"), "timeuuid": (16, "UUID should be 16 or 0 bytes ({})")}
_INT_RANGE = {"int": 32, "bigint": 64, "smallint": 16, "tinyint": 8}
UNSET = object()  # a bound value of length -2: "leave this column alone"


@dataclass(frozen=True)
class CqlType:
    name: str
    subtypes: tuple = ()
    frozen: bool = False

    @property
    def is_collection(self) -> bool:
        return self.name in ("list", "set", "map")

    def cql(self) -> str:
        if not self.subtypes:
            return self.name
        inner = f"{self.name}<{', '.join(s.cql() for s in self.subtypes)}>"
        return f"frozen<{inner}>" if self.frozen else inner

    def driver_class(self):
        if not self.subtypes:
            return _SIMPLE[self.name]
        base = {"list": ct.ListType, "set": ct.SetType, "map": ct.MapType}[self.name]
        return base.apply_parameters(tuple(s.driver_class() for s in self.subtypes))

    def __str__(self):
        return self.cql()


def make_type(name: str, subtypes=(), frozen=False) -> CqlType:
    name = _ALIASES.get(name.lower(), name.lower())
    if name in _KNOWN_UNSUPPORTED:
        raise unsupported(f"Type {name}")
    if name in ("list", "set"):
        if len(subtypes) != 1:
            raise InvalidRequest(f"{name} takes exactly 1 type parameter")
    elif name == "map":
        if len(subtypes) != 2:
            raise InvalidRequest("map takes exactly 2 type parameters")
    elif name not in _SIMPLE or subtypes:
        raise InvalidRequest(f"Unknown type {name}")
    # elements of collections are always frozen
    subtypes = tuple(CqlType(s.name, s.subtypes, True) if s.subtypes else s for s in subtypes)
    return CqlType(name, tuple(subtypes), frozen)


def simple(name: str) -> CqlType:
    return CqlType(name)


BOOLEAN, INT, BIGINT, TEXT, UUID_T, TIMESTAMP, TIMEUUID = (
    simple("boolean"), simple("int"), simple("bigint"), simple("text"), simple("uuid"),
    simple("timestamp"), simple("timeuuid"))


def write_type_option(f, t: CqlType) -> None:
    """Write a type [option] as in result/prepared metadata."""
    if not t.subtypes:
        write_short(f, _CODES[_SIMPLE[t.name]])
        return
    write_short(f, {"list": 0x20, "map": 0x21, "set": 0x22}[t.name])
    for s in t.subtypes:
        write_type_option(f, s)


# ---- canonicalization -------------------------------------------------------------------------

def canonical_collection(t: CqlType, items):
    """items: list (list/set) or list of (k, v) pairs (map), elements already canonical."""
    if any(x is None for x in (items if t.name != "map" else [p[0] for p in items] + [p[1] for p in items])):
        raise InvalidRequest("null is not supported inside collections")
    if t.name == "list":
        out = tuple(items)
    elif t.name == "set":
        sub = t.subtypes[0]
        uniq = {sort_key(sub, x): x for x in items}
        out = tuple(uniq[k] for k in sorted(uniq))
    else:
        kt = t.subtypes[0]
        uniq = {}
        for k, v in items:
            uniq[sort_key(kt, k)] = (k, v)
        out = tuple(uniq[k] for k in sorted(uniq))
    if not out and not t.frozen:
        return None
    return out


def from_driver_value(t: CqlType, v):
    """Convert a value produced by the driver's deserializers to canonical form."""
    if v is None:
        return None
    if t.name == "list":
        return canonical_collection(t, [from_driver_value(t.subtypes[0], x) for x in v])
    if t.name == "set":
        return canonical_collection(t, [from_driver_value(t.subtypes[0], x) for x in v])
    if t.name == "map":
        return canonical_collection(t, [(from_driver_value(t.subtypes[0], k), from_driver_value(t.subtypes[1], x))
                                        for k, x in v.items()])
    if t.name == "timestamp":
        return int(calendar.timegm(v.utctimetuple()) * 1000 + v.microsecond // 1000)
    if t.name == "float":
        return struct.unpack(">f", struct.pack(">f", v))[0]
    return v


def from_bytes(t: CqlType, raw, column: str):
    """Validate and decode a bound value (bytes, None or UNSET)."""
    if raw is None or raw is UNSET:
        return raw
    fixed = _FIXED.get(t.name)
    if fixed and len(raw) not in (0, fixed[0]):
        raise InvalidRequest(fixed[1].format(len(raw)))
    if len(raw) == 0 and t.name not in ("text", "ascii", "blob"):
        return None
    try:
        if t.name == "timestamp":
            return int64_unpack(raw)
        if t.name == "text":
            return raw.decode("utf-8")
        if t.name == "ascii":
            return raw.decode("ascii")
        return from_driver_value(t, t.driver_class().deserialize(raw, 4))
    except UnicodeDecodeError:
        if t.name == "ascii":
            bad = next(b for b in raw if b > 127)
            raise InvalidRequest(f"Invalid byte for ascii: {bad}") from None
        raise InvalidRequest("String didn't validate.") from None
    except InvalidRequest:
        raise
    except Exception as e:  # malformed collections etc.
        raise InvalidRequest(f"Invalid value for column {column} of type {t.cql()}: {e}") from None


def to_bytes(t: CqlType, v) -> bytes:
    """Serialize a canonical non-null value with the driver's codecs."""
    if t.name == "timestamp":
        return int64_pack(v)
    if t.name == "map":
        return t.driver_class().serialize(dict(v), 4)
    if t.name in ("list", "set"):
        return t.driver_class().serialize(list(v), 4)
    return t.driver_class().serialize(v, 4)


# ---- literals --------------------------------------------------------------------------------

_TS_RE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
                    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$")


def parse_timestamp(text: str) -> int:
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    m = _TS_RE.match(text)
    if not m:
        raise InvalidRequest(f"Unable to coerce '{text}' to a formatted date (long)")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    secs = calendar.timegm((int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), 0, 0, 0))
    ms = secs * 1000 + (int((frac or "0").ljust(3, "0")[:3]))
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + (int(digits[2:4]) * 60 if len(digits) > 2 else 0)
        ms -= sign * offset * 1000
    return ms


def _check_int_range(t: CqlType, n: int, text: str) -> int:
    bits = _INT_RANGE.get(t.name)
    if bits and not -(1 << (bits - 1)) <= n < (1 << (bits - 1)):
        raise InvalidRequest(f"Unable to make {t.name} from '{text}'")
    return n


def from_constant(t: CqlType, kind: str, text: str, column: str):
    """Convert a CQL constant (kind STRING/INTEGER/FLOAT/BOOLEAN/UUID/HEX) for receiver type t,
    with Cassandra's assignability rules (Constants.Literal.testAssignment)."""
    ok = {
        "STRING": ("ascii", "text", "inet", "timestamp"),
        "INTEGER": ("bigint", "double", "float", "int", "smallint", "timestamp", "tinyint", "varint"),
        "UUID": ("uuid", "timeuuid"), "FLOAT": ("double", "float"), "BOOLEAN": ("boolean",), "HEX": ("blob",),
    }[kind]
    if t.subtypes or t.name not in ok:
        raise InvalidRequest(f'Invalid {kind} constant ({text}) for "{column}" of type {t.cql()}')
    if kind == "STRING":
        if t.name == "timestamp":
            return parse_timestamp(text)
        if t.name == "ascii" and any(ord(c) > 127 for c in text):
            raise InvalidRequest(f"Invalid ASCII character in string literal {text!r}")
        return text
    if kind == "INTEGER":
        if t.name in ("double", "float"):
            return from_driver_value(t, float(text))
        return _check_int_range(t, int(text), text)
    if kind == "FLOAT":
        val = float(text.lower())  # also nan, infinity, -infinity
        return from_driver_value(t, val)
    if kind == "BOOLEAN":
        return text.lower() == "true"
    if kind == "UUID":
        u = uuid.UUID(text)
        if t.name == "timeuuid" and u.version != 1:
            raise InvalidRequest(f"Unsupported UUID version ({u.version})")
        return u
    if kind == "HEX":
        body = text[2:]
        if len(body) % 2:
            raise InvalidRequest("An hex string representing bytes must have an even length")
        return bytes.fromhex(body)
    raise AssertionError(kind)


# ---- ordering -----------------------------------------------------------------------------

def sort_key(t: CqlType, v):
    """A Python value whose ordering matches Cassandra's comparator for type t (v non-null)."""
    if t.name in ("uuid", "timeuuid"):
        return (v.version or 0, v.time if v.version == 1 else 0, v.bytes)
    if t.name == "list" or t.name == "set":
        return tuple(sort_key(t.subtypes[0], x) for x in v)
    if t.name == "map":
        return tuple((sort_key(t.subtypes[0], k), sort_key(t.subtypes[1], x)) for k, x in v)
    return v


class Desc:
    """Wraps a sort key to reverse its order (DESC clustering columns, reversed queries)."""
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def __lt__(self, other):
        return other.k < self.k

    def __gt__(self, other):
        return other.k > self.k

    def __eq__(self, other):
        return isinstance(other, Desc) and self.k == other.k

    def __le__(self, other):
        return not self > other

    def __ge__(self, other):
        return not self < other

    def __hash__(self):
        return hash(self.k)
