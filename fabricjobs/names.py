"""What a name, UID or affinity may hold (and a file name a listener turns into a UID). They end up in log lines, tables and file names, so:
no control characters or line breaks (a carriage return would forge a log line), no characters
that change the direction of the text around them or take no room (a name shown as another),
and no lone surrogates (no encoding can store them). One rule for the parser, which points at
the character, and for the service, which also takes commands built in code (Client.wait)."""

from __future__ import annotations

import hashlib
import re

from .errors import INVISIBLE, ValidationError

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029"
                    + "".join(f"{chr(first)}-{chr(last)}" for first, last in INVISIBLE) + "]")
SURROGATE = re.compile("[\ud800-\udfff]")
FIELDS = (("name", "NAME"), ("uid", "UID"), ("affinity", "AFFINITY"))
#: Characters a NAME may have; a UID (a listener's child job holds a file name and its
#: version in its UID) and the other names may have MAX_CHARS (docs/guides/run-isolation.md).
MAX_NAME_CHARS = 256
MAX_CHARS = 1024


def derived_uid(base: str, suffix: str) -> str:
    """A UID the product makes from a job's UID (its tasks', its failure or late job's, a
    listener's file jobs'): ``base + suffix``, kept within MAX_CHARS so that every statement
    can name it. A base too long for the suffix is cut, and a hash of the whole base, after
    a ``~``, keeps two such UIDs apart."""
    uid = base + suffix
    if len(uid) <= MAX_CHARS:
        return uid
    mark = _cut_mark(base)
    return (base[:max(MAX_CHARS - len(suffix) - len(mark), 0)] + mark + suffix)[-MAX_CHARS:]


def derived_suffix(base: str, uid: str) -> str | None:
    """The suffix :func:`derived_uid` added to ``base`` to make ``uid``; None if it did not."""
    if uid.startswith(base):
        return uid[len(base):]
    at = uid.find(_cut_mark(base))  # where derived_uid puts it: after the part of base kept, in a UID at the limit
    if at < 0 or len(uid) != MAX_CHARS or at >= len(base) or not base.startswith(uid[:at]):
        return None
    return uid[at + len(_cut_mark(base)):]


def _cut_mark(base: str) -> str:
    return "~" + hashlib.blake2b(base.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def emptiness(what: str, value: str, empty_ok: bool = False) -> str | None:
    """Why ``value`` may not be ``what`` for having nothing to show, or None: blanks alone
    cannot be told apart in a table; '' is refused unless ``empty_ok`` (AFFINITY='': none)."""
    if value.strip():
        return None
    if not value:
        return None if empty_ok else f"{what} must not be empty"
    return f"{what} must not be " + ("blank" if empty_ok else "empty or blank")


def too_long(what: str, value: str) -> str | None:
    """Why ``value`` is too long to be ``what``, or None."""
    limit = MAX_NAME_CHARS if what == "NAME" else MAX_CHARS
    if len(value) <= limit:
        return None
    return f"{what} is {len(value):,} characters long; at most {limit:,} are allowed"


def complaint(what: str, value: str) -> str | None:
    """Why ``value`` may not be ``what`` (NAME, UID, AFFINITY), or None."""
    long = too_long(what, value)
    if long is not None:
        return long
    bad = UNSAFE.search(value)
    if bad is None:
        return None
    return (f"{what} must not contain control characters, line breaks, invisible or direction-changing "
            f"characters or lone surrogates (U+{ord(bad.group()):04X} at character {bad.start() + 1})")


def unwritable(what: str, value: str) -> str | None:
    """Why no statement could write ``value`` as a quoted string (``\\'`` is a quote there,
    docs/guides/commands.md), or None: a job defined with it could not be named by a
    statement, nor written back by export-jobs. Checked where a job is defined, not where one
    is named: a job made before the check stays reachable."""
    if value.endswith("\\") or "\\'" in value:
        return (f"{what} must not end with a backslash or have one right before a quote: no statement could write it "
                "(an exported job could not be made again)")
    return None


def unroutable(what: str, value: str) -> str | None:
    """Why no URL path could name a job (or calendar) called ``value``, or None: a browser and
    most HTTP clients drop a '.' or '..' path segment. Checked where it is made."""
    if value in (".", ".."):
        return f"{what} must not be '.' or '..': no URL path can name it (the API and the console could not)"
    return None


def text_complaint(what: str, value: str) -> str | None:
    """Why ``value`` may not be the free text ``what`` (ARGS, DEPENDS_ON, a SET value), or None:
    any character but a lone surrogate, which no encoding can store (the store's insert raised
    a raw UnicodeEncodeError)."""
    bad = SURROGATE.search(value)
    if bad is None:
        return None
    return f"{what} must not contain lone surrogates (U+{ord(bad.group()):04X} at character {bad.start() + 1})"


def check_command(command: object) -> None:
    """Raise ValidationError if a command's name, UID or affinity holds what :data:`UNSAFE` matches."""
    for field, what in FIELDS:
        value = getattr(command, field, None)
        if isinstance(value, str):
            why = complaint(what, value)
            if why is not None:
                raise ValidationError(why)
