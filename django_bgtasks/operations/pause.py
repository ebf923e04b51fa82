"""The operator's pause and unpause, written once for every surface: of a
``@background_task`` by its name, or of a Django Tasks queue by its name.

* A paused **task**'s status is ``paused`` (``running`` while a run that
  started before is still going: it finishes as usual). The workers start
  nothing of it: a request, pending or made meanwhile, is kept and run after
  the unpause; a lost run's resume and a failed run's retry wait, and are
  claimed after the unpause if still owed; its schedule's slots are skipped
  and counted, and the next run's ``skipped`` has them (the history counts
  them).
* A paused **queue** claims nothing: no worker takes a ready task of that
  queue name until the unpause, whatever backend alias enqueued it (a worker
  of ``--queue`` picks by name across aliases too); running tasks finish. A
  queue name is refused unless a ``LeaseBackend`` of this site declares it in
  its ``QUEUES`` (or one declares none, and so takes any name); an unpause
  takes any well-formed name, so that a paused queue whose backend is gone
  can still be let go.

Both are stored in the database (the lease row's ``paused_at``, the
``PausedQueue`` table), so every worker of every host obeys the same pause at
its next claim. Each function returns a value that says what happened; bad
input (a malformed name, both or neither of a task and a queue) raises
``ValueError``/``TypeError`` before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.core.states import TaskState
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations.task_reads import task_state
from django_bgtasks.operations.writes import NotRegistered
from django_bgtasks.validation import validate_name, validate_queue_name


# The answers are alike on purpose (and alike writes.py's): a type an answer,
# so that a surface matches on what happened and mypy sees it words every case.
@dataclass(frozen=True, slots=True)
class TaskPaused:
    """The task is paused (``changed`` false: it was already); ``state`` is
    read back after the write."""

    state: TaskState
    changed: bool


@dataclass(frozen=True, slots=True)
class TaskUnpaused:
    """The task is not paused (``changed`` false: it was not); ``state`` is
    read back after the write (``None``: the name has no row)."""

    name: str
    state: TaskState | None
    changed: bool


@dataclass(frozen=True, slots=True)
class QueuePaused:
    """No worker claims from ``queue`` now (``changed`` false: none did before either)."""

    queue: str
    changed: bool


@dataclass(frozen=True, slots=True)
class QueueUnpaused:
    """The workers claim from ``queue`` again (``changed`` false: it was not paused)."""

    queue: str
    changed: bool


@dataclass(frozen=True, slots=True)
class UnknownQueue:
    """No ``LeaseBackend`` of this site has that queue; ``queues`` are the
    names they declare. Nothing was written."""

    queue: str
    queues: tuple[str, ...]


PauseResult = TaskPaused | QueuePaused | NotRegistered | UnknownQueue
UnpauseResult = TaskUnpaused | QueueUnpaused


def pause(name: str | None = None, *, queue: str | None = None) -> PauseResult:
    """Pause the background task ``name``, or the queue ``queue`` (exactly
    one of them); see the module docstring."""
    if _target(name, queue) == "queue":
        queue = validate_queue_name(queue)
        declared, any_name = declared_queues()
        if queue not in declared and not any_name:
            return UnknownQueue(queue, tuple(sorted(declared)))
        return QueuePaused(queue, QueuedTask.objects.pause_queue(queue))
    name = validate_name(name)
    try:
        changed = BackgroundTask.objects.pause(name)
    except UnknownTask:
        return NotRegistered(name, tuple(registered_tasks()))
    state = task_state(name)
    assert state is not None  # the pause wrote its row
    return TaskPaused(state, changed)


def unpause(name: str | None = None, *, queue: str | None = None) -> UnpauseResult:
    """Let the workers start the background task ``name`` again, or claim
    from the queue ``queue`` (exactly one of them)."""
    if _target(name, queue) == "queue":
        queue = validate_queue_name(queue)
        return QueueUnpaused(queue, QueuedTask.objects.unpause_queue(queue))
    name = validate_name(name)
    changed = BackgroundTask.objects.unpause(name)
    return TaskUnpaused(name, task_state(name), changed)


def _target(name: str | None, queue: str | None) -> str:
    """``"task"`` or ``"queue"``: the one rule for what a pause names."""
    if (name is None) == (queue is None):
        raise ValueError("a pause names a background task or a queue, not both or neither")
    return "task" if queue is None else "queue"


def declared_queues() -> tuple[set[str], bool]:
    """The queue names this site's ``LeaseBackend`` aliases declare
    (``QUEUES``), and whether one declares none (so takes any name)."""
    try:
        from django_bgtasks.compat import task_backends
        from django_bgtasks.queue.backend import LeaseBackend
    except ImportError:  # no Tasks framework: no queue
        return set(), False
    names: set[str] = set()
    any_name = False
    for backend in task_backends.all():
        if isinstance(backend, LeaseBackend):
            names |= set(backend.queues)
            any_name = any_name or not backend.queues
    return names, any_name
