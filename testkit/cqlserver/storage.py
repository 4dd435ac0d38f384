"""Schema objects and the in-memory data model, with Cassandra's cell semantics: every cell and
row marker carries a write timestamp (microseconds) and an optional expiry (seconds); deletions
are tombstones (partition, row, clustering range, cell) that shadow data whose timestamp is
not newer. Conflicts are resolved by last-write-wins exactly like Cassandra (on equal
timestamps a tombstone wins, then the greater value)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

from cassandra.marshal import uint16_pack
from cassandra.metadata import Murmur3Token

from .errors import InvalidRequest
from .values import CqlType, Desc, sort_key, to_bytes

NEVER = None  # expiry of a non-expiring cell
MIN_TOKEN = -(1 << 63)  # Murmur3Partitioner's minimum token: the ring's start and end, no partition's


@dataclass
class Column:
    name: str
    type: CqlType
    kind: str  # partition_key / clustering / regular
    position: int = -1
    desc: bool = False

    @property
    def is_complex(self) -> bool:  # non-frozen collection
        return self.type.is_collection and not self.type.frozen


@dataclass
class Table:
    keyspace: str
    name: str
    columns: dict  # name -> Column, in declaration order
    partition_key: list
    clustering: list
    options: dict = field(default_factory=dict)
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    provider: Optional[Callable] = None  # system tables: (keyspace names or None) -> row dicts
    data: dict = field(default_factory=dict)  # partition key tuple -> Partition

    @property
    def default_ttl(self) -> int:
        return int(self.options.get("default_time_to_live", 0) or 0)

    @property
    def regular(self) -> list:
        return sorted((c for c in self.columns.values() if c.kind == "regular"), key=lambda c: c.name.encode())

    def select_order(self) -> list:
        """Cassandra's SELECT * order (Columns.selectOrderIterator): partition key, clustering,
        then the regular columns in alphabetical order of their name bytes."""
        return self.partition_key + self.clustering + self.regular

    @property
    def qualified(self) -> str:
        return f"{self.keyspace}.{self.name}"

    def existing_column(self, name: str) -> Column:
        """The column, or Cassandra's error for a name the table does not have."""
        c = self.columns.get(name)
        if c is None:
            raise InvalidRequest(f"Undefined column name {name} in table {self.qualified}")
        return c

    def ck_sort_key(self, ck: tuple):
        return tuple(Desc(sort_key(c.type, v)) if c.desc else sort_key(c.type, v)
                     for c, v in zip(self.clustering, ck))


@dataclass
class Keyspace:
    name: str
    replication: dict
    durable_writes: bool = True
    tables: dict = field(default_factory=dict)
    system: bool = False


class Cell:
    __slots__ = ("value", "ts", "expires")

    def __init__(self, value, ts, expires):
        self.value, self.ts, self.expires = value, ts, expires


class Row:
    __slots__ = ("marker", "deleted", "cells")

    def __init__(self):
        self.marker = None  # (ts, expires) written by INSERT
        self.deleted = None  # row tombstone timestamp
        self.cells = {}


class Partition:
    __slots__ = ("key", "token", "key_bytes", "deleted", "rows", "ranges")

    def __init__(self, key, token, key_bytes):
        self.key, self.token, self.key_bytes = key, token, key_bytes
        self.deleted = None
        self.rows = {}  # clustering tuple -> Row
        self.ranges = []  # (predicate(ck) -> bool, ts, Bounds | None): clustering range tombstones


def partition_key_bytes(table: Table, key: tuple) -> bytes:
    parts = [to_bytes(c.type, v) for c, v in zip(table.partition_key, key)]
    if len(parts) == 1:
        return parts[0]
    return b"".join(uint16_pack(len(p)) + p + b"\x00" for p in parts)


def key_token(key_bytes: bytes) -> int:
    """Murmur3Partitioner's token of a serialized partition key (the driver's murmur3, which
    maps Long.MIN_VALUE, the ring's minimum token, to Long.MAX_VALUE as Cassandra does); an
    empty key has the minimum token, as in Murmur3Partitioner.getToken."""
    return Murmur3Token.hash_fn(key_bytes) if key_bytes else MIN_TOKEN


def get_partition(table: Table, key: tuple, create=False) -> Optional[Partition]:
    p = table.data.get(key)
    if p is None and create:
        kb = partition_key_bytes(table, key)
        p = table.data[key] = Partition(key, key_token(kb), kb)
    return p


def _max(a, b):
    return b if a is None or (b is not None and b > a) else a


def row_deletion(p: Partition, ck: tuple, row: Optional[Row]):
    d = p.deleted
    if row is not None:
        d = _max(d, row.deleted)
    for pred, ts, _ in p.ranges:
        if pred(ck):
            d = _max(d, ts)
    return d


def _alive(ts, expires, deletion, now_s) -> bool:
    return (deletion is None or ts > deletion) and (expires is None or now_s < expires)


def live_view(table: Table, p: Partition, ck: tuple, row: Row, now_s: int):
    """The row as a reader sees it: {column: value} plus {column: Cell} for ttl()/writetime(),
    or None if the row has no live marker and no live cell."""
    deletion = row_deletion(p, ck, row)
    values, cells = {}, {}
    for name, cell in row.cells.items():
        if cell.value is not None and _alive(cell.ts, cell.expires, deletion, now_s):
            values[name] = cell.value
            cells[name] = cell
    if not values and not (row.marker and _alive(row.marker[0], row.marker[1], deletion, now_s)):
        return None
    for c, v in zip(table.partition_key, p.key):
        values[c.name] = v
    for c, v in zip(table.clustering, ck):
        values[c.name] = v
    return values, cells


def _newer(table: Table, col: str, new: Cell, old: Cell) -> bool:
    if new.ts != old.ts:
        return new.ts > old.ts
    if (new.value is None) != (old.value is None):
        return new.value is None  # tombstone wins a tie
    if new.value is None:
        return False
    if (new.expires is None) != (old.expires is None):
        return new.expires is None
    t = table.columns[col].type
    return to_bytes(t, new.value) > to_bytes(t, old.value)


def write_row(table: Table, key: tuple, ck: tuple, values: dict, ts: int, ttl: int, now_s: int,
              marker: bool) -> None:
    """Upsert cells (value None writes a cell tombstone); INSERT also writes a row marker."""
    p = get_partition(table, key, create=True)
    row = p.rows.get(ck)
    if row is None:
        row = p.rows[ck] = Row()
    expires = now_s + ttl if ttl else NEVER
    if marker:
        old = row.marker
        if old is None or ts > old[0] or (ts == old[0] and (old[1] is not None and (expires is None or expires > old[1]))):
            row.marker = (ts, expires)
    for col, value in values.items():
        cell = Cell(value, ts, expires if value is not None else NEVER)
        old = row.cells.get(col)
        if old is None or _newer(table, col, cell, old):
            row.cells[col] = cell


def delete_row(table: Table, key: tuple, ck: tuple, ts: int) -> None:
    p = get_partition(table, key, create=True)
    row = p.rows.get(ck)
    if row is None:
        row = p.rows[ck] = Row()
    row.deleted = _max(row.deleted, ts)


def delete_partition(table: Table, key: tuple, ts: int) -> None:
    p = get_partition(table, key, create=True)
    p.deleted = _max(p.deleted, ts)


@dataclass(frozen=True)
class Bounds:
    """The ends of a range deletion on a prefix of the clustering columns, each a *point* in
    clustering order (None: open): the prefix's sort keys, then a marker that puts the point
    before (an inclusive start, an exclusive end) or after (an exclusive start, an inclusive
    end) every row with that prefix. Points of different lengths compare correctly."""

    lo: Optional[tuple] = None
    hi: Optional[tuple] = None

    @staticmethod
    def point(key: tuple, *, low: bool, inclusive: bool) -> tuple:
        before = low == inclusive
        return tuple((1, k) for k in key) + (((0,) if before else (2,)),)

    def within(self, other: "Bounds") -> bool:
        return ((other.lo is None or (self.lo is not None and self.lo >= other.lo))
                and (other.hi is None or (self.hi is not None and self.hi <= other.hi)))


def _shadowed(row: Row, ts: int) -> bool:
    return ((row.marker is None or row.marker[0] <= ts) and (row.deleted is None or row.deleted <= ts)
            and all(c.ts <= ts for c in row.cells.values()))


def delete_range(table: Table, key: tuple, predicate, ts: int, bounds: Optional[Bounds] = None) -> None:
    """A range tombstone. Like compaction would, it drops what it makes invisible for good:
    the rows in the range with nothing newer than it, and the older range tombstones it covers
    (known for slices of the first clustering column). Reads stay as cheap as Cassandra's."""
    p = get_partition(table, key, create=True)
    for ck in [ck for ck, row in p.rows.items() if predicate(ck) and _shadowed(row, ts)]:
        del p.rows[ck]
    if bounds is not None:
        p.ranges = [r for r in p.ranges if not (r[2] is not None and r[1] <= ts and r[2].within(bounds))]
    p.ranges.append((predicate, ts, bounds))


def sorted_rows(table: Table, p: Partition, reverse=False) -> list:
    return sorted(p.rows.items(), key=lambda kv: table.ck_sort_key(kv[0]), reverse=reverse)
