"""A worker's idle queue threads (:class:`IdleThreads`), and the wake-up that
goes to one of them when a Django Task may be ready.

One ready task needs one thread. Woken all at once, a worker's threads
would each claim (all but one finding nothing), and while they ran, the
thread that did claim the task waited behind them to start it: with 8
threads, a tenth of the starts waited 3 ms or more, one in a hundred 10 ms
or more (docs/benchmarks.md, "Idle workers"). So a notification wakes one
idle thread, and a thread whose claim brought it a task wakes the next idle
one before running it: a burst of tasks (a bulk enqueue sends one
notification) reaches every thread, one claim apart.

A notification that finds no thread idle (each is claiming, or running a
task) is owed to the next thread that would wait: that thread claims once
more instead, since its last claim may have read the queue before the task
was committed.

A poll that no wake-up ended first reads whether a task is ready
(``QueuedTask.objects.any_ready``: a read that locks and writes nothing)
before it claims (:mod:`django_bgtasks.worker.queue_threads`).

How often the polling thread looks: every ``poll`` seconds while the
process's change feed listens (PostgreSQL, not behind a pooler), where the
poll is only the fallback; elsewhere (SQLite, MySQL, a transaction pooler, a
feed reconnecting) ``threads`` times as often, so the worker looks for a
ready task as often as when each of its threads polled alone, and a task
waits for a thread no longer than it did then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django_bgtasks.push import feed as changes
from django_bgtasks.worker.polls import spread


def listening() -> bool:
    """Whether this process's change feed listens (PostgreSQL): a task made
    ready then wakes an idle thread."""
    return changes.feed().listener_pid is not None


class IdleThreads:
    """The events of the queue threads waiting for a task (the module docstring)."""

    def __init__(self, threads: int, *, notified: Callable[[], bool] = listening) -> None:
        self._threads, self._notified = threads, notified
        self._lock = threading.Lock()
        # The waiting threads' events, the last to wait last: it is woken
        # first (its stack and its connection are the warmest).
        self._waiting: list[threading.Event] = []
        # The one of them that polls: the others wait for a wake-up alone.
        self._poller: threading.Event | None = None
        self._owed = False

    def wait(self, wakeup: threading.Event, poll: float) -> bool:
        """Wait until ``wakeup`` is set (by :meth:`wake`, or by a stop), and,
        if no other idle thread polls, until it is time to poll (``poll``,
        the module docstring); at once if a wake-up is owed. ``wakeup`` is the
        calling thread's own, cleared before its last claim. ``False`` when
        it was time to poll: nothing said that a task may be ready."""
        with self._lock:
            if self._owed:
                self._owed = False
                return True
            self._waiting.append(wakeup)
            polls = self._poller is None
            if polls:
                self._poller = wakeup
        try:
            if polls:
                return wakeup.wait(spread(poll if self._notified() else poll / self._threads))
            return wakeup.wait()
        finally:
            with self._lock:
                if wakeup in self._waiting:
                    self._waiting.remove(wakeup)
                if self._poller is wakeup:
                    self._poller = None

    def wake(self, *, owe: bool = True) -> None:
        """Wake the last thread to wait, if one is; else, with ``owe``, owe the
        wake-up to the next thread that would wait."""
        with self._lock:
            if self._waiting:
                self._waiting.pop().set()
            elif owe:
                self._owed = True
