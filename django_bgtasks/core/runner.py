"""Running work under a lease: ``lease()``, ``alease()`` and :class:`RunningLease`.

While the body runs, a heartbeat thread renews the lease every
``BGTASKS_HEARTBEAT_INTERVAL`` (a third of the ttl by default) on its own
connection, so a body that is silent for minutes keeps its lease.

The holder gives the lease up as *lost* by the renew-deadline rule that every
holder here shares (:mod:`django_bgtasks.core.holding`).

A lost lease is never released by its old holder: ``check()``, ``update()`` and
``fence()`` raise :class:`LeaseLost`, and the next claim records the run as lost.

Failures are logged on the ``django_bgtasks`` logger, where error trackers
(Sentry's logging integration, ...) pick them up: a run that raises, once, with
``logger.exception`` in :meth:`RunningLease.finish` (which every way of running
work ends in), and a lost lease as a warning. Each record carries the lease in
``extra`` (:meth:`RunningLease.log_extra`: ``task``, ``token``, ``owner``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from django_bgtasks.background import registry
from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.core.holding import Holder, Renews
from django_bgtasks.core.leases import KEEP_VALUE
from django_bgtasks.core.progress import NOTHING, Progress
from django_bgtasks.core.states import Lease, Renewal, WorkClaim
from django_bgtasks.db.shared import RENEW_TASK
from django_bgtasks.exceptions import (
    LeaseHeld,
    LeaseLost,
    TaskCancelled,
    TaskTimedOut,
    WorkerStopping,
)
from django_bgtasks.models import BackgroundTask
from django_bgtasks.signals import lease_claimed, lease_lost, lease_released
from django_bgtasks.validation import (
    encode_result,
    encode_value,
    heartbeat_interval,
    max_value_bytes,
    progress_interval,
    validate_ttl,
)

logger = logging.getLogger("django_bgtasks")

_T = TypeVar("_T")


class RunningLease(Holder):
    """A lease this process holds while its work runs.

    ``name``, ``owner``, ``token`` and ``ttl`` are those of the claim. Call
    ``update(value)`` to report progress and ``check()`` between steps; both
    raise :class:`LeaseLost` or :class:`TaskCancelled` when the work must stop.
    """

    logger = logger
    describe = "lease {!r}"

    def __init__(
        self,
        lease: Lease,
        *,
        attempt: int = 1,
        trigger: str = Trigger.MANUAL,
        resume_from: Any = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.lease = lease
        super().__init__(lease, stopping=stopping)
        self.attempt = attempt
        self.trigger = trigger
        self.resume_from = resume_from
        # Writes of the value (the body's and the heartbeat thread's) go one
        # at a time, so an older value never lands after a newer one.
        self._write_lock = threading.Lock()
        self._progress: Progress = Progress(progress_interval())
        self._max_bytes = max_value_bytes()
        self._done = threading.Event()
        self.result: Any = None
        self.exception: BaseException | None = None
        # How the run ended (an ``Outcome``), once it was released; ``None``
        # before, and when the lease was lost.
        self.outcome: str | None = None

    @property
    def name(self) -> str:
        """The task name."""
        return self.lease.name

    # --- what the work calls -----------------------------------------------------

    def update(self, value: Any, *, flush: bool = False) -> None:
        """Report ``value`` (progress, partial results).

        Calls closer together than ``BGTASKS_PROGRESS_INTERVAL`` are coalesced
        (django_bgtasks.progress): the first call, one after a quiet interval
        and ``flush=True`` write ``value`` and renew the lease before they
        return; otherwise the latest value is written within the interval,
        by a later call or the heartbeat thread, and at the latest by the
        release. A value JSON can't encode raises ``TypeError`` at once.

        A database that can't be reached is retried until the renew deadline.
        Then, or if the lease was taken over, raises :class:`LeaseLost` with
        nothing written. Raises :class:`TaskCancelled` (after a write) if an
        operator asked to stop, as the last heartbeat or write learned it.
        """
        # Inline, as a progress bar calls this per item (a timed-out run is told, not lost).
        if self._lost is not None or self._timed_out or self._deadline <= time.monotonic():
            self.check()
        # Refused here, not later in the heartbeat thread.
        encode_value(value, max_bytes=self._max_bytes)
        if self._progress.offer(value, flush=flush):
            self.renew_now()  # raises LeaseLost itself
        self._raise_if_told()  # check() without its second look at the deadline: cheap

    async def aupdate(self, value: Any, *, flush: bool = False) -> None:
        """``update()`` for async code."""
        await sync_to_async(self.update)(value, flush=flush)

    def fence(self, *, using: str | None = None) -> None:
        """Lock the lease row for the caller's current transaction.

        Call it first inside ``transaction.atomic(using=<BGTASKS_DATABASE>)``:
        until that transaction ends, nobody can take the lease over, so the
        transaction's writes commit only while this token holds the lease.
        Raises :class:`LeaseLost`, so the transaction rolls back, if it does not.
        Keep fenced transactions shorter than the ttl: renewals wait for them.

        It guards writes to the lease database only: ``using`` (another
        alias), or a transaction open on another alias, raises
        :class:`~django_bgtasks.exceptions.FenceOnOtherDatabase` (see
        :meth:`LeaseManager.fence <django_bgtasks.leases.LeaseManager.fence>`).
        """
        self._raise_if_lost()
        self._own_heartbeat()  # (a worker's run: see there)
        if not BackgroundTask.objects.fence(self.name, self.owner, self.token, using=using):
            self.renewal_refused()
            self._raise_if_lost()

    def wait(self, timeout: float | None = None) -> bool:
        """For ``.start()``: wait until the work has finished; ``False`` on timeout."""
        return self._done.wait(timeout)

    # --- lifecycle ---------------------------------------------------------------

    # Its parameters are alike LeaseManager.try_claim()'s on purpose: it passes each on.
    @classmethod
    def claim(
        cls,
        name: str,
        *,
        ttl: float | None = None,
        value: Any = None,
        owner: str | None = None,
        run_args: dict[str, Any] | None = None,
        wait: float | None = None,
    ) -> RunningLease | None:
        """Claim ``name`` and start renewing it, or return ``None`` if it is
        held (after waiting up to ``wait`` seconds for it, if given)."""
        ttl = validate_ttl(ttl)
        heartbeat_interval(ttl)  # bad settings are refused before the claim
        progress_interval()
        max_value_bytes()
        lease = BackgroundTask.objects.try_claim(
            name, owner, value, ttl=ttl, run_args=run_args, wait=wait
        )
        if lease is None:
            return None
        return cls(lease)._started()

    @classmethod
    def from_work(
        cls, claim: WorkClaim, trigger: str, stopping: threading.Event, renewer: Renews
    ) -> RunningLease:
        """A worker's claim, renewed by the worker's ``renewer`` (which judges
        the ``timeout`` its registered task declares), stopped by ``stopping``."""
        running = cls(
            claim.lease,
            attempt=claim.attempt,
            trigger=trigger,
            resume_from=claim.resume_from,
            stopping=stopping,
        )
        running._renewer = renewer
        running.timeout = getattr(registry.get(running.name), "timeout", None)
        return running._started()

    def _started(self) -> RunningLease:
        self._start_heartbeat(f"bgtasks-heartbeat:{self.name}")
        lease_claimed.send(BackgroundTask, name=self.name, owner=self.owner, token=self.token)
        return self

    def finish(self, exc: BaseException | None, *, result: Any = None) -> bool:
        """Stop renewing and release with the outcome ``exc`` implies
        (:func:`_outcome`), storing ``result`` (what the work returned) with
        the run. A lost lease is not released. If the work itself succeeded,
        the loss is raised as :class:`LeaseLost`, since it ran without the
        lease for a while; otherwise the work's own exception propagates.
        ``True`` if it was released here."""
        if not self._begin_end():
            return False  # interrupt() released it: this thread's end comes too late
        self._stop_heartbeat()
        try:
            ended = _outcome(self, exc, result)
            if ended is None:
                return False  # a lost lease is not released
            try:
                self._release(*ended, result)
            except LeaseLost:
                if exc is None:
                    raise
                return False
            return True
        finally:
            self._done.set()

    def interrupt(self) -> bool:
        """End the run from another thread while its work may still be going:
        released ``interrupted``, as a graceful stop's :class:`WorkerStopping`
        is (fenced by the token), so that it is handed over at once. For a
        worker stopping at once (a second SIGTERM/SIGINT), whose process exits
        right after. ``False`` when the run had already ended, or its lease
        was lost: nothing is written then."""
        return self.finish(WorkerStopping(self.name))

    end_timed_out = finish  # released timed-out (retried while attempts remain)

    def _release(self, outcome: str, error: str, result: Any) -> None:
        if self._progress.take() is None:
            self.renew_now()  # release's final_value=None means "keep": write it first
        final = self._progress.take()
        released = self._retrying(
            lambda: BackgroundTask.objects.release(
                self.name,
                self.owner,
                None if final is NOTHING else final,
                token=self.token,
                outcome=outcome,
                error=error,
                result=result,
            )
        )
        if not released:
            self.renewal_refused()
            self._raise_if_lost()
        self.outcome = outcome
        lease_released.send(
            BackgroundTask, name=self.name, owner=self.owner, token=self.token, outcome=outcome
        )

    # --- renewing ----------------------------------------------------------------

    def renewal_key(self) -> tuple[str, Any, str, int]:
        """A lease-table row, by its name (see :meth:`Holder.renewal_key`)."""
        return RENEW_TASK, self.name, self.owner, self.token

    def _wake_heartbeat(self) -> None:
        self._progress.wake.set()

    def beat_loop(self) -> None:
        """Renew every ``interval``, and write a coalesced value at its deadline."""
        next_beat = time.monotonic() + self.interval
        while not self._stop.is_set():
            now = self._progress.wait_for_write(next_beat, self._stop)
            if now is not None:
                self.renew_now(stop=self._stop)
                next_beat = now + self.interval

    def renew_now(self, *, stop: threading.Event | None = None) -> None:
        """Renew, writing the pending value if there is one, and record what
        the database said."""

        def attempt() -> tuple[float, Renewal | None]:
            with self._write_lock:
                value = self._progress.take()
                sent = time.monotonic()
                renewal = BackgroundTask.objects.renew(
                    self.name,
                    self.owner,
                    token=self.token,
                    value=KEEP_VALUE if value is NOTHING else value,
                )
                if renewal is not None:
                    self._progress.written(value)
                return sent, renewal

        sent, renewal = self._retrying(attempt, stop=stop)
        if renewal is None:
            self.renewal_refused()
            self._raise_if_lost()
            return
        self.renewed(sent, cancel_requested=renewal.cancel_requested)

    def _on_lost(self, reason: str) -> None:
        lease_lost.send(
            BackgroundTask, name=self.name, owner=self.owner, token=self.token, reason=reason
        )


# The error of a run whose return value can't be stored (see finish()).
UNSTORED_RESULT = "its return value could not be stored, so the run failed and is not retried"


def _outcome(
    running: RunningLease, exc: BaseException | None, result: Any
) -> tuple[Outcome, str] | None:
    """The outcome and error ``running``'s end records: succeeded (``exc``
    is ``None``), interrupted (:class:`WorkerStopping`), timed out
    (:class:`TaskTimedOut`), cancelled
    (:class:`TaskCancelled`) or failed; ``None`` for a lost lease (nothing
    is released). A failure is logged with its traceback (``logger.exception``
    on ``django_bgtasks``), here and only here. Work that returned a
    ``result`` which can't be stored (it does not encode, or is too large)
    fails without a traceback, its error and ``result_note`` saying why, and
    is never retried: its work is done."""
    if isinstance(exc, LeaseLost):
        return None
    if isinstance(exc, WorkerStopping):
        return Outcome.INTERRUPTED, str(exc)
    if isinstance(exc, TaskTimedOut):
        logger.warning("%s", exc, extra=running.log_extra())
        return Outcome.TIMED_OUT, str(exc)
    if isinstance(exc, TaskCancelled):
        return Outcome.CANCELLED, str(exc)
    if exc is not None:
        logger.exception(
            "task %r (token %s) failed on %s: %s",
            running.name,
            running.token,
            running.owner,
            _summary(exc),
            exc_info=exc,
            extra=running.log_extra(),
        )
        return Outcome.FAILED, "".join(traceback.format_exception(exc))
    not_stored = _unstorable(result)
    if not not_stored:
        return Outcome.SUCCEEDED, ""
    # The work is done, so the run must not be retried; it is not a success
    # either, since what it returned is lost: it fails, as a Django Task that
    # returns such a value does (queue/execute.py), and result_note tells the
    # worker not to retry it (worker/rescue.py's retry_due).
    error = f"{UNSTORED_RESULT}: {not_stored}"
    logger.error(
        "task %r (token %s) on %s: %s",
        running.name,
        running.token,
        running.owner,
        error,
        extra=running.log_extra(),
    )
    return Outcome.FAILED, error


def _unstorable(result: Any) -> str:
    """Why ``result`` can't be stored (``TypeError: ...``), or ``""``."""
    stored, note = encode_result(result)
    if stored is not None or not note:
        return ""
    return note.removeprefix("not stored: ")


def _summary(exc: BaseException) -> str:
    """``ValueError: bad row`` (the record's traceback has the rest)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _claim_or_raise(
    name: str,
    ttl: float | None,
    value: Any,
    owner: str | None,
    run_args: dict[str, Any] | None = None,
    wait: float | None = None,
) -> RunningLease:
    running = RunningLease.claim(
        name, ttl=ttl, value=value, owner=owner, run_args=run_args, wait=wait
    )
    if running is None:
        state = BackgroundTask.objects.get_state(name)
        raise LeaseHeld(name, state.owner if state is not None else None)
    return running


# Parameters alike RunningLease.claim()'s on purpose: the same claim, as a with block.
@contextlib.contextmanager
def lease(
    name: str,
    *,
    ttl: float | None = None,
    value: Any = None,
    owner: str | None = None,
    run_args: dict[str, Any] | None = None,
    wait: float | None = None,
) -> Iterator[RunningLease]:
    """Run the ``with`` body while holding the lease on ``name``.

    Raises :class:`LeaseHeld`, without running the body, when another holder has
    it (still, after waiting up to ``wait`` seconds for a release or an
    expiry, if given: ``try_claim(..., wait=)``). On exit, releases with
    outcome ``succeeded``, or ``failed`` with the traceback (logged, and
    re-raised), or ``cancelled`` after
    :class:`TaskCancelled`. A body that sets ``running.result`` has it stored
    as the run's result.
    """
    running = _claim_or_raise(name, ttl, value, owner, run_args, wait)
    try:
        yield running
    except BaseException as exc:
        running.finish(exc)
        raise
    running.finish(None, result=running.result)


@contextlib.asynccontextmanager
async def alease(
    name: str,
    *,
    ttl: float | None = None,
    value: Any = None,
    owner: str | None = None,
    wait: float | None = None,
) -> AsyncIterator[RunningLease]:
    """``lease()`` for async code: ``async with alease("name") as lease:``."""
    running = await sync_to_async(_claim_or_raise)(name, ttl, value, owner, None, wait)
    try:
        yield running
    except BaseException as exc:
        await sync_to_async(running.finish)(exc)
        raise
    await sync_to_async(running.finish)(None, result=running.result)
