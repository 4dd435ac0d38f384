"""Command text -> typed command objects (SPEC section 6).

The grammar (``grammar/fabricjobs.lark``) decides what parses; this module loads it once,
turns each statement into its :mod:`.ast` object and checks the values the grammar cannot
(job type, JSON, schedule, duplicates). Every problem leaves as a :class:`CommandSyntaxError`
or :class:`ValidationError` positioned on the script text; no Lark exception gets out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Iterator

import lark
from lark import Lark, Token, Transformer, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from ..errors import CommandSyntaxError, ScheduleError, ValidationError
from . import table
from ..model import JobType
from ..names import complaint
from ..schedule import parse_schedule, resolve_zone
from .statements import (
    Command,
    JobStatus,
    JobHistory,
    JobLog,
    Kill,
    Nodes,
    WaitJob,
    Ps,
    Set,
    Statement,
)

#: Terminals that are not keywords: how lex() colours them and how errors say them.
#: Every other terminal is a keyword (said by its name) or a parameter P_<X> (said "X=").
_TERMINAL_WORDS: dict[str, tuple[str, str]] = {
    "STRING": ("string", "a quoted string"),
    "NUMBER": ("number", "a number"),
    "JOB_TYPE": ("type", "a job type"),
    "NODE_WORD": ("word", "a node name"),
    "SET_KEY": ("word", "a setting name"),
    "SET_WORD": ("word", "a value"),
    "EQ": ("punct", "'='"),
    "SEMI": ("punct", "';'"),
    "COMMENT": ("comment", "a comment"),
    "WS": ("space", "white space"),
    "$END": ("space", "end of input"),
}
_IGNORED = frozenset({"WS", "COMMENT"})
_PARAM_PREFIX = "P_"

_JOB_COMMANDS: dict[str, type] = table.JOB_COMMANDS
#: Mandatory parameters (the grammar cannot say "exactly once, in any order" in LALR).
_REQUIRED: dict[str, tuple[str, ...]] = {"resumejob": ("NAME", "UID")}
_NON_EMPTY = frozenset({"NAME", "UID"})
#: Names that end up in log lines, tables and file names: checked by names.py.
_PLAIN = frozenset({"NAME", "UID", "AFFINITY"})

_MAX_TASK = 2**63 - 1
_MAX_DAYS = 36_500
_MAX_LIMIT = 1_000_000
_MAX_WAIT = 10_000_000
_STRING_ESCAPE = re.compile(r"''|\\([\s\S])")

_parser: Lark | None = None


# -- the grammar, loaded once ----------------------------------------------------------------


def grammar_path() -> Path:
    """The packaged grammar of a wheel install, else the repository's (editable install)."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_grammar" / "fabricjobs.lark"
    return packaged if packaged.is_file() else package.parent / "grammar" / "fabricjobs.lark"


def get_parser() -> Lark:
    """The process-wide LALR parser; its tables come from a cache keyed on the grammar text."""
    global _parser
    if _parser is None:
        text = grammar_path().read_text(encoding="utf-8")
        _parser = Lark(
            text,
            parser="lalr",
            lexer="contextual",
            propagate_positions=True,
            maybe_placeholders=False,
            cache=_cache_file(text) or False,
        )
    return _parser


def _cache_file(grammar: str) -> str | None:
    """A per-user cache path named after the grammar's hash (None: do not cache).

    The name changes with the grammar, Lark and Python, so an edited grammar never meets old
    tables; Lark also checks the hash stored inside the file.
    """
    key = f"{grammar}\0{lark.__version__}\0{sys.version_info[:2]}"
    name = f"grammar-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:20]}.lark-cache"
    directory = _cache_dir()
    return str(directory / name) if directory else None


def _cache_dir() -> Path | None:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    uid = getattr(os, "getuid", lambda: None)()
    candidates = [(base / "fabricjobs", False), (Path(tempfile.gettempdir()) / f"fabricjobs-{uid}", True)]
    for directory, shared in candidates:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = directory.stat()
        except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
            continue
        # The cache is unpickled: in a shared temp dir, trust only a private dir of our own.
        if shared and uid is not None and (st.st_uid != uid or st.st_mode & 0o022):
            continue
        if os.access(directory, os.W_OK | os.X_OK):
            return directory
    return None


# -- terminals in words ----------------------------------------------------------------------


def terminal_category(name: str) -> str:
    """The highlighting class of a terminal: keyword, param, string, number, punct, ..."""
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name][0]
    return "param" if name.startswith(_PARAM_PREFIX) else "keyword"


def terminal_words(name: str) -> str:
    """How a message says a terminal: NAME=, STARTJOB, a quoted string, ';' ..."""
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name][1]
    return f"{param_name(name)}=" if name.startswith(_PARAM_PREFIX) else name


def param_name(terminal: str) -> str:
    """P_EXEC_INTERVAL -> EXEC_INTERVAL."""
    return terminal[len(_PARAM_PREFIX):]


def is_param(terminal: str) -> bool:
    return terminal.startswith(_PARAM_PREFIX)


def is_keyword(terminal: str) -> bool:
    return terminal_category(terminal) == "keyword"


def grammar_order(names: Iterable[str]) -> list[str]:
    """Terminal names sorted as the grammar declares them (so messages read in a stable order)."""
    order = {t.name: i for i, t in enumerate(get_parser().terminals)}
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def expected_words(names: Iterable[str]) -> tuple[str, ...]:
    """The acceptable terminals in words; end of input goes unsaid when ';' is acceptable."""
    names = set(names) - _IGNORED
    if "SEMI" in names:
        names.discard("$END")
    return tuple(terminal_words(n) for n in grammar_order(names))


def _join(words: tuple[str, ...]) -> str:
    if len(words) <= 1:
        return "".join(words) or "nothing more"
    return f"{', '.join(words[:-1])} or {words[-1]}"


def _show(value: str, limit: int = 40) -> str:
    """A token for a one-line message: quoted, escaped, shortened."""
    if len(value) > limit:
        value = value[: limit - 3] + "..."
    return repr(value)


# -- strings ---------------------------------------------------------------------------------


def unescape(body: str) -> str:
    """Decode a string body. The escapes are SPEC 6's two ways to write a quote, ``''`` and
    ``\\'``; every other backslash is kept as written, so JSON escapes inside ARGS (``\\n``,
    ``\\"``, ``\\\\``) reach the JSON decoder exactly as the user typed them."""

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


def _load_json(text: str):
    return json.loads(text, parse_constant=_reject_constant)


def _string_value(tok: Token) -> str:
    return unescape(tok.value[1:-1])


# -- errors ----------------------------------------------------------------------------------


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, pos) + 1
    return text.count("\n", 0, pos) + 1, pos - line_start + 1


def _invalid(text: str, tok: Token, message: str) -> ValidationError:
    return ValidationError(message, text=text, line=tok.line, column=tok.column)


def _invalid_at(text: str, pos: int, message: str) -> ValidationError:
    line, column = _line_col(text, pos)
    return ValidationError(message, text=text, line=line, column=column)


def _accepted(err: UnexpectedInput) -> set[str]:
    ip = getattr(err, "interactive_parser", None)
    if ip is not None:
        try:
            return set(ip.accepts())
        except LarkError:
            pass
    return set(getattr(err, "expected", None) or getattr(err, "allowed", None) or ())


def _statement_keyword(err: UnexpectedInput) -> str | None:
    """The keyword of the statement being parsed when the error happened."""
    ip = getattr(err, "interactive_parser", None)
    if ip is None:
        return None
    for value in reversed(getattr(ip.parser_state, "value_stack", None) or ()):
        if isinstance(value, Token) and value.type == "SEMI":
            return None
        if isinstance(value, Token) and value.type.lower() in _STATEMENT_RULES:
            return value.type
    return None


def syntax_error(text: str, err: UnexpectedInput) -> CommandSyntaxError:
    """Lark's error, said in words: what was found, where, and what may come there."""
    accepted = _accepted(err)
    expected = expected_words(accepted)
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream
        assert pos is not None  # lark sets it for characters it could not lex
        line, column = err.line, err.column
        if text.startswith("'", pos):
            reason, expected = "unterminated string starting here", ("a closing quote",)
        elif text.startswith("/*", pos):
            reason, expected = "unterminated comment starting here", ("*/",)
        else:
            reason = f"unexpected character {_show(text[pos])}; expected {_join(expected)}"
        return CommandSyntaxError(reason, text=text, line=line, column=column, expected=expected)

    assert isinstance(err, UnexpectedToken)
    tok = err.token
    if tok.type == "$END":
        line = tok.end_line if tok.end_line is not None else tok.line
        column = tok.end_column if tok.end_column is not None else tok.column
        reason = f"unexpected end of input; expected {_join(expected)}"
        return CommandSyntaxError(reason, text=text, line=line, column=column, expected=expected)

    line, column = tok.line, tok.column
    keyword = _statement_keyword(err)
    takes = [param_name(t) for t in grammar_order(accepted) if is_param(t)]
    if is_param(tok.type) and takes and keyword is not None:
        message = f"{keyword} does not take {param_name(tok.type)}; it takes {', '.join(takes)}"
        return ValidationError(message, text=text, line=line, column=column, expected=expected)
    reason = f"unexpected {_show(tok.value)}; expected {_join(expected)}"
    start = tok.start_pos if tok.start_pos is not None else 0
    if start > 0 and text[start - 1] == "'" and "STRING" not in accepted:
        reason += " (a quote inside a string is written '')"
    elif tok.value.startswith('"') and "STRING" in accepted:
        reason += " (strings take single quotes: '...')"
    return CommandSyntaxError(reason, text=text, line=line, column=column, expected=expected)


# -- tree -> command -------------------------------------------------------------------------


class _Param:
    """One NAME='...'-like parameter: its name, keyword token and decoded value."""

    __slots__ = ("name", "token", "value")

    def __init__(self, name: str, token: Token, value: Any) -> None:
        self.name, self.token, self.value = name, token, value


class _ToCommand(Transformer):
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
        return _Param(name, key, _string_value(value))

    name = uid = affinity = _string_param

    def args(self, children: list[Token]) -> _Param:
        """ARGS must be a JSON object. It is stored exactly as written; only if that is not
        valid JSON but becomes valid once ``\\"`` and ``\\\\`` are read as C/Java string
        escapes (the seed's example) is the decoded text used instead."""
        param = self._string_param(children)
        value_tok = children[1]
        try:
            obj = _load_json(param.value)
        except json.JSONDecodeError as exc:
            decoded = decode_c_literal(param.value)
            try:
                if decoded == param.value:
                    raise ValueError
                obj = _load_json(decoded)
            except (ValueError, RecursionError):
                at = token_start(value_tok) + 1 + _source_index(value_tok.value[1:-1], exc.pos)
                raise _invalid_at(self._text, at, f"ARGS is not valid JSON: {exc.msg} at char {exc.pos}") from None
            param = _Param(param.name, param.token, decoded)
        except RecursionError:
            raise _invalid(self._text, value_tok, "ARGS is not valid JSON: nested too deeply") from None
        except ValueError as exc:  # NaN / Infinity
            raise _invalid(self._text, value_tok, f"ARGS is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise _invalid(self._text, value_tok, f"ARGS must be a JSON object, got {_json_kind(obj)}")
        return param

    def exec_interval(self, children: list[Token]) -> _Param:
        param = self._string_param(children)
        try:
            parse_schedule(param.value, "UTC")
        except ScheduleError as exc:
            raise _invalid(self._text, children[1], str(exc)) from None
        return param

    def depends_on(self, children: list[Token]) -> _Param:
        param = self._string_param(children)
        keys = []
        for part in param.value.split(","):
            part = part.strip()
            bits = part.split(".")
            if len(bits) < 3 or not all(bits):
                raise _invalid(self._text, children[1], f"DEPENDS_ON expects TYPE.NAME.UID keys separated by commas, got {_show(part)}")
            try:
                JobType.parse(bits[0])
            except ValueError as exc:
                raise _invalid(self._text, children[1], f"DEPENDS_ON {_show(part)}: {exc}") from None
            keys.append(".".join([bits[0].upper(), *bits[1:]]))
        return _Param(param.name, param.token, tuple(dict.fromkeys(keys)))

    def priority(self, children: list[Token]) -> _Param:
        key, value = children
        text = _string_value(value) if value.type == "STRING" else value.value
        if not (text.isascii() and text.isdigit() and 0 <= int(text) <= 9):
            raise _invalid(self._text, value, f"PRIORITY must be a whole number from 0 to 9, got {_show(text)}")
        return _Param(param_name(key.type), key, int(text))

    def tz(self, children: list[Token]) -> _Param:
        param = self._string_param(children)
        if param.value:
            try:
                resolve_zone(param.value)
            except ScheduleError as exc:
                raise _invalid(self._text, children[1], str(exc)) from None
        return param

    def late_threshold(self, children: list[Token]) -> _Param:
        param = self._string_param(children)
        if param.value:
            try:
                sched = parse_schedule(param.value, "UTC")
            except ScheduleError:
                sched = None
            if sched is None or sched.interval is None:
                raise _invalid(self._text, children[1], f"LATE_THRESHOLD must be HH:MM:SS, got {_show(param.value)}")
        return param

    def overlap(self, children: list[Token]) -> _Param:
        param = self._string_param(children)
        value = param.value.strip().upper()
        if value not in ("", "SKIP", "QUEUE"):
            raise _invalid(self._text, children[1], f"OVERLAP must be SKIP or QUEUE, got {_show(param.value)}")
        return _Param(param.name, param.token, value)

    def reset_end_time(self, children: list[Token]) -> _Param:
        key, value = children
        word = _string_value(value) if value.type == "STRING" else value.value
        if word.lower() not in ("true", "false"):
            raise _invalid(self._text, value, f"RESET_END_TIME must be true or false, got {_show(word)}")
        return _Param(param_name(key.type), key, word.lower() == "true")

    def job_type(self, children: list[Token]) -> str:
        (tok,) = children
        try:
            return JobType.parse(tok.value.upper()).value
        except ValueError as exc:
            raise _invalid(self._text, tok, str(exc)) from None

    # statements

    def _job(self, children: list[Any]) -> Command:
        keyword, job_type, *params = children
        statement = keyword.type.lower()
        waiting = [p for p in params if isinstance(p, _Wait)]
        params = [p for p in params if not isinstance(p, _Wait)]
        given: dict[str, _Param] = {}
        for param in params:
            if param.name in given:
                raise _invalid(self._text, param.token, f"{param.name} is given twice")
            given[param.name] = param
        for required in _REQUIRED.get(statement, ("NAME",)):
            if required not in given:
                raise _invalid(self._text, keyword, f"{keyword.type} needs {required}='<{required.lower()}>'")
        fields = {name.lower(): param.value for name, param in given.items()}
        if waiting:
            fields.update(wait=True, timeout=waiting[0].timeout)
        return _JOB_COMMANDS[statement](type=job_type, **fields)

    def wait(self, children: list[Token]) -> "_Wait":
        timeout = None
        if len(children) > 1:
            timeout = float(self._whole(children[2], _MAX_WAIT, "TIMEOUT needs a whole number of seconds"))
        return _Wait(timeout)

    startjob = stopjob = restartjob = resumejob = updatejob = _job

    def jobstatus(self, children: list[Any]) -> JobStatus:
        rest = [c for c in children[1:] if c is not None]
        details = bool(rest) and isinstance(rest[-1], Token) and rest[-1].type == "DETAILS"
        if details:
            rest = rest[:-1]
        if not rest:
            return JobStatus(details=details)
        if isinstance(rest[0], Token) and rest[0].type == "NUMBER":
            days = self._whole(rest[0], _MAX_DAYS, "n DAYS AGO needs a whole number of days")
            return JobStatus(days_ago=days, details=details)
        strings = [t for t in rest[1:] if isinstance(t, Token) and t.type == "STRING"]
        values = [self._plain(tok, what) for tok, what in zip(strings, ("NAME", "UID"))]
        name, uid = (values + [None, None])[:2]
        return JobStatus(type=rest[0], name=name, uid=uid, details=details)

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

    def jobhistory(self, children: list[Any]) -> JobHistory:
        job_type, name, uid, options = self._named(children)
        limit = None
        if "LIMIT" in options:
            limit = self._whole(options["LIMIT"], _MAX_LIMIT, "LIMIT needs a whole number of runs")
        return JobHistory(type=job_type, name=name, uid=uid, limit=limit)

    def joblog(self, children: list[Any]) -> JobLog:
        job_type, name, uid, options = self._named(children)
        run = None
        if "RUN" in options:
            run = self._whole(options["RUN"], _MAX_TASK, "RUN needs a whole run number")
        return JobLog(type=job_type, name=name, uid=uid, run=run)

    def waitjob(self, children: list[Any]) -> WaitJob:
        job_type, name, uid, options = self._named(children)
        timeout = None
        if "TIMEOUT" in options:
            timeout = float(self._whole(options["TIMEOUT"], _MAX_WAIT, "TIMEOUT needs a whole number of seconds"))
        assert uid is not None  # the grammar requires WITH UID for WAITJOB
        return WaitJob(type=job_type, name=name, uid=uid, timeout=timeout)

    def ps(self, children: list[Token]) -> Ps:
        return Ps(all=len(children) > 1)

    def kill(self, children: list[Token]) -> Kill:
        _, node_tok, task_tok = children
        node = _string_value(node_tok) if node_tok.type == "STRING" else node_tok.value
        if node == "":
            raise _invalid(self._text, node_tok, "KILL needs a node name")
        task = self._whole(task_tok, _MAX_TASK, "the task of KILL must be a whole number")
        return Kill(node=node, task=task)

    def nodes(self, children: list[Token]) -> Nodes:
        return Nodes(details=len(children) > 1 and children[1] is not None)

    def set(self, children: list[Token]) -> Set:
        key, value = children[1], children[-1]
        text = _string_value(value) if value.type == "STRING" else value.value
        return Set(key=key.value, value=text)

    def _plain(self, tok: Token, what: str, empty_ok: bool = False) -> str:
        """A name, UID or affinity: shown in log lines, tables and file names, so not empty and
        free of what names.py refuses."""
        value = _string_value(tok)
        if value == "" and not empty_ok:
            raise _invalid(self._text, tok, f"{what} must not be empty")
        why = complaint(what, value)
        if why is not None:
            raise _invalid(self._text, tok, why)
        return value

    def _whole(self, tok: Token, limit: int, message: str) -> int:
        digits = tok.value.lstrip("+")
        if not digits.isascii() or not digits.isdigit():
            raise _invalid(self._text, tok, f"{message}, got {tok.value}")
        if len(digits.lstrip("0")) > len(str(limit)) or int(digits) > limit:
            raise _invalid(self._text, tok, f"{tok.value} is too large (at most {limit})")
        return int(digits)


_STATEMENT_RULES = frozenset(table.BY_RULE)


class _Wait:
    """The WAIT [TIMEOUT n] clause of STOPJOB, until _job folds it into the command."""

    __slots__ = ("timeout",)

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _json_kind(obj: Any) -> str:
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if obj is None:
        return "null"
    return "a number"


# -- the entry points ------------------------------------------------------------------------


def parse_script(text: str) -> list[Statement]:
    """Parse a script of ``;``-separated statements; all or nothing."""
    return [statement for statement, _ in _parse(text)]


def parse_one(text: str) -> Command:
    """Parse text that must hold exactly one statement."""
    parsed = _parse(text)
    if not parsed:
        raise ValidationError("expected a command, got none", text=text)
    if len(parsed) > 1:
        _, start = parsed[1]
        line, column = _line_col(text, start)
        raise ValidationError(f"expected one command, got {len(parsed)}", text=text, line=line, column=column)
    return parsed[0][0].command


def _parse(text: str) -> list[tuple[Statement, int]]:
    """The statements of a script, each with the offset of its first character.

    Prepared statements when every statement has a known shape (or gets one), else the
    plain Lark parse; the two agree on every script (tests/commands/test_prepared.py).
    """
    parsed = _parse_prepared(text)
    return parsed if parsed is not None else _parse_lark(text)


def _parse_lark(text: str) -> list[tuple[Statement, int]]:
    """The plain path: Lark parses the whole script, then each statement tree is transformed.
    Every error comes from here."""
    try:
        tree = get_parser().parse(text)
    except UnexpectedInput as err:
        raise syntax_error(text, err) from None
    except LarkError as err:  # not expected from an LALR parse; still never a raw Lark error
        raise CommandSyntaxError(f"cannot parse the command ({type(err).__name__})") from None
    builder = _ToCommand(text)
    parsed = []
    for node in tree.children:
        if not isinstance(node, Tree):
            continue
        try:
            command = builder.transform(node)
        except VisitError as err:
            if isinstance(err.orig_exc, CommandSyntaxError):
                raise err.orig_exc from None
            raise
        meta = node.meta
        source = text[meta.start_pos : meta.end_pos].strip()
        parsed.append((Statement(command, source, meta.line), meta.start_pos))
    return parsed


# -- prepared statements ---------------------------------------------------------------------
#
# A bulk script repeats a few statement shapes with different strings in them. A statement's
# *shape* is its text with each quoted string (the grammar's STRING terminal) replaced by a
# lone quote, stripped of surrounding white space: all of
#     startjob user_job name='Bench.noop' uid='t000123'
# have the shape "startjob user_job name=' uid='". The first statement of a shape is parsed by
# Lark on its own; its tree, with the STRING tokens made slots, is kept (LRU, bounded). A later
# statement of that shape reuses the tree with its own strings in the slots and goes through
# the same _ToCommand methods, without lexing, parsing or Lark's Transformer.
#
# Why a shape parses the same whatever its strings (T0 prepared, T1 of the same shape): outside
# its slots a shape holds no quote, and the STRING tokens of T0 are exactly its slots (checked
# when it is prepared). Besides STRING only comments can match a quote, and only comments can
# start with '--' or '/*' (tests/commands/test_prepared.py checks the grammar for both); the
# comments of T0 lie between its tokens, so they hold no quote. So no terminal tried outside a
# string looks past the quote that opens it, and a string is always lexed by the STRING regex
# from its opening quote: the lexer sees the same text, in the same parser states, outside the
# strings of T0 and T1, and the same tokens come out.
#
# A shape never holds a ';' outside its strings, and only SEMI, STRING and comments can match
# one (checked too): each ';' that is not in a string is a SEMI unless a comment swallows it,
# and then a statement around it does not parse alone (an unclosed /*) or ends in an open
# '--' comment, which is used only where a newline closes it before the ';'.
#
# Only scripts that parse are answered here: anything unexpected (a quote that opens no
# string, a statement that does not parse alone, a value that does not validate) sends the
# whole script to _parse_lark, which gives the result or the error exactly as before.

_PREPARED_LIMIT = 256  # shapes kept (LRU)
_PREPARED_SHAPE_LIMIT = 2000  # longer shapes are parsed alone but not kept
_PREPARE_MISSES = 32  # after this many new shapes, more than half of all: the plain path
_prepared: OrderedDict[str, "_Prepared"] = OrderedDict()
_prepared_lock = threading.Lock()
_STRING = "STRING"
_UNSET: Any = object()
_lexing: tuple[re.Pattern[str], re.Pattern[str]] | None = _UNSET


class _Prepared:
    """A statement shape: its tree as (rule, items) for _build, and where its tokens lie."""

    __slots__ = ("tree", "head", "tail", "open_tail")

    def __init__(self, tree: tuple, head: int, tail: int, open_tail: bool) -> None:
        self.tree = tree  # (rule, items); an item is a (rule, items), a slot number or a token
        self.head = head  # characters before the first token (comments and their white space)
        self.tail = tail  # characters after the last token (a comment)
        self.open_tail = open_tail  # the tail is a '--' comment that only a newline may close


def _lexing_patterns() -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """The grammar's STRING as one capturing group (for re.split) and its ignored terminals as
    a run of them; None: no prepared statements for this grammar."""
    global _lexing
    if _lexing is _UNSET:
        try:
            parser = get_parser()
            strings = re.compile(f"({parser.get_terminal(_STRING).pattern.to_regexp()})")
            # As the lexer takes them: by priority, the first that matches, each match final.
            ignored = sorted((parser.get_terminal(name) for name in parser.lexer_conf.ignore), key=lambda t: -t.priority)
            gaps = re.compile(f"(?>{'|'.join(f'(?:{t.pattern.to_regexp()})' for t in ignored)})*+")
        except (KeyError, AttributeError, re.error):
            _lexing = None
        else:  # a STRING with groups of its own would garble the split
            _lexing = (strings, gaps) if strings.groups == 1 and gaps.groups == 0 else None
    return _lexing


def _parse_prepared(text: str) -> list[tuple[Statement, int]] | None:
    """The statements of a script through prepared statements; None: use the plain path."""
    lexing = _lexing_patterns()
    if lexing is None:
        return None
    parts = lexing[0].split(text)
    literals = parts[1::2]
    skeleton = "'".join(parts[0::2])
    if skeleton.count("'") != len(literals):  # a quote that opens no string: an error, or in a comment
        return None
    gaps = lexing[1]
    builder = _ToCommand(text)
    parsed: list[Any] = []
    used = offset = line_at = misses = 0
    line = 1
    segments = skeleton.split(";")
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        n = segment.count("'")
        if n:
            values = literals[used : used + n]
            used += n
            extra = sum(map(len, values)) - n  # the strings are longer than their slots
        else:
            values, extra = [], 0
        shape = segment.strip()
        if shape:
            prepared = _prepared.get(shape)
            if prepared is None:
                if not n and gaps.fullmatch(shape):  # comments only: no statement
                    if _gap_end(gaps, shape + ";") != len(shape) and not _closed(segment, i == last):
                        return None
                    offset += len(segment) + 1
                    continue
                misses += 1
                if misses > _PREPARE_MISSES and 2 * misses > len(parsed):
                    return None  # few statements alike: preparing them costs more than it saves
                start = offset + len(segment) - len(segment.lstrip())
                prepared = _prepare(shape, text[start : start + len(shape) + extra], values)
                if prepared is None:
                    return None
            else:
                try:
                    _prepared.move_to_end(shape)
                except KeyError:  # evicted meanwhile by another thread
                    pass
            if prepared.open_tail and not _closed(segment, i == last):
                return None
            try:
                command = _build(prepared.tree, builder, values)
            except Exception:  # a bad value: the plain path says it, with its position
                return None
            start = offset + len(segment) - len(segment.lstrip())
            end = start + len(shape) + extra - prepared.tail
            start += prepared.head
            line += text.count("\n", line_at, start)
            line_at = start
            parsed.append((Statement(command, text[start:end], line), start))
        offset += len(segment) + extra + 1
    return parsed


def _closed(segment: str, last: bool) -> bool:
    """Whether a '--' comment that ends a segment ends before its ';' (a newline closes it)."""
    return last or "\n" in segment[len(segment.rstrip()) :]


def _prepare(shape: str, source: str, values: list[str] | tuple[str, ...]) -> _Prepared | None:
    """Parse one statement alone and keep its tree under its shape; None if it cannot be."""
    lexing = _lexing_patterns()
    try:
        tree = get_parser().parse(source)
    except Exception:  # LarkError, RecursionError ...: the plain path reports it
        return None
    if lexing is None or len(tree.children) != 1 or not isinstance(tree.children[0], Tree):
        return None
    gaps = lexing[1]
    node = tree.children[0]
    meta = node.meta
    # The STRING tokens are exactly the strings found by the split, and only ignored text
    # (white space, comments) lies between tokens: no token is left out of the tree.
    slots = []
    at = 0
    for piece, value in zip(shape.split("'"), values):
        at += len(piece)
        slots.append((at, at + len(value)))
        at += len(value)
    tokens = list(node.scan_values(lambda v: isinstance(v, Token)))
    if not tokens or [(t.start_pos, t.end_pos) for t in tokens if t.type == _STRING] != slots:
        return None
    done = 0
    for tok in tokens:
        if token_start(tok) < done or not gaps.fullmatch(source, done, token_start(tok)):
            return None
        done = token_end(tok)
    if not gaps.fullmatch(source, done):
        return None
    head, tail = token_start(tokens[0]), len(source) - done
    if (meta.start_pos, meta.end_pos, meta.line) != (head, done, 1 + source.count("\n", 0, head)):
        return None
    if source[head:done] != source[head:done].strip():
        return None
    # A tail that would run on into a ';' put right after it is a '--' comment.
    open_tail = _gap_end(gaps, source[done:] + ";") != len(source) - done
    compiled = _compile(node, iter(range(len(slots))))
    if compiled is None:
        return None
    prepared = _Prepared(compiled, head, tail, open_tail)
    if len(shape) <= _PREPARED_SHAPE_LIMIT:
        with _prepared_lock:
            _prepared[shape] = prepared
            _prepared.move_to_end(shape)
            while len(_prepared) > _PREPARED_LIMIT:
                _prepared.popitem(last=False)
    return prepared


def _compile(node: Tree, slot_numbers: Iterator[int]) -> tuple | None:
    """(rule, items): an item is a nested (rule, items), a slot number for a STRING, or a
    token kept as is. None when _ToCommand would not treat the tree as _build does."""
    method = getattr(_ToCommand, node.data, None)
    if not callable(method) or hasattr(method, "visit_wrapper") or _ToCommand.__default_token__ is not Transformer.__default_token__:
        return None
    items: list[Any] = []
    for child in node.children:
        if isinstance(child, Tree):
            sub = _compile(child, slot_numbers)
            if sub is None:
                return None
            items.append(sub)
        elif isinstance(child, Token):
            if hasattr(_ToCommand, child.type):  # a token callback: not what _build does
                return None
            items.append(next(slot_numbers) if child.type == _STRING else child)
        elif child is None:
            items.append(None)
        else:
            return None
    return node.data, tuple(items)


def _build(tree: tuple, builder: _ToCommand, values: list[str] | tuple[str, ...]) -> Any:
    """What ``builder.transform`` gives for the prepared tree with ``values`` in its slots."""
    rule, items = tree
    children = []
    for item in items:
        kind = type(item)
        if kind is tuple:
            children.append(_build(item, builder, values))
        elif kind is int:
            children.append(Token(_STRING, values[item]))
        else:
            children.append(item)
    return getattr(builder, rule)(children)


def token_start(tok: Token) -> int:
    """A token's offset (lark types it optional; tokens of a parse always have one)."""
    assert tok.start_pos is not None
    return tok.start_pos


def token_end(tok: Token) -> int:
    assert tok.end_pos is not None
    return tok.end_pos


def _gap_end(gaps: re.Pattern, text: str) -> int:
    """Where the comments and blanks at the start of ``text`` end (``gaps`` matches "")."""
    m = gaps.match(text)
    assert m is not None
    return m.end()

