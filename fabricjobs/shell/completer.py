"""Completion in two layers (as pgcli does): the grammar says *what kind* of thing may come
next (:func:`fabricjobs.commands.expected_at`), and this completer fills in the candidates:
keywords, job types, parameter names, and the names of existing jobs and live nodes, which a
background thread refreshes from the store so typing never waits on it.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Callable, Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from ..commands import expected_at, lex
from ..model import JobType, Status


class Catalog:
    """Names worth completing, refreshed in the background (at most every ``period`` s)."""

    def __init__(self, load: Callable[[], tuple[list[tuple[str, str, str]], list[str]]], period: float = 5.0) -> None:
        self._load = load
        self.period = period
        self.jobs: list[tuple[str, str, str]] = []  # (type, name, uid)
        self.nodes: list[str] = []
        self._lock = threading.Lock()
        self._loaded_at = 0.0
        self._loading = False
        self._again = False  # asked for ``now`` while a load was under way

    def refresh(self, wait: bool = False, now: bool = False) -> None:
        """Reload in the background, at most every ``period`` s; ``now``: whatever the period
        (after a statement, which may have started the job the next Tab names), and once more
        after a load under way, which may have read the store before that statement."""
        with self._lock:
            if self._loading:
                self._again = self._again or now
                return
            if not now and time.monotonic() - self._loaded_at < self.period:
                return
            self._loading = True

        def work():
            again = True
            while again:
                try:
                    jobs, nodes = self._load()
                    with self._lock:
                        self.jobs, self.nodes = jobs, nodes
                except Exception:
                    pass  # completion data is a convenience; a store hiccup must not disturb typing
                finally:
                    with self._lock:
                        again, self._again = self._again, False
                        self._loading = again
                        self._loaded_at = time.monotonic()

        if wait:
            work()
        else:
            threading.Thread(target=work, name="completion-refresh", daemon=True).start()


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


_TYPES = "|".join(t.value for t in JobType)
_TYPE = re.compile(rf"\b({_TYPES})\b", re.IGNORECASE)
_NAME = re.compile(rf"\bNAME\s*=\s*'((?:[^']|'')*)'|\b(?:{_TYPES})\s+'((?:[^']|'')*)'", re.IGNORECASE)


def _statement_at_end(text: str) -> str:
    """The statement being typed: what follows the last ';' that ends one (not one in a string)."""
    ends = [e for _, e, category in lex(text) if category == "punct" and text[e - 1:e] == ";"]
    return text[ends[-1]:] if ends else text


def _named(statement: str) -> tuple[str | None, str | None]:
    """The job type and NAME the statement has given so far (either may be missing)."""
    typed = _TYPE.search(statement)
    named = _NAME.search(statement)
    name = next((g for g in named.groups() if g is not None), None) if named else None
    return (typed.group(1).upper() if typed else None), (name.replace("''", "'") if name is not None else None)


class CommandCompleter(Completer):
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        exp = expected_at(text)
        if self.catalog is not None:
            self.catalog.refresh()
        prefix = exp.prefix
        upper = prefix.upper()
        if exp.in_string:
            # Inside an open quote: complete the value, replacing the quote and what follows it
            # up to the cursor. A closing quote right after the cursor (an edit of a value) is
            # kept rather than doubled; in the middle of a value nothing is offered, since a
            # completion would leave the rest of the value behind it.
            after = document.text_after_cursor
            closed = after.startswith("'") and not after.startswith("''")
            if after and not closed and not after[0].isspace():
                return
            start = -exp.typed  # (the value as typed: an escaped quote is two characters, not one)
            for value in self._values(exp.string_for, text):
                if value.lower().startswith(prefix.lower()):
                    quoted = _quote(value)
                    yield Completion(quoted[:-1] if closed else quoted, start_position=start, display=value)
            return
        start = -len(prefix)
        for kw in exp.keywords:
            if kw.startswith(upper):
                yield Completion(kw, start_position=start, display_meta="keyword")
        if exp.job_type:
            for t in JobType:
                if t.value.startswith(upper):
                    yield Completion(t.value, start_position=start, display_meta="job type")
        equals = "" if document.text_after_cursor.lstrip(" ").startswith("=") else "="  # (not doubled before one)
        for p in exp.params:
            if p.startswith(upper):
                yield Completion(p + equals, start_position=start, display_meta="parameter")
        if exp.string_for and not prefix:
            for value in self._values(exp.string_for, text):
                yield Completion(_quote(value), start_position=0, display=value)

    def _values(self, role: str | None, text: str) -> list[str]:
        """The candidates for a quoted value: a job's NAME among the jobs of the type the
        statement names, a UID among those of its type and NAME."""
        if role == "STATUS":
            return [s.value for s in Status]
        if self.catalog is None or role is None:
            return []
        jobs = self.catalog.jobs
        job_type, name = _named(_statement_at_end(text))
        if role in ("NAME", "JOB_NAME"):
            return sorted({n for t, n, _ in jobs if job_type in (None, t)})
        if role == "UID":
            return sorted({u for t, n, u in jobs if job_type in (None, t) and name in (None, n)})
        if role == "NODE":
            return list(self.catalog.nodes)
        return []
