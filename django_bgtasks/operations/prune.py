"""The operator's upkeep (``bgtasks prune``): what is pruned, by which rule, once.

:func:`prune` records every silent holder as ``lost`` (``expire_stale()``),
deletes the runs that finished more than ``days`` ago except each task's
newest (``TaskRun.objects.older_than()``, so that a name's tokens keep
rising), deletes the Django Task results that finished more than ``days`` ago
(``QueuedTask.objects.finished_before()``), and forgets the workers silent for
``FORGET_WORKERS_AFTER`` (live workers do that too, once a minute). ``days``
defaults to ``BGTASKS_HISTORY_DAYS``. With ``dry_run`` it only counts what it
would change.

As the other operations do, it returns a value that says what happened
(:class:`Pruned`, :class:`WouldPrune`), never a string for people, and a bad
``days`` raises ``ValueError``/``TypeError`` before anything is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django_bgtasks.conf import conf
from django_bgtasks.limits import FORGET_WORKERS_AFTER
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun

# The bound for --days (and BGTASKS_HISTORY_DAYS): beyond it the date
# arithmetic overflows (and it makes no sense for history).
MAX_HISTORY_DAYS = 36500


def history_days(days: float) -> float:
    """``--days`` (or ``BGTASKS_HISTORY_DAYS``): from 0 to ``MAX_HISTORY_DAYS``."""
    if not (math.isfinite(days) and 0 <= days <= MAX_HISTORY_DAYS):
        raise ValueError(
            f"--days must be 0 or more, and at most {MAX_HISTORY_DAYS}, not {days:g}."
        )
    return days


@dataclass(frozen=True, slots=True)
class WouldPrune:
    """A dry run: what :func:`prune` would change now. Nothing was written."""

    days: float
    silent: tuple[str, ...]  # the tasks whose holders would be recorded as lost
    runs: int
    queued: int


@dataclass(frozen=True, slots=True)
class Pruned:
    """What :func:`prune` changed: ``expired`` silent holders recorded as lost,
    ``workers`` rows of workers silent for ``workers_silent_for`` seconds
    forgotten, ``runs`` runs and ``queued`` Django Task results deleted."""

    days: float
    expired: int
    workers: int
    workers_silent_for: float
    runs: int
    queued: int


PruneResult = Pruned | WouldPrune


def prune(days: float | None = None, *, dry_run: bool = False) -> PruneResult:
    """Prune by the rules of the module docstring, keeping ``days`` of history
    (default: ``BGTASKS_HISTORY_DAYS``); with ``dry_run``, only count."""
    days = history_days(conf.HISTORY_DAYS if days is None else days)
    old_runs = TaskRun.objects.older_than(days)
    old_queued = QueuedTask.objects.finished_before(days)
    if dry_run:
        silent = tuple(state.name for state in BackgroundTask.objects.list_states() if state.stale)
        return WouldPrune(days, silent, old_runs.count(), old_queued.count())
    expired = BackgroundTask.objects.expire_stale()
    deleted, _by_model = old_runs.delete()
    deleted_queued, _by_model = old_queued.delete()
    forgot = BackgroundTask.objects.work.forget_workers(FORGET_WORKERS_AFTER)
    return Pruned(days, expired, forgot, FORGET_WORKERS_AFTER, deleted, deleted_queued)
