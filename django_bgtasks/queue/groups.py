"""Group commit: :class:`Group`, one statement at a time for everything that
came while the one before was on its way.

A worker's queue threads claim (``QueuedTask.objects.claim_many``) and end
their runs (``finish_many``) through a group each. A thread submits its item
and waits for its own outcome. When no statement of the group is on its
way, the thread runs one at once, for its item and whatever else is pending;
when one is, the items that come meanwhile wait for it to end, and the first
of them then runs the next statement, for them all. Nothing waits for a
batch to fill: an item alone goes at once, as by a statement of its own, and
under load each statement carries every item that came while the one before
was on its way.

So an item's outcome is known at most two statements after it was
submitted: the one on its way then, and its own.
"""

from __future__ import annotations

import threading
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
    returning one outcome for each, in their order (see the module docstring)."""

    def __init__(self, run: Callable[[list[_In]], Sequence[_Out]]) -> None:
        self._run = run
        self._pending: list[_Pending[_In, _Out]] = []
        self._on_its_way = False
        self._lock = threading.Condition()

    def submit(self, item: _In) -> _Out:
        """``item``'s outcome, once the statement that carried it has run;
        raises what that statement raised (in every thread it carried an
        item of)."""
        mine: _Pending[_In, _Out] = _Pending(item)
        with self._lock:
            self._pending.append(mine)
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
        on its way; the lock is released while it runs."""
        batch, self._pending = self._pending, []
        self._on_its_way = True
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
