"""django-bgtasks: one owner across every replica for long-running background
work, and one truthful shared state, kept in a database lease.

The public names are re-exported here. Nothing heavy is imported until it is
used, so importing this package before Django is set up is safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_bgtasks.exceptions import (
    BgTasksError,
    FenceOnOtherDatabase,
    InAtomicBlock,
    LeaseHeld,
    LeaseLost,
    NotInAtomicBlock,
    TaskCancelled,
    TaskNotImportable,
    TaskTimedOut,
    UnknownTask,
    WorkerStopping,
)

if TYPE_CHECKING:
    from django_bgtasks.background.functions import (
        BackgroundTaskFunction,
        background_task,
        get_task,
        registered_tasks,
    )
    from django_bgtasks.core.runner import RunningLease, alease, lease
    from django_bgtasks.core.states import Lease, TaskState

__all__ = [
    "BackgroundTaskFunction",
    "BgTasksError",
    "FenceOnOtherDatabase",
    "InAtomicBlock",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "NotInAtomicBlock",
    "RunningLease",
    "TaskCancelled",
    "TaskNotImportable",
    "TaskState",
    "TaskTimedOut",
    "UnknownTask",
    "WorkerStopping",
    "alease",
    "background_task",
    "get_task",
    "lease",
    "registered_tasks",
]

_LAZY = {
    "Lease": "core.states",
    "TaskState": "core.states",
    "RunningLease": "core.runner",
    "lease": "core.runner",
    "alease": "core.runner",
    "BackgroundTaskFunction": "background.functions",
    "background_task": "background.functions",
    "get_task": "background.functions",
    "registered_tasks": "background.functions",
}


def __getattr__(name: str) -> Any:
    # The runner imports the models, which need the app registry ready; load
    # it on first use rather than at "import django_bgtasks".
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
