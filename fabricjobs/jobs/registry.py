"""Which code a job NAME may run (docs/guides/writing-jobs.md): only what the operator put there.

USER_JOB names resolve, in this order, to

1. an entry point of the ``fabricjobs.jobs`` group with exactly that name;
2. ``package.module:function`` when the module is, or is inside, a package listed in
   ``[jobs] USER_JOB_MODULES`` (an allowlist, empty by default);
3. ``Module.function`` (or ``pkg.Module.function``) in ``[jobs] USER_JOBS_DIR``, the seed's
   ``Customer.userJob1`` style: function ``userJob1`` of ``Customer.py`` in that directory.

Anything else (``os:system``, ``subprocess:run``, ``builtins:eval``) is refused. PROCESS names
resolve to an executable file inside ``[jobs] PROCESS_JOBS_DIR``; ``..``, absolute paths
outside it and symlinks leading out of it are refused.

:meth:`JobCatalog.check` validates a name without importing or running anything (the shell
calls it at STARTJOB); :meth:`JobCatalog.load_user_job` imports (only in a worker).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..config import Config
from ..model import JobType
from .context import JOB_MARK
from .given_keys import given_by_node
from .limits import ARG_MAX_BYTES, PROCESS_ARGS_KEYS, ProcessLimits, check_arguments as check_limit_arguments, process_argv  # noqa: F401 (re-exported)
from .source import (JobResolutionError, declares_job, defines_function as _defines_function, import_fresh,
                     module_source as _module_source, parameters)

ENTRY_POINT_GROUP = "fabricjobs.jobs"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_load_lock = threading.Lock()
_loaded: dict[tuple, tuple] = {}  # (jobs dir, allowlist, name) -> (function, source file, its version)
_imported: dict[str, tuple[int, int] | None] = {}  # job module -> its file's version when imported here
_CHECK_TRUST_SEC = 1.0
_checked: dict[tuple, float] = {}  # (catalog, type, name) -> trusted until (monotonic)


@dataclass(frozen=True)
class JobCatalog:
    user_jobs_dir: str
    user_job_modules: tuple[str, ...]
    process_jobs_dir: str
    listener_root: str = ""
    process_limits: ProcessLimits = ProcessLimits()
    require_decorator: bool = False  # only functions declared with @job (context.job) are jobs
    cleanup_root: str = ""  # DELETE_ON_SUCCESS files must be under it ('' : none may be given)

    @classmethod
    def from_config(cls, config: Config) -> "JobCatalog":
        return cls(
            config.get("jobs", "USER_JOBS_DIR"),
            tuple(config.get("jobs", "USER_JOB_MODULES")),
            config.get("jobs", "PROCESS_JOBS_DIR"),
            config.get("jobs", "LISTENER_ROOT"),
            ProcessLimits(config.get("jobs", "PROCESS_TIME_LIMIT_SEC"), config.get("jobs", "PROCESS_MEMORY_MB"),
                          tuple(config.get("jobs", "PROCESS_ENV"))),
            config.get("jobs", "REQUIRE_JOB_DECORATOR"),
            config.get("jobs", "CLEANUP_ROOT"),
        )

    # -- checking (no user code runs) ----------------------------------------------------------

    def check_directories(self) -> None:
        """Refuse (ConfigError) a USER_JOBS_DIR or PROCESS_JOBS_DIR that other users may write
        to: whoever can add a file there can have every node run it. A node checks this at
        start; it does not start on an unsafe directory, rather than warn and run it anyway."""
        from ..errors import ConfigError

        for key, directory in (("USER_JOBS_DIR", self.user_jobs_dir), ("PROCESS_JOBS_DIR", self.process_jobs_dir)):
            if not directory:
                continue
            try:
                mode = os.stat(directory).st_mode
            except OSError as exc:  # every job of it is refused until it is there: said once, where an operator looks
                logging.getLogger("fabricjobs.node").warning(
                    "[jobs] %s = %s cannot be read (%s): its jobs are refused until it can", key, directory,
                    exc.strerror or exc)
                continue
            if mode & 0o022:
                raise ConfigError(f"[jobs] {key} = {directory} is {_writable_by(mode)}: anyone who can write "
                                  f"there could make this node run code; chmod go-w {directory}")
            loose = _shared_folders(Path(directory))
            if loose:  # their jobs are refused when started: said once here, where an operator looks
                shown = ", ".join(str(p) for p in loose[:5]) + (f" and {len(loose) - 5} more" if len(loose) > 5 else "")
                logging.getLogger("fabricjobs.node").warning(
                    "[jobs] %s has folders others may write to (%s): the jobs in them are refused; chmod go-w them",
                    key, shown)

    def check(self, type: str, name: str) -> None:
        """Raise JobResolutionError unless ``name`` resolves. A name that resolved is trusted
        for a second (a bulk submit checks it once, not once per job; a file removed meanwhile
        only fails at run time, like one removed after the STARTJOB)."""
        key = (self, type, name)
        now = time.monotonic()
        if _checked.get(key, 0.0) > now:
            return
        self._check(type, name)
        if len(_checked) > 4096:
            _checked.clear()
        _checked[key] = now + _CHECK_TRUST_SEC

    def _check(self, type: str, name: str) -> None:
        if type == JobType.USER_JOB:
            self._user_job_origin(name)
        elif type == JobType.INTERFACE_LISTENER:  # a listener's NAME is the user job it starts per file
            try:
                self._user_job_origin(name)
            except JobResolutionError as exc:
                raise JobResolutionError(f"INTERFACE_LISTENER {name!r}: its NAME is the USER_JOB each file runs; "
                                         f"{exc}") from None
        elif type == JobType.PROCESS:
            self.process_path(name)

    def check_listener(self, args_text: str | None, must_exist: bool = True) -> tuple[Path, str]:
        """An INTERFACE_LISTENER's ARGS: {"path": "<dir under LISTENER_ROOT>", "pattern": "*.csv",
        "settle_sec": 0.5, "poll_sec": 1}; the two times are checked against LISTENER_TIMES.
        ``must_exist`` False: the directory may be missing for now (a listener's run waits for it)."""
        try:
            args = json.loads(args_text or "{}")
        except ValueError:
            raise JobResolutionError("INTERFACE_LISTENER ARGS must be a JSON object") from None
        if not isinstance(args, dict) or not isinstance(args.get("path"), str) or not args["path"]:
            raise JobResolutionError('INTERFACE_LISTENER needs ARGS=\'{"path": "<directory>", "pattern": "*.csv"}\'')
        pattern = args.get("pattern", "*")
        if not isinstance(pattern, str) or not pattern or "/" in pattern:
            raise JobResolutionError("INTERFACE_LISTENER pattern must be a file name pattern such as *.csv")
        for key, (low, high) in LISTENER_TIMES.items():
            value = args.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise JobResolutionError(f"INTERFACE_LISTENER {key} must be a number of seconds from {low:g} "
                                         f"to {high:g}, not {json.dumps(value)[:40]}")
        return self.listener_dir(args["path"], must_exist), pattern

    def check_process_arguments(self, args_text: str | None) -> None:
        """A PROCESS job's ARGS, checked at STARTJOB as the worker will use them."""
        try:
            args = json.loads(args_text or "{}")
        except (ValueError, RecursionError):
            return  # the parser refused it already; the worker reports it if it got here
        if isinstance(args, dict):
            unknown = sorted(k for k in args if not k.isdigit() and k not in PROCESS_ARGS_KEYS | given_by_node(args))
            if unknown:  # a mistyped limit ("time_limit": 30) would run the job without it
                raise JobResolutionError(
                    f"PROCESS ARGS key {unknown[0]!r} is neither an argument position (\"0\", \"1\", ...) nor one of "
                    f"{', '.join(sorted(PROCESS_ARGS_KEYS - {'session_scope'}))}")
            process_argv("", args)
            check_limit_arguments(args)

    def listener_dir(self, path: str, must_exist: bool = True) -> Path:
        if not self.listener_root:
            raise JobResolutionError("INTERFACE_LISTENER jobs are disabled: set [jobs] LISTENER_ROOT to the directory they may watch")
        root = Path(self.listener_root).resolve()
        if ".." in Path(path).parts:
            raise JobResolutionError(f"INTERFACE_LISTENER path {path!r} refused: '..' is not allowed")
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise JobResolutionError(f"INTERFACE_LISTENER path {path!r} refused: it is outside LISTENER_ROOT ({root})")
        if must_exist and not target.is_dir():
            raise JobResolutionError(f"INTERFACE_LISTENER path {path!r}: no such directory under LISTENER_ROOT ({root})")
        return target

    def cleanup_files(self, listed: str) -> list[Path]:
        """DELETE_ON_SUCCESS's files (comma-separated, relative to CLEANUP_ROOT or absolute
        under it), each checked to be under the root: a node deletes nothing else."""
        paths = [p.strip() for p in listed.split(",") if p.strip()]
        if paths and not self.cleanup_root:
            raise JobResolutionError("DELETE_ON_SUCCESS is disabled: set [jobs] CLEANUP_ROOT to the directory its files may be in")
        root = Path(self.cleanup_root).resolve() if paths else Path("/")
        out = []
        for path in paths:
            if ".." in Path(path).parts:
                raise JobResolutionError(f"DELETE_ON_SUCCESS file {path!r} refused: '..' is not allowed")
            target = root / path  # an absolute path stays as it is
            if root not in target.parent.resolve().parents and target.parent.resolve() != root:
                raise JobResolutionError(f"DELETE_ON_SUCCESS file {path!r} refused: it is outside CLEANUP_ROOT ({root})")
            out.append(target.parent.resolve() / target.name)
        return out

    def _user_job_origin(self, name: str, verify: bool = True) -> tuple[str, Any]:
        ep = _entry_points().get(name)
        if ep is not None:
            return "entry_point", ep
        if ":" in name:
            module, _, func = name.partition(":")
            if not all(_IDENT.match(p) for p in module.split(".")) or not _IDENT.match(func):
                raise JobResolutionError(f"USER_JOB name {name!r} is not of the form package.module:function")
            if not self._allowed_module(module):
                allowed = ", ".join(self.user_job_modules) or "empty"
                raise JobResolutionError(
                    f"USER_JOB {name!r} refused: module {module!r} is not in the [jobs] USER_JOB_MODULES "
                    f"allowlist ({allowed}); only code the operator installed may run"
                )
            _refuse_private(name, func)
            source = _module_source(module)
            if source is not None:
                _refuse_shared(f"USER_JOB {name!r}", source)  # by the worker too: before its import runs the file
            if verify:
                if source is None:
                    raise JobResolutionError(f"USER_JOB {name!r}: module {module!r} is not installed")
                if not _defines_function(source, func):
                    raise JobResolutionError(f"USER_JOB {name!r} refused: {func!r} is not a function defined in "
                                             f"{module} ({source}); only its own top-level functions may run")
                self._check_declared(name, source, func)
            return "module", (module, func)
        return "dir", self._jobs_dir_target(name, verify)

    def _check_declared(self, name: str, source: Path, func: str) -> None:
        if self.require_decorator and not declares_job(source, func):
            raise JobResolutionError(_UNDECLARED.format(name=name, func=func))

    def check_user_arguments(self, name: str, args_text: str | None, given: Iterable[str] = ()) -> None:
        """Refuse ARGS keys that no parameter of USER_JOB ``name``'s function takes, where its
        source says what it takes (no ``**kwargs``, no ``current_job()`` reading its ARGS
        itself): a mistyped key would run the job with the parameter's default. ``given``:
        keys the caller adds, which a function need not take (a listener's, to its files'
        jobs). Nothing is imported."""
        try:
            args = json.loads(args_text or "{}")
        except (ValueError, RecursionError):
            return  # the parser refused it already
        keys = set(args) - {"session_scope", *given, *given_by_node(args)} if isinstance(args, dict) else set()
        if not keys:
            return
        try:
            where = self._function_source(name)
        except JobResolutionError:
            return  # (UPDATEJOB of a job whose code is gone: its run says so)
        takes = parameters(*where) if where is not None else None
        unknown = sorted(keys - set(takes.names)) if takes is not None and not takes.any_key else []
        if unknown:
            assert takes is not None and where is not None
            listed = ", ".join(takes.names) or "none"
            raise JobResolutionError(
                f"USER_JOB {name!r}: ARGS key {unknown[0]!r} is not a parameter of {where[1]}() (its parameters: "
                f"{listed})" + (f"; nor are {', '.join(map(repr, unknown[1:]))}" if unknown[1:] else "")
                + "; a function that takes other keys declares **kwargs")

    def _function_source(self, name: str) -> tuple[Path, str] | None:
        """The source file that defines USER_JOB ``name``'s function, and the function's name."""
        origin, target = self._user_job_origin(name, verify=False)
        if origin == "entry_point":
            module, _, func = target.value.partition(":")
            source = _module_source(module.strip()) if func.strip().isidentifier() else None
            return (source, func.strip()) if source is not None else None
        if origin == "module":
            source = _module_source(target[0])
            return (source, target[1]) if source is not None else None
        root, module, func = target
        found = _dir_module_file(root, module)
        return (found, func) if found is not None else None

    def _allowed_module(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.user_job_modules)

    def _jobs_dir_target(self, name: str, verify: bool = True) -> tuple[Path, str, str]:
        """(root, module, function) of a ``Module.function`` name. ``verify`` parses the module
        to check that the function is there without running it (STARTJOB); a worker, which
        imports the module anyway, skips that (a fresh worker's first run is ~3 ms sooner)."""
        parts = name.split(".")
        if len(parts) < 2 or not all(_IDENT.match(p) for p in parts):
            raise JobResolutionError(
                f"unknown USER_JOB {name!r}: expected Module.function from USER_JOBS_DIR, "
                "package.module:function from USER_JOB_MODULES, or a fabricjobs.jobs entry point"
            )
        if not self.user_jobs_dir:
            raise JobResolutionError(
                f"unknown USER_JOB {name!r}: no entry point has that name and [jobs] USER_JOBS_DIR is not set"
            )
        root = Path(self.user_jobs_dir)
        *mod_parts, func = parts
        _refuse_private(name, func)
        candidate = _dir_module_file(root, ".".join(mod_parts))
        if candidate is None:
            raise JobResolutionError(f"unknown USER_JOB {name!r}: no {'/'.join(mod_parts)}.py in USER_JOBS_DIR ({root})")
        _refuse_shared(f"USER_JOB {name!r}", candidate, root)
        if verify:
            if not _defines_function(candidate, func):
                raise JobResolutionError(f"unknown USER_JOB {name!r}: {candidate} defines no top-level "
                                         f"function {func!r} (a name it imports is not a job)")
            self._check_declared(name, candidate, func)
        return root, ".".join(mod_parts), func

    def process_path(self, name: str) -> Path:
        if not self.process_jobs_dir:
            raise JobResolutionError("PROCESS jobs are disabled: set [jobs] PROCESS_JOBS_DIR to the directory of allowed executables")
        if not name or "\x00" in name:
            raise JobResolutionError("PROCESS NAME must name an executable in PROCESS_JOBS_DIR")
        root = Path(self.process_jobs_dir).resolve()
        if ".." in Path(name).parts:
            raise JobResolutionError(f"PROCESS {name!r} refused: '..' is not allowed in a process name")
        target = (root / name).resolve()  # absolute names stay absolute; symlinks are followed
        if target != root and root not in target.parents:
            raise JobResolutionError(f"PROCESS {name!r} refused: it is outside PROCESS_JOBS_DIR ({root})")
        if not target.is_file():
            raise JobResolutionError(f"PROCESS {name!r}: no such file in PROCESS_JOBS_DIR ({root})")
        if not os.access(target, os.X_OK):
            raise JobResolutionError(f"PROCESS {name!r}: {target} is not executable")
        _refuse_shared(f"PROCESS {name!r}", target, root)
        return target

    # -- loading (worker side) -----------------------------------------------------------------

    def load_user_job(self, name: str) -> Callable:
        """The job's function, resolved once per worker process and version of its module's
        file (docs/guides/writing-jobs.md): a run uses the code on disk when it starts. A module whose file
        changed since it was imported is imported afresh, also for a name not loaded before (a
        function the deploy added); modules it imports in turn are not: a worker that is
        recycled, or a node restarted, picks those up."""
        cache_key = (self.user_jobs_dir, self.user_job_modules, name)
        cached = _loaded.get(cache_key)
        if cached is not None:
            fn, source, version = cached
            if source is None or _version(source) == version:
                return fn
            _forget_module(fn.__module__)
        origin, target = self._user_job_origin(name, verify=False)
        with _load_lock:
            if origin == "entry_point":
                fn = target.load()  # an EntryPoint
            elif origin == "module":
                module, func = target
                try:
                    _drop_if_changed(module)
                    loaded = _note_imported(_import_installed(module))
                except Exception as exc:
                    raise JobResolutionError(f"USER_JOB {name!r}: cannot import {module}: "
                                             f"{type(exc).__name__}: {exc}") from None
                fn = _own_function(name, loaded, func, self.require_decorator)
            else:
                root, module, func = target
                try:
                    loaded = _import_from_dir(root, module)
                except Exception as exc:  # a syntax error, or the module's own code raising on import
                    raise JobResolutionError(f"USER_JOB {name!r}: cannot import {module}.py: "
                                             f"{type(exc).__name__}: {exc}") from None
                fn = _own_function(name, loaded, func, self.require_decorator)
        if not callable(fn):
            raise JobResolutionError(f"USER_JOB {name!r} is not a function")
        source = getattr(sys.modules.get(fn.__module__), "__file__", None) if origin != "entry_point" else None
        if len(_loaded) < 10_000:
            _loaded[cache_key] = (fn, source, _version(source) if source else None)
        return fn


#: A listener's times in seconds, (lowest, highest): a poll_sec of 0 spun a core.
LISTENER_TIMES = {"settle_sec": (0.0, 3600.0), "poll_sec": (0.05, 3600.0)}

def _import_installed(module: str):
    """An allowlisted module: its packages imported as usual, itself from its source."""
    if module in sys.modules:
        return sys.modules[module]
    parent = module.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    source = _module_source(module)
    return import_fresh(module, source) if source is not None else importlib.import_module(module)


def _version(path: str) -> tuple[int, int] | None:
    """A source file's version, as the import system would see it changed: (mtime_ns, size)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _drop_if_changed(module: str) -> None:
    """Forget an imported job module whose file is not the version this process imported (or
    that something else imported, at a version unknown), so that the import that follows
    reads the file on disk: a warm worker may hold a module from before a deploy."""
    loaded = sys.modules.get(module)
    source = getattr(loaded, "__file__", None)
    if source is not None and (module not in _imported or _imported[module] != _version(source)):
        _forget_module(module)


def _note_imported(module):
    """Remember which version of its file ``module`` was imported from (see _drop_if_changed)."""
    source = getattr(module, "__file__", None)
    if source is not None and module.__name__ not in _imported:
        _imported[module.__name__] = _version(source)
    return module


def _forget_module(module: str) -> None:
    """Drop an imported job module, so that the next load imports its file afresh."""
    sys.modules.pop(module, None)
    _imported.pop(module, None)
    importlib.invalidate_caches()
    for key in [k for k, (fn, _s, _v) in _loaded.items() if fn.__module__ == module]:
        del _loaded[key]


def _writable_by(mode: int) -> str:
    who = " and ".join(w for w, bit in (("its group", 0o020), ("every user", 0o002)) if mode & bit)
    return f"writable by {who} (mode {mode & 0o7777:o})"


def _shared_folders(root: Path, most: int = 10_000) -> list[Path]:
    """Folders under ``root`` (looked at up to ``most`` of them) that their group or every user
    may write: _refuse_shared refuses the jobs in them."""
    found: list[Path] = []
    for n, (folder, subfolders, _files) in enumerate(os.walk(root)):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        if n >= most:
            break
        try:
            if n and os.stat(folder).st_mode & 0o022:
                found.append(Path(folder))
        except OSError:
            continue
    return found


def _refuse_shared(what: str, path: Path, root: Path | None = None) -> None:
    """Refuse (``what``: the job, as a message names it) a job file that others may write to, as
    the node refuses such a job directory (check_directories): whoever can change it chooses
    what this node runs. Under ``root`` (the jobs directory) so may whoever can write a
    directory on the way to it (they could put another file in its place), or a package's
    ``__init__.py`` that importing the job runs first."""
    places = [path]
    if root is not None:
        for parent in path.parents:
            if parent == root or root not in parent.parents:
                break
            places += [parent, parent / "__init__.py"]
    for place in places:
        try:
            mode = place.stat().st_mode
        except OSError:
            continue  # gone, or no __init__.py: the caller's own checks say what that means
        if mode & 0o022:
            raise JobResolutionError(f"{what} refused: {place} is {_writable_by(mode)}: anyone who can write it "
                                     f"could make this node run code; chmod go-w {place}")


def _refuse_private(name: str, func: str) -> None:
    if func.startswith("_"):
        raise JobResolutionError(f"USER_JOB {name!r} refused: {func!r} is private (a name that starts with '_' "
                                 "is a module's helper, never a job)")


def _own_function(name: str, module, func: str, declared: bool = False) -> Callable:
    """``module.func`` if it is a plain function defined in ``module`` itself: checked again on
    the node's own configuration, whatever the shell that sent the STARTJOB checked. A name the
    module imported (``from subprocess import run``, ``system = os.system``), a class, or any
    other callable attribute is refused."""
    fn = getattr(module, func, None)  # (a private name was refused when the name was resolved)
    if fn is None:
        raise JobResolutionError(f"unknown USER_JOB {name!r}: module {module.__name__!r} has no function {func!r}")
    if not inspect.isfunction(fn) or fn.__module__ != module.__name__:
        raise JobResolutionError(f"USER_JOB {name!r} refused: {func!r} is not a function defined in "
                                 f"{module.__name__} itself; only its own top-level functions may run")
    if declared and getattr(fn, JOB_MARK, False) is not True:
        raise JobResolutionError(_UNDECLARED.format(name=name, func=func))
    return fn


_UNDECLARED = ("USER_JOB {name!r} refused: {func!r} is not declared a job (REQUIRE_JOB_DECORATOR is on: "
               "decorate it with @job from fabricjobs.jobs.context)")


def _import_from_dir(root: Path, module: str):
    """Import ``module`` from the jobs directory under a private name prefix, so a job module
    called ``json`` or ``os`` can never shadow the standard library. One prefix per directory:
    a process that loads jobs from two directories (a test run, a client) gets each module
    from its own."""
    base = "fabricjobs_userjobs" + ("" if _first_root.setdefault("root", str(root)) == str(root)
                                    else "_" + hashlib.sha1(str(root).encode()).hexdigest()[:12])
    qualified = f"{base}.{module}"
    _drop_if_changed(qualified)
    if qualified in sys.modules:
        return sys.modules[qualified]
    pkg = sys.modules.get(base)
    if pkg is None:
        spec = importlib.util.spec_from_loader(base, loader=None, is_package=True)
        assert spec is not None  # a spec without a loader is always made
        pkg = importlib.util.module_from_spec(spec)
        pkg.__path__ = [str(root)]
        sys.modules[base] = pkg
    *parents, leaf = module.split(".")
    if parents:  # a package in the directory: imported as usual; the job's own module from its source
        importlib.import_module(f"{base}.{'.'.join(parents)}")
    found = _dir_module_file(root, module)
    if found is None:
        raise ModuleNotFoundError(f"no {'/'.join(module.split('.'))}.py in {root}")
    return _note_imported(import_fresh(qualified, found))


def _dir_module_file(root: Path, module: str) -> Path | None:
    """The source of ``Module`` (or ``pkg.Module``) in a jobs directory: its .py file, or its
    package's __init__.py."""
    base = root.joinpath(*module.split("."))
    return next((c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()), None)


_first_root: dict[str, str] = {}  # the jobs directory a process loads first keeps the plain prefix


@functools.lru_cache(maxsize=1)
def _entry_points() -> dict:
    """Entry points are read once per process (installing new ones needs a restart)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
