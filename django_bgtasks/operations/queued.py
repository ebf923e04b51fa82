"""Django Tasks as an operator reads them, at any size of their table.

The admin, the JSON API and the ``bgtasks`` command list Django Tasks from
here, and only put what they get into their own form. Every read is bounded
by an index, whatever the table holds (10,000,000 rows are measured:
docs/benchmarks.md, "A million tasks"), and runs in
``QueuedTask.objects.index_reads()``, which keeps PostgreSQL's planner to
those index reads whatever its statistics say:

* :func:`of_status` and :class:`QueuedFilter`: the one set of filters (status, queue, task path,
  backend, and those of operations/search.py: arguments, error, key, time),
  checked before any SQL: a bad value is a ``ValueError`` that names it, so
  that each surface refuses it in its own way (a 400, a ``CommandError``).
* :func:`queued_page`: newest first, a page at a time by keyset (the tasks
  older than the page before, not an OFFSET that reads every row it skips).
* :func:`count_capped`: a count that stops at ``COUNT_CAP``, where an exact
  one would read every matching row: :class:`Counted` says which it is, and
  prints "10,000+" for one that stopped; :func:`newest_window`: how many of
  the newest ``COUNT_CAP`` rows have each value of a column (a filter's
  choices), exact when those are all the rows, else a lower bound each.
* :func:`queued_tasks`: ``bgtasks list``'s running and waiting tasks, then the
  newest finished ones.
* :func:`queue_names` and :func:`task_paths`: the names there are, each once
  (a loose scan of their index).
* :func:`queued_task` and :func:`queued_json`: one task, and its one JSON
  shape; :func:`waiting`: what a ready task waits for, where it is not
  only its turn (each surface shows it beside the status);
  :func:`status_label`: the status as the admin and the command say it;
  :func:`last_error_line`: why it failed, in a line.
"""

from __future__ import annotations

import datetime as dt
import heapq
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from django_bgtasks.choices import QueueStatus
from django_bgtasks.conf import conf
from django_bgtasks.core.states import run_duration
from django_bgtasks.db import read_database
from django_bgtasks.exceptions import TaskCancelled, TaskNotImportable
from django_bgtasks.limits import (
    COUNT_CAP,
    MAX_BACKEND_LENGTH,
    MAX_PAGE_SIZE,
    MAX_TASK_PATH_LENGTH,
)
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import search
from django_bgtasks.queue.manager import FAILED, READY, RUNNING, SUCCESSFUL
from django_bgtasks.validation import check_text, validate_queue_name

# What a ready task that the last worker to claim it could not import waits
# for (queue/execute.py's _not_importable: an old release's worker during a
# deploy, which handed it back with TaskNotImportable as its last error).
WAITING_FOR_IMPORT = "waiting for a worker that can import it"
# What a ready task of a paused queue waits for.
WAITING_FOR_UNPAUSE = "waiting for its queue to be unpaused"
_NOT_IMPORTABLE = f"{TaskNotImportable.__module__}.{TaskNotImportable.__qualname__}"
_CANCELLED = f"{TaskCancelled.__module__}.{TaskCancelled.__qualname__}"

# How many of the newest queued Django Tasks ``bgtasks list`` shows.
RECENT_QUEUED = 50
# A page of the API's list, when the request names no ``limit``.
DEFAULT_PAGE_SIZE = 100


def of_status(queryset: QuerySet[QueuedTask], status: str) -> QuerySet[QueuedTask]:
    """``queryset``'s tasks of ``status``. The ready ones with ``seq > 0``
    besides, true of every row: the predicate of the index of the ready rows
    by ``seq`` (migration 0021's ``bgtasks_queued_ready_seq``), which only a
    read that states it can use, so that the claim never does."""
    if status == READY:
        return queryset.filter(status=status, seq__gt=0)
    return queryset.filter(status=status)


# The status filter's word for the ready tasks that ran before and failed
# (or lost their worker), and will run again: apart from FAILED, which is
# failed for good (no attempt left, or cancelled) until an operator retries it.
RETRYING = "RETRYING"
STATUS_FILTERS = (*QueueStatus.values, RETRYING)
# The value no ``args`` term has (``None`` is JSON's null, a value to search for).
ANY_ARGS: Any = object()


@dataclass(frozen=True, slots=True)
class QueuedFilter:
    """Which Django Tasks to read: each field ``None`` for any (``args``:
    ``ANY_ARGS``). ``status``, ``queue``, ``task`` and ``backend`` are read
    from an index; the others are tested row by row on what those read
    (operations/search.py, which says what each matches)."""

    status: str | None = None
    queue: str | None = None
    task: str | None = None
    backend: str | None = None
    args: Any = ANY_ARGS
    error: str | None = None
    key: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    @classmethod
    def parse(
        cls,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        backend: str | None = None,
        args: str | None = None,
        error: str | None = None,
        key: str | None = None,
        since: str | dt.datetime | None = None,
        until: str | dt.datetime | None = None,
    ) -> QueuedFilter:
        """The filter of these texts (a query string's, a command's options),
        each checked: a ``ValueError`` names the one that is wrong. A status
        is one of ``choices.QueueStatus``'s or ``RETRYING``, in any case; an
        age in ``since`` or ``until`` is read against the database's clock."""
        if status is not None:
            wanted = status.strip().upper()
            if wanted not in STATUS_FILTERS:
                raise ValueError(
                    f"status must be one of {', '.join(STATUS_FILTERS)}, not {status!r}"
                )
            status = wanted
        begins = None if since is None else search.parse_time("since", since)
        ends = None if until is None else search.parse_time("until", until)
        return cls(
            status=status,
            queue=None if queue is None else validate_queue_name(queue),
            task=None if task is None else check_text("task", task, MAX_TASK_PATH_LENGTH),
            backend=(
                None if backend is None else check_text("backend", backend, MAX_BACKEND_LENGTH)
            ),
            args=ANY_ARGS if args is None else search.parse_args(args),
            error=None if error is None else search.parse_error(error),
            key=None if key is None else search.parse_key(key),
            # (the clock is read last, once every term is known to be good)
            **dict(zip(("since", "until"), search.resolve(begins, ends), strict=True)),
        )

    @property
    def scans(self) -> bool:
        """Whether a term of the filter is tested row by row (no index has it)."""
        return self != self.indexed()

    def indexed(self) -> QueuedFilter:
        """This filter's terms that an index reads, alone (``RETRYING`` reads
        the ready tasks' index, and tests each one's attempts)."""
        status = READY if self.status == RETRYING else self.status
        return QueuedFilter(status, self.queue, self.task, self.backend)

    def apply(self, queryset: QuerySet[QueuedTask]) -> QuerySet[QueuedTask]:
        """``queryset`` narrowed to the tasks this filter names."""
        lookups = {"queue_name": self.queue, "task_path": self.task, "backend": self.backend}
        queryset = queryset.filter(**{field: value for field, value in lookups.items() if value})
        if self.status is not None:
            queryset = of_status(queryset, self.indexed().status)  # type: ignore[arg-type]
        return self.match(queryset)

    def match(self, queryset: QuerySet[QueuedTask]) -> QuerySet[QueuedTask]:
        """``queryset`` narrowed by the terms no index reads."""
        if self.status == RETRYING:
            queryset = queryset.filter(attempts__gt=0)
        if self.args is not ANY_ARGS:
            queryset = search.args_condition(queryset, self.args)
        if self.error is not None:
            queryset = search.with_error_text(queryset).filter(search.error_condition(self.error))
        if self.key is not None:
            queryset = queryset.filter(search.key_condition(self.key))
        if self.since is not None or self.until is not None:
            queryset = search.with_time(queryset).filter(
                search.time_condition(self.since, self.until)
            )
        return queryset

    def tasks(self) -> QuerySet[QueuedTask]:
        """The tasks this filter names, newest first."""
        return self.apply(QueuedTask.objects.using(read_database.alias())).order_by("-seq")


@dataclass(frozen=True, slots=True)
class Counted:
    """A count that stops at a cap: ``value`` exactly when not ``capped``,
    else at least ``value`` (the cap)."""

    value: int
    capped: bool

    def __str__(self) -> str:
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


def count_capped(
    queryset: QuerySet[Any], cap: int = COUNT_CAP, order: Sequence[str] = ("-pk",)
) -> Counted:
    """How many rows ``queryset`` has, counting at most ``cap`` and one: the
    newest ``cap + 1`` rows at most, read in ``seq`` order from the index of
    its filter (``SELECT COUNT(*) FROM (... ORDER BY seq DESC LIMIT cap +
    1)``), where an exact count reads every matching row. (Without the
    order the planner may read the table from its start, as if the rows it
    counts were spread through it: the ready ones are the newest, after
    millions of finished ones.) ``order`` is another index's order, for a
    queryset that it serves better."""
    found = queryset.order_by(*order)[: cap + 1].count()
    return Counted(min(found, cap), found > cap)


@dataclass(frozen=True, slots=True)
class Window:
    """The newest rows of a queryset (at most ``COUNT_CAP``), counted by the
    values of some columns: ``complete`` when those are all its rows (each
    count is then exact), else each count is a lower bound."""

    counts: dict[str, Counter[Any]]
    complete: bool
    size: int
    # Each row's values of all the columns, in their order, counted.
    combinations: Counter[tuple[Any, ...]]

    def count(self, column: str, value: Any) -> Counted:
        """How many rows have ``value`` in ``column``: exact, or at least that many."""
        return Counted(self.counts[column][value], not self.complete)

    def count_of(self, *values: Any) -> Counted:
        """How many rows have these ``values``, one for each column in order."""
        return Counted(self.combinations[values], not self.complete)

    def total(self) -> Counted:
        """How many rows there are: exact, or at least that many."""
        return Counted(self.size, not self.complete)


def newest_window(queryset: QuerySet[Any], columns: Sequence[str], cap: int = COUNT_CAP) -> Window:
    """:class:`Window` of ``columns`` over ``queryset``: one read of its newest
    ``cap + 1`` rows at most, whose values are counted here, where a count of
    each value reads every row that has it (a filter's choices on a big
    table: 20 queues, each a count of up to a million rows)."""
    rows = list(queryset.order_by("-pk").values_list(*columns)[: cap + 1])
    complete = len(rows) <= cap
    rows = rows[:cap]
    counts = {column: Counter(row[n] for row in rows) for n, column in enumerate(columns)}
    return Window(counts, complete, len(rows), Counter(map(tuple, rows)))


@dataclass(frozen=True, slots=True)
class QueuedPage:
    """A page of :func:`queued_page`: its tasks, newest first, and the ``seq``
    to read the next page below (``None``: this is the last)."""

    rows: list[QueuedTask]
    next_before: int | None


def page_size(limit: object) -> int:
    """A page's number of tasks: a whole number from 1 to ``MAX_PAGE_SIZE``
    (or its text, as a query string has it)."""
    if isinstance(limit, str) and limit.strip().isdigit():
        limit = int(limit)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}, not {limit!r}")
    return limit


def queued_page(
    filters: QueuedFilter, *, before: int | None = None, limit: int = DEFAULT_PAGE_SIZE
) -> QueuedPage:
    """The ``limit`` newest tasks ``filters`` names whose ``seq`` is below
    ``before`` (every one with ``None``): one read of an index in ``seq``
    order, however deep the page (a keyset, not an OFFSET). With terms no
    index reads (``filters.scans``), a bounded scan (search.scan): a page may
    then hold fewer tasks than ``limit``, and still have a next page, where
    the scan stopped."""
    limit = page_size(limit)
    if filters.scans:
        found = search.scan(
            filters.indexed().tasks(), filters.match, before=before, wanted=limit + 1
        )
        rows = found.rows[:limit]
        if len(found.rows) > limit:
            return QueuedPage(rows, rows[-1].seq)
        return QueuedPage(rows, found.last_read)
    tasks = filters.tasks()
    if before is not None:
        tasks = tasks.filter(seq__lt=before)
    with QueuedTask.objects.index_reads():
        rows = list(tasks[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return QueuedPage(rows, rows[-1].seq if more else None)


def _newest(statuses: Iterable[str], limit: int) -> list[QueuedTask]:
    """The ``limit`` newest tasks of ``statuses``: one read per status, each of
    the status's index (migrations 0021 and 0023: a read of the table in
    ``seq`` order would step over every row of another status first, a
    million ready tasks before the newest finished one), merged."""
    reads = [QueuedFilter(status=status).tasks()[:limit] for status in statuses]
    return list(heapq.merge(*reads, key=lambda row: -row.seq))[:limit]


def queued_tasks(limit: int = RECENT_QUEUED) -> list[QueuedTask]:
    """The running and waiting Django Tasks, then the most recent finished
    ones: at most ``limit`` rows, newest first within each group."""
    with QueuedTask.objects.index_reads():
        waiting = _newest((RUNNING, READY), limit)
        return waiting + _newest((SUCCESSFUL, FAILED), limit - len(waiting))


def queue_names() -> list[str]:
    """The queue names that have tasks, sorted."""
    return QueuedTask.objects.queue_names()


def task_paths() -> list[str]:
    """The task paths that have tasks, sorted."""
    return QueuedTask.objects.task_paths()


def queued_task(result_id: str) -> QueuedTask | None:
    """The Django Task whose result id is ``result_id``, or ``None``."""
    try:
        key = uuid.UUID(str(result_id))
    except ValueError:
        return None
    return QueuedTask.objects.using(conf.DATABASE).filter(uuid=key).first()


def waiting(row: QueuedTask, paused: Collection[str]) -> str | None:
    """What ``row`` waits for beyond its turn in the queue, said as each
    surface shows it (:data:`WAITING_FOR_UNPAUSE`, its queue being one of
    ``paused``; :data:`WAITING_FOR_IMPORT`), or ``None``."""
    if row.status != READY:
        return None
    if row.queue_name in paused:
        return WAITING_FOR_UNPAUSE
    return WAITING_FOR_IMPORT if _last_error_class(row) == _NOT_IMPORTABLE else None


def status_label(row: QueuedTask, paused: Collection[str]) -> str:
    """``row``'s status as the admin and ``bgtasks list``/``show`` say it: in
    lower case, with what a ready task waits for (:func:`waiting`), a cancel
    asked of a running one, or that a failed one was cancelled (its last
    error a ``TaskCancelled``: cancelled while ready, or stopped at a check).
    A cancel asked of a run that then succeeded, or failed of its own
    error, is not its state now, and is not said."""
    label = row.status.lower()
    if (why := waiting(row, paused)) is not None:
        return f"{label} ({why})"
    if row.status == RUNNING and row.cancel_requested:
        return f"{label} (cancel requested)"
    if row.status == FAILED and _last_error_class(row) == _CANCELLED:
        return f"{label} (cancelled)"
    return label


# How much of an error a list shows beside the status (the page has it whole).
ERROR_LINE_LENGTH = 160


def last_error_line(row: QueuedTask) -> str | None:
    """The last line of ``row``'s last error (``ValueError: bad input``), cut
    to ``ERROR_LINE_LENGTH``, or its exception class when its traceback has
    no text; ``None`` without an error. Why a failed task failed, or why a
    retrying one will run again, at a glance in a list."""
    last = row.errors[-1] if row.errors else None
    if not isinstance(last, dict):
        return None
    lines = [line.strip() for line in str(last.get("traceback") or "").splitlines()]
    line = next((line for line in reversed(lines) if line), "")
    line = line or str(last.get("exception_class_path") or "")
    if len(line) > ERROR_LINE_LENGTH:
        line = line[: ERROR_LINE_LENGTH - 1] + "…"
    return line or None


def _last_error_class(row: QueuedTask) -> str | None:
    """The exception class path of ``row``'s last error, if it has one."""
    last = row.errors[-1] if row.errors else None
    return last.get("exception_class_path") if isinstance(last, dict) else None


def queued_json(row: QueuedTask, paused: Collection[str]) -> dict[str, Any]:
    """One Django Task as the API and ``bgtasks --json`` show it (``paused``:
    the paused queues' names, read once for a page of them): with its
    arguments and its return value as stored (JSON, as the admin shows
    them; ``null`` until it succeeded), its errors and its attempts."""
    args, kwargs = row.arguments()
    return {
        "id": str(row.uuid),
        "task": row.task_path,
        "backend": row.backend,
        "queue": row.queue_name,
        "priority": row.priority,
        "status": row.status,
        "waiting": waiting(row, paused),
        "attempts": row.attempts,
        "max_attempts": row.max_attempts,
        "worker": row.owner,
        "worker_ids": row.worker_ids,
        "token": row.token,
        "progress": row.progress,
        "cancel_requested": row.cancel_requested,
        "enqueued_at": _iso(row.enqueued_at),
        "run_after": _iso(row.run_after),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "duration": run_duration(row.started_at, row.finished_at),
        "args": args,
        "kwargs": kwargs,
        "return_value": row.return_value,
        "errors": row.errors,
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
