"""Cron for Django Tasks: ``TASKS[alias]["OPTIONS"]["SCHEDULES"]`` of a
``LeaseBackend``.

.. code-block:: python

    "OPTIONS": {"SCHEDULES": {
        "nightly-report": {"task": "reports.tasks.nightly", "schedule": "0 3 * * *",
                           "kwargs": {"full": True}, "timezone": "Europe/Paris"},
        "sync": {"task": "shop.tasks.sync_prices", "schedule": timedelta(minutes=5)},
    }}

Each schedule keeps its next slot on a lease row of its own, named
``tasks:<alias>:<name>``, exactly as a ``@background_task``'s schedule does
(one slot rule for both): the workers give the row its first slot and follow
a changed schedule with the same statement (``ensure_schedule``: a slot only
ever moves earlier), and the slot is taken by one compare-and-set statement,
``take_slot``, which moves ``next_run_at`` on from the slot the worker saw,
only while the database's clock is before the next one. The worker that
takes it enqueues the task through the backend **in the same transaction**
(:func:`enqueue_slot`): so exactly one task is enqueued per slot, whatever
the number of workers, and a slot whose enqueue fails on the database is not
used up. No app server's clock takes part: the poll's ``db_now`` says which
slot comes next.

The task is enqueued as ``task.using(run_after=slot).enqueue(*args,
**kwargs)``: the backend's validation, the task's queue, priority and
options all apply, and ``result.task.run_after`` is the slot that made it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string

from django_bgtasks.background.schedules import Cron, Every, parse_schedule, validate_zone
from django_bgtasks.conf import conf, lease_backends
from django_bgtasks.models import BackgroundTask
from django_bgtasks.validation import check_arguments, validate_name, validate_ttl

logger = logging.getLogger("django_bgtasks.worker")

ENTRY_KEYS = ("task", "schedule", "args", "kwargs", "timezone")
REQUIRED_KEYS = ("task", "schedule")
ROW_PREFIX = "tasks"
_HINT = (
    'Each entry is {"task": "module.function", "schedule": timedelta(...) or "m h dom mon '
    'dow", "args": [...], "kwargs": {...}, "timezone": "Europe/Paris"} (args, kwargs and '
    "timezone optional); see docs/django-tasks.md."
)


class ScheduleError(ValueError):
    """A bad ``SCHEDULES`` entry: its system check's ``id`` and ``hint`` ride along."""

    def __init__(self, message: str, *, id: str, hint: str = _HINT) -> None:
        super().__init__(message)
        self.id, self.hint = id, hint


@dataclass(frozen=True)
class TaskSchedule:
    """One ``SCHEDULES`` entry of backend ``alias``, parsed. It has what the
    workers' schedule upkeep reads of a scheduled task (``name``,
    ``effective_schedule``, ``effective_ttl``: worker/slots.py)."""

    alias: str
    key: str
    task_path: str
    schedule: Every | Cron
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Its lease row's name: ``tasks:<alias>:<name>``."""
        return row_name(self.alias, self.key)

    @property
    def effective_schedule(self) -> Every | Cron:
        """Its schedule (settings are read once, when the worker starts)."""
        return self.schedule

    @property
    def effective_ttl(self) -> float:
        """The row's ttl: it is never held, so ``BGTASKS_TTL``."""
        return validate_ttl(None)

    def task(self) -> Any:
        """The Django ``Task`` it enqueues."""
        return import_string(self.task_path)


def row_name(alias: str, key: str) -> str:
    """The lease row that keeps the slots of schedule ``key`` of ``alias``."""
    return f"{ROW_PREFIX}:{alias}:{key}"


def task_schedules() -> list[TaskSchedule]:
    """Every ``SCHEDULES`` entry of every ``LeaseBackend`` in ``TASKS``; the
    first bad one is a :class:`ScheduleError` (a worker refuses to start)."""
    found = []
    for alias, params in lease_backends().items():
        schedules, errors = parse_schedules(alias, (params.get("OPTIONS") or {}).get("SCHEDULES"))
        if errors:
            raise errors[0]
        found.extend(schedules)
    return found


def parse_schedules(
    alias: str, schedules: object
) -> tuple[list[TaskSchedule], list[ScheduleError]]:
    """The entries of a backend's ``SCHEDULES`` option (``None``: none), and
    what is wrong with the others, one error each (the system checks')."""
    if schedules is None:
        return [], []
    where = f"TASKS[{alias!r}]['OPTIONS']['SCHEDULES']"
    if not isinstance(schedules, Mapping):
        message = f"{where} is {type(schedules).__name__}; it must be a dict of names to entries."
        return [], [ScheduleError(message, id="bgtasks.E023")]
    parsed, errors = [], []
    for key, entry in schedules.items():
        try:
            parsed.append(parse_entry(alias, key, entry, where=f"{where}[{key!r}]"))
        except ScheduleError as exc:
            errors.append(exc)
    return parsed, errors


def parse_entry(alias: str, key: object, entry: object, *, where: str) -> TaskSchedule:
    """One entry, or the :class:`ScheduleError` of its first fault."""
    _check_shape(alias, key, entry, where)
    assert isinstance(key, str) and isinstance(entry, Mapping)
    task = _import_task(alias, entry["task"], where)
    try:
        zone = validate_zone(entry.get("timezone"))
    except (TypeError, ValueError) as exc:
        hint = 'An IANA time zone name, such as "Europe/Paris" or "America/New_York".'
        raise ScheduleError(f"{where}: {exc}", id="bgtasks.E027", hint=hint) from None
    try:
        schedule = parse_schedule(entry["schedule"], zone)
    except (TypeError, ValueError) as exc:
        hint = (
            "A datetime.timedelta above zero, or a five-field cron string (minute hour "
            'day-of-month month day-of-week, needs the "cron" extra); "timezone" goes with '
            "a cron string only."
        )
        raise ScheduleError(f"{where}: {exc}", id="bgtasks.E026", hint=hint) from None
    assert schedule is not None  # None is refused by _check_shape
    args, kwargs = _check_arguments(task, entry.get("args", []), entry.get("kwargs", {}), where)
    return TaskSchedule(alias, key, entry["task"], schedule, args, kwargs)


def _check_shape(alias: str, key: object, entry: object, where: str) -> None:
    """bgtasks.E023: a name that makes a lease row's name, an entry that is a
    dict of the known keys, with a task path and a schedule."""
    try:
        if not isinstance(key, str) or not key:
            raise ValueError(f"a schedule's name must be a non-empty string, not {key!r}")
        validate_name(row_name(alias, key))
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"{where}: {exc}", id="bgtasks.E023") from None
    if not isinstance(entry, Mapping):
        raise ScheduleError(
            f"{where} is {type(entry).__name__}; it must be a dict.", id="bgtasks.E023"
        )
    unknown = sorted(map(str, set(entry) - set(ENTRY_KEYS)))
    if unknown:
        raise ScheduleError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(ENTRY_KEYS)}.",
            id="bgtasks.E023",
        )
    missing = [name for name in REQUIRED_KEYS if entry.get(name) is None]
    if missing:
        raise ScheduleError(
            f"{where} has no {' and no '.join(map(repr, missing))}.", id="bgtasks.E023"
        )


def _import_task(alias: str, path: object, where: str) -> Any:
    """bgtasks.E024 (no such path), E025 (not a Django Task of this backend)."""
    from django_bgtasks import compat  # only here: a worker of background tasks alone has none

    try:
        task = import_string(path) if isinstance(path, str) else None
    except ImportError as exc:
        raise ScheduleError(
            f"{where}: task {path!r} does not import: {exc}",
            id="bgtasks.E024",
            hint='"task" is the dotted path of a function decorated with @task, such as '
            '"reports.tasks.nightly".',
        ) from None
    if task is None:
        raise ScheduleError(
            f"{where}: task must be a dotted path, not {type(path).__name__}", id="bgtasks.E024"
        )
    if not isinstance(task, compat.Task):
        raise ScheduleError(
            f"{where}: {path!r} is {type(task).__name__}, not a Django Task.",
            id="bgtasks.E025",
            hint="Decorate the function with @task (django.tasks, or django_tasks on Django "
            "5.2), and name it here.",
        )
    if task.backend != alias:
        raise ScheduleError(
            f"{where}: task {path!r} is enqueued on backend {task.backend!r}, not {alias!r}.",
            id="bgtasks.E025",
            hint=f'Declare it with @task(backend="{alias}"), or move the entry into '
            f"TASKS[{task.backend!r}] if that is a LeaseBackend.",
        )
    return task


def _check_arguments(
    task: Any, args: object, kwargs: object, where: str
) -> tuple[list[Any], dict[str, Any]]:
    """bgtasks.E028: ``args`` a list and ``kwargs`` a dict that JSON encodes
    and the function takes (as ``enqueue()`` refuses them)."""
    hint = '"args" is a list and "kwargs" a dict of names, both JSON-encodable, that the '
    hint += "task's function takes."
    try:
        if not isinstance(args, list | tuple):
            raise TypeError(f"args must be a list, not {type(args).__name__}")
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"kwargs must be a dict of names, not {kwargs!r}")
        arguments = list(args), dict(kwargs)
        json.dumps(arguments, allow_nan=False)
        check_arguments(
            task.func, *arguments, passed_first=task.takes_context, task=repr(task.module_path)
        )
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"{where}: {exc}", id="bgtasks.E028", hint=hint) from None
    return arguments


def enqueue_slot(entry: TaskSchedule, *, due: dt.datetime, next_slot: dt.datetime) -> Any:
    """Take the slot ``due`` of ``entry`` (as the poll read it), moving its
    row on to ``next_slot``, and enqueue its task, in one transaction: the
    ``TaskResult``, or ``None`` when another worker took the slot. An enqueue
    the backend refuses (a ``TypeError``, ``ValueError`` or ``InvalidTask``,
    before any SQL) uses the slot up and is logged: the next slot tries again."""
    from django_bgtasks import compat

    with transaction.atomic(using=conf.DATABASE):
        taken = BackgroundTask.objects.work.take_slot(
            entry.name, due=due, next_slot=next_slot, schedule=entry.schedule.text
        )
        if not taken:
            return None
        try:
            result = entry.task().using(run_after=due).enqueue(*entry.args, **entry.kwargs)
        except (TypeError, ValueError, compat.InvalidTask) as exc:
            logger.error("schedule %s: slot %s not enqueued: %s", entry.name, due.isoformat(), exc)
            return None
    logger.info("schedule %s: slot %s enqueued %s", entry.name, due.isoformat(), result.id)
    return result
