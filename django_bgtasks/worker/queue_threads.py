"""A worker's Django Tasks threads (``bgtasks worker --queue``): each claims a
ready queued task, runs it under its lease (:mod:`django_bgtasks.queue.execute`),
and claims the next; with nothing ready, it waits ``poll`` seconds, or less
on PostgreSQL, where the change feed wakes it when a task becomes ready.

A claim whose reply was lost with the connection may have committed: the
thread then gives back, before its next claim, every task the worker claimed
and holds in no thread, so that it does not wait out its ttl as ``RUNNING``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from django.db import DatabaseError

from django_bgtasks.core.holding import Renews
from django_bgtasks.db.outages import TRANSIENT_ERRORS, close_connection
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import READY, RUNNING, Claim
from django_bgtasks.worker.polls import MAX_BACKOFF_SECONDS, spread

logger = logging.getLogger("django_bgtasks.worker")


class QueueThreads:
    """``count`` threads of the worker ``worker_id``, claiming from ``queues``
    (all of them if ``None``) until ``stopping`` is set."""

    def __init__(
        self,
        worker_id: str,
        *,
        count: int,
        poll: float,
        queues: list[str] | None,
        stopping: threading.Event,
    ) -> None:
        self.worker_id, self.count, self.poll, self.queues = worker_id, count, poll, queues
        self.stopping = stopping
        # The worker's renewer (given to start()): it renews the leases of
        # the tasks run here, with the others the worker holds.
        self.renewer: Renews | None = None
        self.threads: list[threading.Thread] = []
        self._once = False
        # One per thread: set when a queued task may be ready, and on stopping.
        self._wakeups: list[threading.Event] = []
        # The seq of each queued task a thread holds here, how many claims
        # are on their way (sent, their reply not yet recorded in ``_held``),
        # and the condition both are guarded by: a give-back (after a claim
        # whose reply was lost) waits until no claim is on its way, so that
        # it never takes a task another thread has just claimed, and no claim
        # starts while it runs. Claims themselves don't wait on each other.
        self._held: set[int] = set()
        self._claims_on_their_way = 0
        self._claiming = threading.Condition()

    def start(self, *, once: bool = False, renewer: Renews | None = None) -> None:
        """Start the threads; with ``once``, each ends when nothing is ready.
        ``renewer`` renews the leases of the tasks they run."""
        self._once, self.renewer = once, renewer
        self._wakeups = [threading.Event() for _ in range(self.count)]
        if self.stopping.is_set():
            self.wake()
        for number, wakeup in enumerate(self._wakeups):
            thread = threading.Thread(
                target=self._loop, args=(wakeup,), name=f"bgtasks-queue-{number}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def wake(self) -> None:
        """A task may be ready, or the worker is stopping: every idle thread looks."""
        for wakeup in self._wakeups:
            wakeup.set()

    def busy(self) -> bool:
        """Some thread is still going."""
        return any(thread.is_alive() for thread in self.threads)

    def recover(self) -> None:
        """Queued tasks whose worker went silent past their ttl: ready again
        while attempts remain, else failed ("worker lost")."""
        for result_id, status in QueuedTask.objects.recover():
            logger.warning("queued task %s: its worker was lost; now %s", result_id, status)

    def claim(self, *, give_back: bool) -> Claim | None:
        """Claim a queued task, and record it as held here. With
        ``give_back`` (a claim before failed with the connection), first
        :meth:`_give_back_unheld`."""
        with self._claiming:
            if give_back:
                # (Waits for the other threads' claims on their way, which end
                # with their reply or their error; the lock stays held while
                # the statement runs, so no claim starts meanwhile.)
                self._claiming.wait_for(lambda: self._claims_on_their_way == 0)
                self._give_back_unheld()
            self._claims_on_their_way += 1
        claimed = None
        try:
            claimed = QueuedTask.objects.claim(self.worker_id, queues=self.queues)
        finally:
            with self._claiming:
                self._claims_on_their_way -= 1
                if claimed is not None:
                    self._held.add(claimed.seq)
                self._claiming.notify_all()
        return claimed

    def _give_back_unheld(self) -> None:
        """Put back in the queue every task this worker claimed and holds in no
        thread: a claim that committed, its reply lost with the connection.
        Without this, it would wait out its ttl as ``RUNNING``, then count
        as a lost attempt. Called with ``_claiming`` held, and no claim on its way."""
        for result_id in QueuedTask.objects.give_back(self.worker_id, held=self._held):
            logger.warning(
                "queued task %s: the reply to its claim was lost; back in the queue", result_id
            )

    def _loop(self, wakeup: threading.Event) -> None:
        """Claim a ready task, run it, repeat; when there is none, wait ``poll``
        seconds or until ``wakeup`` (a task became ready, on PostgreSQL; a
        stop). With ``once``, stop then."""
        backoff = self.poll
        # A claim failed with the connection: it may have committed, its
        # reply lost. Until a give-back has run, that task may be ours.
        unsure = False
        try:
            while not self.stopping.is_set():
                # Cleared before the claim: a task ready after it sets it again.
                wakeup.clear()
                try:
                    claim = self.claim(give_back=unsure)
                    unsure = False
                except TRANSIENT_ERRORS as exc:
                    unsure = True
                    logger.warning(
                        "queue: database unreachable, retrying in %g s: %s", backoff, exc
                    )
                    close_connection()
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                    continue
                backoff = self.poll
                if claim is None:
                    if self._once:
                        return
                    # (A stop that came before the clear above: seen here.)
                    if not self.stopping.is_set():
                        wakeup.wait(spread(self.poll))
                    continue
                self._run(claim, backoff)
        finally:
            if unsure:  # stopping before the database came back: one last try
                with contextlib.suppress(DatabaseError), self._claiming:
                    self._claiming.wait_for(lambda: self._claims_on_their_way == 0)
                    self._give_back_unheld()
            close_connection()

    def _run(self, claim: Claim, backoff: float) -> None:
        """Run one claimed task to its end, logged; never raise."""
        # Imported here: it needs Django's Tasks framework (django.tasks or the
        # backport), which a worker of background tasks alone may not have.
        from django_bgtasks.queue.execute import execute

        logger.info(
            "queued task %s %s started (token %d, attempt %d, queue %s)",
            claim.task_path,
            claim.uuid,
            claim.token,
            claim.attempts,
            claim.queue_name,
            extra={**_extra(claim), "queue": claim.queue_name},
        )
        try:
            status = execute(claim, stopping=self.stopping, renewer=self.renewer)
        except TRANSIENT_ERRORS as exc:
            # Its end could not be written before the lease's deadline: the
            # row is recovered after its ttl.
            logger.warning("queued task %s: database unreachable: %s", claim.uuid, exc)
            close_connection()
            self.stopping.wait(backoff)
            return
        except BaseException:
            # execute() records whatever the task raised; anything else (a
            # signal receiver's KeyboardInterrupt, say) must not end this
            # thread either: with --concurrency 1 no task would run again.
            # Signals never arrive here (they reach the main thread), so
            # nothing is swallowed that meant "stop": that is ``stopping``.
            logger.exception("queued task %s: the worker failed to run it", claim.uuid)
            return
        finally:
            with self._claiming:
                self._held.discard(claim.seq)
        log_ended(claim, status, time.monotonic() - claim.sent_at)


def log_ended(claim: Claim, status: str, duration: float) -> None:
    """Say at INFO how ``claim``'s run ended (the status it left the row in,
    :func:`ended`), after ``duration`` seconds, with its token and attempt;
    the record's ``extra`` has them as ``outcome`` (the status), ``duration``,
    ``token`` and ``attempt``."""
    logger.info(
        "queued task %s %s (token %d, attempt %d) ended: %s after %.3f s",
        claim.task_path,
        claim.uuid,
        claim.token,
        claim.attempts,
        ended(status),
        duration,
        extra={**_extra(claim), "outcome": status, "duration": duration},
    )


def _extra(claim: Claim) -> dict[str, Any]:
    """The ``extra`` of a queued run's log records: as a ``QueuedLease``'s
    (``task``, ``token``, ``owner``), and its ``attempt``."""
    return {
        "task": f"{claim.task_path} {claim.uuid}",
        "token": claim.token,
        "owner": claim.owner,
        "attempt": claim.attempts,
    }


def ended(status: str) -> str:
    """How a queued task's run ended, from the status it left the row in."""
    if status == READY:
        return f"{READY} (to be run again)"
    if status == RUNNING:
        return "its lease was lost (the recovery ends it)"
    return status
