"""``fabricjobs export-jobs``: the cluster's job definitions as a script that makes them again.

A backup of what was asked, not of what happened: every calendar (CREATECALENDAR) and every
live job as the STARTJOB that would make it (its parameters, its ARGS without the session
scope that STARTJOB adds, HOLD=true for a held job), each ``IF NOT EXISTS`` so that the script
may run again on a store that has some of them (docs/guides/operations/backup.md). Run
history, outcomes and archived jobs are left out, and so are parallel jobs (PARALLELISM): a
one-time job that runs now, which STARTJOB cannot make IF NOT EXISTS; the script names them in a
comment. Jobs come parents first, so DEPENDS_ON finds its parents when the script runs.
"""

from __future__ import annotations

import json
from typing import Iterable

from .model import Job, Status
from .store.base import JobStore

_PAGE = 1000


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def definition_args(arguments: str) -> str:
    """A job's ARGS as given: its stored arguments without the session scope STARTJOB adds."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
    if isinstance(args, dict):
        args.pop("session_scope", None)
    return json.dumps(args, ensure_ascii=False, separators=(", ", ": "))


def startjob(job: Job) -> str:
    """The STARTJOB that makes ``job`` again, as it was defined."""
    k = job.key
    parts = [f"STARTJOB {k.type} NAME={quoted(k.name)} UID={quoted(k.uid)}"]
    text_params = (("AFFINITY", job.affinity), ("EXEC_INTERVAL", job.execution_interval),
                   ("DEPENDS_ON", job.depends_on), ("TZ", job.time_zone), ("LATE_THRESHOLD", job.late_threshold),
                   ("OVERLAP", job.overlap), ("LATE_ACTION", job.late_action), ("ON_FAILURE", job.on_failure),
                   ("REQUESTOR", job.requestor), ("CALENDAR", job.calendar),
                   ("DELETE_ON_SUCCESS", job.delete_on_success))
    args = definition_args(job.arguments)
    if args not in ("", "{}"):
        parts.append(f"ARGS={quoted(args)}")
    parts += [f"{name}={quoted(value)}" for name, value in text_params if value]
    parts.append(f"PRIORITY={job.priority}")
    if job.status is Status.HELD:
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
    lines += [startjob(j) for j in parents_first(j for j in jobs if not j.parallelism)]
    return "\n".join(lines) + "\n"
