"""A Django Task's flow limits, as ``@task(...)`` declares them on
:class:`~django_bgtasks.queue.backend.LeaseTask`: ``concurrency=N`` (at most
N tasks of one key ``RUNNING`` at once) with ``concurrency_key=``, and
``rate_limit="N/s" | "N/m" | "N/h"`` (at most N starts of one key in any
window of that length) with ``rate_key=``.

A key is a format string over the task's arguments by parameter name
(``"account:{account_id}"``), or a callable that takes the task's arguments
(not the context) and returns the key; without one it is the task's module
path. :func:`check_task` refuses a bad declaration with the reason (at
``@task(...)``, as ``InvalidTask``); :func:`resolve` forms the keys of one
enqueue from its arguments (a ``TypeError`` when they can't form one, before
any SQL). What the limits mean in the claim: db/shared.py.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_bgtasks import limits

# The windows a rate limit names, in seconds.
RATE_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\A\s*(\d+)\s*/\s*([smh])\s*\Z")


@dataclass(frozen=True)
class Rate:
    """A parsed ``rate_limit``: ``count`` starts per ``period`` seconds."""

    count: int
    period: float


def parse_rate(value: object) -> Rate:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` as a :class:`Rate`; a ``ValueError``
    with the reason otherwise."""
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f'rate_limit must be "N/s", "N/m" or "N/h", not {value!r}')
    count = int(match[1])
    if not 1 <= count <= limits.MAX_FLOW_LIMIT:
        raise ValueError(
            f"rate_limit allows 1 to {limits.MAX_FLOW_LIMIT} starts per window, not {count}"
        )
    return Rate(count, RATE_PERIODS[match[2]])


def check_concurrency(value: object) -> int:
    """``concurrency=``: a whole number from 1; a ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"concurrency must be a whole number, not {value!r}")
    if not 1 <= value <= limits.MAX_FLOW_LIMIT:
        raise ValueError(f"concurrency must be from 1 to {limits.MAX_FLOW_LIMIT}, not {value}")
    return value


def check_task(task: Any) -> None:
    """A ``ValueError`` saying what is wrong with ``task``'s flow options:
    a limit out of range or of the wrong type, a key without its limit, or
    a key that is neither a format string over the function's parameters
    nor a callable."""
    concurrency = getattr(task, "concurrency", None)
    rate_limit = getattr(task, "rate_limit", None)
    if concurrency is not None:
        check_concurrency(concurrency)
    if rate_limit is not None:
        parse_rate(rate_limit)
    for option, limit in (("concurrency", concurrency), ("rate", rate_limit)):
        key = getattr(task, f"{option}_key", None)
        if key is None:
            continue
        name = "concurrency" if option == "concurrency" else "rate_limit"
        if limit is None:
            raise ValueError(f"{option}_key needs {name}= too: it keys that limit")
        _check_key(f"{option}_key", key, task.func)


def _check_key(option: str, key: object, func: Callable[..., Any]) -> None:
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


@dataclass(frozen=True)
class FlowOptions:
    """What one enqueue stores of a task's flow limits: the columns every row
    shares (``concurrency``, ``rate_limit``, ``rate_period``, each ``None``
    without that limit), and how to form each row's keys."""

    concurrency: int | None
    concurrency_key: Any
    rate_limit: int | None
    rate_period: float | None
    rate_key: Any

    @classmethod
    def of(cls, task: Any) -> FlowOptions:
        """``task``'s limits (already checked at its declaration)."""
        concurrency = getattr(task, "concurrency", None)
        rate_text = getattr(task, "rate_limit", None)
        rate = parse_rate(rate_text) if rate_text is not None else None
        return cls(
            concurrency=concurrency,
            concurrency_key=getattr(task, "concurrency_key", None) if concurrency else None,
            rate_limit=rate.count if rate else None,
            rate_period=rate.period if rate else None,
            rate_key=getattr(task, "rate_key", None) if rate else None,
        )

    @property
    def limited(self) -> bool:
        """Whether the task has any limit."""
        return self.concurrency is not None or self.rate_limit is not None

    def columns(self) -> dict[str, Any]:
        """The enqueue statement's scalar parameters."""
        return {
            "concurrency": self.concurrency,
            "rate_limit": self.rate_limit,
            "rate_period": self.rate_period,
        }

    def keys(
        self, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[str | None, str | None]:
        """The concurrency and rate keys of one task of ``task`` with these
        arguments (``None`` without that limit). A ``TypeError`` naming the
        key when the arguments can't form it, or it is empty or too long."""
        concurrency_key = rate_key = None
        if self.concurrency is not None:
            concurrency_key = _key("concurrency_key", self.concurrency_key, task, args, kwargs)
        if self.rate_limit is not None:
            rate_key = _key("rate_key", self.rate_key, task, args, kwargs)
        return concurrency_key, rate_key


def _key(option: str, key: Any, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
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
        bound = inspect.signature(task.func).bind(*leading, *args, **kwargs)
    except (TypeError, ValueError):
        named: dict[str, Any] = dict(kwargs)
    else:
        bound.apply_defaults()
        named = dict(bound.arguments)
        for parameter in inspect.signature(task.func).parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(named.pop(parameter.name, {}))
    try:
        return key.format(**named)
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise TypeError(
            f"the {option} {key!r} of task {task.module_path!r} can't be formed from "
            f"these arguments: {type(exc).__name__}: {exc}"
        ) from None


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f"{len(value)} characters"
    return repr(value)


__all__ = ["FlowOptions", "Rate", "check_task", "parse_rate"]
