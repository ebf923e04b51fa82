"""The background-task runs a worker started, each on a thread of its own
(``BackgroundTaskFunction.run_in_thread``): what its loop counts against
``concurrency``, names in its heartbeat, and waits for when it stops."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django_bgtasks.choices import Outcome
from django_bgtasks.core.runner import RunningLease
from django_bgtasks.worker.hooks import WorkerHooks

logger = logging.getLogger("django_bgtasks.worker")

# How often a waiting main thread looks whether it should stop waiting: for a
# stop at once while it waits for the runs (it comes as a flag, which can't
# end a join), and under --once for a run or queue thread that ended.
LOOK_EVERY_SECONDS = 0.1


class Runs:
    """Task name -> its run and the thread running it."""

    def __init__(self, hooks: WorkerHooks | None = None) -> None:
        self._runs: dict[str, tuple[RunningLease, threading.Thread]] = {}
        # Told of each run reaped (the worker's hooks: its metrics, say).
        self.hooks = hooks

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, name: object) -> bool:
        return name in self._runs

    def add(self, running: RunningLease, thread: threading.Thread) -> None:
        self._runs[running.name] = (running, thread)

    def names(self) -> list[str]:
        """The names of the runs held here, sorted (as the heartbeat states them)."""
        return sorted(self._runs)

    def any_ended(self) -> bool:
        """A run's thread ended, and :meth:`reap` has not forgotten it yet."""
        return any(not thread.is_alive() for _, thread in self._runs.values())

    def going(self) -> list[RunningLease]:
        """The runs whose threads are still going."""
        return [running for running, thread in self._runs.values() if thread.is_alive()]

    def reap(self) -> None:
        """Forget the runs whose threads ended, logging how each ended."""
        for name, (running, thread) in list(self._runs.items()):
            if not thread.is_alive():
                del self._runs[name]
                log_ended(running)
                if self.hooks is not None:
                    self.hooks.run_ended(running)

    def wait(
        self, deadline: float, grace: float, waiting: Callable[[threading.Thread], bool]
    ) -> None:
        """Wait for every run until ``deadline`` (``grace`` seconds after the
        stop), while ``waiting(thread)`` says to (it beats meanwhile, and
        says no once the worker stops at once); then warn of each run still
        going, unless it stopped at once."""
        for name, (running, thread) in list(self._runs.items()):
            if not join(thread, deadline, waiting):
                continue
            logger.warning(
                "task %r (token %d) did not stop within the grace period (%g s); its "
                "lease expires after its ttl and another worker takes it over",
                name,
                running.token,
                grace,
            )


def log_started(running: RunningLease) -> None:
    """Say at INFO that a worker started ``running``: the task, the token,
    the trigger and the attempt (also in the record's ``extra``)."""
    logger.info(
        "task %r started (token %d, %s, attempt %d)",
        running.name,
        running.token,
        running.trigger,
        running.attempt,
        extra={**running.log_extra(), "attempt": running.attempt, "trigger": str(running.trigger)},
    )


def log_ended(running: RunningLease) -> None:
    """Say at INFO how ``running`` ended (its outcome, ``lost`` when its lease
    was), after how long, with its token and attempt; the record's ``extra``
    has them as ``outcome``, ``duration`` (seconds), ``token`` and ``attempt``."""
    outcome = running.outcome or Outcome.LOST
    duration = running.duration
    logger.info(
        "task %r (token %d, attempt %d) ended: %s after %.3f s",
        running.name,
        running.token,
        running.attempt,
        outcome,
        duration,
        extra={
            **running.log_extra(),
            "attempt": running.attempt,
            "outcome": str(outcome),
            "duration": duration,
        },
    )


def join(
    thread: threading.Thread, deadline: float, waiting: Callable[[threading.Thread], bool]
) -> bool:
    """Wait for ``thread`` until ``deadline``, looking every
    ``LOOK_EVERY_SECONDS`` whether ``waiting(thread)`` still holds. ``True``
    if the thread outlived the grace period (not when ``waiting`` said stop)."""
    while thread.is_alive():
        if not waiting(thread):
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        thread.join(min(left, LOOK_EVERY_SECONDS))
    return False
