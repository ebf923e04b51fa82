"""A Django Tasks backend whose every running task holds a lease:
``django_bgtasks.backend.LeaseBackend``.

.. code-block:: python

    TASKS = {
        "default": {
            "BACKEND": "django_bgtasks.backend.LeaseBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 3, "TTL": 60},
        }
    }

For ``django.tasks`` (Django 6.x) and the ``django-tasks`` backport (Django
5.2, the ``tasks`` extra), through :mod:`django_bgtasks.compat`.
``enqueue()`` inserts a ``QueuedTask`` row on the ``BGTASKS_DATABASE`` alias
in one statement, so inside the caller's ``transaction.atomic()`` on that
alias it commits or rolls back with the caller's work; ``enqueue_many()``
inserts any number of tasks of one ``Task`` in one statement too
(:mod:`django_bgtasks.queue.enqueue`). ``manage.py bgtasks worker`` runs the
rows (:mod:`django_bgtasks.queue.execute`); ``get_result()`` reads them back.
Options:

* ``MAX_ATTEMPTS`` (default 1): runs of a task before it ends ``FAILED``; a
  run that raised, or whose worker was lost (no heartbeat within the ttl), is
  retried while attempts remain.
* ``TTL`` (default ``BGTASKS_TTL``): the lease of each run, in seconds; a
  killed worker's task is recovered within it.
* ``RETRY_DELAY`` (default none: at once): the delay before a failed
  task's first retry, doubling after each attempt as a task's own
  ``retry_delay`` does, for the tasks that set none.
* ``IMPORT_DEADLINE`` (default 3600): how long, in seconds from its first
  claim, a task no worker can import waits for one that can (a new task
  during a rolling deploy, claimed by the old release's workers) before it
  ends ``FAILED`` with the import error.

Per task, ``@task(max_attempts=N, retry_delay=S, timeout=S)`` override
``MAX_ATTEMPTS``, space the retries out and bound each run (:class:`LeaseTask`).

A task function reaches its lease with
:func:`~django_bgtasks.queue.execute.task_lease` (``update()`` for
progress, ``check()`` for an operator's cancel), with or without
``takes_context=True``.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_bgtasks import compat, limits
from django_bgtasks.conf import conf
from django_bgtasks.db import engines
from django_bgtasks.queue import fairness, flow
from django_bgtasks.queue.enqueue import Pairs, store
from django_bgtasks.queue.results import result_from_row
from django_bgtasks.validation import (
    validate_attempts,
    validate_import_deadline,
    validate_pairs,
    validate_retry_delay,
    validate_timeout,
    validate_ttl,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import QueueManager

__all__ = ["LeaseBackend", "LeaseTask"]

OPTION_NAMES = ("MAX_ATTEMPTS", "TTL", "RETRY_DELAY", "IMPORT_DEADLINE", "SCHEDULES")


if TYPE_CHECKING:
    _Task = compat.Task[Any, Any]
else:  # Task is generic in django-stubs and the backport, not in Django 6
    _Task = compat.Task


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTask(_Task):
    """The backend's ``task_class``: Django's ``Task`` with a unique key,
    retries, a timeout and flow limits.

    ``@task(unique=True)`` keys the task by its path; ``@task(lease_name="...")``
    (or ``.using()``-style ``dataclasses.replace``) names the key. While one
    task of a key is ready or running, ``enqueue()`` returns its ``TaskResult``
    instead of storing another: at most one run at a time per key.

    ``max_attempts`` (runs before it ends ``FAILED``) overrides the backend's
    ``MAX_ATTEMPTS``; ``retry_delay`` (seconds) spaces the retries out, doubling
    after each attempt, capped at ``limits.MAX_RETRY_DELAY``, with +-10 %
    jitter (:meth:`retry_delay_for`); ``timeout`` (seconds) bounds each run
    (``TaskTimedOut``).

    ``@task(concurrency=N, concurrency_key=...)``: at most N tasks of one key
    ``RUNNING`` at once, across every worker; ``@task(rate_limit="N/s",
    rate_key=...)`` (or ``"N/m"``, ``"N/h"``): at most N starts of one key in
    any window of that length, by the database's clock. A key is a format
    string over the arguments by parameter name (``"account:{account_id}"``)
    or a callable taking the arguments; by default the task's path. Tasks
    over a limit wait ``READY`` without holding back the others
    (:mod:`django_bgtasks.queue.flow`).

    ``@task(fairness_key=..., fairness_weight=...)``: among ready tasks of
    equal priority, the claim takes from the keys in turn, so that each key
    with ready work gets its share of the workers (a key formed as the flow
    limits' are; a weight a mapping of keys to whole numbers, or a callable
    taking the key: :mod:`django_bgtasks.queue.fairness`).

    A bad value is an ``InvalidTask`` when the task is declared. Where
    ``@task`` passes no extra keywords to ``task_class`` (Django 6.0),
    ``dataclasses.replace(task, max_attempts=3)`` gives the same task with
    them."""

    unique: bool = False
    lease_name: str | None = None
    max_attempts: int | None = None
    retry_delay: float | None = None
    timeout: float | None = None
    concurrency: int | None = None
    concurrency_key: str | Callable[..., str] | None = None
    rate_limit: str | None = None
    rate_key: str | Callable[..., str] | None = None
    fairness_key: str | Callable[..., str] | None = None
    fairness_weight: Mapping[str, int] | Callable[[str], int] | None = None

    @property
    def unique_key(self) -> str | None:
        """The key enqueue() folds on, or ``None``."""
        if self.lease_name is not None:
            return str(self.lease_name)
        return self.module_path if self.unique else None

    def retry_delay_for(self, attempt: int) -> float:
        """Seconds before the retry that follows failed attempt ``attempt``
        (1, 2, ...): ``retry_delay`` (else the backend's ``RETRY_DELAY``)
        doubled for each attempt before it, capped at
        ``limits.MAX_RETRY_DELAY``, then +-10 % of jitter (so that tasks that
        failed together do not all come back together); 0 without either."""
        delay = self.retry_delay
        if delay is None:
            backend = self.get_backend()
            delay = backend.default_retry_delay() if isinstance(backend, LeaseBackend) else None
        if delay is None:
            return 0.0
        doubled = delay * 2.0 ** min(max(attempt - 1, 0), 32)
        jitter = random.uniform(-limits.RETRY_JITTER, limits.RETRY_JITTER)  # noqa: S311
        return min(doubled, limits.MAX_RETRY_DELAY) * (1.0 + jitter)


class LeaseBackend(compat.BaseTaskBackend):
    """Stores tasks in this app's table; ``bgtasks worker`` runs each under a lease."""

    task_class = LeaseTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.max_attempts: Any = self.options.get("MAX_ATTEMPTS", 1)
        self.ttl: Any = self.options.get("TTL")
        self.import_deadline: Any = self.options.get("IMPORT_DEADLINE", limits.IMPORT_DEADLINE)
        self.retry_delay: Any = self.options.get("RETRY_DELAY")

    def validate_task(self, task: Any) -> None:
        """Django's checks, the options of :class:`LeaseTask` (``max_attempts``,
        ``retry_delay``, ``timeout``, and the flow limits:
        :func:`django_bgtasks.queue.flow.check_task`), and a unique key that
        fits its column (255 characters, the most MySQL/MariaDB index in a
        unique text column): each an ``InvalidTask`` with the reason. Django
        calls it when the task is declared (``@task(...)``, ``.using()``), on
        Django 6 and on the backport alike, and enqueue calls it again."""
        super().validate_task(task)
        try:
            # A string such as "false" would be true: a typing mistake to refuse.
            if not isinstance(unique := getattr(task, "unique", False), bool):
                raise TypeError(f"unique must be True or False, not {unique!r}")
            if (attempts := getattr(task, "max_attempts", None)) is not None:
                validate_attempts(attempts)
            validate_retry_delay(getattr(task, "retry_delay", None))
            validate_timeout(getattr(task, "timeout", None))
            flow.check_task(task)
            fairness.check_task(task)
        except (TypeError, ValueError) as exc:
            raise compat.InvalidTask(f"task {task.module_path!r}: {exc}") from None
        key = getattr(task, "unique_key", None)
        if key is not None and not 0 < len(key) <= limits.MAX_UNIQUE_KEY_LENGTH:
            raise compat.InvalidTask(
                f"the unique key of task {task.module_path!r} must be 1 to "
                f"{limits.MAX_UNIQUE_KEY_LENGTH} characters, not {len(key)}"
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store ``task`` with its arguments, in one statement (in the
        caller's transaction, if any, on ``BGTASKS_DATABASE``); the
        ``TaskResult`` is ``READY``. Arguments the function can't take, or
        JSON can't encode, are a ``TypeError``, with nothing stored."""
        return self._enqueue(task, [(args, kwargs)], numbered=False)[0]

    def enqueue_many(
        self, task: Any, items: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
    ) -> list[Any]:
        """Store one task of ``task`` for each ``(args, kwargs)`` pair of
        ``items``, in one statement whatever their number, and return their
        ``TaskResult`` in the same order. Each is as ``enqueue()`` would
        store it, one after the other, in the caller's transaction if any:
        ``task_enqueued`` is sent for each task stored, and a unique task is
        stored once (every item's result is then that task's: the one ready
        or running already, else the first item's). An item that is no
        ``(args, kwargs)`` pair, or whose arguments the function can't take
        or JSON can't encode, is a ``TypeError`` naming it (counted from 0),
        with nothing stored. On PostgreSQL the workers are woken once, not
        once per task. A ``task`` of another backend is an ``InvalidTask``:
        call ``task.get_backend().enqueue_many(task, items)``."""
        if getattr(task, "backend", self.alias) != self.alias:
            raise compat.InvalidTask(
                f"task {task.module_path!r} is enqueued on backend {task.backend!r}, not on "
                f"{self.alias!r}: call task.get_backend().enqueue_many(task, items)"
            )
        return self._enqueue(task, validate_pairs(items), numbered=True)

    async def aenqueue_many(
        self, task: Any, items: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
    ) -> list[Any]:
        """:meth:`enqueue_many` from async code (as Django's ``aenqueue()``)."""
        return await sync_to_async(self.enqueue_many, thread_sensitive=True)(task, items)

    def _enqueue(self, task: Any, pairs: Pairs, *, numbered: bool) -> list[Any]:
        self.validate_task(task)
        options = {
            "backend": self.alias,
            "max_attempts": self._max_attempts(getattr(task, "max_attempts", None)),
            "ttl": validate_ttl(self.ttl),
        }
        return store(
            self._objects(), task, pairs, options=options, sender=type(self), numbered=numbered
        )

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of ``result_id``, as the database holds it now."""
        try:
            key = uuid.UUID(str(result_id))
        except ValueError:
            raise compat.TaskResultDoesNotExist(result_id) from None
        rows = self._rows()
        try:
            row = rows.get(uuid=key)
        except rows.model.DoesNotExist:
            raise compat.TaskResultDoesNotExist(result_id) from None
        return result_from_row(row)

    def _rows(self) -> QuerySet[QueuedTask]:
        """The queue's rows on ``BGTASKS_DATABASE``."""
        return self._objects().using(conf.DATABASE)

    def _objects(self) -> QueueManager:
        """``QueuedTask.objects``. The models are imported here, not at the
        top: Django's Tasks framework imports the backend even where this app
        is not installed, and importing them there raises a RuntimeError that
        says nothing of the fix (bgtasks.E018)."""
        if not apps.is_installed("django_bgtasks"):
            raise ImproperlyConfigured(
                f"{self._where()} is django_bgtasks.backend.LeaseBackend, but "
                '"django_bgtasks" is not in INSTALLED_APPS (system check bgtasks.E018): '
                "add it, then run `manage.py migrate`."
            )
        from django_bgtasks.models import QueuedTask

        return QueuedTask.objects

    def _where(self) -> str:
        return f"TASKS[{self.alias!r}]"

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """bgtasks.E018 (this app is not installed), E015 (the database is not
        PostgreSQL, SQLite, MySQL or MariaDB), E016 (a bad option), E023-E028 (a
        bad ``SCHEDULES`` entry: :mod:`django_bgtasks.queue.task_schedules`)."""
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        where = self._where()
        if not apps.is_installed("django_bgtasks"):
            # Alone: without the app none of its own checks run, and the
            # others assume its models (and BGTASKS_DATABASE's alias).
            messages.append(
                checks.Error(
                    f'{where} is LeaseBackend, but "django_bgtasks" is not in '
                    "INSTALLED_APPS: the backend keeps its tasks in that app's table.",
                    hint='Add "django_bgtasks" to INSTALLED_APPS, then run `manage.py migrate`.',
                    id="bgtasks.E018",
                )
            )
            return messages
        engine = engines.driver_or_none(connections[conf.DATABASE])
        if engine is None or engine.queue is None:
            vendor = connections[conf.DATABASE].vendor
            messages.append(
                checks.Error(
                    f"{where}: LeaseBackend runs on PostgreSQL, SQLite, MySQL and MariaDB, "
                    f"and BGTASKS_DATABASE ({conf.DATABASE!r}) is {vendor!r}.",
                    hint="Point BGTASKS_DATABASE at a PostgreSQL, SQLite, MySQL or MariaDB "
                    "database, or use another Tasks backend.",
                    id="bgtasks.E015",
                )
            )
        for name in sorted(set(self.options) - set(OPTION_NAMES)):
            messages.append(
                checks.Error(
                    f"{where}: unknown option {name!r}.",
                    hint=f"LeaseBackend's options are {', '.join(OPTION_NAMES)}.",
                    id="bgtasks.E016",
                )
            )
        try:
            self._max_attempts()
            validate_ttl(self.ttl)
            validate_import_deadline(self.import_deadline)
            validate_retry_delay(self.retry_delay, kind="RETRY_DELAY")
        except (TypeError, ValueError) as exc:
            messages.append(
                checks.Error(
                    f"{where}: {exc}",
                    hint="MAX_ATTEMPTS is a whole number, 1 or more; TTL, RETRY_DELAY "
                    "and IMPORT_DEADLINE numbers of seconds above 0.",
                    id="bgtasks.E016",
                )
            )
        # Imported here, as the models are (_rows()): it reads them.
        from django_bgtasks.queue.task_schedules import parse_schedules

        _, errors = parse_schedules(self.alias, self.options.get("SCHEDULES"))
        messages.extend(checks.Error(str(exc), hint=exc.hint, id=exc.id) for exc in errors)
        return messages

    def default_retry_delay(self) -> float | None:
        """``RETRY_DELAY``: the first retry's delay of a task that sets no
        ``retry_delay`` of its own (``None``: at once). A bad value, which
        the system check reports (bgtasks.E016), counts as none."""
        try:
            return validate_retry_delay(self.retry_delay, kind="RETRY_DELAY")
        except (TypeError, ValueError):
            return None

    def import_deadline_seconds(self) -> float:
        """``IMPORT_DEADLINE``: how long, from its first claim, a task no
        worker can import waits for one that can. A bad value, which the
        system check reports (bgtasks.E016), counts as the default."""
        try:
            return validate_import_deadline(self.import_deadline)
        except (TypeError, ValueError):
            return limits.IMPORT_DEADLINE

    def _max_attempts(self, task_attempts: int | None = None) -> int:
        """The task's own ``max_attempts``, else the backend's ``MAX_ATTEMPTS``."""
        if task_attempts is not None:
            return task_attempts
        value = self.max_attempts
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 1 <= value <= limits.MAX_ATTEMPTS
        ):
            raise ValueError(
                "MAX_ATTEMPTS must be a whole number from 1 to "
                f"{limits.MAX_ATTEMPTS}, not {value!r}"
            )
        return value
