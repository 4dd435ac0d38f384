"""What a backend reports of its own work: the counters it keeps (which the node exports as
metrics) and a page of its index repair pass. Kept apart from the store contract (base.py),
which names them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StoreStats:
    """Counts a backend keeps of its own work, which the node exports as metrics: the costs
    and troubles of a distributed store that no job row shows (SQLite leaves them at 0)."""

    lwt_attempts: int = 0  # conditional writes sent (a retried one counts again)
    writes: int = 0  # plain (unconditional) writes and deletes sent (each statement of a batch)
    reads: int = 0  # reads sent (serial_reads among them)
    rows_read: int = 0  # rows those reads returned (every page of them)
    serial_reads: int = 0  # reads at SERIAL: settling an unknown outcome, schema version
    contention_retries: int = 0  # LWTs sent again after an unknown outcome on an unchanged row
    unknown_outcomes: int = 0  # LWTs whose outcome had to be settled by a SERIAL read
    index_repairs: int = 0  # stale index entries removed by whoever met them
    index_sweeps: int = 0  # range deletes sent over the tombstones of an index partition
    slow_entry_writes: int = 0  # index entries written again: acknowledged too late to be safe
    server_warnings: int = 0  # warnings the store sent with its answers (tombstones met, big batches)
    index_restored: int = 0  # live rows found without their index entry and given one (the repair pass)
    repair_rows: int = 0  # rows the repair pass read


@dataclass(frozen=True, slots=True)
class RepairPage:
    """One page of the index repair pass (:meth:`JobStore.repair_index`): where the next page
    starts (None: the share is done), how many rows were read, how many given their entry."""

    cursor: object | None
    read: int
    restored: int
