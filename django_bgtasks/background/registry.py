"""The ``@background_task`` functions registered in this process, by name.

:mod:`django_bgtasks.background.functions` fills it (``@background_task``) and reads it
(``get_task()``, ``registered_tasks()``). It sits at the bottom, below the
lease operations, because ``BackgroundTask.objects.request_run()`` reads it
too: a request is refused there, once for every surface, when no process runs
the name or when the function can't take the arguments. The manager is
below ``tasks.py``, so the registry has to be below both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Registered", "add", "get", "registered"]


class Registered(Protocol):
    """What the lease operations read of a registered task
    (:class:`~django_bgtasks.background.functions.BackgroundTaskFunction` has it all)."""

    @property
    def name(self) -> str: ...

    @property
    def func(self) -> Callable[..., Any]: ...

    @property
    def ttl(self) -> float | None: ...


_tasks: dict[str, Registered] = {}
_lock = threading.Lock()


def add(task: Registered) -> None:
    """Register ``task`` under its name. A name is one function's: registering
    another function under it is a ``ValueError``; the same function again (a
    module imported twice, under two names) replaces it."""
    with _lock:
        existing = _tasks.get(task.name)
        if existing is not None and _qualname(existing.func) != _qualname(task.func):
            raise ValueError(
                f"background task {task.name!r} is already registered by "
                f"{_qualname(existing.func)}; names must be unique"
            )
        _tasks[task.name] = task


def get(name: str) -> Registered | None:
    """The task registered as ``name`` in this process, or ``None``."""
    return _tasks.get(name)


def registered() -> dict[str, Registered]:
    """Every task registered in this process, by name."""
    return dict(sorted(_tasks.items()))


def _qualname(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"
