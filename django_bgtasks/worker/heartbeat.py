"""A worker's own row in the workers' table (``BackgroundTask.objects.work.beat``).

It is written every ``WORKER_BEAT_SECONDS``, and at once when the worker's
runs change; the worker beats during its idle wait and its grace period too.
The row states the worker's ttl (three beats): readers list a worker whose
last beat is older than that, by the database's clock, as silent. A killed
worker can't remove its row, so every worker's beat removes, at most once a
minute, the rows of workers silent for ``limits.FORGET_WORKERS_AFTER``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

from django.db import DatabaseError

from django_bgtasks.core.leases import host_name
from django_bgtasks.db.outages import TRANSIENT_ERRORS, close_connection
from django_bgtasks.limits import FORGET_WORKERS_AFTER
from django_bgtasks.models import BackgroundTask

logger = logging.getLogger("django_bgtasks.worker")

# How often a worker renews its own row in the workers' table, whatever its
# --poll (it beats during the idle wait too). Read when a Heartbeat is made
# (with its Worker), so that a test can shorten it first.
WORKER_BEAT_SECONDS = 5.0
# The ttl a worker states in its row, in beats: a worker silent for longer is
# listed as silent (as a lease is renewed every ttl/3, so one lost beat is not
# taken for a dead worker). 3 beats of 5 s: limits.WORKER_TTL, the default
# of the row's ttl column.
WORKER_TTL_BEATS = 3
# How often, at most, each live worker removes the rows of dead ones.
FORGET_EVERY_SECONDS = 60.0


class Heartbeat:
    """The beats of the worker ``worker_id``, which runs ``tasks`` (names),
    at most ``concurrency`` at once."""

    def __init__(self, worker_id: str, tasks: list[str], concurrency: int) -> None:
        self.worker_id, self.tasks, self.concurrency = worker_id, sorted(tasks), concurrency
        self.every = WORKER_BEAT_SECONDS
        self.ttl = WORKER_TTL_BEATS * self.every
        self._at = 0.0
        self._running: list[str] | None = None
        self._forgot_at: float | None = None

    def due_in(self) -> float:
        """Seconds until the next beat is due (0 or less: due now)."""
        return self._at + self.every - time.monotonic()

    def beat(self, running: list[str], *, force: bool = False) -> None:
        """Write the row, stating the names of the runs going (``running``,
        sorted), unless the last beat was less than a beat ago and said the same."""
        now = time.monotonic()
        if not force and running == self._running and now - self._at < self.every:
            return
        BackgroundTask.objects.work.beat(
            worker=self.worker_id,
            host=host_name(),
            pid=os.getpid(),
            tasks=self.tasks,
            concurrency=self.concurrency,
            running=running,
            ttl=self.ttl,
        )
        self._at, self._running = now, running
        self._forget_silent_workers()

    def beat_quietly(self, running: list[str]) -> None:
        """A beat between polls (the idle wait, the grace period): a database
        that can't be reached now is the next poll's to report and retry."""
        try:
            self.beat(running)
        except TRANSIENT_ERRORS as exc:
            logger.debug("worker %s: heartbeat failed: %s", self.worker_id, exc)
            close_connection()
            self._at = time.monotonic()  # the next try a beat later, not at once

    def gone(self) -> None:
        """Remove the row: the worker stopped. (A database that is down
        can't be told; the row is then listed as silent, and forgotten.)"""
        with contextlib.suppress(DatabaseError):
            BackgroundTask.objects.work.gone(self.worker_id)

    def _forget_silent_workers(self) -> None:
        """Remove the rows of workers silent for FORGET_WORKERS_AFTER (and past
        their own ttl, by the database's clock), at most every
        FORGET_EVERY_SECONDS: killed workers can't remove their own, and
        without this nothing would unless someone ran ``bgtasks prune``."""
        now = time.monotonic()
        if self._forgot_at is not None and now - self._forgot_at < FORGET_EVERY_SECONDS:
            return
        self._forgot_at = now
        forgot = BackgroundTask.objects.work.forget_workers(FORGET_WORKERS_AFTER)
        if forgot:
            logger.info(
                "worker %s: forgot %d worker(s) silent for more than %g s",
                self.worker_id,
                forgot,
                FORGET_WORKERS_AFTER,
            )
