"""Coalescing a run's progress: when an ``update()`` writes, and when it waits.

A body that reports progress per item would otherwise commit once per item.
The rule (``BGTASKS_PROGRESS_INTERVAL``, *i*, 0.5 s by default):

* the first ``update()`` of a run writes at once, and so does one that comes
  after *i* without any ``update()``: a task that reports now and then
  behaves as if nothing were coalesced;
* calls closer together than that only replace the pending value (the latest
  wins). It is written by the first later call at least *i* after the last
  write, or else by the heartbeat thread (a worker's renewer) at that moment, so every replica
  sees progress at most *i* (plus one write) old;
* ``update(value, flush=True)`` and the release write at once.

This class only keeps the times and the pending value, on the caller's
monotonic clock (it judges no lease, only when this holder writes its own
value); the runner does the writing. Safe to call from the body and the
heartbeat thread at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# No value waiting to be written (``None`` is a value).
NOTHING: Any = object()


class Progress:
    """The pending value of one run and when it must be written."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._pending: Any = NOTHING
        self._last_call: float | None = None
        self._last_write: float | None = None
        # Set when a value starts waiting, so the heartbeat thread can wake
        # for its deadline instead of the next heartbeat's.
        self.wake = threading.Event()
        # Called then too, when a worker's renewer writes the values instead.
        self.on_pending: Callable[[], None] | None = None

    def offer(self, value: Any, *, flush: bool = False) -> bool:
        """Make ``value`` the pending value; ``True`` if the caller must write
        it now (then it calls :meth:`take` and :meth:`written`)."""
        now = time.monotonic()
        with self._lock:
            quiet = self._last_call is None or now - self._last_call >= self.interval
            self._last_call = now
            newly = self._pending is NOTHING
            self._pending = value
            if flush or quiet or self._due(now):
                return True
        if newly:  # only then does the heartbeat thread's deadline change
            self.wake.set()
            if self.on_pending is not None:
                self.on_pending()
        return False

    def take(self) -> Any:
        """The value to write now: the pending one, or :data:`NOTHING`."""
        with self._lock:
            return self._pending

    def written(self, value: Any) -> None:
        """``value`` (from :meth:`take`) is in the database: it is no longer
        pending, unless a newer one arrived meanwhile."""
        now = time.monotonic()
        with self._lock:
            if value is not NOTHING:
                self._last_write = now
            if self._pending is value:
                self._pending = NOTHING

    def deadline(self) -> float | None:
        """When the pending value must be written (monotonic), or ``None``."""
        with self._lock:
            if self._pending is NOTHING:
                return None
            return (self._last_write or 0.0) + self.interval

    def wait_for_write(self, next_beat: float, stop: threading.Event) -> float | None:
        """For the heartbeat thread: wait until ``next_beat`` (monotonic) or
        the pending value's :meth:`deadline`, whichever comes first. Returns
        the time it woke if a renewal is due now; ``None`` if it was woken
        early (by a newer pending value, or ``stop``)."""
        self.wake.clear()
        due = self.deadline()
        wake_at = next_beat if due is None else min(next_beat, due)
        self.wake.wait(max(wake_at - time.monotonic(), 0.0))
        now = time.monotonic()
        due = self.deadline()
        if stop.is_set() or (now < next_beat and (due is None or now < due)):
            return None
        return now

    def _due(self, now: float) -> bool:
        return self._last_write is None or now - self._last_write >= self.interval
