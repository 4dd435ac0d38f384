"""The one place a :class:`~fabricjobs.result.Result` becomes text.

table  tabulate (psql style) ending with ``(1 row)`` / ``(N rows)``; a record per block when the
       result asks for it or (interactive) when the table is wider than the terminal
json   a JSON array of objects (times in ISO 8601 UTC), for scripts
csv    a header line and one line per row
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, tzinfo
from typing import Any, TextIO

from ..clock import shown_time
from ..errors import shown
from ..result import Result

FORMATS = ("table", "json", "csv")


def render(result: Result, fmt: str = "table", *, zone: tzinfo | None = None, width: int | None = None) -> str:
    if fmt == "json":
        return _json(result)
    if fmt == "csv":
        return _csv(result, zone)
    return _table(result, zone, width)


def print_result(result: Result, fmt: str, out: TextIO, *, zone: tzinfo | None = None, width: int | None = None,
                 notes: TextIO | None = None) -> None:
    """Print ``result``; lines that come over time (JOBLOG ... FOLLOW) each as it comes
    (json: one object a line, ``{"line": ...}``). Reading them may raise as the command would.
    json and csv keep their documents to the rows: a table's notices ("there are more ...") and
    status line go to ``notes`` (stderr), where a program still sees that the list was cut."""
    if result.lines is None or result.has_table or result.status:
        print(render(result, fmt, zone=zone, width=width), file=out, flush=True)
    if fmt in ("json", "csv") and result.has_table and notes is not None:
        for note in (*result.notices, *([result.status] if result.status else [])):
            print(shown(note), file=notes, flush=True)
    for line in result.lines or ():
        print(json.dumps({"line": line}, ensure_ascii=False) if fmt == "json" else line if fmt == "csv" else shown(line),
              file=out, flush=True)


def _text(value: Any, zone: tzinfo | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return shown_time(value, zone)
    return str(value)


def _count(n: int) -> str:
    return "(1 row)" if n == 1 else f"({n} rows)"


def _table(result: Result, zone: tzinfo | None, width: int | None) -> str:
    from tabulate import tabulate

    if not result.has_table:
        return shown(result.status or "")
    # For a terminal: a cell's own lines kept, any other control character shown (a job's
    # error or output may hold a carriage return or an escape sequence). json and csv keep
    # values exactly, for programs.
    rows = [[shown(_text(v, zone)) for v in r] for r in result.rows]
    lines = []
    if result.vertical:
        if rows:  # no records: the count alone, as psql's expanded display
            lines.append(_vertical(result.columns, rows))
    else:
        table = tabulate(rows, headers=list(result.columns), tablefmt="psql", disable_numparse=True)
        if width is not None and max(len(line) for line in table.splitlines()) > width:
            table = _vertical(result.columns, rows)  # (no rows: the count alone, not a wrapped header)
        if table:
            lines.append(table)
    lines.append(_count(len(rows)))
    lines.extend(shown(notice) for notice in result.notices)
    if result.status:
        lines.append(shown(result.status))
    return "\n".join(lines)


def _vertical(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    label = max((len(c) for c in columns), default=0)
    out = []
    for i, row in enumerate(rows, start=1):
        out.append(f"-[ RECORD {i} ]" + "-" * max(4, label - 8))
        for col, value in zip(columns, row):
            lines = value.splitlines() or [""]
            out.append(f"{col.ljust(label)} | {lines[0]}")
            out.extend(f"{''.ljust(label)} | {more}" for more in lines[1:])
    return "\n".join(out)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _json(result: Result) -> str:
    if not result.has_table:
        return json.dumps({"status": result.status}, ensure_ascii=False)
    return json.dumps(
        [{c: _json_value(v) for c, v in zip(result.columns, r)} for r in result.rows], ensure_ascii=False, indent=2,
    )


def _csv(result: Result, zone: tzinfo | None) -> str:
    if not result.has_table:
        return result.status or ""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(result.columns)
    for r in result.rows:
        w.writerow([_text(v, zone) for v in r])
    return buf.getvalue().rstrip("\n")
