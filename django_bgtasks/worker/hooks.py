"""What a worker tells as it works, for whoever listens: the public
contract between a worker's parts and its metrics (``--metrics-port``,
:class:`~django_bgtasks.worker.prometheus.WorkerMetrics`), or anything else a
site hands :class:`~django_bgtasks.worker.loop.Worker` as ``hooks``.

The worker's parts take the hooks when they are made and call them where
each fact is known once: the runs (``worker/runs.py``) as a background run
is reaped, the queue threads (``worker/queue_threads.py``) as a Django Task
starts and ends, the renewer (``worker/renewal.py``) after each renewal
statement. A worker made without hooks calls nothing. A hook runs in the
part's own thread, between two statements of its work: it must be quick
and must not raise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from django_bgtasks.core.runner import RunningLease
    from django_bgtasks.queue.manager import Claim


class WorkerHooks(Protocol):
    """The calls a worker makes to its ``hooks``."""

    def run_ended(self, running: RunningLease) -> None:
        """A background run ended (reaped): its outcome and duration are on it."""
        ...

    def queued_started(self, claim: Claim) -> None:
        """A Django Task's run starts, as claimed."""
        ...

    def queued_ended(self, claim: Claim, status: str, duration: float, stopping: bool) -> None:
        """A Django Task's run ended after ``duration`` seconds, leaving its
        row ``status``; ``stopping``: its worker was stopping."""
        ...

    def renewed(self, seconds: float) -> None:
        """A renewal statement (every lease the worker holds) took ``seconds``."""
        ...
