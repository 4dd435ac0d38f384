"""The insert and CAS statements, built once per shape and kept: a STARTJOB's upsert of n rows,
and a CAS's ``UPDATE ... FROM (VALUES ...)`` per set of changed columns and batch size (a
handful of shapes: claim, outcome, ...), so that a batch of rows is one statement.
"""

from __future__ import annotations

import operator
import sqlite3
from itertools import compress
from operator import ne
from typing import Sequence

from ...model import RUN_COUNTERS, Job
from .rows import _COLS, _JOB_COLUMNS, _RUN_COLS, _RUN_COLUMNS, _job_params, column_value

_RETURNING = f" RETURNING {_COLS}" if sqlite3.sqlite_version_info >= (3, 35, 4) else ""  # RETURNING fixes in 3.35.4
_RETURNING_KEYS = " RETURNING type, name, uid" if _RETURNING else ""  # cas_many(whole=True): which applied
_PLACEHOLDERS = ", ".join("?" for _ in _JOB_COLUMNS)
# STARTJOB: a new key, or a key whose row is archived (the job is started again: its epoch,
# revision and run counters count on).
_UPSERT = (
    " ON CONFLICT (type, name, uid) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _JOB_COLUMNS[3:] if c not in ("epoch", "revision", *RUN_COUNTERS))
    + ", epoch = k2_jobs.epoch + 1, revision = k2_jobs.revision + 1 WHERE k2_jobs.archived = 1"
    + _RETURNING
)
_INSERT_SQL: dict[int, str] = {}


def _insert_sql(rows: int) -> str:
    """The upsert of ``rows`` rows in one statement (applied in order)."""
    sql = _INSERT_SQL.get(rows)
    if sql is None:
        sql = _INSERT_SQL[rows] = f"INSERT INTO k2_jobs ({_COLS}) VALUES {', '.join([f'({_PLACEHOLDERS})'] * rows)}{_UPSERT}"
    return sql


def _insert_params(job: Job) -> tuple:
    """A STARTJOB's row as inserted: a new row starts at revision 1."""
    return _job_params(job.replace(revision=1))


# What a CAS may write (not the key, and revision is written by the CAS itself), and its
# UPDATE statement per set of changed columns (a handful of shapes: claim, outcome, ...).
_CAS_COLUMNS = tuple(i for i, c in enumerate(_JOB_COLUMNS) if i >= 3 and c != "revision")
_CAS_SQL: dict[tuple[tuple[int, ...], int, bool], str] = {}
# UPDATE ... FROM (VALUES ...) RETURNING: SQLite 3.35.4 (before it, one row per statement).
_BATCHED = bool(_RETURNING)
_BATCH_SIZES = (64, 16, 4, 1) if _BATCHED else (1,)


_CAS_VALUES = operator.attrgetter(*(_JOB_COLUMNS[i] for i in _CAS_COLUMNS))  # a Job's, in column order
# Each CAS column as (its place in _CAS_VALUES, its index in _JOB_COLUMNS, the conversion of
# its Job field to the column's value).
_CAS_CONVERT = tuple((at, i, column_value(_JOB_COLUMNS[i])) for at, i in enumerate(_CAS_COLUMNS))


def _changes(expected: Job, new: Job) -> tuple[list, tuple[int, ...]]:
    """The CAS columns in which ``new`` differs from ``expected``, and ``new``'s values for
    them: only those are written, since a row read from an index may be a candidate without
    arguments or output, and must not blank them. Compared as fields, and only the changed
    ones converted: two rows' full parameters cost a fifth of a claim's time on the node."""
    fields = _CAS_VALUES(new)
    differ = list(compress(_CAS_CONVERT, map(ne, _CAS_VALUES(expected), fields)))  # compared in C
    values = [fields[at] if convert is None else convert(fields[at]) for at, _, convert in differ]
    return values, tuple(i for _, i, _ in differ)


def cas_statements(pairs: Sequence[tuple[Job, Job]], returning_rows: bool = True) -> list[tuple[str, list, list[tuple[int, Job]]]]:
    """The CAS statements that write ``pairs``, in the order to run them, each as (SQL,
    parameters, [(index of the pair, expected row)]): pairs that write the same columns in
    batches of 64, 16, 4 and 1; a key given a second time after the rest, alone. Each returns
    the rows it wrote, or only their keys (``returning_rows`` False)."""
    shapes: dict[tuple[int, ...], list[tuple[int, list, Job]]] = {}
    later: list[tuple[tuple[int, ...], list[tuple[int, list, Job]]]] = []
    keys: set = set()
    for i, (expected, new) in enumerate(pairs):
        values, changed = _changes(expected, new)
        if expected.key in keys:
            later.append((changed, [(i, values, expected)]))
            continue
        keys.add(expected.key)
        shapes.setdefault(changed, []).append((i, values, expected))
    statements = []
    for changed, items in shapes.items():
        at = 0
        for size in _BATCH_SIZES:
            while len(items) - at >= size:
                statements.append(_cas_statement(changed, items[at:at + size], returning_rows))
                at += size
    statements.extend(_cas_statement(changed, items, returning_rows) for changed, items in later)
    return statements


def _cas_statement(changed: tuple[int, ...], items: list[tuple[int, list, Job]],
                  returning_rows: bool) -> tuple[str, list, list[tuple[int, Job]]]:
    params: list = []
    for _, values, expected in items:
        params.extend(values)
        params.extend((expected.revision + 1, expected.key.type, expected.key.name, expected.key.uid,
                       expected.status.value, expected.epoch, expected.worker_id, expected.revision))
    return _cas_sql(changed, len(items), returning_rows), params, [(i, expected) for i, _, expected in items]


def _cas_sql(changed: tuple[int, ...], rows: int, returning_rows: bool = True) -> str:
    """The CAS UPDATE of ``rows`` rows that write the columns ``changed`` (and revision): the
    values and the conditions of each row come from one row of a VALUES list."""
    sql = _CAS_SQL.get((changed, rows, returning_rows))
    if sql is not None:
        return sql
    if not _BATCHED:
        sql = ("UPDATE k2_jobs SET " + "".join(f"{_JOB_COLUMNS[i]} = ?, " for i in changed) + "revision = ? "
               "WHERE type = ? AND name = ? AND uid = ? AND status = ? AND epoch = ? AND worker_id IS ? AND revision = ?")
    else:
        n = len(changed)
        sets = "".join(f"{_JOB_COLUMNS[i]} = v.column{k + 1}, " for k, i in enumerate(changed))
        row = "(" + ", ".join("?" for _ in range(n + 8)) + ")"
        sql = (f"UPDATE k2_jobs SET {sets}revision = v.column{n + 1} FROM (VALUES {', '.join([row] * rows)}) AS v "
               f"WHERE k2_jobs.type = v.column{n + 2} AND k2_jobs.name = v.column{n + 3} AND k2_jobs.uid = v.column{n + 4} "
               f"AND k2_jobs.status = v.column{n + 5} AND k2_jobs.epoch = v.column{n + 6} "
               f"AND k2_jobs.worker_id IS v.column{n + 7} AND k2_jobs.revision = v.column{n + 8}"
               f"{_RETURNING if returning_rows else _RETURNING_KEYS}")
    if len(_CAS_SQL) < 512:
        _CAS_SQL[(changed, rows, returning_rows)] = sql
    return sql


_INSERT_RUN_SQL = f"INSERT OR IGNORE INTO k2_job_runs ({_RUN_COLS}) VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})"
