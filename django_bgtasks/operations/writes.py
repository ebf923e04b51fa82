"""The operator layer's writes: start, request cancel and force release, each
written once, and a Django Task's cancel and retry. (Which tasks there are
to show, and their JSON: :mod:`~django_bgtasks.operations.task_reads`.)

The admin, the JSON API and the ``bgtasks`` command call these and only
translate the result into their own form: a message, a status code, an exit
code. Each function returns a small value that says what happened, never a
string for people, so each surface words it in its own way.

Bad input (a malformed name, ttl or token; arguments the task can't take)
raises ``ValueError``/``TypeError`` before anything is written, as the lease
operations do. Every state here is read back from the database after the
write, so what a surface reports is what every replica sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django_bgtasks.background.functions import get_task, registered_tasks
from django_bgtasks.conf import EXECUTOR_WORKER, conf
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.core.states import TaskState
from django_bgtasks.exceptions import UnknownTask
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations.queued import queued_task
from django_bgtasks.queue.manager import FAILED, RUNNING
from django_bgtasks.validation import (
    validate_args,
    validate_kwargs,
    validate_name,
    validate_token,
)


@dataclass(frozen=True, slots=True)
class Started:
    """The task was claimed here and runs in a thread of this process."""

    running: RunningLease


@dataclass(frozen=True, slots=True)
class Requested:
    """``BGTASKS_EXECUTOR = "worker"``: a request was filed; a worker runs it
    (after the current run, if the task is running now)."""

    state: TaskState


@dataclass(frozen=True, slots=True)
class AlreadyRequested:
    """A request for the task is already pending; nothing more was filed."""

    state: TaskState | None


@dataclass(frozen=True, slots=True)
class AlreadyHeld:
    """Another holder has the lease; ``state`` says who (``None`` if the row
    was released and removed in the moment between the claim and the read)."""

    state: TaskState | None


@dataclass(frozen=True, slots=True)
class NotRegistered:
    """No task is registered by that name, so it can't be started."""

    name: str
    registered: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NeverRun:
    """The name has no lease row; ``registered`` says whether it could be started."""

    name: str
    registered: bool


# CancelRequested, Released and NotRunning are alike on purpose (and so are the
# queued answers below): a type an answer, so that a surface matches on what
# happened and mypy sees that it words every case.
@dataclass(frozen=True, slots=True)
class CancelRequested:
    """The holder was asked to stop; it sees this at its next heartbeat."""

    state: TaskState


@dataclass(frozen=True, slots=True)
class Released:
    """The claim was ended; its holder can no longer renew or write through it."""

    state: TaskState


@dataclass(frozen=True, slots=True)
class NotRunning:
    """Nobody holds the lease (for a cancel: nobody live), so nothing was done."""

    state: TaskState


@dataclass(frozen=True, slots=True)
class TookOverSince:
    """The claim the operator named (``token``) no longer holds the lease:
    ``state`` is the claim that holds it, or held it last."""

    token: int
    state: TaskState


StartResult = Started | Requested | AlreadyHeld | AlreadyRequested | NotRegistered
CancelResult = CancelRequested | NotRunning | TookOverSince | NeverRun
ReleaseResult = Released | NotRunning | TookOverSince | NeverRun
_Done = TypeVar("_Done", CancelRequested, Released)


def start(
    name: str,
    *,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    ttl: float | None = None,
    requested_by: str = "",
    executor: str | None = None,
) -> StartResult:
    """Run the registered task ``name`` now, with ``args`` and ``kwargs``: with
    ``BGTASKS_EXECUTOR = "thread"`` (the default) claim it and run it in a
    thread of this process; with ``"worker"``, file a request that a
    ``bgtasks worker`` performs (``request_run()``: also for a task only a
    worker registered). ``executor`` overrides the setting (``bgtasks run``
    always runs here). :class:`NotRegistered` when nothing here (or, for a
    request, no worker) can run it.

    Every surface's arguments meet the same rules here, before anything is
    written: ``args`` a list, ``kwargs`` a dict (``validate_args()``,
    ``validate_kwargs()``; ``None`` is none), and arguments the function
    registered here takes, as the call would (``check_arguments()``, run by
    ``task.start()`` and ``request_run()``): else a ``TypeError`` with the
    reason. A request's arguments must also encode as JSON."""
    name = validate_name(name)
    args, kwargs = validate_args(args), validate_kwargs(kwargs)
    if (executor or conf.EXECUTOR) == EXECUTOR_WORKER:
        # request_run() decides what a worker can run (also a task only the
        # workers import) and whether the task takes these arguments.
        try:
            filed = BackgroundTask.objects.request_run(
                name, args=args, kwargs=kwargs, requested_by=requested_by, ttl=ttl
            )
        except UnknownTask:
            return NotRegistered(name, tuple(registered_tasks()))
        state = BackgroundTask.objects.get_state(name)
        if filed and state is not None:
            return Requested(state)
        return AlreadyRequested(state)
    try:
        task = get_task(name)
    except UnknownTask:
        return NotRegistered(name, tuple(registered_tasks()))
    if ttl is not None:
        task = task.options(ttl=ttl)
    running = task.start(*args, **kwargs)  # checks the arguments before the claim
    if running is None:
        return AlreadyHeld(BackgroundTask.objects.get_state(name))
    return Started(running)


def request_cancel(name: str, *, token: int | None = None) -> CancelResult:
    """Ask the live holder of ``name`` to stop; with ``token``, only that claim,
    so that an operator never cancels a newer run that took over since."""
    requested = BackgroundTask.objects.request_cancel(name, token=token)
    return _answer(name, token, requested, CancelRequested)


def force_release(name: str, *, token: int) -> ReleaseResult:
    """End claim ``token`` of ``name`` (live or silent), recording it as
    released by an operator. Only that claim: the operator confirmed the run
    they saw, never a newer one that took over since."""
    token = _required_token(token)
    released = BackgroundTask.objects.force_release(name, token=token)
    return _answer(name, token, released, Released)


def _answer(
    name: str, token: int | None, done: bool, answer: Callable[[TaskState], _Done]
) -> _Done | NotRunning | TookOverSince | NeverRun:
    """What an operator's cancel or release did, read back after the write:
    ``answer(state)`` when it was ``done``; else why not."""
    state = BackgroundTask.objects.get_state(name)
    if state is None:
        return NeverRun(name, name in registered_tasks())
    if done:
        return answer(state)
    if token is not None and state.token != token:
        return TookOverSince(token, state)
    return NotRunning(state)


def _required_token(token: object) -> int:
    checked = validate_token(token)
    if checked is None:
        raise TypeError("force release needs the token of the claim to end")
    return checked


# --- Django Tasks (django_bgtasks.backend.LeaseBackend) ----------------------------------


@dataclass(frozen=True, slots=True)
class QueuedCancelled:
    """A ready Django Task was failed without running (``started`` false), or a
    running one was asked to stop at its next ``check()`` (``started`` true)."""

    row: QueuedTask
    started: bool


@dataclass(frozen=True, slots=True)
class QueuedFinished:
    """The Django Task had already finished; nothing was done."""

    row: QueuedTask


@dataclass(frozen=True, slots=True)
class QueuedUnknown:
    """No Django Task has that result id."""

    result_id: str


QueuedCancelResult = QueuedCancelled | QueuedFinished | QueuedUnknown


def cancel_queued(result_id: str) -> QueuedCancelResult:
    """An operator's cancel of the Django Task ``result_id``: see :class:`QueuedCancelled`."""
    row = queued_task(result_id)
    if row is None:
        return QueuedUnknown(str(result_id))
    status = QueuedTask.objects.cancel(row.uuid)
    row.refresh_from_db(using=conf.DATABASE)
    if status is None:
        return QueuedFinished(row)
    return QueuedCancelled(row, started=status == RUNNING)


@dataclass(frozen=True, slots=True)
class QueuedRetried:
    """A failed Django Task is ready to run again (``row``, read back after)."""

    row: QueuedTask


@dataclass(frozen=True, slots=True)
class QueuedNotFailed:
    """The Django Task is not failed (``row.status`` says what it is); only a
    failed task is retried, and nothing was done."""

    row: QueuedTask


@dataclass(frozen=True, slots=True)
class QueuedKeyHeld:
    """A failed unique Django Task whose key another task holds, ready or
    running (``holder``; ``None`` if it ended in the moment since): it was
    not retried, so that one run of the key is waiting or running at a time."""

    row: QueuedTask
    holder: QueuedTask | None


QueuedRetryResult = QueuedRetried | QueuedNotFailed | QueuedKeyHeld | QueuedUnknown


def retry_queued(result_id: str) -> QueuedRetryResult:
    """An operator's retry of the failed Django Task ``result_id``, once its
    cause is fixed (``QueuedTask.objects.retry()``): ready to run at once,
    with one more attempt if it had used them all. An id that is no UUID
    names no task: :class:`QueuedUnknown`, with nothing written."""
    row = queued_task(result_id)
    if row is None:
        return QueuedUnknown(str(result_id))
    retried = QueuedTask.objects.retry(row.uuid)
    try:
        row.refresh_from_db(using=conf.DATABASE)
    except QueuedTask.DoesNotExist:  # pruned in the moment since
        return QueuedUnknown(str(result_id))
    if retried:
        return QueuedRetried(row)
    if row.status == FAILED and row.unique_key:
        holder = QueuedTask.objects.using(conf.DATABASE).filter(active_key=row.unique_key).first()
        return QueuedKeyHeld(row, holder)
    return QueuedNotFailed(row)
