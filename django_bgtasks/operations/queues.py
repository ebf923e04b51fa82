"""The Django Tasks queues as things to see, written once for every surface
(``bgtasks queues``, ``GET <api>/django-tasks/queues/``, the admin, the
metrics): every queue that has tasks or a pause, whether it is paused and
since when, and its tasks counted by status.

The counts are what the operator's reads can afford at any size of the table
(:mod:`django_bgtasks.operations.queued`): a queue's ready and running tasks
each counted from their index up to ``COUNT_CAP``; its succeeded and failed
ones from the window of the newest ``COUNT_CAP`` tasks, each then a lower
bound unless the window held every task. A :class:`Counted` says which.
(Who paused a queue is not recorded: ``paused_at`` is all there is.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations.queued import (
    Counted,
    QueuedFilter,
    count_capped,
    newest_window,
    queue_names,
)
from django_bgtasks.queue.manager import FAILED, READY, RUNNING, SUCCESSFUL

STATUSES = (READY, RUNNING, SUCCESSFUL, FAILED)


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue: its ``name``, whether it is ``paused`` and since when, and
    its tasks' ``counts`` by status."""

    name: str
    paused: bool
    paused_at: dt.datetime | None
    counts: Mapping[str, Counted]

    def as_json(self) -> dict[str, Any]:
        """``{"name", "paused", "paused_at", "counts": {status: n}, "capped":
        [status, ...]}``: ``capped`` names the counts that are lower bounds."""
        return {
            "name": self.name,
            "paused": self.paused,
            "paused_at": None if self.paused_at is None else self.paused_at.isoformat(),
            "counts": {status: counted.value for status, counted in self.counts.items()},
            "capped": [status for status, counted in self.counts.items() if counted.capped],
        }


def queues() -> list[Queue]:
    """Every queue that has tasks or a pause, by name."""
    paused = QueuedTask.objects.paused_queues()
    with QueuedTask.objects.index_reads():
        names = sorted(set(queue_names()) | set(paused))
        if not names:
            return []
        window = newest_window(QueuedFilter().tasks(), ["queue_name", "status"])
        return [
            Queue(
                name,
                name in paused,
                paused.get(name),
                {
                    READY: count_capped(
                        QueuedTask.objects.ready().filter(queue_name=name),
                        order=("-priority", "seq"),
                    ),
                    RUNNING: count_capped(
                        QueuedTask.objects.running().filter(queue_name=name), order=("owner",)
                    ),
                    SUCCESSFUL: window.count_of(name, SUCCESSFUL),
                    FAILED: window.count_of(name, FAILED),
                },
            )
            for name in names
        ]


def paused_queues() -> dict[str, dt.datetime | None]:
    """The paused queues' names, each with when it was paused."""
    return QueuedTask.objects.paused_queues()


__all__ = ["STATUSES", "Queue", "paused_queues", "queues"]
