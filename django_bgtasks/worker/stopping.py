"""How a worker stops: its stop flag, and the hand-back of a stop at once.

A graceful stop (the first SIGTERM or Ctrl-C) sets the flag: the worker
claims nothing more and its runs raise ``WorkerStopping`` at their next
``check()``/``update()``. A stop at once (the second) waits for no run: the
runs still going are recorded as a graceful stop would record them, each by
its fenced statement, and the process exits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from django_bgtasks.core.runner import RunningLease
from django_bgtasks.db.outages import close_connection
from django_bgtasks.queue.manager import RUNNING
from django_bgtasks.worker.queue_threads import log_ended as log_queued_ended
from django_bgtasks.worker.runs import log_ended

if TYPE_CHECKING:  # it needs Django's Tasks framework, which a worker may lack
    from django_bgtasks.queue.execute import QueuedLease

logger = logging.getLogger("django_bgtasks.worker")

# A worker stopping at once waits this long, at most, for the statements that
# hand its runs back: one may wait on a row lock the stuck run holds (a
# fence() in an open transaction), and then the process exits anyway.
AT_ONCE_WRITES_SECONDS = 5.0


class Stopping(threading.Event):
    """The worker's stop flag, which also ends its idle waits: whoever sets it
    (``stop()``, the command on a signal, a test) wakes the loop and the
    queue threads at once."""

    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


def hand_back(worker_id: str, runs: list[RunningLease], queued: list[QueuedLease]) -> None:
    """Record ``runs`` (``interrupted``) and ``queued`` (``READY`` again, the
    attempt given back) as a graceful stop does, each by its fenced
    statement, on a thread of its own that is waited for
    ``AT_ONCE_WRITES_SECONDS`` at most. The runs' threads die with the
    process; a run whose statement did not finish in time goes stale after
    its ttl, as after a SIGKILL."""
    logger.warning(
        "worker %s: stopping at once; handing back %d run(s) still going",
        worker_id,
        len(runs) + len(queued),
    )
    writer = threading.Thread(
        target=_write, args=(runs, queued), name="bgtasks-stop-at-once", daemon=True
    )
    writer.start()
    writer.join(AT_ONCE_WRITES_SECONDS)
    if writer.is_alive():
        logger.warning(
            "worker %s: the runs were not all handed back within %g s; the rest expire "
            "after their ttl",
            worker_id,
            AT_ONCE_WRITES_SECONDS,
        )


def _write(runs: list[RunningLease], queued: list[QueuedLease]) -> None:
    """The writes of :func:`hand_back`, on their own thread."""
    try:
        for running in runs:
            try:
                if running.interrupt():
                    log_ended(running)
            except DatabaseError as exc:
                logger.warning("task %r: not handed back: %s", running.name, exc)
        for lease in queued:
            try:
                status = lease.interrupt()
            except DatabaseError as exc:
                logger.warning("queued task %s: not handed back: %s", lease.name, exc)
            else:
                # RUNNING: nothing written (the run had ended, and said so
                # itself, or its lease was lost), as a running lease's
                # interrupt() returning False above: nothing to say here.
                if status != RUNNING:
                    log_queued_ended(lease.claim, status, lease.duration)
    finally:
        close_connection()
