"""An operator's action on every Django Task a filter matches, on the server:
retry, cancel or delete, written once for the admin's confirmation page,
the JSON API's ``POST <prefix>/django-tasks/<action>/`` and ``bgtasks
retry|cancel|delete`` with filter options.

:func:`act` reads the filter's tasks a chunk at a time (search.chunks:
``SCAN_CHUNK`` rows of the filter's index a statement, its other terms
tested on those), and acts on each chunk's matches in one statement, each
task matched as a single task's action is:

* ``retry``: ``QueuedTask.objects.retry_many``, the rule of a task's Retry
  (a failed task only; a unique one only while no other run holds its key);
* ``cancel``: ``QueuedTask.objects.cancel_many``, the rule of its Cancel (a
  ready task fails at once, a running one is asked to stop, a finished one
  is left alone);
* ``delete``: a ``DELETE`` of the chunk's tasks that are not running (a
  running task's worker still writes to its row: cancel it first).

The filter is read when the action reaches each chunk, so a task that
changed since the confirmation counted it is acted on as it is then: a
ready task claimed since is asked to stop, a failed one retried since is
not retried twice. :class:`BulkResult` says how many each way.

An action needs the change permission (``delete``, the delete one:
:data:`PERMISSIONS`), and a filter of at least one term: an empty filter is
refused rather than read as "every task" (:meth:`Selection.of`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from django.db.models import QuerySet

from django_bgtasks.conf import conf
from django_bgtasks.limits import COUNT_CAP
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import search
from django_bgtasks.operations.queued import Counted, QueuedFilter, count_capped
from django_bgtasks.queue.manager import FAILED, RUNNING

Action = Literal["retry", "cancel", "delete"]
ACTIONS: tuple[Action, ...] = ("retry", "cancel", "delete")
# The permission of operations/permissions.py each action needs.
PERMISSIONS: dict[Action, Literal["change", "delete"]] = {
    "retry": "change",
    "cancel": "change",
    "delete": "delete",
}
# What each surface says an action did to a task: the key of its count in
# the API's answer, and the word for it.
DONE: dict[Action, str] = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What :func:`act` did: of the ``matched`` tasks (those the filter named
    when it reached them), ``done`` were retried, cancelled before they ran,
    or deleted; ``stopping`` (a cancel's) were running and asked to stop;
    the rest were ``skipped``, their state not the action's (a retry of a
    task that is not failed, a cancel of a finished one, a delete of a
    running one), or gone."""

    action: Action
    matched: int
    done: int
    stopping: int = 0

    @property
    def skipped(self) -> int:
        return self.matched - self.done - self.stopping

    @property
    def count(self) -> int:
        """How many tasks the action took: retried, cancelled or asked to
        stop, deleted."""
        return self.done + self.stopping

    def as_json(self) -> dict[str, int | str]:
        """The API's answer: ``{"action", "count", "matched",
        "<retried|cancelled|deleted>", "stopping", "skipped"}``."""
        return {
            "action": self.action,
            "count": self.count,
            "matched": self.matched,
            DONE[self.action]: self.done,
            "stopping": self.stopping,
            "skipped": self.skipped,
        }


@dataclass(frozen=True, slots=True)
class Selection:
    """The tasks a bulk action takes: those of ``indexed`` (read newest first,
    a chunk a statement) that ``match`` keeps (the terms no index reads;
    ``scans``: whether it has any). :meth:`of` makes the selection of a
    filter; the admin makes its list's (its filters and search)."""

    indexed: QuerySet[QueuedTask]
    match: Callable[[QuerySet[QueuedTask]], QuerySet[QueuedTask]]
    scans: bool

    @classmethod
    def of(cls, filters: QueuedFilter) -> Selection:
        """The tasks ``filters`` names; a ``ValueError`` for an empty filter,
        which is not read as "every task"."""
        if filters == QueuedFilter():
            raise ValueError(
                "Name at least one filter: status, queue, task, backend, args, error, key, "
                "since or until (every task is not a filter)."
            )
        return cls(filters.indexed().tasks(), filters.match, filters.scans)


def checked(action: str) -> Action:
    """``action``, one of :data:`ACTIONS`; a ``ValueError`` else."""
    if action not in ACTIONS:
        raise ValueError(f"The action must be one of {', '.join(ACTIONS)}, not {action!r}.")
    return action


def matching(selection: Selection) -> Counted:
    """How many tasks ``selection`` holds now, for a confirmation: exact up to
    ``COUNT_CAP``; with terms no index reads, counted in the newest
    ``search.SCAN_BUDGET`` rows the indexed terms read, and "at least" that
    many when there were more."""
    if not selection.scans:
        with QueuedTask.objects.index_reads():
            return count_capped(selection.indexed, COUNT_CAP)
    # The search's own bounded read (the admin's list reads it so too).
    seqs, complete = search.scan_seqs(selection.indexed, selection.match, wanted=COUNT_CAP + 1)
    return Counted(min(len(seqs), COUNT_CAP), not complete)


def act(action: str, selection: Selection) -> BulkResult:
    """``action`` on every task ``selection`` holds, a batch a statement (see
    the module); a ``ValueError`` for a bad action, before anything is
    written."""
    chosen = checked(action)
    matched = done = stopping = 0
    for seqs in search.chunks(selection.indexed, selection.match):
        matched += len(seqs)
        if chosen == "retry":
            done += QueuedTask.objects.retry_many(seqs)
        elif chosen == "cancel":
            after = QueuedTask.objects.cancel_many(seqs).values()
            done += sum(status == FAILED for status in after)
            stopping += sum(status == RUNNING for status in after)
        else:
            done += _delete(seqs)
    return BulkResult(chosen, matched, done, stopping)


def _delete(seqs: list[int]) -> int:
    """Delete the tasks ``seqs`` that are not running, in one statement: how many."""
    if not seqs:
        return 0
    rows = QueuedTask.objects.using(conf.DATABASE).filter(seq__in=seqs).exclude(status=RUNNING)
    deleted, _by_model = rows.delete()
    return deleted
