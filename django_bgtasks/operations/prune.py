"""The operator's upkeep (``bgtasks prune``): what is pruned, by which rule, once.

:func:`prune` records every silent holder as ``lost`` (``expire_stale()``),
deletes the runs that finished more than ``days`` ago except each task's
newest (``TaskRun.objects.older_than()``, so that a name's tokens keep
rising), deletes the Django Task results that finished more than ``days`` ago
(``QueuedTask.objects.finished_before()``), and forgets the workers silent for
``FORGET_WORKERS_AFTER`` (live workers do that too, once a minute). ``days``
defaults to ``BGTASKS_HISTORY_DAYS``. With ``dry_run`` it only counts what it
would change.

The deletes run in batches: a statement for each ``BATCH`` primary keys at
most, fewer where a statement takes longer than ``STATEMENT_SECONDS``
(:func:`resized`), from the oldest row to the last one enqueued (a run:
finished) before the cutoff, found by a binary search on the keys (a few
reads by primary key).
Each statement is short and commits at once: a claim, an end or an enqueue
waits for none on PostgreSQL and MariaDB (they touch no finished row, and
each batch holds its rows' locks for milliseconds; on SQLite they wait for
each, which holds the database's one write lock), a table of 10,000,000
finished rows is pruned by 2,000 of them or more, and no transaction as old
as the whole prune holds back autovacuum meanwhile; after each, prune waits
as long as it took (``PAUSE``), so that it takes half of what it could of
the server beside the workers (docs/operations.md, "A big table"). Rows
enqueued before the cutoff that finish after it are kept, as ever, and the
rare one enqueued by a transaction that committed after rows enqueued later
(its ``seq`` is the later one) is left for the next prune. A dry run counts up
to ``COUNT_CAP`` (operations/queued.py), oldest first.

As the other operations do, it returns a value that says what happened
(:class:`Pruned`, :class:`WouldPrune`), never a string for people, and a bad
``days`` raises ``ValueError``/``TypeError`` before anything is written.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from django_bgtasks.conf import conf
from django_bgtasks.limits import FORGET_WORKERS_AFTER
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from django_bgtasks.operations.queued import Counted, count_capped

# The bound for --days (and BGTASKS_HISTORY_DAYS): beyond it the date
# arithmetic overflows (and it makes no sense for history).
MAX_HISTORY_DAYS = 36500
# How many primary keys one DELETE of prune covers at most, and how long
# prune waits after each, as a share of the time the DELETE took: a prune of
# millions of rows keeps to about half of one core and of the disk's writes,
# beside the workers' claims and ends.
BATCH = 5_000
PAUSE = 1.0
# How long one DELETE may take: a batch that took longer is halved for the
# next (down to MIN_BATCH keys), one that took under a quarter of it is
# doubled (up to BATCH). Where a DELETE holds the whole database's write
# lock (SQLite), every claim and end waits for it: 5,000 rows took about
# 0.2 s there beside four workers, and a claim waited up to 2.2 s
# (docs/benchmarks.md, "A million tasks"). PostgreSQL and MariaDB lock the
# deleted rows only, which no claim or end touches; the same rule keeps
# each statement, and its share of the disk, short there too.
STATEMENT_SECONDS = 0.05
MIN_BATCH = 100


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
    runs: Counted  # counted up to COUNT_CAP
    queued: Counted


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
    cutoff = timezone.now() - dt.timedelta(days=days)
    old_runs = TaskRun.objects.older_than(days)
    old_queued = QueuedTask.objects.finished_before(days)
    if dry_run:
        silent = tuple(state.name for state in BackgroundTask.objects.list_states() if state.stale)
        runs, queued = (count_capped(old, order=("pk",)) for old in (old_runs, old_queued))
        return WouldPrune(days, silent, runs, queued)
    expired = BackgroundTask.objects.expire_stale()
    deleted = _delete_in_batches(old_runs, "finished_at", cutoff)
    # A result finishes after it was enqueued: none enqueued after the cutoff is old.
    deleted_queued = _delete_in_batches(old_queued, "enqueued_at", cutoff)
    forgot = BackgroundTask.objects.work.forget_workers(FORGET_WORKERS_AFTER)
    return Pruned(days, expired, forgot, FORGET_WORKERS_AFTER, deleted, deleted_queued)


def _delete_in_batches(old: QuerySet[Any], stamp: str, cutoff: dt.datetime) -> int:
    """Delete ``old``'s rows, ``BATCH`` primary keys a statement, from the
    first key to the last whose row's ``stamp`` is before ``cutoff``."""
    rows = old.model._default_manager.using(conf.DATABASE).order_by("pk")
    first = rows.values_list("pk", flat=True).first()
    if first is None:
        return 0
    last = _last_before(rows, stamp, cutoff, first)
    deleted, start, size = 0, first, BATCH
    while start <= last:
        began = time.monotonic()
        count, _by_model = old.filter(pk__gte=start, pk__lt=start + size).delete()
        took = time.monotonic() - began
        deleted += count
        start += size
        if count:
            time.sleep(took * PAUSE)
            size = resized(size, took)
    return deleted


def resized(size: int, took: float) -> int:
    """The next batch's size, after one of ``size`` keys took ``took``
    seconds: halved when it took longer than ``STATEMENT_SECONDS``, doubled
    when it took under a quarter of it, within ``MIN_BATCH`` and ``BATCH``."""
    if took > STATEMENT_SECONDS:
        return max(min(MIN_BATCH, BATCH), size // 2)
    if took < STATEMENT_SECONDS / 4:
        return min(BATCH, size * 2)
    return size


def _last_before(rows: QuerySet[Any], stamp: str, cutoff: dt.datetime, first: int) -> int:
    """About the last primary key of ``rows`` (ordered by it) whose row's
    ``stamp`` is before ``cutoff``, within ``BATCH`` above it: a binary search
    on the keys, as the stamps rise with them."""
    last = rows.reverse().values_list("pk", flat=True).first()
    assert last is not None  # (there is a first)

    def before(key: int) -> bool:
        at = rows.filter(pk__gte=key).values_list(stamp, flat=True).first()
        return at is not None and at < cutoff

    if before(last):
        return int(last)
    low, high = first, int(last)
    while high - low > BATCH:
        middle = (low + high) // 2
        low, high = (middle, high) if before(middle) else (low, middle)
    return high
