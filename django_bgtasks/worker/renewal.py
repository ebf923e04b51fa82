"""A worker's one renewal of every lease it holds: :class:`Renewer`.

Each lease a worker runs, a ``@background_task`` run
(:class:`~django_bgtasks.core.runner.RunningLease`) or a Django Task
(:class:`~django_bgtasks.queue.execute.QueuedLease`), registers here when
it starts and leaves when it ends. One thread sends ONE statement a beat for
all of them (``BackgroundTask.objects.work.renew_many``), and hands each
holder its answer: renewed, with its cancel flag, or not held any more (then
it gives its lease up). A worker running 50 tasks makes one renewal a beat,
not 50.

The rules are the holders' (:mod:`django_bgtasks.core.holding`), unchanged:
the deadline counts from when the last renewal that succeeded was *sent*; a
lease is given up when a renewal is refused, or when none succeeded within
its ttl. Only who sends the statement changes, so a loss and a cancel are
seen as fast as each lease's own heartbeat saw them:

* a beat comes when the first held lease is due: one heartbeat interval
  after its claim was sent or after the last beat (each lease's own
  ``interval``: ``BGTASKS_HEARTBEAT_INTERVAL``, or a third of its ttl), and
  renews every held lease; each is renewed at least as often as its own
  thread renewed it;
* a database that can't be reached is retried as a holder retries
  (:func:`~django_bgtasks.db.outages.retry_delay`), on a new connection,
  and each lease whose deadline passes meanwhile is given up and left out;
* a value waiting to be written (``update()``'s coalescing) is written at its
  deadline by its own statement, as its heartbeat thread wrote it.

Timeouts (``@task(timeout=S)``, ``@background_task(timeout=S)``) are judged
here, by the database's clock: each answer carries the run's age (seconds
since it began). The first beat at or past its timeout tells the run (its
next ``check()``/``update()`` raises ``TaskTimedOut``); a run still held at
the first beat ``timeout_grace`` seconds later (the worker's ``--grace``) is
ended by this thread (:meth:`~django_bgtasks.core.holding.Holder.time_out`):
recorded timed out, fenced by its token, its thread left to finish. A held
run with a timeout is renewed at those two moments too, not only every
interval (the process's clock only says when to look; the database's clock
decides).

A run that calls ``fence()`` gets a heartbeat thread of its own from then on
(:meth:`~django_bgtasks.core.holding.Holder._own_heartbeat`): its fenced
transaction holds its row, and the statement that renews the others must not
wait for it. Leases held outside a worker (``with lease(...)``,
``BGTASKS_EXECUTOR = "thread"``) keep their own heartbeat threads.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

from django_bgtasks.core.holding import RenewedHolder
from django_bgtasks.db.outages import (
    TRANSIENT_ERRORS,
    Stopped,
    close_connection,
    retry_delay,
)
from django_bgtasks.db.shared import RENEW_TASK
from django_bgtasks.exceptions import LeaseLost
from django_bgtasks.models import BackgroundTask
from django_bgtasks.worker.hooks import WorkerHooks

logger = logging.getLogger("django_bgtasks.worker")


class Renewer:
    """The renewal thread of one worker; see the module docstring. It starts
    with the first lease added; :meth:`close` ends it."""

    def __init__(
        self,
        name: str = "bgtasks-renewer",
        *,
        timeout_grace: float = 0.0,
        hooks: WorkerHooks | None = None,
    ) -> None:
        self.name = name
        self.timeout_grace = timeout_grace
        # Each held lease, and when its next renewal is due (monotonic).
        self._held: dict[RenewedHolder, float] = {}
        # A holder whose value could not be written: not before when to try again.
        self._value_after: dict[RenewedHolder, float] = {}
        self._lock = threading.Lock()
        # Held while a statement is on its way: remove(wait=True) waits for it.
        self._sending = threading.Lock()
        self._wakeup = threading.Event()
        # When the thread's wait ends by itself (monotonic; -inf while it is
        # awake): a lease added that is due no sooner needs no wake-up, since
        # the thread reads the held leases again then. Waking it at every
        # task's start cost a thread switch a task.
        self._sleeping_until = -math.inf
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        # How many renewal statements it sent (the worker's debug log says each).
        self.statements = 0
        # Told how long each renewal statement took (the worker's hooks).
        self.hooks = hooks

    # --- what the holders call -----------------------------------------------------

    def add(self, holder: RenewedHolder) -> None:
        """Renew ``holder``'s lease from now on: one interval from now (as its
        own heartbeat thread, started now, would), or at the next beat if
        that comes sooner."""
        now = time.monotonic()
        due = holder.timeout_due(0.0, self.timeout_grace)
        at = now + min(holder.interval, due if due is not None else math.inf)
        with self._lock:
            self._held[holder] = at
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            sooner = at < self._sleeping_until
        if sooner:
            self._wakeup.set()

    def remove(self, holder: RenewedHolder, *, wait: bool = False) -> None:
        """Renew ``holder``'s lease no more. With ``wait``, return only once
        no statement that names it is on its way."""
        with self._lock:
            self._held.pop(holder, None)
            self._value_after.pop(holder, None)
        if wait and threading.current_thread() is not self._thread:
            with self._sending:
                pass

    def wake(self) -> None:
        """A value is waiting to be written: look again when."""
        self._wakeup.set()

    def close(self) -> None:
        """Stop renewing (the worker has ended its runs) and end the thread."""
        self._closing.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def held(self) -> list[RenewedHolder]:
        """The leases renewed here now."""
        with self._lock:
            return list(self._held)

    # --- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                self._wakeup.clear()
                with self._lock:
                    self._sleeping_until = -math.inf
                    due = dict(self._held)
                if not due:
                    self._sleep(math.inf)
                    continue
                now = time.monotonic()
                values = {holder: self._value_due(holder) for holder in due}
                for holder, value_due in values.items():
                    if value_due is not None and value_due <= now:
                        self._write_value(holder, now)
                beat_at = min(due.values())
                if beat_at <= now:
                    self._beat()
                    continue
                wake_at = min([beat_at, *(at for at in values.values() if at is not None)])
                self._sleep(wake_at)
        finally:
            close_connection()

    def _sleep(self, until: float) -> None:
        """Wait until ``until`` (monotonic), or a wake-up: by :meth:`add`
        only for a lease due sooner."""
        with self._lock:
            self._sleeping_until = until
        if until == math.inf:
            self._wakeup.wait()
        else:
            self._wakeup.wait(max(until - time.monotonic(), 0.0))

    def _value_due(self, holder: RenewedHolder) -> float | None:
        due = holder.value_due()
        with self._lock:
            after = self._value_after.get(holder)
        return due if due is None or after is None else max(due, after)

    def _write_value(self, holder: RenewedHolder, now: float) -> None:
        """``holder``'s waiting value, in one try: a failure leaves it
        waiting, tried again after a holder's retry delay (and written at
        the latest by its release)."""
        try:
            with contextlib.suppress(LeaseLost, Stopped):  # (a lost lease was logged as lost)
                holder.write_value()
        except Exception as exc:  # a bug, not an outage: give the lease up loudly
            logger.exception("%s: writing its value failed", holder.described)
            holder.declare_lost(f"heartbeat failed: {exc!r}")
        if holder.lost:
            self.remove(holder)
            return
        with self._lock:
            if holder.value_due() is None:
                self._value_after.pop(holder, None)
            elif holder in self._held:
                delay = retry_delay(holder.interval, holder.remaining())
                self._value_after[holder] = now + delay

    def _beat(self) -> None:
        """One statement renewing every held lease, retried through an outage
        as a holder retries its own (a lease whose deadline passes meanwhile
        is given up and left out); each holder is handed its answer."""
        while not self._closing.is_set():
            holders = [holder for holder in self.held() if not self._gave_up(holder)]
            if not holders:
                return
            tasks: list[tuple[str, str, int]] = []
            queued: list[tuple[int, str, int]] = []
            for holder in holders:
                kind, key, owner, token = holder.renewal_key()
                (tasks if kind == RENEW_TASK else queued).append((key, owner, token))
            sent = time.monotonic()
            try:
                with self._sending:
                    self.statements += 1
                    answer = BackgroundTask.objects.work.renew_many(tasks, queued)
                if self.hooks is not None:
                    self.hooks.renewed(time.monotonic() - sent)
            except TRANSIENT_ERRORS as exc:
                logger.warning(
                    "renewal of %d lease(s): database unreachable, retrying: %s", len(holders), exc
                )
                close_connection()
                interval = min(holder.interval for holder in holders)
                remaining = min(holder.remaining() for holder in holders)
                self._closing.wait(retry_delay(interval, remaining))
                continue
            except Exception as exc:  # a bug, not an outage: give the leases up loudly
                logger.exception("renewal of %d lease(s) failed", len(holders))
                for holder in holders:
                    self.remove(holder)
                    holder.declare_lost(f"heartbeat failed: {exc!r}")
                return
            self._hand_out(holders, sent, answer)
            return

    def _time_out(self, holder: RenewedHolder) -> None:
        """End ``holder``'s run, past its timeout and the grace (see the
        module docstring), on a thread of its own: its end is retried through
        an outage up to its deadline, which must not hold up the beats of the
        other leases. The run's own thread goes on, and its end is refused."""
        self.remove(holder)
        threading.Thread(
            target=self._end_timed_out, args=(holder,), name=f"{self.name}:timeout", daemon=True
        ).start()

    def _end_timed_out(self, holder: RenewedHolder) -> None:
        logger.warning(
            "%s: still running %g s past its timeout (%g s): ended as timed out; its "
            "thread is left to finish, and its end will be refused",
            holder.described,
            self.timeout_grace,
            holder.timeout,
            extra=holder.log_extra(),
        )
        try:
            holder.time_out()
        except Exception:  # an outage past its deadline, a bug: the row is recovered
            logger.exception("%s: ending it as timed out failed", holder.described)
        finally:
            close_connection()

    def _gave_up(self, holder: RenewedHolder) -> bool:
        """Whether ``holder`` gave its lease up (its deadline passed: it says
        so itself, by the renew-deadline rule); it then leaves the renewer."""
        if holder.lost:
            self.remove(holder)
            return True
        return False

    def _hand_out(
        self,
        holders: list[RenewedHolder],
        sent: float,
        answer: dict[tuple[str, str, int], tuple[bool, float]],
    ) -> None:
        """Each holder its answer: renewed (the deadline moves on from
        ``sent``) with its cancel flag and its run's age (a run past its
        timeout is told; past its grace too, ended), or refused. A holder that
        left meanwhile (its run ended) is not told it was refused: its own
        end may have come first."""
        refused = 0
        for holder in holders:
            kind, key, _, token = holder.renewal_key()
            renewed = answer.get((kind, str(key), token))
            if renewed is not None:
                cancel_requested, age = renewed
                told = holder.timed_out
                holder.renewed(sent, cancel_requested=cancel_requested, age=age)
                due = holder.timeout_due(age, self.timeout_grace)
                if told and due == 0.0:
                    self._time_out(holder)
                    continue
                with self._lock:
                    if holder in self._held:
                        wait = min(holder.interval, due if due is not None else math.inf)
                        self._held[holder] = sent + wait
                continue
            with self._lock:
                still_held = self._held.pop(holder, None) is not None
            if still_held:
                refused += 1
                holder.renewal_refused()
        logger.debug(
            "renewed %d of %d lease(s) in one statement (%d refused)",
            len(holders) - refused,
            len(holders),
            refused,
        )
