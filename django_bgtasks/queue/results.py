"""A queued row as Django's Tasks API shows it: the ``Task`` it names, with the
options it was enqueued with (:func:`enqueued_task`), and its ``TaskResult``
(:func:`result_from_row`; :func:`running_result` as a worker starts it). The
backend's ``get_result()`` and the worker build them here alike."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from django_bgtasks import compat
from django_bgtasks.core.states import as_datetime
from django_bgtasks.queue.manager import RUNNING, Claim

if TYPE_CHECKING:
    from django_bgtasks.models import QueuedTask


def load_task(path: str, **changes: Any) -> Any:
    """The ``Task`` at ``path``, with ``changes`` (priority, queue_name, ...)."""
    found = import_string(path)
    if not isinstance(found, compat.Task):
        raise TypeError(f"{path!r} is not a Task (decorate the function with @task)")
    try:
        return _with_options(found, tuple(sorted(changes.items())))
    except TypeError:  # an option that can't be hashed: made afresh, as Django makes it
        return dataclasses.replace(found, **changes)


@functools.lru_cache(maxsize=512)
def _with_options(task: Any, changes: tuple[tuple[str, Any], ...]) -> Any:
    """``task`` with ``changes``, made once for each: a ``Task`` is frozen,
    and making one validates it (its backend's ``validate_task``), which a
    worker would otherwise do again for every row it runs. Keyed by the
    ``Task`` object itself, so a module reloaded (or a test's stand-in)
    gets its own."""
    return dataclasses.replace(task, **dict(changes))


def enqueued_task(queued: QueuedTask | Claim) -> Any:
    """The ``Task`` a queued row (or a claim of it) names, with the options it
    was enqueued with: its priority, queue, backend and ``run_after``."""
    return load_task(
        queued.task_path,
        priority=queued.priority,
        queue_name=queued.queue_name,
        backend=queued.backend,
        run_after=queued.run_after,
    )


def result_from_row(row: QueuedTask) -> Any:
    """A ``TaskResult`` with what ``row`` holds."""
    task = enqueued_task(row)
    args, kwargs = row.arguments()
    result: Any = compat.TaskResult(
        task=task,
        id=str(row.uuid),
        status=compat.TaskResultStatus(row.status),
        enqueued_at=row.enqueued_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        last_attempted_at=row.last_attempted_at,
        args=args,
        kwargs=kwargs,
        backend=row.backend,
        errors=[
            compat.TaskError(
                exception_class_path=error["exception_class_path"], traceback=error["traceback"]
            )
            for error in row.errors or []
        ],
        worker_ids=list(row.worker_ids or []),
    )
    object.__setattr__(result, "_return_value", row.return_value)
    return result


def running_result(task: Any, claim: Claim) -> Any:
    """The ``TaskResult`` of ``claim``'s run as it starts: ``RUNNING``."""
    return compat.TaskResult(
        task=task,
        id=str(claim.uuid),
        status=compat.TaskResultStatus(RUNNING),
        enqueued_at=as_datetime(claim.enqueued_at),
        started_at=claim.started_at,
        finished_at=None,
        last_attempted_at=claim.last_attempted_at,
        args=claim.args,
        kwargs=claim.kwargs,
        backend=claim.backend,
        errors=[],
        worker_ids=claim.worker_ids,
    )


__all__ = ["enqueued_task", "load_task", "result_from_row", "running_result"]
