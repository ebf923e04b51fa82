"""The keys a Django Task's options form from its arguments, one rule for
each option that keys tasks (the flow limits' ``concurrency_key`` and
``rate_key``, :mod:`~django_bgtasks.queue.flow`; ``fairness_key``,
:mod:`~django_bgtasks.queue.fairness`).

A key is a format string over the task's arguments by parameter name
(``"account:{account_id}"``), or a callable that takes the task's arguments
(not the context) and returns the key. :func:`check_key` refuses a bad
declaration with the reason; :func:`form_key` forms one task's key from its
arguments (a ``TypeError`` when they can't, before any SQL).
"""

from __future__ import annotations

import functools
import inspect
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django_bgtasks import limits


def check_key(option: str, key: object, func: Callable[..., Any]) -> None:
    """A ``ValueError`` saying why ``key``, the task option ``option`` of the
    function ``func``, is neither a format string over ``func``'s parameters
    by name nor a callable."""
    if callable(key):
        return
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"{option} must be a format string over the task's arguments or a "
            f"callable taking them, not {key!r}"
        )
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(key) if field is not None]
    except ValueError as exc:
        raise ValueError(f"{option} {key!r} is not a format string: {exc}") from None
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):  # a callable whose signature Python can't read
        return
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for field in fields:
        name = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not name or name.isdigit():
            raise ValueError(
                f"{option} {key!r} names the arguments by parameter name, not by position"
            )
        if name not in parameters and not takes_any:
            raise ValueError(
                f"{option} {key!r} names {name!r}, which is not a parameter of the task"
            )


def form_key(
    option: str, key: Any, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """The key the task option ``option`` (``key``: a format string, a
    callable, or ``None`` for the task's path) gives one task of ``task``
    with these arguments. A ``TypeError`` naming the option when the
    arguments can't form it, or it is empty or too long."""
    if key is None:
        value: object = task.module_path
    elif callable(key):
        try:
            value = key(*args, **kwargs)
        except Exception as exc:
            raise TypeError(
                f"the {option} of task {task.module_path!r} raised {type(exc).__name__}: {exc}"
            ) from None
    else:
        value = _formatted(option, key, task, args, kwargs)
    if not isinstance(value, str) or not 0 < len(value) <= limits.MAX_FLOW_KEY_LENGTH:
        raise TypeError(
            f"the {option} of task {task.module_path!r} must be a string of 1 to "
            f"{limits.MAX_FLOW_KEY_LENGTH} characters, not {_shown(value)}"
        )
    return value


def _formatted(
    option: str, key: str, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """``key`` formatted with the task's arguments by parameter name (their
    defaults too; extra keywords by their own name)."""
    leading = (None,) if task.takes_context else ()
    try:
        signature = _signature(task.func)
        bound = signature.bind(*leading, *args, **kwargs)
    except (TypeError, ValueError):
        named: dict[str, Any] = dict(kwargs)
    else:
        bound.apply_defaults()
        named = dict(bound.arguments)
        for parameter in signature.parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(named.pop(parameter.name, {}))
    try:
        return key.format(**named)
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise TypeError(
            f"the {option} {key!r} of task {task.module_path!r} can't be formed from "
            f"these arguments: {type(exc).__name__}: {exc}"
        ) from None


# A function's signature, read once: reading it is most of the cost of
# forming a key (``enqueue_many()`` forms one a task: 10,000 keys took 0.85 s
# of inspect.signature, twice each, where the INSERT of their tasks took 0.9 s).
@functools.lru_cache(maxsize=1024)
def _cached_signature(func: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(func)


def _signature(func: Callable[..., Any]) -> inspect.Signature:
    try:
        hash(func)
    except TypeError:  # a callable that can't be a cache's key: read each time
        return inspect.signature(func)
    return _cached_signature(func)


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f"{len(value)} characters"
    return repr(value)


__all__ = ["check_key", "form_key"]
