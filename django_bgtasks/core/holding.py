"""What every lease holder in this process shares, whichever kind of work it
holds: a ``@background_task`` run (:class:`~django_bgtasks.core.runner.RunningLease`)
or a Django Task (:class:`~django_bgtasks.queue.execute.QueuedLease`).

One rule for both, the renew deadline: a holder gives its lease up as *lost*
when a renewal is refused (the lease was taken over, force-released or
recovered) or when no renewal has succeeded for a whole ttl. Failing
renewals are retried until then, then it stops (Kubernetes' renew-deadline
rule). The deadline is measured from when the claim, then the last
successful renewal, was *sent*, on this process's monotonic clock. It never
judges anyone else's lease (the database's clock does that); it only makes
this holder give up no later than the database would let another take over,
even when the database can't be reached to say so, or this process was paused.

A holder's heartbeat is a thread of its own, or, for the leases a worker
runs, its worker's one renewer (:mod:`django_bgtasks.worker.renewal`: one
statement a beat for every lease the worker holds), which hands each holder
its answer through the same methods (:meth:`Holder.renewed`,
:meth:`Holder.renewal_refused`, the deadline): the rules stay here, for both.

``check()`` reports what the heartbeat last learned, without a
statement: :class:`LeaseLost`, an operator's :class:`TaskCancelled`, the
worker's graceful stop (:class:`WorkerStopping`), or a run past its
``timeout`` (:class:`TaskTimedOut`). A run ends once: by its own thread, or
by its worker, stopping at once (``interrupt()``) or ending a run that went on
past its timeout and the worker's grace (``time_out()``), whichever comes
first (:meth:`Holder._begin_end`).

Timeouts are judged by the database's clock: a worker's renewal reads each
run's age (the seconds since it began, by the database's clock) with its
answer. A lease renewed by a heartbeat thread of its own (``with lease()``,
``.start()``, a run that called ``fence()``) is not judged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from django_bgtasks.core.progress import Progress
from django_bgtasks.db.outages import Stopped, close_connection, retry_until_deadline
from django_bgtasks.exceptions import LeaseLost, TaskCancelled, TaskTimedOut, WorkerStopping
from django_bgtasks.validation import heartbeat_interval

_T = TypeVar("_T")

# A stop already set: ``_retrying(call, stop=ONE_TRY)`` tries ``call`` once,
# and raises Stopped instead of waiting to try again (a renewer's write of a
# holder's value must not hold up its beat for the other leases).
ONE_TRY = threading.Event()
ONE_TRY.set()


class Held(Protocol):
    """What a claim returned, as a holder reads it (a ``Lease``, a queue ``Claim``)."""

    @property
    def owner(self) -> str: ...

    @property
    def token(self) -> int: ...

    @property
    def ttl(self) -> float: ...

    @property
    def sent_at(self) -> float:
        """When the claim was sent (``time.monotonic()``): the renew deadline counts from it."""
        ...


# Alike Held in shape on purpose: a Protocol's properties, each a stub.
class RenewedHolder(Protocol):
    """A holder as a renewer (:class:`Renews`) sees it: what it reads of
    each lease it renews, and what it tells each of the answer, all public
    (:class:`Holder` has it all). The rules of the answer stay with the
    holder: the renewer reports, the holder judges."""

    # Seconds between renewals (a third of the ttl), and the run's timeout.
    interval: float
    timeout: float | None

    @property
    def described(self) -> str: ...

    @property
    def lost(self) -> bool: ...

    @property
    def timed_out(self) -> bool: ...

    def log_extra(self) -> dict[str, Any]: ...

    def renewal_key(self) -> tuple[str, Any, str, int]:
        """The lease as a renewal statement names it: (kind, name or row, owner, token)."""
        ...

    def value_due(self) -> float | None:
        """When a value waiting to be written is due (monotonic), or ``None``."""
        ...

    def write_value(self) -> None:
        """Write the waiting value now (one try: the renewer's beat goes on)."""
        ...

    def remaining(self) -> float:
        """Seconds left before the renew deadline."""
        ...

    def renewed(self, sent: float, *, cancel_requested: bool, age: float | None = None) -> None:
        """A renewal sent at ``sent`` (monotonic) succeeded, with what it read."""
        ...

    def renewal_refused(self) -> None:
        """A renewal was refused: the lease is no longer this holder's."""
        ...

    def declare_lost(self, reason: str) -> None:
        """Give the lease up, saying why (the deadline passed without a renewal)."""
        ...

    def timeout_due(self, age: float, grace: float) -> float | None: ...

    def time_out(self) -> object: ...


class Renews(Protocol):
    """What renews holders' leases instead of heartbeat threads of their own
    (a worker's :class:`~django_bgtasks.worker.renewal.Renewer`)."""

    def add(self, holder: RenewedHolder) -> None:
        """Renew ``holder``'s lease from now on."""
        ...

    def remove(self, holder: RenewedHolder, *, wait: bool = False) -> None:
        """Renew it no more; with ``wait``, return only once no renewal that
        names it is on its way."""
        ...

    def wake(self) -> None:
        """A holder's value is waiting to be written: look when."""
        ...


class Holder:
    """A lease held here while its work runs, renewed by a heartbeat thread,
    or by ``renewer`` (a worker's, for every lease it holds) when given.

    ``held`` is what the claim returned (its ``owner``, ``token``, ``ttl``
    and ``sent_at``); a subclass says how the lease is named (``name``,
    ``described``), how its heartbeat renews (:meth:`beat_loop`), how a
    renewer names it (:meth:`renewal_key`), and logs on its ``logger``."""

    logger: logging.Logger
    # The values waiting to be written, where a subclass coalesces them.
    _progress: Progress | None = None
    # Why a lease is given up when a renewal is refused (taken over, ...).
    refused = "the lease was taken over or released by an operator"

    # --- what its heartbeat tells the work: an operator's cancel, its
    # worker's graceful stop, a run past its timeout (by the database's
    # clock: the age of the run that each renewal of a worker's reads). A
    # worker's renewer ends a run that goes on past its timeout and the
    # grace (time_out()).

    # How long a run may go on (seconds, by the database's clock), or None;
    # set before its heartbeat starts.
    timeout: float | None = None
    # Set once a renewal found the run past its timeout: check() raises.
    _timed_out = False
    _cancel_requested = False
    _stopping: threading.Event | None = None

    @property
    def name(self) -> str:
        """The name its errors carry."""
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """``True`` once the worker running this work began a graceful shutdown."""
        return self._stopping is not None and self._stopping.is_set()

    @property
    def cancel_requested(self) -> bool:
        """``True`` once a heartbeat has brought an operator's cancel request."""
        return self._cancel_requested

    @property
    def timed_out(self) -> bool:
        """``True`` once a renewal found the run past its ``timeout``."""
        return self._timed_out

    def _raise_if_told(self) -> None:
        """Raise :class:`TaskTimedOut`, :class:`TaskCancelled` or
        :class:`WorkerStopping` (each a ``TaskCancelled``), if told so."""
        if self._timed_out:
            raise TaskTimedOut(self.name, self.timeout or 0.0)
        if self._cancel_requested:
            raise TaskCancelled(self.name)
        if self._stopping is not None and self._stopping.is_set():
            raise WorkerStopping(self.name)

    def _judge_age(self, age: float | None) -> None:
        """A renewal read the run's ``age`` (seconds since it began, by the
        database's clock): past the ``timeout``, the run is told."""
        if self.timeout is not None and age is not None and age >= self.timeout:
            self._timed_out = True

    def timeout_due(self, age: float, grace: float) -> float | None:
        """Seconds from a renewal that read the run's ``age`` to the next
        moment its timeout calls for a renewal: its ``timeout`` (the run is
        told), then ``grace`` after it (its worker ends it); ``None`` without a
        timeout. A renewer beats then, as well as every ``interval``."""
        if self.timeout is None:
            return None
        at = self.timeout + grace if self._timed_out else self.timeout
        return max(at - age, 0.0)

    def time_out(self) -> object:
        """End the run, still going past its timeout and its worker's grace,
        from the worker's renewer: recorded as timed out (fenced by the
        token), its lease given up, its thread left to finish (its own end
        then comes too late: ``Holder._begin_end``). What the end returned."""
        self._timed_out = True
        return self.end_timed_out(TaskTimedOut(self.name, self.timeout or 0.0))

    def end_timed_out(self, exc: TaskTimedOut) -> object:
        """Record the run's end as ``exc`` says, from another thread (a subclass's)."""
        raise NotImplementedError

    def __init__(
        self,
        held: Held,
        *,
        stopping: threading.Event | None,
        renewer: Renews | None = None,
    ) -> None:
        self._held = held
        self._renewer = renewer
        self.interval = heartbeat_interval(held.ttl)
        self._stopping = stopping
        self._deadline = held.sent_at + held.ttl
        self._lost: str | None = None
        self._cancel_requested = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._thread_name = ""
        # Set by whichever ends the run first: its own thread, or interrupt()
        # (a worker stopping at once): the run is ended once.
        self._ending = False
        # When that was (``time.monotonic()``): where :attr:`duration` stops.
        self._ended_at: float | None = None

    # --- what a subclass says of its lease ------------------------------------

    @property
    def owner(self) -> str:
        """This holder's identity, as stored in the row."""
        return self._held.owner

    @property
    def token(self) -> int:
        """The fencing token; pass it to any other system that can check it."""
        return self._held.token

    @property
    def ttl(self) -> float:
        """The lease duration in seconds."""
        return self._held.ttl

    # How log lines name a lease of the subclass, from its ``name``.
    describe = "{}"

    @property
    def described(self) -> str:
        """How log lines name this lease."""
        return self.describe.format(self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} token={self.token} owner={self.owner!r}>"

    # --- what the work reads -------------------------------------------------

    @property
    def lost(self) -> bool:
        """``True`` once this holder has given the lease up (see :class:`LeaseLost`)."""
        self._check_deadline()
        return self._lost is not None

    @property
    def ended_elsewhere(self) -> bool:
        """``True`` once another thread ended the run (its worker's renewer,
        past its timeout; a stop at once): the run's own end comes too late."""
        return self._ending

    @property
    def duration(self) -> float:
        """Seconds from the claim (when it was sent) to the run's end, or to
        now while it runs: what the worker's log says a run took. By this
        process's monotonic clock; the history's duration is the database's."""
        end = time.monotonic() if self._ended_at is None else self._ended_at
        return max(end - self._held.sent_at, 0.0)

    def log_extra(self) -> dict[str, Any]:
        """The ``extra`` of every log record about this lease: ``task`` (the
        name), ``token`` and ``owner`` (keys no ``LogRecord`` attribute uses)."""
        return {"task": self.name, "token": self.token, "owner": self.owner}

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease is gone, or
        :class:`TaskCancelled` if an operator asked to stop. No database access:
        it reports what the heartbeat thread last learned. Raises
        :class:`WorkerStopping` (a ``TaskCancelled``) when the worker is
        stopping, and :class:`TaskTimedOut` (one too) once the run went on
        past its ``timeout``."""
        self._raise_if_lost()
        self._raise_if_told()

    # --- the heartbeat -------------------------------------------------------

    def renewal_key(self) -> tuple[str, Any, str, int]:
        """How a renewer's statement names it: kind, key, owner, token (db.rules' RENEW_MANY)."""
        raise NotImplementedError

    def value_due(self) -> float | None:
        """When a value waiting to be written must be (monotonic), or ``None``."""
        return None if self._progress is None else self._progress.deadline()

    def write_value(self) -> None:
        """Write the waiting value now, in one try (a renewer calls it)."""
        self.renew_now(stop=ONE_TRY)

    def _start_heartbeat(self, thread_name: str) -> None:
        self._thread_name = thread_name
        if self._renewer is not None:
            if self._progress is not None:  # a value waiting wakes the renewer
                self._progress.on_pending = self._renewer.wake
            self._renewer.add(self)
            return
        self._heartbeat = threading.Thread(target=self._beat, name=thread_name, daemon=True)
        self._heartbeat.start()

    def _own_heartbeat(self) -> None:
        """From now on, a heartbeat thread of its own instead of the renewer's
        statement (a fenced transaction holds the row: a statement that
        renews the worker's other leases too must not wait for it). Returns
        once no renewal naming it is on its way."""
        renewer, self._renewer = self._renewer, None
        if renewer is None or self._stop.is_set():
            return
        if self._progress is not None:
            self._progress.on_pending = None
        renewer.remove(self, wait=True)
        self._start_heartbeat(self._thread_name)

    def _stop_heartbeat(self) -> None:
        """Stop the heartbeat (idempotent)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.remove(self)
        self._wake_heartbeat()
        if self._heartbeat is not None:
            # A renewal stuck on a dead network must not hold up the exit past
            # the deadline; the thread is a daemon and finishes on its own.
            self._heartbeat.join(timeout=max(self.remaining(), 0.0) + 1.0)

    def _wake_heartbeat(self) -> None:
        """Wake a heartbeat that waits on something other than ``_stop``."""

    def _beat(self) -> None:
        try:
            self.beat_loop()
        except (LeaseLost, Stopped):
            pass
        except Exception as exc:  # a bug, not an outage: give the lease up loudly
            self.logger.exception("%s: heartbeat failed", self.described, extra=self.log_extra())
            self.declare_lost(f"heartbeat failed: {exc!r}")
        finally:
            close_connection()

    def beat_loop(self) -> None:
        """Renew until ``_stop`` is set (raising ``LeaseLost`` or ``Stopped`` ends it)."""
        raise NotImplementedError

    def renew_now(self, *, stop: threading.Event | None = None) -> None:
        """Renew once (retried through an outage until the deadline or ``stop``)."""
        raise NotImplementedError

    def renewal_refused(self) -> None:
        """A renewal was refused: the lease is not this holder's any more."""
        self.declare_lost(self.refused)

    def renewed(self, sent: float, *, cancel_requested: bool, age: float | None = None) -> None:
        """A renewal sent at ``sent`` (monotonic) succeeded: the deadline moves
        on. ``age``, when the renewal read it, is the seconds since the run
        began by the database's clock: past the ``timeout``, the run is told."""
        with self._lock:
            self._deadline = max(self._deadline, sent + self.ttl)
            if cancel_requested:
                self._cancel_requested = True
            self._judge_age(age)

    def _retrying(self, call: Callable[[], _T], *, stop: threading.Event | None = None) -> _T:
        """``call()`` (a fenced write of this holder's), retried on a new
        connection while the database can't be reached, until the renew
        deadline passes (then :class:`LeaseLost`) or ``stop`` is set."""
        return retry_until_deadline(
            call,
            name=self.described,
            interval=self.interval,
            remaining=self.remaining,
            raise_if_lost=self._raise_if_lost,
            logger=self.logger,
            stop=stop,
            extra=self.log_extra(),
        )

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    # --- ending, and losing --------------------------------------------------

    def _begin_end(self) -> bool:
        """``True`` for the first caller only (the run's own end, or interrupt())."""
        with self._lock:
            if self._ending:
                return False
            self._ending = True
            self._ended_at = time.monotonic()
            return True

    def _check_deadline(self) -> None:
        if self._lost is None and self.remaining() <= 0:
            if self._timed_out and self._ending:
                # Its worker ended it past its timeout and stopped renewing
                # it: the run's own late return, not an outage.
                self.declare_lost(
                    f"it ran past its timeout ({self.timeout or 0:g} s) and its worker's "
                    "grace, and its worker ended it: its own end came too late"
                )
                return
            self.declare_lost(
                f"not renewed within the ttl ({self.ttl:g} s): the database was unreachable "
                "or this process was paused"
            )

    def declare_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost is not None:
                return
            self._lost = reason
        self.logger.warning(
            "%s (token %s) lost: %s", self.described, self.token, reason, extra=self.log_extra()
        )
        self._on_lost(reason)

    def _on_lost(self, reason: str) -> None:
        """Told once, when the lease is given up."""

    def _raise_if_lost(self) -> None:
        self._check_deadline()
        if self._lost is not None:
            raise LeaseLost(self.name, self._lost)
