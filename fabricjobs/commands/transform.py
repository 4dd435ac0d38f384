"""Parse tree -> typed command objects (:mod:`.statements`), with every value checked.

The grammar decides what parses; this module turns each statement's tree into its command and
checks what the grammar cannot: the job type, JSON, schedules, time zones, names, numbers and
duplicate or missing parameters. A bad value raises :class:`ValidationError` pointed at it.
The prepared-statement cache (:mod:`.prepared`) calls the same methods, so both paths build
commands in one place.
"""

from __future__ import annotations

import dataclasses

import json
import re
from typing import Any, Callable

from lark import Token, Transformer

from ..calendar import MAX_RULES, CalendarError, check_name, make_calendar
from ..model import MAX_PARALLELISM, MIN_PARALLELISM, JobKey, JobType, Status
from ..names import complaint, emptiness, text_complaint
from . import table, values
from .grammar import param_name, token_start
from .messages import invalid, invalid_at, show
from .statements import (
    Calendars, Command, CreateCalendar, DeleteHistory, DropCalendar, JobHistory, JobLog, JobStatus, Kill, Nodes, Ps, Set,
    WaitJob,
)

_JOB_COMMANDS: dict[str, type] = table.JOB_COMMANDS
#: Mandatory parameters (the grammar cannot say "exactly once, in any order" in LALR).
_REQUIRED: dict[str, tuple[str, ...]] = {"resumejob": ("NAME", "UID")}
_NON_EMPTY = frozenset({"NAME", "UID"})
#: Names that end up in log lines, tables and file names: checked by names.py.
_PLAIN = frozenset({"NAME", "UID", "AFFINITY", "REQUESTOR"})

_MAX_TASK = 2**63 - 1
_MAX_DAYS = 36_500
_MAX_LIMIT = 1_000_000
_MAX_WAIT = 10_000_000
_STRING_ESCAPE = re.compile(r"''|\\([\s\S])")


# -- strings ---------------------------------------------------------------------------------


def unescape(body: str) -> str:
    """Decode a string body. The escapes are the language's two ways to write a quote, ``''``
    and ``\\'`` (docs/guides/commands.md); every other backslash is kept as written, so JSON
    escapes inside ARGS (``\\n``, ``\\"``, ``\\\\``) reach the JSON decoder exactly as the user
    typed them."""

    def repl(m: re.Match[str]) -> str:
        return "'" if m.group(0) == "''" or m.group(1) == "'" else m.group(0)

    return _STRING_ESCAPE.sub(repl, body)


def _source_index(body: str, value_index: int) -> int:
    """Where in the string body the decoded character ``value_index`` comes from."""
    pos = out = 0
    for m in _STRING_ESCAPE.finditer(body):
        plain = m.start() - pos
        if out + plain > value_index:
            break
        out += plain
        pos = m.start()
        width = 1 if m.group(0) == "''" or m.group(1) == "'" else 2
        if out + width > value_index:
            return pos
        out += width
        pos = m.end()
    return pos + (value_index - out)


_C_ESCAPE = re.compile(r'\\(["\\\\])')


def decode_c_literal(value: str) -> str:
    """``\\"`` -> ``"`` and ``\\\\`` -> ``\\``: JSON that was written inside a C or Java
    string literal, as in the seed's ``args='{\\"loopsIterationCount\\":\\"2000\\"}'``."""
    return _C_ESCAPE.sub(lambda m: m.group(1), value)


def _string_value(tok: Token) -> str:
    return unescape(tok.value[1:-1])


# -- tree -> command -------------------------------------------------------------------------


class _Param:
    """One NAME='...'-like parameter: its name, keyword token and decoded value."""

    __slots__ = ("name", "token", "value")

    def __init__(self, name: str, token: Token, value: Any) -> None:
        self.name, self.token, self.value = name, token, value



def _by_rule(rule: Callable[[str], str]) -> Callable[..., _Param]:
    """The transformer method of a string parameter that ``rule`` (values.py) checks."""
    def method(self, children: list[Token]) -> _Param:
        return self._ruled(children, rule)
    return method

class ToCommand(Transformer):
    """Builds one command from one statement tree; raises ValidationError on a bad value."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    # parameters

    def _string_param(self, children: list[Token]) -> _Param:
        key, value = children
        name = param_name(key.type)
        if name in _PLAIN:
            return _Param(name, key, self._plain(value, name, empty_ok=name not in _NON_EMPTY))
        return _Param(name, key, self._free_text(value, name))

    name = uid = affinity = requestor = _string_param

    def args(self, children: list[Token]) -> _Param:
        """ARGS must be a JSON object. It is stored exactly as written; only if that is not
        valid JSON but becomes valid once ``\\"`` and ``\\\\`` are read as C/Java string
        escapes (the seed's example) is the decoded text used instead."""
        param = self._string_param(children)
        value_tok = children[1]
        try:
            obj = values.load_json(param.value)
        except json.JSONDecodeError as exc:
            decoded = decode_c_literal(param.value)
            try:
                if decoded == param.value:
                    raise ValueError
                obj = values.load_json(decoded)
            except (ValueError, RecursionError):
                at = token_start(value_tok) + 1 + _source_index(value_tok.value[1:-1], exc.pos)
                raise invalid_at(self._text, at, f"ARGS is not valid JSON: {exc.msg} at char {exc.pos}") from None
            param = _Param(param.name, param.token, decoded)
        except RecursionError:
            raise invalid(self._text, value_tok, "ARGS is not valid JSON: nested too deeply") from None
        except ValueError as exc:  # NaN / Infinity
            raise invalid(self._text, value_tok, f"ARGS is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise invalid(self._text, value_tok, f"ARGS must be a JSON object, got {values.json_kind(obj)}")
        return param

    def exec_interval(self, children: list[Token]) -> _Param:
        return self._ruled(children, values.exec_interval)

    def depends_on(self, children: list[Token]) -> _Param:
        """The parents' keys, checked and read here once: the service takes them as they are."""
        param = self._string_param(children)
        if not param.value.strip():  # no parents (UPDATEJOB: its parents are removed)
            return _Param(param.name, param.token, ())
        keys = []
        for part in param.value.split(","):
            part = part.strip()
            bits = part.split(".")
            if len(bits) < 3 or not all(bits):
                raise invalid(self._text, children[1], f"DEPENDS_ON expects TYPE.NAME.UID keys separated by commas, got {show(part)}")
            try:
                JobType.parse(bits[0])
            except ValueError as exc:
                raise invalid(self._text, children[1], f"DEPENDS_ON {show(part)}: {exc}") from None
            keys.append(JobKey(bits[0].upper(), ".".join(bits[1:-1]), bits[-1]))
        return _Param(param.name, param.token, tuple(dict.fromkeys(keys)))

    def priority(self, children: list[Token]) -> _Param:
        return self._whole_param(children, 0, 9)

    def parallelism(self, children: list[Token]) -> _Param:
        return self._whole_param(children, MIN_PARALLELISM, MAX_PARALLELISM, " (the job's tasks)")

    def _whole_param(self, children: list[Token], lo: int, hi: int, what: str = "") -> _Param:
        """PARAM=n or PARAM='n', a whole number from ``lo`` to ``hi``."""
        key, value = children
        text = _string_value(value) if value.type == "STRING" else value.value
        if not (text.isascii() and text.isdigit() and lo <= int(text) <= hi):
            raise invalid(self._text, value,
                          f"{param_name(key.type)} must be a whole number from {lo} to {hi}{what}, got {show(text)}")
        return _Param(param_name(key.type), key, int(text))

    def _ruled(self, children: list[Token], rule: Callable[[str], str]) -> _Param:
        """A string parameter checked (and normalised) by its rule in values.py."""
        param = self._string_param(children)
        try:
            return _Param(param.name, param.token, rule(param.value))
        except ValueError as exc:
            raise invalid(self._text, children[1], str(exc)) from None

    def _boolean(self, children: list[Token]) -> _Param:
        """PARAM=true|false (a word or a string), e.g. RESET_END_TIME, HOLD."""
        key, value = children
        word = _string_value(value) if value.type == "STRING" else value.value
        if word.lower() not in ("true", "false"):
            raise invalid(self._text, value, f"{param_name(key.type)} must be true or false, got {show(word)}")
        return _Param(param_name(key.type), key, word.lower() == "true")

    reset_end_time = hold = _boolean
    # String parameters checked (and normalised) by their rule in values.py.
    tz = _by_rule(values.tz)
    late_threshold = _by_rule(values.late_threshold)
    overlap = _by_rule(values.overlap)
    late_action = _by_rule(values.late_action)
    on_failure = _by_rule(values.on_failure)
    calendar = _by_rule(values.calendar)
    delete_on_success = _by_rule(values.delete_on_success)

    def job_type(self, children: list[Token]) -> str:
        (tok,) = children
        try:
            return JobType.parse(tok.value.upper()).value
        except ValueError as exc:
            raise invalid(self._text, tok, str(exc)) from None

    # statements

    def _job(self, children: list[Any]) -> Command:
        keyword, job_type, *params = children
        statement = keyword.type.lower()
        waiting = [p for p in params if isinstance(p, _Wait)]
        running = any(isinstance(p, _Running) for p in params)
        if_not_exists = [p for p in params if isinstance(p, Token) and p.type == "IF"]
        params = [p for p in params if not isinstance(p, (_Wait, _Running, Token))]
        given: dict[str, _Param] = {}
        for param in params:
            if param.name in given:
                raise invalid(self._text, param.token, f"{param.name} is given twice")
            given[param.name] = param
        needed = _REQUIRED.get(statement, ("NAME",))
        if running:  # RESTARTJOB ... RUNNING: every running job of the type, or of one name
            needed = ("NAME",) if "UID" in given else ()
        for required in needed:
            if required not in given:
                raise invalid(self._text, keyword, f"{keyword.type} needs {required}='<{required.lower()}>'")
        if if_not_exists and "UID" not in given:  # a generated UID never exists: each run would add a job
            raise invalid(self._text, if_not_exists[0], values.IF_NOT_EXISTS_NEEDS_UID)
        if statement == "updatejob" and "HOLD" in given and not given["HOLD"].value:
            raise invalid(self._text, given["HOLD"].token, values.UPDATE_HOLDS_ONLY)
        fields = {name.lower(): param.value for name, param in given.items()}
        if if_not_exists:
            fields.update(if_not_exists=True)
        if waiting:
            fields.update(wait=True, timeout=waiting[0].timeout)
        if running:
            fields.update(running=True, name=fields.get("name"))
        return _JOB_COMMANDS[statement](type=job_type, **fields)

    def wait(self, children: list[Token]) -> "_Wait":
        timeout = None
        if len(children) > 1:
            timeout = float(self._whole(children[2], _MAX_WAIT, "TIMEOUT needs a whole number of seconds"))
        return _Wait(timeout)

    def running(self, children: list[Token]) -> "_Running":
        return _Running()

    def if_not_exists(self, children: list[Token]) -> Token:
        return children[0]  # IF, where a message about it points

    startjob = stopjob = finishjob = runjob = releasejob = restartjob = resumejob = updatejob = _job

    def owned_by(self, children: list[Token]) -> _Param:
        return _Param("BY", children[0], self._plain(children[1], "BY"))

    def requested_by(self, children: list[Token]) -> _Param:
        return _Param("REQUESTOR", children[0], self._plain(children[1], "REQUESTOR", empty_ok=True))

    def where_status(self, children: list[Token]) -> _Param:
        """WHERE STATUS = '<status>' | WHERE STATUS IN ('<status>', ...): known statuses, any case."""
        statuses = []
        for tok in (c for c in children if c.type == "STRING"):
            text = self._plain(tok, "STATUS").strip().upper()
            if text not in Status.__members__:
                raise invalid(self._text, tok, f"STATUS must be one of {', '.join(s.value for s in Status)}; "
                                               f"got {show(text)}")
            statuses.append(Status(text))
        return _Param("STATUS", children[0], frozenset(statuses))

    def jobstatus(self, children: list[Any]) -> JobStatus:
        rest = [c for c in children[1:] if c is not None]
        details = bool(rest) and isinstance(rest[-1], Token) and rest[-1].type == "DETAILS"
        if details:
            rest = rest[:-1]
        filters: dict[str, Any] = {}
        for param in (c for c in rest if isinstance(c, _Param)):
            if param.name in filters:
                raise invalid(self._text, param.token, f"{param.name} is given twice")
            filters[param.name] = param.value
        rest = [c for c in rest if not isinstance(c, _Param)]
        found = JobStatus(details=details, owner=filters.get("BY"), requestor=filters.get("REQUESTOR"),
                          statuses=filters.get("STATUS", frozenset()))
        return dataclasses.replace(found, **self._jobstatus_selection(rest))

    def _jobstatus_selection(self, rest: list[Any]) -> dict[str, Any]:
        """JOBSTATUS's type, name, UID and days, from what comes before its filters."""
        numbers = [t for t in rest if isinstance(t, Token) and t.type == "NUMBER"]
        days = self._whole(numbers[0], _MAX_DAYS, "n DAYS AGO needs a whole number of days") if numbers else None
        if not rest or (isinstance(rest[0], Token) and rest[0].type == "NUMBER"):
            return {"days_ago": days}
        strings = [t for t in rest[1:] if isinstance(t, Token) and t.type == "STRING"]
        values = [self._plain(tok, what) for tok, what in zip(strings, ("NAME", "UID"))]
        name, uid = (values + [None, None])[:2]
        return {"type": rest[0], "name": name, "uid": uid, "days_ago": days}

    def _named(self, children: list[Any]) -> tuple[str, str, str | None, dict[str, Token]]:
        """<TYPE> '<NAME>' [WITH UID='<UID>'] and trailing keyword NUMBER options."""
        keyword, job_type, name_tok, *rest = [c for c in children if c is not None]
        name = self._plain(name_tok, "NAME")
        uid = None
        options: dict[str, Token] = {}
        i = 0
        while i < len(rest):
            tok = rest[i]
            if tok.type == "WITH":
                uid_tok = rest[i + 2]
                uid = self._plain(uid_tok, "UID")
                i += 3
            else:
                options[tok.type] = rest[i + 1]
                i += 2
        return job_type, name, uid, options

    def _option(self, options: dict[str, Token], word: str, limit: int, message: str) -> int | None:
        """The whole number after an optional keyword (LIMIT n, RUN n, TIMEOUT n); None if not given."""
        return self._whole(options[word], limit, message) if word in options else None

    def jobhistory(self, children: list[Any]) -> JobHistory:
        if isinstance(children[1], Token) and children[1].type == "RECENT":
            recent = self._whole(children[2], values.MAX_RECENT, "RECENT needs a whole number of runs")
            if recent == 0:
                raise invalid(self._text, children[2], "RECENT needs at least 1 run")
            return JobHistory(recent=recent)
        job_type, name, uid, options = self._named(children)
        limit = self._option(options, "LIMIT", _MAX_LIMIT, "LIMIT needs a whole number of runs")
        if limit == 0:
            raise invalid(self._text, options["LIMIT"], "LIMIT needs at least 1 run")
        return JobHistory(type=job_type, name=name, uid=uid, limit=limit)

    def joblog(self, children: list[Any]) -> JobLog:
        follow = any(isinstance(c, Token) and c.type == "FOLLOW" for c in children)
        job_type, name, uid, options = self._named([c for c in children if not (isinstance(c, Token) and c.type == "FOLLOW")])
        run = self._option(options, "RUN", _MAX_TASK, "RUN needs a whole run number")
        timeout = self._option(options, "TIMEOUT", _MAX_WAIT, "TIMEOUT needs a whole number of seconds")
        return JobLog(type=job_type, name=name, uid=uid, run=run, follow=follow,
                      timeout=None if timeout is None else float(timeout))

    def waitjob(self, children: list[Any]) -> WaitJob:
        job_type, name, uid, options = self._named(children)
        timeout = self._option(options, "TIMEOUT", _MAX_WAIT, "TIMEOUT needs a whole number of seconds")
        run = self._option(options, "RUN", _MAX_TASK, "RUN needs a whole run number")
        assert uid is not None  # the grammar requires WITH UID for WAITJOB
        return WaitJob(type=job_type, name=name, uid=uid, timeout=None if timeout is None else float(timeout), run=run)

    def deletehistory(self, children: list[Any]) -> DeleteHistory:
        job_type, name, uid, _ = self._named(children)
        assert uid is not None  # the grammar requires WITH UID for DELETEHISTORY
        return DeleteHistory(type=job_type, name=name, uid=uid)

    def createcalendar(self, children: list[Token]) -> CreateCalendar:
        _, name_tok, *rest = children
        name = self._calendar_name(name_tok)
        rules: list[str] = []
        for tok in (t for t in rest if t.type == "STRING"):  # each checked alone: the error points at it
            try:
                rules.extend(r.text for r in make_calendar(name, [_string_value(tok)]).rules)
            except CalendarError as exc:
                raise invalid(self._text, tok, str(exc)) from None
        if len(rules) > MAX_RULES:
            raise invalid(self._text, name_tok, f"a calendar has at most {MAX_RULES} rules")
        return CreateCalendar(name=name, rules=tuple(rules))

    def dropcalendar(self, children: list[Token]) -> DropCalendar:
        return DropCalendar(name=self._calendar_name(children[1]))

    def calendars(self, children: list[Token]) -> Calendars:
        return Calendars()

    def _calendar_name(self, tok: Token) -> str:
        try:
            return check_name(_string_value(tok))
        except CalendarError as exc:
            raise invalid(self._text, tok, str(exc)) from None

    def ps(self, children: list[Token]) -> Ps:
        return Ps(all=len(children) > 1)

    def kill(self, children: list[Token]) -> Kill:
        _, node_tok, task_tok = children
        node = _string_value(node_tok) if node_tok.type == "STRING" else node_tok.value
        if node == "":
            raise invalid(self._text, node_tok, "KILL needs a node name")
        task = self._whole(task_tok, _MAX_TASK, "the task of KILL must be a whole number")
        return Kill(node=node, task=task)

    def nodes(self, children: list[Token]) -> Nodes:
        return Nodes(details=len(children) > 1 and children[1] is not None)

    def set(self, children: list[Token]) -> Set:
        key, value = children[1], children[-1]
        text = _string_value(value) if value.type == "STRING" else value.value
        why = text_complaint("SET value", text)
        if why is not None:
            raise invalid(self._text, value, why)
        return Set(key=key.value, value=text)

    def _plain(self, tok: Token, what: str, empty_ok: bool = False) -> str:
        """A name, UID or affinity: shown in log lines, tables and file names, so not empty and
        free of what names.py refuses."""
        value = _string_value(tok)
        why = emptiness(what, value, empty_ok) or complaint(what, value)
        if why is not None:
            raise invalid(self._text, tok, why)
        return value

    def _free_text(self, tok: Token, what: str) -> str:
        """A string that is stored or sent on as written (ARGS, a schedule, a SET value): any
        text an encoding can hold, so no lone surrogate (names.text_complaint)."""
        value = _string_value(tok)
        why = text_complaint(what, value)
        if why is not None:
            raise invalid(self._text, tok, why)
        return value

    def _whole(self, tok: Token, limit: int, message: str) -> int:
        digits = tok.value.lstrip("+")
        if not digits.isascii() or not digits.isdigit():
            raise invalid(self._text, tok, f"{message}, got {tok.value}")
        if len(digits.lstrip("0")) > len(str(limit)) or int(digits) > limit:
            raise invalid(self._text, tok, f"{tok.value} is too large (at most {limit})")
        return int(digits)



class _Wait:
    """The WAIT [TIMEOUT n] clause of STOPJOB, until _job folds it into the command."""

    __slots__ = ("timeout",)

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout


class _Running:
    """The RUNNING word of RESTARTJOB, until _job folds it into the command."""

    __slots__ = ()
