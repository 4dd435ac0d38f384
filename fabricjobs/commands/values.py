"""The rules a command's values must follow, in one place for both ways a command is made.

The parser (:mod:`.transform`) applies them to what was typed and points at the offending
token; :func:`checked` applies them to a command built in code (the HTTP API, ``Client.wait``),
which never went through the parser. Each rule returns the value as the command holds it, or
raises ``ValueError`` with the words the user sees.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Callable

from ..errors import ScheduleError, ValidationError
from ..model import MAX_PARALLELISM, MIN_PARALLELISM, JobKey, JobType
from ..names import complaint, emptiness, text_complaint
from ..schedule import parse_schedule, resolve_zone
from .messages import show as _show

#: Parameters that must not be empty when given (the parser's NAME='' and UID='' errors).
_NON_EMPTY = ("name", "uid")

#: What a statement refuses whatever the values are (said by the parser and by :func:`checked`).
IF_NOT_EXISTS_NEEDS_UID = "IF NOT EXISTS needs UID='<uid>' (without one, every STARTJOB makes a new job)"
UPDATE_HOLDS_ONLY = "UPDATEJOB takes HOLD=true only: RELEASEJOB releases a held job (and its held children)"


def job_type(text: str) -> str:
    return JobType.parse(text).value


#: JOBHISTORY RECENT's ceiling: on Cassandra it reads n lines per hour and shard (store/cassandra/recent.py).
MAX_RECENT = 10_000


def recent(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RECENT:
        raise ValueError(f"RECENT must be a whole number of runs from 1 to {MAX_RECENT}, got {n!r}")
    return n


def exec_interval(text: str) -> str:
    try:
        parse_schedule(text, "UTC")
    except ScheduleError as exc:
        raise ValueError(str(exc)) from None
    return text


def tz(text: str) -> str:
    if text:
        try:
            resolve_zone(text)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
    return text


def late_threshold(text: str) -> str:
    if text:
        try:
            schedule = parse_schedule(text, "UTC")
        except ScheduleError:
            schedule = None
        if schedule is None and re.fullmatch(r"0+:00:00(\.0+)?", text.strip()):
            raise ValueError(f"LATE_THRESHOLD must be longer than 00:00:00 (no threshold: '' or none), got {_show(text)}")
        if schedule is None or schedule.interval is None:
            raise ValueError(f"LATE_THRESHOLD must be HH:MM:SS, got {_show(text)}")
    return text


def overlap(text: str) -> str:
    value = text.strip().upper()
    if value not in ("", "SKIP", "QUEUE"):
        raise ValueError(f"OVERLAP must be SKIP or QUEUE, got {_show(text)}")
    return value


def late_action(text: str) -> str:
    """'' | SKIP | RUN | <TYPE>.<NAME> (the late-handler job; the service checks it exists)."""
    value = text.strip()
    if value.upper() in ("", "SKIP", "RUN"):
        return value.upper()
    job_type, dot, name = value.partition(".")
    try:
        job_type = JobType.parse(job_type).value
    except ValueError:
        dot = ""
    if not dot or not name or any(not c.isprintable() for c in name):
        raise ValueError(f"LATE_ACTION must be SKIP, RUN or <TYPE>.<NAME> of a late-handler job, got {_show(text)}")
    return f"{job_type}.{name}"


def delete_on_success(text: str) -> str:
    """'' | file,file,...: RJM's rjm_delete list (where they may be is the node's to check)."""
    files = [f.strip() for f in text.split(",") if f.strip()]
    for f in files:
        if any(ord(c) < 32 for c in f):
            raise ValueError(f"DELETE_ON_SUCCESS: file name {_show(f)} has a control character")
    return ",".join(files)


def calendar(text: str) -> str:
    """'' | the name of a stored calendar (CREATECALENDAR)."""
    from ..calendar import CalendarError, check_name

    value = text.strip()
    if not value:
        return ""
    try:
        return check_name(value)
    except CalendarError as exc:
        raise ValueError(f"CALENDAR: {exc}") from None


def calendar_name(text: str) -> str:
    """CREATECALENDAR's and DROPCALENDAR's name."""
    from ..calendar import check_name

    return check_name(text)  # a CalendarError is a ValueError


def calendar_rules(rules: tuple[str, ...]) -> tuple[str, ...]:
    """CREATECALENDAR's EXCLUDE rules, one rule each as stored (a date list is split)."""
    from ..calendar import parse_rules

    return tuple(r.text for r in parse_rules(rules))


def parallelism(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PARALLELISM <= value <= MAX_PARALLELISM:
        raise ValueError(f"PARALLELISM must be a whole number from {MIN_PARALLELISM} to {MAX_PARALLELISM} "
                         f"(the job's tasks), got {_show(str(value))}")
    return value


def on_failure(text: str) -> str:
    """'' | <TYPE>.<NAME> of the job to start when a run fails for good."""
    value = text.strip()
    if not value:
        return ""
    if value.upper() in ("SKIP", "RUN"):
        raise ValueError(f"ON_FAILURE must be <TYPE>.<NAME> of a job, got {_show(text)}")
    try:
        return late_action(value)
    except ValueError:
        raise ValueError(f"ON_FAILURE must be <TYPE>.<NAME> of a job, got {_show(text)}") from None


def priority(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 9:
        raise ValueError(f"PRIORITY must be a whole number from 0 to 9, got {_show(str(value))}")
    return value


def load_json(text: str) -> Any:
    """JSON as ARGS may hold it: no NaN or Infinity (they are not JSON)."""
    return json.loads(text, parse_constant=_reject_constant)


def args_object(text: str) -> str:
    """ARGS: the JSON text of an object (kept exactly as given)."""
    if (why := text_complaint("ARGS", text)) is not None:  # no encoding can store it
        raise ValueError(why)
    try:
        obj = load_json(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"ARGS is not valid JSON: {exc.msg} at char {exc.pos}") from None
    except RecursionError:
        raise ValueError("ARGS is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # NaN / Infinity
        raise ValueError(f"ARGS is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"ARGS must be a JSON object, got {json_kind(obj)}")
    return text


def json_kind(obj: Any) -> str:
    if isinstance(obj, list):
        return "a list"
    if isinstance(obj, str):
        return "a string"
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if obj is None:
        return "null"
    return "a number"


_RULES: dict[str, Callable[[Any], Any]] = {
    "exec_interval": exec_interval, "tz": tz, "late_threshold": late_threshold, "overlap": overlap, "late_action": late_action, "on_failure": on_failure,
    "priority": priority, "args": args_object, "recent": recent, "calendar": calendar,
    "delete_on_success": delete_on_success, "parallelism": parallelism, "rules": calendar_rules,
}


#: Names shown in tables, which blanks alone would leave empty to the eye (as the parser's _plain).
_PLAIN_FIELDS = frozenset({"name", "uid", "affinity", "requestor", "owner"})


def checked(command: Any) -> Any:
    """``command`` (a frozen command object built in code) with every value checked by the
    rules the parser applies, normalised as the parser would (the job type upper-case);
    ValidationError names the first bad value."""
    changes: dict[str, Any] = {}
    try:
        fields = {f.name: getattr(command, f.name) for f in dataclasses.fields(command)}
        for name, value in fields.items():  # the parser's check of every string it reads
            if isinstance(value, str) and (why := text_complaint(name.upper(), value)) is not None:
                raise ValueError(why)
        if isinstance(fields.get("type"), str):
            changes["type"] = job_type(fields["type"])
        changes.update(_statement_rules(command))
        for name, rule in _RULES.items():
            if fields.get(name) is not None:
                changes[name] = rule(fields[name])
        for name in _PLAIN_FIELDS:  # as the parser's _plain: NAME and UID not empty, none of them blank
            value = fields.get(name)
            if isinstance(value, str) and (why := emptiness(name.upper(), value, name not in _NON_EMPTY)):
                raise ValueError(why)
        for name in _NON_EMPTY:
            what = name.upper()
            if isinstance(fields.get(name), str) and (why := complaint(what, fields[name])) is not None:
                raise ValueError(why)
        for name, what in (("affinity", "AFFINITY"), ("requestor", "REQUESTOR"), ("owner", "BY")):
            if isinstance(fields.get(name), str) and (why := complaint(what, fields[name])):
                raise ValueError(why)
        for parent in fields.get("depends_on") or ():
            if isinstance(parent, JobKey):  # text (TYPE.NAME.UID) is read by dependencies.parent_keys
                if not (parent.name and parent.uid):
                    raise ValueError(f"DEPENDS_ON expects TYPE.NAME.UID keys, got {_show(str(parent))}")
                job_type(parent.type)
        for name in ("timeout", "limit", "run", "task", "days_ago"):
            value = fields.get(name)
            if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value < 0):
                raise ValueError(f"{name.upper()} must be a whole number of at least 0, got {value!r}")
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    changes = {k: v for k, v in changes.items() if v != fields[k]}
    return dataclasses.replace(command, **changes) if changes else command


def _statement_rules(command: Any) -> dict[str, Any]:
    """What one statement refuses that no other does (the parser says the same words)."""
    from . import statements as st

    if isinstance(command, (st.CreateCalendar, st.DropCalendar)):
        return {"name": calendar_name(command.name)}
    if isinstance(command, st.StartJob) and command.if_not_exists and command.uid is None:
        raise ValueError(IF_NOT_EXISTS_NEEDS_UID)
    if isinstance(command, st.UpdateJob) and command.hold is False:
        raise ValueError(UPDATE_HOLDS_ONLY)
    if isinstance(command, st.RestartJob) and command.name is None and (command.uid is not None or not command.running):
        raise ValueError("RESTARTJOB needs NAME='<name>'")  # without RUNNING, or with a UID
    return {}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
