"""ARGS to a user function's parameters (docs/guides/writing-jobs.md).

Keys bind by name and are converted to the annotated type, so the seed's
``userJob1(int loopsIterationCount)`` receives ``'{"loopsIterationCount":"2000"}'`` as 2000.
A missing parameter or a failed conversion is a :class:`BindError`: the run fails at once,
without retry (retrying cannot fix the arguments).
"""

from __future__ import annotations

import inspect
import json
import typing
import weakref
from typing import Any, Callable

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class BindError(Exception):
    pass


def _shape(fn: Callable) -> tuple[inspect.Signature, dict[str, Any]]:
    """A function's signature and type hints, worked out once per function object (a worker
    runs the same job function many times; a changed module gives a new function object)."""
    try:
        return _shapes[fn]
    except (KeyError, TypeError):
        pass
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise BindError(f"cannot inspect {fn!r}: {exc}") from None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    try:
        _shapes[fn] = (sig, hints)
    except TypeError:  # not weak-referenceable: just not cached
        pass
    return sig, hints


_shapes: "weakref.WeakKeyDictionary[Callable, tuple[inspect.Signature, dict[str, Any]]]" = weakref.WeakKeyDictionary()


def bind_arguments(fn: Callable, args: dict[str, Any], given: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
    """``given``: values the run itself supplies (a parallel job's ``task_index`` and
    ``task_count``), bound to parameters so named, before ARGS."""
    sig, hints = _shape(fn)
    given = given or {}
    kwargs: dict[str, Any] = {}
    takes_var_kw = False
    for name, param in sig.parameters.items():
        if param.kind is param.VAR_KEYWORD:
            takes_var_kw = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        if name in given:
            kwargs[name] = given[name]
        elif name in args:
            kwargs[name] = convert(args[name], hints.get(name, param.annotation), name)
        elif param.default is param.empty:
            raise BindError(f"missing argument {name!r}: ARGS has no key {name!r}")
    if takes_var_kw:
        for k, v in args.items():
            if k not in kwargs and k != "session_scope" and k.isidentifier():
                kwargs[k] = v
    return [], kwargs


def convert(value: Any, annotation: Any, name: str) -> Any:
    target = _plain(annotation)
    if target is None or target is Any:
        return value
    try:
        if target is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if target is int:
            if isinstance(value, bool):
                raise ValueError("a boolean is not an integer")
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"not a whole number: {value!r}")
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if target is float:
            return float(value)
        if target is str:
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if target in (list, dict):
            if isinstance(value, str):
                value = json.loads(value)
            if not isinstance(value, target):
                raise ValueError(f"expected a JSON {target.__name__}")
            return value
    except (TypeError, ValueError) as exc:
        raise BindError(f"argument {name!r}: cannot convert {value!r} to {target.__name__}: {exc}") from None
    return value


def _plain(annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty:
        return None
    origin = typing.get_origin(annotation)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _plain(options[0]) if len(options) == 1 else None
    if origin in (list, dict):
        return origin
    return annotation if annotation in (int, float, bool, str, list, dict) else None
