"""The operator layer's reads of the background tasks: which tasks there
are to show, and the one JSON shape of each.

``task_states()`` and ``task_state()`` are the one rule for what a surface
lists: every task with a row, and every registered task, also one that has
never run (its state then says ``never run``). ``task_json()`` is the one JSON
shape of a task, for the API and ``bgtasks --json``. The writes are
:mod:`~django_bgtasks.operations.writes`'.
"""

from __future__ import annotations

from typing import Any

from django_bgtasks.background.functions import BackgroundTaskFunction, get_task, registered_tasks
from django_bgtasks.core.states import TaskState
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.models import BackgroundTask


def task_states() -> list[TaskState]:
    """Every task's state, by name: each lease row's, and for each registered
    task that has no row yet, :meth:`TaskState.never_run`."""
    states = {state.name: state for state in BackgroundTask.objects.list_states()}
    for name, task in registered_tasks().items():
        if name not in states:
            states[name] = _never_run(task)
    return [states[name] for name in sorted(states)]


def task_state(name: str) -> TaskState | None:
    """``name``'s state: its row's, or ``never run`` for a registered task with
    no row; ``None`` for a name that neither has a row nor is registered."""
    state = BackgroundTask.objects.get_state(name)
    if state is not None:
        return state
    try:
        task = get_task(name)
    except UnknownTask:
        return None
    return _never_run(task)


def task_json(state: TaskState) -> dict[str, Any]:
    """``state.as_json()``, and for a registered task its ``schedule`` (the
    one workers follow, as text; ``""`` for none) and ``description``."""
    data = state.as_json()
    try:
        task = get_task(state.name)
    except UnknownTask:
        return data
    data["schedule"] = schedule_text(task)
    data["description"] = task.description
    return data


def schedule_text(task: BackgroundTaskFunction[..., Any]) -> str:
    """The schedule workers follow for ``task``, as text: ``""`` for none, and
    also for a ``BGTASKS_SCHEDULES`` entry that is no schedule (bgtasks.E008)."""
    try:
        schedule = task.effective_schedule
    except (TypeError, ValueError):
        return ""
    return schedule.text if schedule is not None else ""


def _never_run(task: BackgroundTaskFunction[..., Any]) -> TaskState:
    return TaskState.never_run(task.name, task.effective_ttl)
