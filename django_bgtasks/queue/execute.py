"""Running one queued Django Task under its lease: :func:`execute` and
:class:`QueuedLease`, and the helper a task function reaches its lease with,
:func:`task_lease`.

The worker (:mod:`django_bgtasks.worker`) claims a row
(``QueuedTask.objects.claim()``) and hands it to :func:`execute`, which runs
the function with the row's lease renewed every ``BGTASKS_HEARTBEAT_INTERVAL``
(a third of the ttl by default), by the worker's one renewal of every lease
it holds (:mod:`django_bgtasks.worker.renewal`) or else a heartbeat thread of
its own, then ends the run with one fenced statement:

* returned: ``SUCCESSFUL``, with the JSON of the return value;
* returned a value that can't be stored (it does not encode, or is larger
  than ``BGTASKS_MAX_VALUE_BYTES``): ``FAILED`` with that error, never
  retried, since the work is done (Django's own backends fail it too);
* raised (any ``BaseException``: ``SystemExit`` and ``KeyboardInterrupt``
  too), or a ``task_started`` receiver raised: ``READY`` again while attempts
  remain (the next claim raises the token), else ``FAILED``; each attempt's
  error is kept, with its traceback;
* its task can't be imported here (an old release's worker, during a
  deploy): ``READY`` again, the attempt given back, for a worker that can
  (``_not_importable``), until none has for ``IMPORT_DEADLINE``: ``FAILED``;
* cancelled by an operator (seen by ``check()``/``update()``): ``FAILED``;
* past the task's ``timeout`` (``TaskTimedOut`` at ``check()``/``update()``,
  or, for a run that did not stop within its worker's grace, ended by the
  worker's renewer: ``QueuedLease.time_out()``): ``READY`` again while
  attempts remain, else ``FAILED``, with that error;
* a retry waits the task's ``retry_delay`` (doubling, capped, with jitter:
  ``LeaseTask.retry_delay_for``): ``run_after`` is set by the database's
  clock in the statement that records the failed attempt;
* the worker is stopping (``WorkerStopping``): ``READY`` again, the attempt
  given back, for the next worker; the same when a worker stopping at once
  ends the run from its main thread (:meth:`QueuedLease.interrupt`);
* lease lost (the heartbeat was refused, or none succeeded for a ttl):
  nothing is written; the row is the recovery's (``QueuedTask.objects.recover()``).

The end is written with the ends of the process's other runs that came
meanwhile, in one ``finish_many`` (group commit, :mod:`~django_bgtasks.queue.groups`:
at once when no write is on its way, else in the next one), each row still
fenced by its own token; the run's thread waits for its row's outcome, so
what it logs, signals and returns is what was committed.

The ``Task`` and its ``TaskResult`` are built from what the row holds by
:mod:`~django_bgtasks.queue.results`, as the backend builds them.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured

from django_bgtasks import compat, limits, tracing
from django_bgtasks.choices import Outcome
from django_bgtasks.core.holding import Holder, Renews
from django_bgtasks.db.shared import RENEW_QUEUED
from django_bgtasks.exceptions import (
    LeaseLost,
    TaskCancelled,
    TaskNotImportable,
    TaskTimedOut,
    WorkerStopping,
)
from django_bgtasks.queue.groups import Group
from django_bgtasks.queue.manager import (
    ENDED_LATE,
    FAILED,
    READY,
    RUNNING,
    SUCCESSFUL,
    Claim,
    Ending,
    QueueManager,
)
from django_bgtasks.queue.results import enqueued_task, running_result
from django_bgtasks.validation import clean_error, encode_value

logger = logging.getLogger("django_bgtasks.queued")
_T = TypeVar("_T")

_current: contextvars.ContextVar[QueuedLease | None] = contextvars.ContextVar(
    "bgtasks_queued_lease", default=None
)
# A run's outcome on its span when nothing could be written (tracing.py),
# or its worker had ended it past its timeout.
LOST: str = Outcome.LOST.value
_OUTCOMES = {RUNNING: LOST, ENDED_LATE: Outcome.TIMED_OUT.value}
# The runs going on in this process, for a worker that stops at once and must
# hand its runs back from its main thread (running_leases()).
_running: set[QueuedLease] = set()
_running_lock = threading.Lock()


class QueuedLease(Holder):
    """The lease of a queued task while it runs here. ``update(progress)``
    stores progress and renews; ``check()`` raises :class:`TaskCancelled`
    (an operator's cancel), :class:`WorkerStopping` (the worker's graceful
    stop) or :class:`LeaseLost`."""

    logger = logger
    describe = "queued task {}"
    refused = "the task was recovered or its lease taken over"

    @property
    def described(self) -> str:
        """How log lines name the run: its task's path and id, and its worker."""
        return self.claim.described

    def __init__(
        self,
        claim: Claim,
        *,
        stopping: threading.Event | None = None,
        renewer: Renews | None = None,
    ) -> None:
        self.claim = claim
        super().__init__(claim, stopping=stopping, renewer=renewer)
        # When the run ended, by the database's clock (set by the finish).
        self.finished_at: dt.datetime | None = None
        # What writes the run's end and returns what its finish returned: the
        # process's group of ends, or the worker's (execute()'s write_end).
        self.write_end: Callable[[Ending], dt.datetime | bool | None] = _ends.submit
        # The Task it runs, its running TaskResult and the signals' sender,
        # once loaded (_execute): what an end by time_out() needs too.
        self.task: Any = None
        self.result: Any = None
        self.sender: type | None = None

    @property
    def name(self) -> str:
        """How the task is named in errors: its path and result id."""
        return f"{self.claim.task_path} {self.claim.uuid}"

    @property
    def attempt(self) -> int:
        """1 on the first run, 2 on the first retry, ..."""
        return self.claim.attempts

    def update(self, progress: Any) -> None:
        """Store ``progress`` (JSON) and renew, then :meth:`check`."""
        if self._timed_out:  # (its worker may have ended it: told so, not lost)
            self._raise_if_told()
        self._raise_if_lost()
        encode_value(progress, kind="progress")  # a bad value raises before any SQL
        self.renew_now(progress=progress, set_progress=True)
        self.check()

    def interrupt(self) -> str:
        """End the run from another thread while the task may still be going:
        ``READY`` again with the attempt given back, as a graceful stop's
        :class:`WorkerStopping` does (fenced by the claim's token). For a
        worker stopping at once, whose process exits right after. Returns the
        status the row was left in (``RUNNING``: nothing written, the run had
        ended or its lease was lost)."""
        if not self._begin_end():
            return RUNNING
        self._stop_heartbeat()
        return _finish(self, READY, refund=True, ending=False)

    def end_timed_out(self, exc: TaskTimedOut) -> str:
        """For :meth:`~django_bgtasks.core.holding.Holder.time_out`: the run ends
        as one that raised ``exc`` does (``READY`` after its retry delay while
        attempts remain, else ``FAILED``). Returns the status the row was left
        in (``RUNNING``: nothing written, the run had ended or its lease was lost)."""
        if not self._begin_end():
            return RUNNING
        self._stop_heartbeat()
        return _failed(self, exc, ending=False)

    # --- the heartbeat -------------------------------------------------------------

    def renewal_key(self) -> tuple[str, Any, str, int]:
        """A queued row, by its seq (see :meth:`Holder.renewal_key`)."""
        return RENEW_QUEUED, self.claim.seq, self.owner, self.token

    def beat_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew_now(stop=self._stop)

    def renew_now(
        self,
        *,
        progress: Any = None,
        set_progress: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        def attempt() -> tuple[float, bool | None]:
            sent = time.monotonic()
            return sent, _queue().renew(self.claim, progress=progress, set_progress=set_progress)

        sent, answer = self._retrying(attempt, stop=stop)
        if answer is None:
            self.renewal_refused()
            self._raise_if_lost()
            return
        self.renewed(sent, cancel_requested=answer)


def _queue() -> QueueManager:
    """``QueuedTask.objects``. The models are imported here, not at the top:
    django_bgtasks.backend imports this module, and Django's Tasks framework
    imports the backend even where this app is not installed, where importing
    the models raises RuntimeError (the backend's check says bgtasks.E018)."""
    from django_bgtasks.models import QueuedTask

    return QueuedTask.objects


def _write_ends(ends: list[Ending]) -> list[dt.datetime | bool | None]:
    """One ``finish_many`` for ``ends``: what each row's finish returned."""
    written = _queue().finish_many(ends)
    return [written.get(ending.seq) for ending in ends]


# The process's runs' ends, written together (group commit: queue/groups.py).
_ends: Group[Ending, dt.datetime | bool | None] = Group(_write_ends)


def running_leases(owner: str) -> list[QueuedLease]:
    """The leases of the queued tasks that worker ``owner`` is running in this process."""
    with _running_lock:
        return [lease for lease in _running if lease.claim.owner == owner]


def task_lease(context: Any = None) -> QueuedLease:
    """The lease of the queued task running in this thread (its ``update()``
    and ``check()``), for a task function run by ``bgtasks worker``. Pass the
    ``context`` of a ``takes_context=True`` task to have it checked that the
    lease is that task's. Raises ``LookupError`` outside such a run."""
    running = _current.get()
    if running is None:
        raise LookupError("task_lease() is only available inside a task run by bgtasks worker")
    if context is not None and str(context.task_result.id) != str(running.claim.uuid):
        raise LookupError("this context is not the running task's")
    return running


def execute(
    claim: Claim,
    *,
    stopping: threading.Event | None = None,
    renewer: Renews | None = None,
    write_end: Callable[[Ending], dt.datetime | bool | None] | None = None,
) -> str:
    """Run ``claim``'s task here under its lease and record how it ended (see
    the module docstring). Returns the status it was left in (``RUNNING``
    when the lease was lost and nothing could be written). A worker passes
    its ``renewer``, which renews the lease with the others it holds; else
    the lease has a heartbeat thread of its own. ``write_end`` writes the
    end (returning what ``QueuedTask.objects.finish`` would): a worker's
    threads write it with their next claim; by default it goes with the
    process's other ends."""
    lease = QueuedLease(claim, stopping=stopping, renewer=renewer)
    if write_end is not None:
        lease.write_end = write_end
    with _running_lock:
        _running.add(lease)
    traced = {
        tracing.TASK: claim.task_path,
        tracing.MESSAGE_ID: str(claim.uuid),
        tracing.TOKEN: claim.token,
        tracing.ATTEMPT: claim.attempts,
        tracing.CLIENT_ID: claim.owner,
    }
    # The run's consumer span, the task's spans inside it (tracing.py).
    with tracing.run(claim.queue_name, claim.trace_context, traced) as span:
        try:
            status = _execute(lease, claim, span)
        finally:
            with _running_lock:
                _running.discard(lease)
        # RUNNING: nothing was written, the lease was lost.
        span.set(tracing.OUTCOME, _OUTCOMES.get(status, status))
        if status == RUNNING:
            span.failed(None, "the lease was lost")
        return status


def _execute(lease: QueuedLease, claim: Claim, span: tracing.Span) -> str:
    try:
        task = enqueued_task(claim)
    except ImportError as exc:  # another release's task, perhaps: not this worker's to fail
        span.failed(exc)
        return _not_importable(lease, exc)
    except Exception as exc:  # nothing to run: no attempt can succeed
        span.failed(exc)
        return _finish(lease, FAILED, error=_error(exc))
    result = running_result(task, claim)
    sender = type(task.get_backend())
    lease.task, lease.result, lease.sender = task, result, sender
    lease.timeout = getattr(task, "timeout", None)
    lease._start_heartbeat(f"bgtasks-queued:{claim.uuid}")
    token = _current.set(lease)
    try:
        # Inside the try, as django-tasks-db's worker sends it: a receiver that
        # raises fails this attempt like the task raising, instead of leaving
        # the row RUNNING until its ttl.
        compat.task_started.send(sender=sender, task_result=result)
        if task.takes_context:
            context: Any = compat.TaskContext(task_result=result)
            value = task.call(context, *claim.args, **claim.kwargs)
        else:
            value = task.call(*claim.args, **claim.kwargs)
    except LeaseLost:
        lease._stop_heartbeat()
        return RUNNING
    except WorkerStopping:
        lease._stop_heartbeat()
        return _finish(lease, READY, refund=True)
    except TaskTimedOut as exc:
        lease._stop_heartbeat()
        logger.warning("%s: %s (attempt %d)", lease.described, exc, claim.attempts)
        return _failed(lease, exc)
    except TaskCancelled as exc:
        lease._stop_heartbeat()
        return _finished(lease, result, sender, FAILED, error=_error(exc))
    except BaseException as exc:
        # Any BaseException too (SystemExit, KeyboardInterrupt, GeneratorExit,
        # a task's own): in a worker's queue thread it can only come from the
        # task, since signals reach the main thread only (and the command makes
        # SIGINT a graceful stop). Re-raised, it would end the thread for good
        # and leave the row RUNNING until its ttl.
        lease._stop_heartbeat()
        logger.exception("%s failed on attempt %d", lease.described, claim.attempts)
        span.failed(exc)
        return _failed(lease, exc)
    finally:
        _current.reset(token)
        # (Again: stopping is idempotent, and must happen on every way out.)
        lease._stop_heartbeat()
    if lease.timed_out and lease.ended_elsewhere:
        logger.info(
            "%s: returned after its worker had ended it past its timeout (%g s); its "
            "return is dropped",
            lease.described,
            lease.timeout or 0,
        )
        return ENDED_LATE
    if lease.lost:
        return RUNNING
    try:
        return_value = encode_value(value, kind="return value")
    except Exception as exc:  # also whatever a lazy string's str() raises
        # Outside the task's try: its work is done, so this must never make it
        # run again. FAILED, as Django's own backends end it, with no retry.
        logger.error("%s: its return value can't be stored: %s", lease.described, exc)
        span.failed(exc)
        return _finished(lease, result, sender, FAILED, error=_error(exc))
    return _finished(lease, result, sender, SUCCESSFUL, return_value=return_value)


def _not_importable(lease: QueuedLease, exc: ImportError) -> str:
    """End a run whose task this worker can't import (its module, or the
    function in it). During a rolling deploy that is a new task an old
    worker claimed, which a new worker can run: ``READY`` again with the
    attempt given back and :class:`TaskNotImportable` kept (what the
    operator's views show as waiting for a worker that can import it), after
    a delay that doubles from 1 s with each hand-back, at most
    ``limits.MAX_IMPORT_RETRY_DELAY``, so that old workers don't spin on it.
    Once no worker has imported it for the backend's ``IMPORT_DEADLINE``
    since its first claim (the database's clock: the claims' times), it ends
    ``FAILED`` with the import error itself."""
    claim = lease.claim
    deadline = _import_deadline(claim.backend)
    waited = (
        (claim.last_attempted_at - claim.started_at).total_seconds()
        if claim.last_attempted_at is not None and claim.started_at is not None
        else 0.0
    )
    if waited >= deadline:
        logger.error(
            "queued task %s: no worker could import it for %g s (IMPORT_DEADLINE): "
            "FAILED on worker %s with %s: %s",
            lease.name,
            deadline,
            claim.owner,
            type(exc).__name__,
            exc,
        )
        return _finish(lease, FAILED, error=_error(exc))
    # A claim adds its worker to worker_ids, an attempt given back takes its
    # attempt off: their difference counts the hand-backs before this one.
    handbacks = max(len(claim.worker_ids) - claim.attempts, 0)
    delay = min(2.0 ** min(handbacks, 16), limits.MAX_IMPORT_RETRY_DELAY)
    logger.warning(
        "queued task %s: worker %s can't import it (%s: %s); back in the queue for "
        "a worker that can, in %g s (FAILED if none has for %g s)",
        lease.name,
        claim.owner,
        type(exc).__name__,
        exc,
        delay,
        deadline,
    )
    kept = TaskNotImportable(claim.task_path, claim.owner, exc)
    return _finish(lease, READY, error=_error(kept), refund=True, delay=delay)


def _import_deadline(alias: str) -> float:
    """``IMPORT_DEADLINE`` of the backend ``alias``
    (``LeaseBackend.import_deadline_seconds``), or the default where this
    process has no such ``LeaseBackend``."""
    try:
        backend = compat.task_backends[alias]
    except ImproperlyConfigured:  # InvalidTaskBackend: unknown here, as the task is
        return limits.IMPORT_DEADLINE
    seconds = getattr(backend, "import_deadline_seconds", None)
    return seconds() if seconds is not None else limits.IMPORT_DEADLINE


def _failed(lease: QueuedLease, exc: BaseException, *, ending: bool = True) -> str:
    """End a run that raised ``exc`` (or timed out): ``READY`` again after
    the task's retry delay while attempts remain (and no cancel came), else
    ``FAILED``; the error is kept either way."""
    claim = lease.claim
    if claim.attempts < claim.max_attempts and not lease.cancel_requested:
        retry_delay_for = getattr(lease.task, "retry_delay_for", None)
        delay = retry_delay_for(claim.attempts) if retry_delay_for is not None else 0.0
        return _finish(lease, READY, error=_error(exc), delay=delay, ending=ending)
    if lease.sender is None:  # (never: set before the task ran)
        return _finish(lease, FAILED, error=_error(exc), ending=ending)
    return _finished(lease, lease.result, lease.sender, FAILED, error=_error(exc), ending=ending)


def _finished(
    lease: QueuedLease,
    result: Any,
    sender: type,
    status: str,
    *,
    return_value: str | None = None,
    error: dict[str, str] | None = None,
    ending: bool = True,
) -> str:
    """End the run for good (succeeded or failed), then send ``task_finished``
    with the result as it ended."""
    ended = _finish(lease, status, return_value=return_value, error=error, ending=ending)
    if ended != status:
        return ended
    object.__setattr__(result, "status", compat.TaskResultStatus(status))
    object.__setattr__(result, "finished_at", lease.finished_at)
    value = None if return_value is None else json.loads(return_value)
    object.__setattr__(result, "_return_value", value)
    if error is not None:
        result.errors.append(
            compat.TaskError(
                exception_class_path=error["exception_class_path"], traceback=error["traceback"]
            )
        )
    compat.task_finished.send(sender=sender, task_result=result)
    return status


# Its parameters are alike QueueManager.finish()'s on purpose: it passes each on.
def _finish(
    lease: QueuedLease,
    status: str,
    *,
    return_value: str | None = None,
    error: dict[str, str] | None = None,
    refund: bool = False,
    delay: float = 0.0,
    ending: bool = True,
) -> str:
    """Write the run's end (``delay``: a retry's, see ``Ending``), retried
    through a database outage while the lease can still be valid (the write
    is fenced, so a retry is safe). A retry
    first asks whether the try before it landed, its reply lost with the
    connection: the end is then written already, and this run did end."""
    if ending and not lease._begin_end():
        return RUNNING  # interrupt() ended it: this thread's end comes too late
    if lease.lost:
        return RUNNING
    tries = 0

    def attempt() -> dt.datetime | bool | None:
        nonlocal tries
        tries += 1
        if tries > 1 and (landed := _queue().ended(lease.claim, status=status)) is not None:
            return landed
        claim = lease.claim
        ending = Ending(
            claim.seq, claim.owner, claim.token, status, return_value, error, refund, delay
        )
        return lease.write_end(ending)

    try:
        written = lease._retrying(attempt)
    except LeaseLost:
        return RUNNING  # (logged as lost when it was declared)
    if isinstance(written, dt.datetime):
        lease.finished_at = written
    if written is None:
        logger.warning("%s: its lease was lost before it ended", lease.described)
        return RUNNING
    return status


def _error(exc: BaseException) -> dict[str, str]:
    kind = type(exc)
    return {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": clean_error("".join(traceback.format_exception(exc))),
    }


__all__ = ["QueuedLease", "execute", "running_leases", "task_lease"]
