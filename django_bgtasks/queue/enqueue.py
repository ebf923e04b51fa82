"""Storing Django Tasks: what ``LeaseBackend.enqueue()`` and
``enqueue_many()`` do (:func:`store`).

Any number of tasks of one ``Task`` are one statement
(``QueuedTask.objects.enqueue()``, the ``enqueue`` statement of each vendor's
module in :mod:`django_bgtasks.db`): one round trip, prepared on PostgreSQL,
that joins the caller's transaction on ``BGTASKS_DATABASE``, so a rolled-back
view enqueues nothing. It stores what these checks let through, and nothing
when any item fails them: every item's arguments are bound to the function's
signature and encoded as JSON before the statement is sent.

Each task stored is as ``enqueue()`` stores it alone, in the order given: a
``READY`` row, ``task_enqueued`` sent with its result. A unique task
(``LeaseTask.unique_key``) is stored at most once, by the unique index on
``active_key``: while another task of its key is ready or running, the
statement stores nothing (``ON CONFLICT DO NOTHING``: no error, so no
savepoint in the caller's transaction) and every item's result is that
task's, as the database holds it; else the first item is stored and every
item's result is it. On PostgreSQL, migration 0010's trigger announces
each row, and PostgreSQL folds a transaction's identical notifications into
one: the workers are woken once per queue, not once per task
(benchmarks/queue_notify_cost.py measured a trigger per statement instead,
which was no cheaper).

The statement is one producer span (:mod:`django_bgtasks.tracing`),
whatever its number of tasks: each task stores its trace context, so that
each run continues the trace of the call that enqueued it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError

from django_bgtasks import compat, tracing
from django_bgtasks.conf import conf
from django_bgtasks.queue import fairness
from django_bgtasks.queue.flow import FlowOptions
from django_bgtasks.queue.results import result_from_row
from django_bgtasks.validation import check_arguments

if TYPE_CHECKING:
    import datetime as dt

    from django_bgtasks.queue.manager import QueueManager

Pairs = Sequence[tuple[Sequence[Any], Mapping[str, Any]]]


def store(
    objects: QueueManager,
    task: Any,
    pairs: Pairs,
    *,
    options: Mapping[str, Any],
    sender: type,
    numbered: bool,
) -> list[Any]:
    """Store a task of ``task`` for each ``(args, kwargs)`` of ``pairs`` and
    return their ``TaskResult`` in that order (see the module docstring).
    ``options`` are the backend's columns (``backend``, ``max_attempts``,
    ``ttl``); ``sender`` sends ``task_enqueued``. A ``TypeError`` for
    arguments the function can't take or JSON can't encode, before any SQL;
    with ``numbered`` its message names the item (counted from 0)."""
    name = repr(task.module_path)
    # Refused now, with the reason, not after every attempt of the run. Whether
    # the arguments bind depends on their number and keywords, not on their
    # values: each shape is bound once.
    shapes = set()
    for index, (args, kwargs) in enumerate(pairs):
        shape = (len(args), *kwargs)
        if shape in shapes:
            continue
        try:
            check_arguments(task.func, args, kwargs, passed_first=task.takes_context, task=name)
        except TypeError as exc:
            raise TypeError(f"item {index}: {exc}" if numbered else str(exc)) from None
        shapes.add(shape)
    if not pairs:
        return []
    ids = [uuid.uuid4() for _ in pairs]
    rows: list[dict[str, Any]] = [
        {"uuid": id_.hex, "args_kwargs": {"args": list(args), "kwargs": dict(kwargs)}}
        for id_, (args, kwargs) in zip(ids, pairs, strict=True)
    ]
    flow = FlowOptions.of(task)
    if flow.limited:
        # Each row's keys, from its own arguments: a key they can't form is
        # refused now, with nothing stored.
        for index, (row, (args, kwargs)) in enumerate(zip(rows, pairs, strict=True)):
            try:
                row["concurrency_key"], row["rate_key"] = flow.keys(task, args, kwargs)
            except TypeError as exc:
                raise TypeError(f"item {index}: {exc}" if numbered else str(exc)) from None
    if getattr(task, "fairness_key", None) is not None:
        # Each row's fair share, from its own arguments, refused alike.
        for index, (row, (args, kwargs)) in enumerate(zip(rows, pairs, strict=True)):
            try:
                shared = fairness.share(task, args, kwargs)
            except TypeError as exc:
                raise TypeError(f"item {index}: {exc}" if numbered else str(exc)) from None
            if shared is not None:
                row["fairness_key"], row["fairness_weight"] = shared
    text = _encoded(rows, name, numbered=numbered)
    # As the database stores them and get_result() reads them back (a tuple
    # becomes a list): the results say the same from the start.
    stored = json.loads(text)
    arguments = [row["args_kwargs"] for row in stored]
    key = getattr(task, "unique_key", None)
    fields = {
        "task_path": task.module_path,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "takes_context": task.takes_context,
        "run_after": task.run_after,
        **options,
        **flow.columns(),
        "unique_key": key or "",
        "active_key": key,
    }
    # One producer span for the statement, whatever its number of tasks: each
    # task stores its context, and each run is a child of it (tracing.py).
    count = len(pairs) if len(pairs) > 1 else None
    traced = {tracing.TASK: task.module_path, tracing.BATCH_COUNT: count}
    with tracing.send(tracing.ENQUEUE, task.queue_name, traced) as span:
        fields["trace_context"] = span.context
        if key is not None:
            results = _store_unique(
                objects, task, fields, ids[0], stored[0], len(pairs), sender=sender
            )
            span.set(tracing.MESSAGE_ID, results[0].id)  # the stored task's, or the holder's
            return results
        enqueued = objects.enqueue(fields, text)
        if count is None:
            span.set(tracing.MESSAGE_ID, str(ids[0]))
    results = [
        ready_result(task, id_, enqueued[id_.hex], stored, backend=fields["backend"])
        for id_, stored in zip(ids, arguments, strict=True)
    ]
    for result in results:
        compat.task_enqueued.send(sender=sender, task_result=result)
    return results


def _store_unique(
    objects: QueueManager,
    task: Any,
    fields: dict[str, Any],
    id_: uuid.UUID,
    row: dict[str, Any],
    count: int,
    *,
    sender: type,
) -> list[Any]:
    """The first item (``row``, as the statement takes it) of a unique task,
    stored unless its key is held: the ``count`` results of the task that
    holds the key."""
    text = json.dumps([row])
    arguments = row["args_kwargs"]
    key = fields["active_key"]
    for _ in range(3):
        if enqueued := objects.enqueue(fields, text):
            results = [
                ready_result(task, id_, enqueued[id_.hex], arguments, backend=fields["backend"])
                for _ in range(count)
            ]
            compat.task_enqueued.send(sender=sender, task_result=results[0])
            return results
        existing = objects.using(conf.DATABASE).filter(active_key=key).first()
        if existing is not None:
            return [result_from_row(existing) for _ in range(count)]
        # It finished between the insert and the read: insert again.
    raise IntegrityError(f"could not enqueue unique task {key!r}")


def ready_result(
    task: Any,
    id_: uuid.UUID,
    enqueued_at: dt.datetime | None,
    arguments: Mapping[str, Any],
    *,
    backend: str,
) -> Any:
    """The ``TaskResult`` of a task just stored: what
    :func:`~django_bgtasks.queue.results.result_from_row` reads of its row,
    without reading it, with the ``Task`` as it was enqueued."""
    result: Any = compat.TaskResult(
        task=task,
        id=str(id_),
        status=compat.TaskResultStatus.READY,
        enqueued_at=enqueued_at,
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=list(arguments["args"]),
        kwargs=dict(arguments["kwargs"]),
        backend=backend,
        errors=[],
        worker_ids=[],
    )
    object.__setattr__(result, "_return_value", None)
    return result


def _encoded(rows: list[dict[str, Any]], task: str, *, numbered: bool) -> str:
    """``rows`` as the JSON text the statement takes; a ``TypeError`` naming
    the first item whose arguments JSON can't encode."""
    try:
        return json.dumps(rows, allow_nan=False)
    except (TypeError, ValueError):
        pass  # which item: said below, at the cost of encoding each again
    for index, row in enumerate(rows):
        try:
            json.dumps(row, allow_nan=False)
        except (TypeError, ValueError) as exc:
            item = f"item {index}: " if numbered else ""
            raise TypeError(
                f"{item}the arguments of task {task} must be JSON-encodable: {exc}"
            ) from None
    raise AssertionError("the rows encode one by one but not together")  # pragma: no cover


__all__ = ["ready_result", "store"]
