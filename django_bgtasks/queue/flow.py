"""A Django Task's flow limits, as ``@task(...)`` declares them on
:class:`~django_bgtasks.queue.backend.LeaseTask`: ``concurrency=N`` (at most
N tasks of one key ``RUNNING`` at once) with ``concurrency_key=``, and
``rate_limit="N/s" | "N/m" | "N/h"`` (at most N starts of one key in any
window of that length) with ``rate_key=``.

A key is a format string over the task's arguments by parameter name
(``"account:{account_id}"``), or a callable that takes the task's arguments
(not the context) and returns the key (:mod:`~django_bgtasks.queue.keys`);
without one it is the task's module path. :func:`check_task` refuses a bad
declaration with the reason (at ``@task(...)``, as ``InvalidTask``);
:meth:`FlowOptions.keys` forms the keys of one enqueue from its arguments (a
``TypeError`` when they can't form one, before any SQL). What the limits mean
in the claim: db/shared.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_bgtasks import limits
from django_bgtasks.queue.keys import check_key, form_key

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
        check_key(f"{option}_key", key, task.func)


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
            concurrency_key = form_key("concurrency_key", self.concurrency_key, task, args, kwargs)
        if self.rate_limit is not None:
            rate_key = form_key("rate_key", self.rate_key, task, args, kwargs)
        return concurrency_key, rate_key


__all__ = ["FlowOptions", "Rate", "check_task", "parse_rate"]
