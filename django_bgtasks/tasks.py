"""``@background_task``: named work that the admin, the JSON API and the
``bgtasks`` command can start by name.

Tasks are registered when their module is imported. django-bgtasks imports
the ``tasks`` module of every installed app at start-up (as the admin does with
``admin`` modules), so put them in ``yourapp/tasks.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, ParamSpec, TypeVar

from django.db import connections

from .exceptions import UnknownTask
from .runner import RunningLease, lease
from .validation import heartbeat_interval, validate_name, validate_ttl

P = ParamSpec("P")
R = TypeVar("R")

_registry: dict[str, BackgroundTaskFunction[..., Any]] = {}
_registry_lock = threading.Lock()


@dataclass(frozen=True)
class BackgroundTaskFunction(Generic[P, R]):
    """A function registered with ``@background_task``. It takes the
    :class:`RunningLease` as its first argument."""

    name: str
    func: Callable[..., R]
    ttl: float | None = None

    @property
    def description(self) -> str:
        """The first line of the function's docstring."""
        doc = (self.func.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def options(self, *, ttl: float | None = None) -> BackgroundTaskFunction[P, R]:
        """A copy with another ttl, for one run (the registry is unchanged)."""
        if ttl is not None:
            _check_ttl(ttl)
        return replace(self, ttl=ttl)

    def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run here, under the lease; raises :class:`LeaseHeld` if it is held."""
        with lease(self.name, ttl=self.ttl) as running:
            return self.func(running, *args, **kwargs)

    def start(self, *args: P.args, **kwargs: P.kwargs) -> RunningLease | None:
        """Claim the lease here and now, then run in a background thread.

        Returns the :class:`RunningLease` (``.wait()`` for the end, then
        ``.result`` or ``.exception``), or ``None`` when the task is already
        running anywhere. Claiming before the thread starts means there is no
        moment when the work was started but nobody holds the lease.
        """
        running = RunningLease.claim(self.name, ttl=self.ttl)
        if running is None:
            return None
        thread = threading.Thread(
            target=self._run_started,
            args=(running, args, kwargs),
            name=f"bgtasks:{self.name}",
            daemon=True,
        )
        thread.start()
        return running

    def _run_started(
        self, running: RunningLease, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        try:
            try:
                running.result = self.func(running, *args, **kwargs)
            except BaseException as exc:
                running.exception = exc
                running.finish(exc)
            else:
                running.finish(None)
        except BaseException as exc:  # finish() raised LeaseLost; record it
            running.exception = exc
        finally:
            connections.close_all()  # this thread's connections only


def _check_ttl(ttl: float) -> None:
    heartbeat_interval(validate_ttl(ttl))


def background_task(
    *, name: str, ttl: float | None = None
) -> Callable[[Callable[..., R]], BackgroundTaskFunction[..., R]]:
    """Register a function as the background task ``name``.

    ::

        @background_task(name="log-cleanup", ttl=120)
        def log_cleanup(lease, days=30):
            ...
            lease.update({"done": n, "total": total})

        log_cleanup.start(days=7)
    """
    name = validate_name(name)
    if ttl is not None:
        _check_ttl(ttl)

    def register(func: Callable[..., R]) -> BackgroundTaskFunction[..., R]:
        task: BackgroundTaskFunction[..., R] = BackgroundTaskFunction(name, func, ttl)
        with _registry_lock:
            existing = _registry.get(name)
            if existing is not None and _qualname(existing.func) != _qualname(func):
                raise ValueError(
                    f"background task {name!r} is already registered by "
                    f"{_qualname(existing.func)}; names must be unique"
                )
            _registry[name] = task
        return task

    return register


def _qualname(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def get_task(name: str) -> BackgroundTaskFunction[..., Any]:
    """The registered task ``name``, or :class:`UnknownTask`."""
    try:
        return _registry[name]
    except KeyError:
        raise UnknownTask(name) from None


def registered_tasks() -> dict[str, BackgroundTaskFunction[..., Any]]:
    """Every registered task, by name."""
    return dict(sorted(_registry.items()))
