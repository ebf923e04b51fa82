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
with the ORM, so inside the caller's ``transaction.atomic()`` on that alias
it commits or rolls back with the caller's work. ``manage.py bgtasks worker``
runs the rows (:mod:`django_bgtasks.queue.execute`); ``get_result()`` reads them
back. Options:

* ``MAX_ATTEMPTS`` (default 1): runs of a task before it ends ``FAILED``; a
  run that raised, or whose worker was lost (no heartbeat within the ttl), is
  retried while attempts remain.
* ``TTL`` (default ``BGTASKS_TTL``): the lease of each run, in seconds; a
  killed worker's task is recovered within it.

A task function reaches its lease with
:func:`~django_bgtasks.queue.execute.task_lease` (``update()`` for
progress, ``check()`` for an operator's cancel), with or without
``takes_context=True``.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connections, transaction

from django_bgtasks import compat, limits
from django_bgtasks.conf import conf
from django_bgtasks.db.vendors import QUEUE_VENDORS
from django_bgtasks.queue.execute import result_from_row
from django_bgtasks.validation import check_arguments, validate_ttl

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_bgtasks.models import QueuedTask

__all__ = ["LeaseBackend", "LeaseTask"]

OPTION_NAMES = ("MAX_ATTEMPTS", "TTL", "SCHEDULES")


if TYPE_CHECKING:
    _Task = compat.Task[Any, Any]
else:  # Task is generic in django-stubs and the backport, not in Django 6
    _Task = compat.Task


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTask(_Task):
    """The backend's ``task_class``: Django's ``Task`` with a unique key.

    ``@task(unique=True)`` keys the task by its path; ``@task(lease_name="...")``
    (or ``.using()``-style ``dataclasses.replace``) names the key. While one
    task of a key is ready or running, ``enqueue()`` returns its ``TaskResult``
    instead of storing another: at most one run at a time per key."""

    unique: bool = False
    lease_name: str | None = None

    @property
    def unique_key(self) -> str | None:
        """The key enqueue() folds on, or ``None``."""
        if self.lease_name is not None:
            return str(self.lease_name)
        return self.module_path if self.unique else None


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

    def validate_task(self, task: Any) -> None:
        """Django's checks, and a unique key that fits its column (255
        characters, the most MySQL/MariaDB index in a unique text column)."""
        super().validate_task(task)
        key = getattr(task, "unique_key", None)
        if key is not None and not 0 < len(key) <= limits.MAX_UNIQUE_KEY_LENGTH:
            raise compat.InvalidTask(
                f"the unique key of task {task.module_path!r} must be 1 to "
                f"{limits.MAX_UNIQUE_KEY_LENGTH} characters, not {len(key)}"
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store ``task`` with its arguments (in the caller's transaction, if
        any, on ``BGTASKS_DATABASE``); the ``TaskResult`` is ``READY``.
        Arguments the function can't take, or JSON can't encode, are a
        ``TypeError``, with nothing stored."""
        self.validate_task(task)
        # Refused now, with the reason, not after every attempt of the run.
        check_arguments(
            task.func, args, kwargs, passed_first=task.takes_context, task=repr(task.module_path)
        )
        arguments = {"args": list(args), "kwargs": dict(kwargs)}
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"the arguments of task {task.module_path!r} must be JSON-encodable: {exc}"
            ) from None
        key = getattr(task, "unique_key", None)
        fields = {
            "task_path": task.module_path,
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "takes_context": task.takes_context,
            "args_kwargs": arguments,
            "run_after": task.run_after,
            "max_attempts": self._max_attempts(),
            "ttl": validate_ttl(self.ttl),
            "unique_key": key or "",
            "active_key": key,
        }
        rows = self._rows()
        if key is None:
            return self._enqueued(result_from_row(rows.create(uuid=uuid.uuid4(), **fields)))
        # A unique task: the unique index on active_key (the key while ready
        # or running) decides, also between processes; the savepoint keeps
        # the caller's transaction usable.
        for _ in range(3):
            try:
                with transaction.atomic(using=conf.DATABASE):
                    created = rows.create(uuid=uuid.uuid4(), **fields)
                return self._enqueued(result_from_row(created))
            except IntegrityError:
                existing = rows.filter(active_key=key).first()
                if existing is not None:
                    return result_from_row(existing)
                # It finished between the insert and the read: insert again.
        raise IntegrityError(f"could not enqueue unique task {key!r}")

    def _enqueued(self, result: Any) -> Any:
        compat.task_enqueued.send(sender=type(self), task_result=result)
        return result

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
        """The queue's rows on ``BGTASKS_DATABASE``. The models are imported
        here, not at the top: Django's Tasks framework imports the backend
        even where this app is not installed, and importing them there raises
        a RuntimeError that says nothing of the fix (bgtasks.E018)."""
        if not apps.is_installed("django_bgtasks"):
            raise ImproperlyConfigured(
                f"{self._where()} is django_bgtasks.backend.LeaseBackend, but "
                '"django_bgtasks" is not in INSTALLED_APPS (system check bgtasks.E018): '
                "add it, then run `manage.py migrate`."
            )
        from django_bgtasks.models import QueuedTask

        return QueuedTask.objects.using(conf.DATABASE)

    def _where(self) -> str:
        return f"TASKS[{self.alias!r}]"

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """bgtasks.E018 (this app is not installed), E015 (the database is not
        PostgreSQL or SQLite), E016 (a bad option), E023-E028 (a bad
        ``SCHEDULES`` entry: :mod:`django_bgtasks.queue.schedules`)."""
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
        vendor = connections[conf.DATABASE].vendor
        if vendor not in QUEUE_VENDORS:
            messages.append(
                checks.Error(
                    f"{where}: LeaseBackend runs on PostgreSQL and SQLite, and "
                    f"BGTASKS_DATABASE ({conf.DATABASE!r}) is {vendor!r}.",
                    hint="Point BGTASKS_DATABASE at a PostgreSQL or SQLite database, or use "
                    "another Tasks backend.",
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
        except (TypeError, ValueError) as exc:
            messages.append(
                checks.Error(
                    f"{where}: {exc}",
                    hint="MAX_ATTEMPTS is a whole number, 1 or more; TTL a number of "
                    "seconds above 0.",
                    id="bgtasks.E016",
                )
            )
        # Imported here, as the models are (_rows()): it reads them.
        from django_bgtasks.queue.schedules import parse_schedules

        _, errors = parse_schedules(self.alias, self.options.get("SCHEDULES"))
        messages.extend(checks.Error(str(exc), hint=exc.hint, id=exc.id) for exc in errors)
        return messages

    def _max_attempts(self) -> int:
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
