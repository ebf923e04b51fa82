"""How the admin and the ``bgtasks`` command put a :class:`TaskState` (and a
:class:`WorkerState`) into words.

Only wording lives here; the rules (status, progress, duration, held) are
properties of :class:`~django_bgtasks.core.states.TaskState` and ``TaskRun``.
``static/django_bgtasks/live.js`` repeats these words in the browser (its
``formatSeconds``, ``progressLabel`` and ``durationOf``), so that a cell the
script updates reads exactly like the one the server rendered. Change both
together.
"""

from __future__ import annotations

import datetime as dt
import inspect
import math
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from django_bgtasks.choices import QueueStatus, Status, WorkerRunStatus
from django_bgtasks.core.states import HeldTask, LostTask, TaskState, WorkerRun, WorkerState
from django_bgtasks.operations.bulk import DONE, BulkResult


def seconds(value: float | None) -> str:
    """``4.2 s``, ``42 s``, ``3 min 5 s`` or ``2 h 5 min``; ``""`` for ``None``."""
    if value is None:
        return ""
    value = max(value, 0.0)
    if value < 10:
        return f"{value:.1f} s"
    if value < 60:
        return f"{math.floor(value)} s"
    minutes, secs = divmod(math.floor(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def ago(value: float | None) -> str:
    """``4.2 s ago``, for a heartbeat age; ``""`` for ``None``."""
    return "" if value is None else f"{seconds(value)} ago"


def status_text(state: TaskState) -> str:
    """The badge: the status, and for a stale lease how long its holder has been silent."""
    if state.status == Status.STALE:
        return f"stale: holder silent for {seconds(state.heartbeat_age)}"
    return str(state.status)


def progress_label(state: TaskState) -> str:
    """``45%`` or ``45% (9/20)``; ``""`` when the value reports no progress.

    Rounded down, so that 100% means done."""
    progress = state.progress
    if progress is None:
        return ""
    label = f"{math.floor(progress * 100)}%"
    value: Any = state.value
    if isinstance(value, dict) and "done" in value and "total" in value:
        label += f" ({_number(value['done'])}/{_number(value['total'])})"
    return label


def _number(value: Any) -> str:
    # As JavaScript's String() writes it: 3.0 is "3".
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def when(value: dt.datetime | None) -> str:
    """A time in the current time zone, to the second."""
    if value is None:
        return ""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def worker_status(worker: WorkerState) -> str:
    """``live``, or ``silent: last seen 3 min 5 s ago`` for a worker whose
    last beat is older than its ttl (by the database's clock)."""
    if worker.silent:
        return f"silent: last seen {ago(worker.age)}"
    return "live"


def worker_runs(worker: WorkerState) -> str:
    """What a worker runs: its background runs (:func:`background_runs`),
    then the Django Tasks whose rows it holds (:func:`held_task`), then
    those taken back from it once it was lost (:func:`lost_task`)."""
    held = "; ".join(map(held_task, worker.django_tasks))
    lost = "; ".join(map(lost_task, worker.lost_tasks))
    parts = (
        background_runs(worker),
        f"{HELD_TASKS}: {held}" if held else "",
        f"{LOST_TASKS}: {lost}" if lost else "",
    )
    return "; ".join(part for part in parts if part)


# What the lists of a worker's Django Tasks begin with.
HELD_TASKS = "Django Tasks"
LOST_TASKS = "lost Django Tasks"


def background_runs(worker: WorkerState) -> str:
    """A live worker's task names; a silent worker's, each with what became
    of it (:func:`worker_run`), after ``was running``."""
    if not worker.silent:
        return ", ".join(worker.running)
    return "was running " + "; ".join(map(worker_run, worker.runs)) if worker.runs else ""


def held_task(task: HeldTask) -> str:
    """A Django Task a worker holds: its path and id, and :func:`held_state`."""
    return f"{task.task} {task.id} ({held_state(task)})"


def lost_task(task: LostTask) -> str:
    """A Django Task taken back from a lost worker: its path and id, and
    :func:`lost_state`."""
    return f"{task.task or '?'} {task.id} ({lost_state(task)})"


def lost_state(task: LostTask) -> str:
    """What became of a Django Task taken back from a lost worker, as its
    row says now. (A row made ready keeps the lost worker as its owner until
    the next claim: READY names no one.)"""
    if not task.status:
        return "no longer in the table"
    if task.status == QueueStatus.READY:
        return "back in the queue"
    if task.status == QueueStatus.RUNNING:
        return f"running again, on {task.owner}"
    return f"{task.status.lower()} on {task.owner}"


def held_state(task: HeldTask) -> str:
    """Since when a worker holds a Django Task; for a stale one (its worker
    silent past its ttl), what comes of it."""
    if task.stale:
        return (
            "no heartbeat within its ttl: a worker's next poll puts it back in the "
            "queue, or fails it"
        )
    return f"since {when(task.started_at)}"


def worker_run(run: WorkerRun) -> str:
    """One run of a silent worker, as its lease row says it is now."""
    if run.status == WorkerRunStatus.RUNNING:
        return run.name
    if run.status == WorkerRunStatus.HELD:
        return (
            f"{run.name} (lease still held, heartbeat {ago(run.heartbeat_age)}: "
            "taken over if it goes a ttl without one)"
        )
    if run.status == WorkerRunStatus.STALE:
        return (
            f"{run.name} (lease stale, no heartbeat for {seconds(run.heartbeat_age)}: "
            "a worker that runs it takes it over or records it lost at its next poll)"
        )
    if run.status == WorkerRunStatus.TAKEN_OVER:
        return f"{run.name} (taken over by {run.owner}, token {run.token})"
    return f"{run.name} (ended: {run.outcome or 'no row'})"


def parameters(func: Callable[..., Any]) -> tuple[str, bool]:
    """What a ``@background_task`` function takes after its lease, as Python
    writes a signature without its annotations (``(numbers, total=3)``), and
    whether any of it is required; ``("", False)`` for a function whose
    signature Python can't read."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # some builtins and C callables
        return "", False
    taken = [
        parameter.replace(annotation=inspect.Parameter.empty)
        for parameter in list(signature.parameters.values())[1:]
    ]
    required = any(
        parameter.default is inspect.Parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        for parameter in taken
    )
    text = str(signature.replace(parameters=taken, return_annotation=inspect.Signature.empty))
    return text, required


def bulk_result(result: BulkResult) -> str:
    """What a bulk action did (operations/bulk.py), in a sentence."""
    done = f"{DONE[result.action].capitalize()} {result.done} of the {result.matched} "
    text = done + "Django Tasks the filter matched"
    if result.stopping:
        text += f"; asked {result.stopping} running to stop at their next check()"
    if result.skipped:
        why = {
            "retry": "not failed, or another run of their unique key is ready or running",
            "cancel": "already finished",
            "delete": "running: cancel them first",
        }[result.action]
        text += f"; {result.skipped} skipped ({why})"
    return text + "."
