"""The one result shape every command returns, whatever prints it.

``columns`` and ``rows`` carry typed values (datetime, bool, int, str, None); turning them into
text is the output module's job (:mod:`fabricjobs.shell.output`), so application code gets
real values and the shell gets formatting in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


class Row(dict):
    """A result row: a dict keyed by column name (``row["Status"]``)."""


@dataclass(frozen=True)
class Result:
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    status: str | None = None  # a message for results without rows ("SET", "kill sent ...")
    vertical: bool = False  # print one record per block (detail views)
    notices: tuple[str, ...] = field(default=())  # extra lines shown after the table
    # Lines that come over time (JOBLOG ... FOLLOW): read once, each printed as it comes. A
    # program may iterate it; reading it may raise as the command would (WaitTimeout).
    lines: Iterable[str] | None = field(default=None, compare=False)

    def __iter__(self) -> Iterator[Row]:
        for r in self.rows:
            yield Row(zip(self.columns, r))

    def __len__(self) -> int:
        return len(self.rows)

    def first_row(self) -> Row | None:
        return Row(zip(self.columns, self.rows[0])) if self.rows else None

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    @property
    def has_table(self) -> bool:
        return bool(self.columns)
