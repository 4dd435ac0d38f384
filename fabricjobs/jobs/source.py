"""What a job module's source says, read without running it, and a job module imported from
its source alone.

The shell (STARTJOB) checks a USER_JOB against its module without importing it: whoever may
STARTJOB must not make the shell's process run operator code. So the function's existence,
its ``@job`` mark and its parameters are read from the parsed source (:mod:`ast`), once per
version of the file.

A worker imports a job module from its source, never from a bytecode cache: Python trusts a
cached ``.pyc`` whose source has the same size and the same modification time to the second,
so a same-size edit within a second of the last import ran the old code.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..errors import ValidationError


class JobResolutionError(ValidationError):
    """A job NAME does not name code this cluster may run."""


@dataclass(frozen=True)
class Parameters:
    """The parameters of a job function as its source declares them."""

    names: tuple[str, ...]
    any_key: bool  # **kwargs, or it reads its ARGS itself (current_job()): any key may come


def module_source(module: str) -> Path | None:
    """The source file of an installed module, found the way the import system would find it
    but without running anything: no package's ``__init__`` is imported (find_spec of
    ``pkg.mod`` imports ``pkg``)."""
    from importlib.machinery import PathFinder

    path = None
    spec = None
    for part in module.split("."):
        spec = PathFinder.find_spec(part, path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
        if path is None and part != module.split(".")[-1]:
            return None  # a plain module has no submodules
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError as exc:
        raise JobResolutionError(f"cannot read {path}: {exc}") from None


def defines_function(path: Path, func: str) -> bool:
    return func in _top_level_functions(str(path), _mtime(path))


def declares_job(path: Path, func: str) -> bool:
    """Whether ``func`` is decorated ``@job`` in the source at ``path``."""
    return func in _declared_functions(str(path), _mtime(path))


def parameters(path: Path, func: str) -> Parameters | None:
    """The parameters of top-level function ``func`` of the source at ``path``; None where
    the source cannot say (no such function, or a decorator that may change its signature)."""
    found = _parameters(str(path), _mtime(path)).get(func)
    if found is not None and not found.any_key and _imports_a_reader(path):
        return Parameters(found.names, True)
    return found


def _imports_a_reader(path: Path) -> bool:
    """Whether the module imports, directly or through others, a module beside it (a helper
    in the jobs folder) that may read a run's ARGS itself: then which job function calls that
    code is not read here, and every one may take any key. Each file is read once per version."""
    seen: set[Path] = {path}
    todo = [path]
    while todo:
        module = todo.pop()
        for sibling in _sibling_imports(str(module), _mtime(module)):
            if sibling in seen or not sibling.is_file():
                continue
            seen.add(sibling)
            if _reads_args(str(sibling), _mtime(sibling)):
                return True
            todo.append(sibling)
    return False


@functools.lru_cache(maxsize=256)
def _sibling_imports(path: str, mtime_ns: int) -> tuple[Path, ...]:
    """The files of the jobs folder that the module at ``path`` imports: beside it, in its
    package (``from . import``, ``from .. import``) or from the folder's top (``import
    pkg.helpers`` in ``pkg/job.py``)."""
    here = Path(path).parent
    top = here
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent  # the jobs folder: the first directory above the packages
    wanted: list[tuple[Path, str]] = []  # (where the name is looked up, dotted name)
    for n in ast.walk(_module(path)):
        if isinstance(n, ast.Import):
            wanted += [(base, a.name) for a in n.names for base in (here, top)]
        elif isinstance(n, ast.ImportFrom):
            up = here
            for _ in range(max(n.level - 1, 0)):
                up = up.parent  # (from .. import: the package above)
            bases = (here, top) if n.level == 0 else (up,)
            module = n.module or ""
            for base in bases:
                wanted += [(base, module)] if module else []
                wanted += [(base, f"{module}.{a.name}" if module else a.name) for a in n.names]
    found: list[Path] = []
    for base, name in wanted:
        place = base.joinpath(*name.split("."))
        found += [p for p in (place.with_suffix(".py"), place / "__init__.py") if p.is_file() and p not in found]
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _reads_args(path: str, mtime_ns: int) -> bool:
    """Whether code in the module at ``path`` may read a run's ARGS (see _module_reads_args)."""
    try:
        return _module_reads_args(_module(path))
    except JobResolutionError:
        return True  # a helper that cannot be read may do anything


@functools.lru_cache(maxsize=256)
def _top_level_functions(path: str, mtime_ns: int) -> frozenset[str]:
    """Names of a module's top-level functions, parsed once per file version."""
    return frozenset(n.name for n in _function_defs(path))


def _function_defs(path: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """A module's top-level function definitions, from its source (nothing is run)."""
    return _defs_in(_module(path))


def _defs_in(module: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _module(path: str) -> ast.Module:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        raise JobResolutionError(f"cannot read {path}: {exc}") from None


@functools.lru_cache(maxsize=256)
def _declared_functions(path: str, mtime_ns: int) -> frozenset[str]:
    """Top-level functions decorated ``@job`` (or ``@<module>.job``), read from the source
    without running it; the worker checks the mark the decorator really set."""
    return frozenset(n.name for n in _function_defs(path) if any(_names_job(d) for d in n.decorator_list))


@functools.lru_cache(maxsize=256)
def _parameters(path: str, mtime_ns: int) -> dict[str, Parameters | None]:
    out: dict[str, Parameters | None] = {}
    module = _module(path)
    anywhere = _module_reads_args(module)
    for node in _defs_in(module):
        if not all(_names_job(d) for d in node.decorator_list):
            out[node.name] = None  # another decorator may take other parameters
            continue
        a = node.args
        out[node.name] = Parameters(tuple(p.arg for p in (*a.args, *a.kwonlyargs)),
                                    a.kwarg is not None or anywhere or _may_read_args(node))
    return out


_ARGS_ATTRIBUTES = frozenset({"args", "arguments", "session_scope"})


def _module_reads_args(module: ast.Module) -> bool:
    """Whether code anywhere in the module may read a run's ARGS other than through the job
    function's own handle (a helper or a class method that asks ``current_job().args``, or
    ``current_job`` reached under another name): then every job function of the module may
    take any key, since which of them calls that code is not read here."""
    mentions = False
    for n in ast.walk(module):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("fabricjobs"):
            if any(alias.name == "current_job" and alias.asname not in (None, "current_job") for alias in n.names):
                return True  # current_job under another name
            if any(alias.name == "context" for alias in n.names):
                return True  # the context module itself: ctx.current_job()
        elif isinstance(n, ast.Import) and any(a.name.startswith("fabricjobs.jobs") for a in n.names):
            return True
        elif isinstance(n, ast.Name) and n.id == "current_job":
            mentions = True
    return mentions and any(isinstance(n, ast.Attribute) and n.attr in _ARGS_ATTRIBUTES for n in ast.walk(module))


#: What a job may use of its ``current_job()`` handle without reading its ARGS (jobs/context.py).
_ATTRIBUTES_BESIDE_ARGS = frozenset({"logger", "is_aborted", "isAborted", "progress", "key", "epoch", "node", "due",
                                     "task_index", "task_count"})


def _may_read_args(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the function may read its ARGS through ``current_job()``: it does unless every
    use of the job handle is one of the attributes above (``current_job().logger``, or
    ``job = current_job()`` then ``job.is_aborted()``). A handle passed on or stored anywhere
    else may be read by other code, so that counts as reading."""
    parents = {child: parent for parent in ast.walk(func) for child in ast.iter_child_nodes(parent)}

    def used_for_attributes_only(expr: ast.AST) -> bool:
        parent = parents.get(expr)
        return isinstance(parent, ast.Attribute) and parent.value is expr and parent.attr in _ATTRIBUTES_BESIDE_ARGS

    handles: set[str] = set()  # names bound to current_job() by a plain assignment
    calls = []
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and n.id == "current_job":
            call = parents.get(n)
            if not (isinstance(call, ast.Call) and call.func is n and not call.args and not call.keywords):
                return True  # the function itself handed on, or aliased
            calls.append(call)
    for call in calls:
        if used_for_attributes_only(call):
            continue
        assign = parents.get(call)
        if isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name):
            handles.add(assign.targets[0].id)
            continue
        return True
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and n.id in handles and isinstance(n.ctx, ast.Load) and not used_for_attributes_only(n):
            return True
        if isinstance(n, (ast.Global, ast.Nonlocal)) and handles & set(n.names):
            return True
    return False


def _names_job(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Name) and decorator.id == "job") or \
        (isinstance(decorator, ast.Attribute) and decorator.attr == "job")


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Compiles the module from its source every time: no bytecode cache is read or written."""

    def get_code(self, fullname: str):
        return self.source_to_code(self.get_data(self.path), self.path)


def import_fresh(name: str, path: Path) -> ModuleType:
    """Import module ``name`` (its parent package imported already, or none) from the source
    file ``path`` (a package's ``__init__.py`` included)."""
    package = [str(path.parent)] if path.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location(name, path, loader=_SourceOnly(name, str(path)),
                                                  submodule_search_locations=package)
    assert spec is not None and spec.loader is not None  # (a loader is given)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    parent, _, leaf = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], leaf, module)
    return module
