"""Group commit: :class:`Group`, one statement at a time for everything that
came while the one before was on its way.

A worker's queue threads claim (``QueuedTask.objects.claim_many``) and end
their runs (``finish_many``) through a group each. A thread submits its item
and waits for its own outcome. When no statement of the group is on its
way, the thread runs one at once, for its item and whatever else is pending;
when one is, the items that come meanwhile wait for it to end, and the first
of them then runs the next statement, for them all. An item alone goes at
once, as by a statement of its own, and under load each statement carries
every item that came while the one before was on its way.

With a ``linger``, a statement that begins within ``linger`` seconds of the
last one's end first waits, until that end plus ``linger`` at most, for the
items that end said would come back (``comes_back``: a worker's thread handed
a task, coming back with its end once it has run it). Without it, the threads
of a worker split into two halves whose rounds take turns: the half whose
task a round just claimed is still running it when the other half's round
goes. A short task's thread is back within the linger, and the round
carries both halves; a long task's thread is not, and a thread that ends
one a linger or more after the last round's end does not wait at all
(docs/benchmarks.md, "Rounds that wait for the threads coming back").

So an item's outcome is known at most two statements and one ``linger``
after it was submitted: the one on its way then, and its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

_In = TypeVar("_In")
_Out = TypeVar("_Out")


@dataclass
class _Pending(Generic[_In, _Out]):
    """One item waiting for its statement, and that statement's outcome for it."""

    item: _In
    done: bool = False
    out: _Out | None = None
    error: BaseException | None = None


class Group(Generic[_In, _Out]):
    """Group commit through ``run``: one statement for the items it is given,
    returning one outcome for each, in their order; with a ``linger``, a
    statement right after another waits for the items ``comes_back`` (an item
    and its outcome) expects (see the module docstring)."""

    def __init__(
        self,
        run: Callable[[list[_In]], Sequence[_Out]],
        *,
        linger: float = 0.0,
        comes_back: Callable[[_In, _Out], bool] | None = None,
    ) -> None:
        self._run = run
        self._linger, self._comes_back = linger, comes_back
        self._pending: list[_Pending[_In, _Out]] = []
        self._on_its_way = False
        # One lock: the items wait on ``_lock`` for their statement, the
        # next statement on ``_arrivals`` for the items it lingers for.
        lock = threading.Lock()
        self._lock = threading.Condition(lock)
        self._arrivals = threading.Condition(lock)
        self._lingering = False
        # Set by each statement's end: until when the next one lingers
        # (monotonic), and for how many pending items at most.
        self._linger_until = 0.0
        self._expected = 0
        # How long the statement on its way (else the last) lingered, in
        # seconds: for its ``run`` to log.
        self.lingered = 0.0

    def submit(self, item: _In) -> _Out:
        """``item``'s outcome, once the statement that carried it has run;
        raises what that statement raised (in every thread it carried an
        item of)."""
        mine: _Pending[_In, _Out] = _Pending(item)
        with self._lock:
            self._pending.append(mine)
            if self._lingering:
                self._arrivals.notify()
            self._lock.wait_for(lambda: mine.done or not self._on_its_way)
            if not mine.done:
                self._run_pending()
        if mine.error is not None:
            raise mine.error
        # (Set with ``done`` when there is no error: an outcome may be None.)
        return cast(_Out, mine.out)

    def _run_pending(self) -> None:
        """Run one statement for every pending item (this thread's among them)
        and hand each its outcome. Called with the lock held and no statement
        on its way; the lock is released while it runs (and while it lingers,
        the items that come meanwhile waiting as for a statement on its way)."""
        self._on_its_way = True
        began = time.monotonic()
        left = self._linger_until - began
        self.lingered = 0.0
        if left > 0 and len(self._pending) < self._expected:
            self._lingering = True
            self._arrivals.wait_for(lambda: len(self._pending) >= self._expected, left)
            self._lingering = False
            self.lingered = time.monotonic() - began
        batch, self._pending = self._pending, []
        outs: Sequence[_Out] = ()
        error: BaseException | None = None
        self._lock.release()
        try:
            outs = self._run([pending.item for pending in batch])
            if len(outs) != len(batch):
                raise RuntimeError(f"{len(outs)} outcomes for {len(batch)} items")
        except BaseException as exc:
            error = exc
        finally:
            self._lock.acquire()
            for number, pending in enumerate(batch):
                if error is None:
                    pending.out = outs[number]
                else:
                    pending.error = error if number == 0 else copy_error(error)
                pending.done = True
            self._on_its_way = False
            self._linger_until = 0.0
            if self._linger and error is None and self._comes_back is not None:
                back = sum(map(self._comes_back, (pending.item for pending in batch), outs))
                self._expected = len(self._pending) + back
                self._linger_until = time.monotonic() + self._linger
            self._lock.notify_all()


def copy_error(error: BaseException) -> BaseException:
    """Another exception like ``error`` (of its class, with its args, caused
    by it), for another thread to raise: one exception raised in several
    threads would share its traceback. ``error`` itself if it can't be made."""
    try:
        copied = type(error)(*error.args)
    except Exception:
        return error
    copied.__cause__ = error
    return copied
