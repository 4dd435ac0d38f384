"""Cursors as clients carry them: the last key of a page of live jobs (the API's job list, the
console's jobs table) or where a search of archived jobs goes on (the console's history, the
API's job list once its live jobs are done), as
URL-safe base64 of a small JSON list. A cursor the server did not give is a 400 that never
reaches the store."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ..model import JobKey
from ..names import text_complaint
from ..store.search import Cursor
from .errors import ApiError


def _encode(values: list[Any]) -> str:
    raw = json.dumps(values, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, *sizes: int) -> list[Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(values, list) or len(values) not in sizes:
            raise ValueError
        if not all(isinstance(v, str) and text_complaint("cursor", v) is None for v in values[-3:]):
            raise ValueError  # (a lone surrogate, which no store can take as a bound value)
    except (ValueError, TypeError, binascii.Error):
        raise _forged() from None
    return values


def _forged() -> ApiError:
    return ApiError(400, "ValidationError", "cursor is not one this API gave (use next_cursor as it came)")


def key_cursor(key: JobKey) -> str:
    return _encode([key.type, key.name, key.uid])


def cursor_key(cursor: str | None) -> JobKey | None:
    if cursor is None or cursor == "":
        return None
    type, name, uid = _decode(cursor, 3)
    return JobKey(type, name, uid)


def archive_cursor(after: Cursor) -> str:
    return _encode(list(after))


def cursor_archive(cursor: str | None) -> Cursor | None:
    if cursor is None or cursor == "":
        return None
    return _archive(_decode(cursor, 4))


#: The largest End Time a cursor may hold (as a backend stores it: ms since 1970 on Cassandra,
#: well past any date; Infinity and the like never reach a store).
_LATEST = 1e15


def _archive(values: list[Any]) -> Cursor:
    end, type, name, uid = values
    if isinstance(end, bool) or not isinstance(end, (int, float)) or not -_LATEST < end < _LATEST:
        raise _forged()
    return (end, type, name, uid)


def list_cursor(cursor: str | None, live: bool, archived: bool) -> JobKey | Cursor | None:
    """The API job list's cursor: a key while its live jobs go on, then where the search of the
    archived ones goes on (service/listing.py), as the scope asked for allows."""
    if cursor is None or cursor == "":
        return None
    values = _decode(cursor, *((3,) if live else ()), *((4,) if archived else ()))
    return JobKey(*values) if len(values) == 3 else _archive(values)


def next_cursor(after: JobKey | Cursor | None) -> str | None:
    if after is None:
        return None
    return key_cursor(after) if isinstance(after, JobKey) else archive_cursor(after)
