"""``fabricjobs init DIR``: what one node needs on a fresh host, and nothing else.

A commented ``config.ini`` (every key of :data:`~fabricjobs.config.KEYS` with what it does and
its default, written from the table so that it cannot miss one), a ``node.id`` and a jobs
folder with one example job (with ``--examples``, also the jobs the documentation's examples
use). The paths it sets are relative to the directory, so the directory
may be moved. It writes into an existing directory only files that are not there yet, and
refuses (changing nothing) when one is: an operator's config is never overwritten.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .config import KEYS, SECTIONS, Key
from .errors import ConfigError

#: What init sets beside the defaults (section, KEY) -> the value as written.
INIT_VALUES: Mapping[tuple[str, str], str] = {
    ("jobs", "USER_JOBS_DIR"): "jobs",
    ("jobs", "PROCESS_JOBS_DIR"): "process_jobs",
    ("store", "SQLITE_PATH"): "fabricjobs.db",
    ("node", "NODE_ID_FILE"): "node.id",
}

_SECTION_HELP = {
    "node": "This node. NAME defaults to the host name; give each node on a host its own (--name).",
    "jobs": "What this node runs and how (names as in Fabric's config.ini where Fabric has the key).",
    "heartbeat": "Liveness: a node is dead after INTERVAL x MISS without a visible beat (60 s by default); "
                 "its runs end themselves before that when it cannot write its heartbeat (self-fencing).",
    "store": "Where the jobs live. sqlite: one file, any number of nodes on this host. cassandra: see [cassandra].",
    "cassandra": "Used when [store] BACKEND = cassandra (pip install 'fabricjobs[cassandra]').",
    "metrics": "Prometheus metrics of this node (off unless PORT is set).",
    "web": "fabricjobs web: the HTTP API and the web console.",
}

NODE_ID = """\
# node.id: the logical names (affinities) this node answers to, with how many of their jobs it
# runs at once (docs/reference/node-id.md). One entry per line:  NAME:recommended [absolute]
#   HANDLE_MSG:5 10   up to 5 HANDLE_MSG jobs, 10 for jobs that waited CLAIM_EXCEPTIONAL_INTERVAL_SEC
#   ANY:0             no jobs without an affinity (ANY is on by default, up to K2JOBS_POOL_SIZE)
#   PRIORITIES:5-9    only jobs whose PRIORITY is in the range (default 0-9)
# Without an entry this node runs every job without an affinity.
"""

HELLO_JOB = '''\
"""An example job: STARTJOB USER_JOB NAME='Hello.hello' ARGS='{"who": "you"}'.

A job is a public function of a module in USER_JOBS_DIR; its ARGS bind to its parameters by
name, what it returns (JSON) is the job's Output, and what it logs JOBLOG shows
(docs/guides/writing-jobs.md).
"""

from fabricjobs.jobs.context import current_job


def hello(who: str = "world", times: int = 1):
    job = current_job()
    for i in range(times):
        if job.is_aborted():  # STOPJOB, or the node lost its lease
            raise InterruptedError(f"stopped after {i} greetings")
        job.logger.info("hello, %s (%d of %d)", who, i + 1, times)
    return {"greeted": who, "times": times}
'''


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ", ".join(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _key_lines(key: Key, values: Mapping[tuple[str, str], str]) -> list[str]:
    lines = textwrap.wrap(key.help, width=94, initial_indent="# ", subsequent_indent="# ")
    given = values.get((key.section, key.name))
    if given is not None:
        return [*lines, f"{key.name} = {given}"]
    default = _text(key.default)
    return [*lines, f"{key.name} = {default}" if default else f"# {key.name} ="]


def render_config(values: Mapping[tuple[str, str], str] = INIT_VALUES) -> str:
    """A config.ini documenting every key: its help as a comment, its default (a key whose
    default is empty left commented out), and ``values`` set."""
    out = ["# fabricjobs configuration (fabricjobs init). Every key is optional; the value shown is",
           "# the default unless set below by init. Keys are case-insensitive; a bad value stops",
           "# start-up with a message naming it. Relative paths are relative to this file.",
           "# All keys: docs/reference/configuration.md; `fabricjobs config` prints what is in effect."]
    for section in SECTIONS:
        out += ["", f"[{section}]"]
        out += textwrap.wrap(_SECTION_HELP.get(section, ""), width=94, initial_indent="# ", subsequent_indent="# ")
        for key in KEYS:
            if key.section == section:
                out += _key_lines(key, values)
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Scaffold:
    """The files of a node directory, relative to it, with their modes."""

    files: Mapping[str, tuple[str, int]]
    dirs: Mapping[str, int]


#: The example jobs the documentation's statements use (``init --examples``), with their modes.
EXAMPLES = {"jobs/Customer.py": 0o644, "jobs/Files.py": 0o644, "process_jobs/echoArg.sh": 0o755}


def examples_path() -> Path:
    """The packaged examples of a wheel install, else the repository's (editable install)."""
    package = Path(__file__).resolve().parent
    packaged = package / "_examples"
    return packaged if packaged.is_dir() else package.parent / "examples"


def scaffold(examples: bool = False) -> Scaffold:
    """With ``examples``, also the example jobs of the guides and a directory for the
    listener's (LISTENER_ROOT), so that every example in the documentation runs as written."""
    files = {"node.id": (NODE_ID, 0o644), "jobs/Hello.py": (HELLO_JOB, 0o644)}
    dirs = {"": 0o755, "jobs": 0o755, "process_jobs": 0o755}
    values = dict(INIT_VALUES)
    if examples:
        source = examples_path()
        files |= {name: ((source / name).read_text(encoding="utf-8"), mode) for name, mode in EXAMPLES.items()}
        dirs["listen"] = 0o755
        values[("jobs", "LISTENER_ROOT")] = "listen"
    return Scaffold(files={"config.ini": (render_config(values), 0o600), **files}, dirs=dirs)


def init_directory(directory: str | os.PathLike, examples: bool = False) -> list[Path]:
    """Write the scaffold into ``directory`` (made if missing); the files written. Refuses, with
    nothing written, when any of them exists. The jobs directories are writable by their owner
    only: a node refuses job directories others may write to."""
    root = Path(directory).expanduser().absolute()
    plan = scaffold(examples)
    clash = [name for name in plan.files if (root / name).exists()]
    if clash:
        raise ConfigError(f"{root} already holds {', '.join(clash)}: fabricjobs init writes a new node directory "
                          "and never overwrites one (move them away, or choose another directory)")
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is not a directory")
    written: list[Path] = []
    try:
        for name, mode in plan.dirs.items():
            path = root / name
            if not path.exists():  # a directory that was there keeps its mode
                path.mkdir(parents=True)
                os.chmod(path, mode)
        for name, (text, mode) in plan.files.items():
            path = root / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(path, mode)  # whatever the umask
            written.append(path)
    except OSError as exc:  # (a directory this user may not write, a read-only or full disk)
        done = f"; written before it failed: {', '.join(str(p) for p in written)}" if written else ""
        raise ConfigError(f"cannot write {exc.filename or root}: {exc.strerror or exc}{done}") from None
    return written
