"""``fabricjobs export-jobs``: the cluster's job definitions as a script that makes them again.

A backup of what was asked, not of what happened: every calendar (CREATECALENDAR) and every
live job as the STARTJOB that would make it (its parameters, its ARGS without the session
scope that STARTJOB adds, HOLD=true for a held job), each ``IF NOT EXISTS`` so that the script
may run again on a store that has some of them (docs/guides/operations/backup.md). Run
history, outcomes and archived jobs are left out, and so are parallel jobs (PARALLELISM): a
one-time job that runs now, which STARTJOB cannot make IF NOT EXISTS; the script names them in a
comment. Jobs come parents first, so DEPENDS_ON finds its parents when the script runs; a parent
that is not in the script (it has ended) is left out of its children's DEPENDS_ON, with a comment,
and a child that it left waiting is made HELD.
"""

from __future__ import annotations

import json
from typing import Iterable

from .dependencies import parents_of
from .model import Job, Status
from .names import text_complaint
from .store.base import JobStore

_PAGE = 1000


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def definition_args(arguments: str) -> str:
    """A job's ARGS as given: its stored arguments without the session scope STARTJOB adds.

    The caller's own text where the scope is the one STARTJOB appended (service/session.py):
    re-encoded, ARGS could outgrow [jobs] MAX_ARGS_BYTES (a restore then refused them) or hold
    a lone surrogate its ``\\udXXX`` escape stood for (no output can be written)."""
    text = arguments or "{}"
    try:
        args = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return text
    if not isinstance(args, dict) or "session_scope" not in args:
        return text
    appended = json.dumps({"session_scope": args["session_scope"]}, ensure_ascii=False, separators=(",", ":"))[1:-1]
    if text.endswith(appended + "}"):
        body = text[:-len(appended) - 1].rstrip()
        return (body[:-1] if body.endswith(",") else body) + "}"
    args.pop("session_scope")
    plain = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    return plain if text_complaint("ARGS", plain) is None else json.dumps(args, separators=(",", ":"))


def startjob(job: Job, depends_on: str | None = None, hold: bool = False) -> str:
    """The STARTJOB that makes ``job`` again, as it was defined (``depends_on``: the parents
    it names instead of its own; ``hold``: HOLD=true even if it is not held)."""
    k = job.key
    parts = [f"STARTJOB {k.type} NAME={quoted(k.name)} UID={quoted(k.uid)}"]
    text_params = (("AFFINITY", job.affinity), ("EXEC_INTERVAL", job.execution_interval),
                   ("DEPENDS_ON", job.depends_on if depends_on is None else depends_on), ("TZ", job.time_zone), ("LATE_THRESHOLD", job.late_threshold),
                   ("OVERLAP", job.overlap), ("LATE_ACTION", job.late_action), ("ON_FAILURE", job.on_failure),
                   ("REQUESTOR", job.requestor), ("CALENDAR", job.calendar),
                   ("DELETE_ON_SUCCESS", job.delete_on_success))
    args = definition_args(job.arguments)
    if args not in ("", "{}"):
        parts.append(f"ARGS={quoted(args)}")
    parts += [f"{name}={quoted(value)}" for name, value in text_params if value]
    parts.append(f"PRIORITY={job.priority}")
    if hold or job.status is Status.HELD:
        parts.append("HOLD=true")
    return " ".join(parts) + " IF NOT EXISTS;"


def parents_first(jobs: Iterable[Job]) -> list[Job]:
    """Jobs ordered so that each comes after the live parents it names (a cycle cannot be:
    DEPENDS_ON refuses them)."""
    by_key = {str(j.key): j for j in jobs}
    done: set[str] = set()
    out: list[Job] = []

    def visit(key: str, path: frozenset[str]) -> None:
        if key in done or key in path or key not in by_key:
            return
        for parent in filter(None, by_key[key].depends_on.split(",")):
            visit(parent.strip(), path | {key})
        done.add(key)
        out.append(by_key[key])

    for key in sorted(by_key):
        visit(key, frozenset())
    return out


def export_script(store: JobStore) -> str:
    lines = ["-- fabricjobs job definitions (fabricjobs export-jobs); run with: fabricjobs shell -f FILE"]
    for calendar in store.calendars():
        rules = " ".join(f"EXCLUDE {quoted(rule.text)}" for rule in calendar.rules)
        lines.append(f"CREATECALENDAR {quoted(calendar.name)} {rules};")
    jobs = [j for j in store.each_live(_PAGE) if not j.task_of]
    lines += [f"-- left out: {j.key}, a parallel job (PARALLELISM={j.parallelism}) still running: a one-time job, "
              "start it again by hand if it must run" for j in jobs if j.parallelism]
    exported = [j for j in jobs if not j.parallelism]
    keys = {str(j.key) for j in exported}
    for job in parents_first(exported):
        lines += _with_parents_left_out(store, job, keys)
    return "\n".join(lines) + "\n"


def _with_parents_left_out(store: JobStore, job: Job, exported: set[str]) -> list[str]:
    """The job's STARTJOB, naming only the parents the script makes too: an ended parent is
    not exported, and the script must run on a store that never had it. A parent that ended
    other than PROCESSED kept the job waiting: the job is made HELD, with a comment, so that
    it does not run before someone has looked (RELEASEJOB runs it)."""
    parents = parents_of(job)
    left_out = [p for p in parents if str(p) not in exported]
    if not left_out:
        return [startjob(job)]
    ends = []
    for parent in left_out:
        row = store.get(parent)
        ends.append((parent, "gone" if row is None else row.status.value if row.archived else "still running (parallel)"))
    held = any(end != Status.PROCESSED.value for _, end in ends)
    said = ", ".join(f"{parent} ({end})" for parent, end in ends)
    note = f"-- {job.key}: its parents {said} are not in this script" + (
        "; made HELD, as it waited for them: RELEASEJOB runs it" if held and job.status is not Status.HELD else "")
    return [note, startjob(job, ",".join(str(p) for p in parents if str(p) in exported), hold=held)]
