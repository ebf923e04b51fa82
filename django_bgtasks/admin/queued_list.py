"""The Django tasks' list at any size of their table: its filters, their
counts, its search and its count of results, each a bounded read
(:mod:`django_bgtasks.operations.queued`).

Django's changelist counts every row twice (the filtered list and the whole
table) and each filter's choices once more (``show_facets``), lists a field
filter's choices with ``DISTINCT`` over every row, and searches with
``icontains`` over every row: at 10,000,000 rows the page never answered
(docs/benchmarks.md, "A million tasks"). Here:

* the count of results stops at ``COUNT_CAP`` (:class:`CappedPaginator`;
  the page says "10,000+ Django tasks", and pages through those), and the
  whole table is not counted;
* each filter's choices carry the count of the newest ``COUNT_CAP`` tasks the
  other filters hold (one read of at most that many rows a filter): exact
  where those are all, else "n+", at least that many;
* the queues and backends to filter by are the names there are, from a
  loose scan of the queue's index, and ``TASKS``' ``LeaseBackend``s;
* the search takes a task's id (its UUID, whole) or a part of a task path,
  matched against the task paths there are (a loose scan of their index),
  not against every row; and terms (``error:timeout``, ``args:{"user_id":5}``,
  ``key:``, ``task:``, ``since:``, ``until:``; the status filter's "will
  retry" too) tested on the rows the rest reads, newest first, within the
  search's budget (operations/search.py), the list saying when it stopped;
* an action on every task the list selects ("Select all") takes the newest
  ``ACTION_CAP`` of them, one operation each, and says so: one on a million
  tasks took minutes.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import EmptyResultSet
from django.core.paginator import Paginator
from django.db.models import QuerySet, Value
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.text import smart_split, unescape_string_literal
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_bgtasks.choices import QueueStatus
from django_bgtasks.conf import lease_backends
from django_bgtasks.db import read_database
from django_bgtasks.limits import COUNT_CAP
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations.queued import (
    RETRYING,
    Counted,
    QueuedFilter,
    Window,
    count_capped,
    newest_window,
    of_status,
    queue_names,
    task_paths,
)
from django_bgtasks.operations.search import scan_seqs
from django_bgtasks.queue.manager import READY

# How many tasks an action on the whole selection ("Select all") takes: a
# cancel is three statements, so that the page answers within a second
# (200 took 1.3 s at 10,000,000 rows: docs/benchmarks.md, "A million tasks").
ACTION_CAP = 100


class AtLeast(int):
    """A count that stopped at its cap: a number to Django's changelist (its
    pages, "Select all"), "10,000+" where a page writes it (a site with
    ``USE_THOUSAND_SEPARATOR`` writes the number: the list's note says that
    its counts stop, queued_change_list.html)."""

    def __str__(self) -> str:
        return f"{int(self):,}+"


class CappedPaginator(Paginator):  # type: ignore[type-arg]  # (django-stubs' generic)
    """A paginator whose count stops at ``COUNT_CAP`` (``counted`` says
    whether it did): its pages are those of the first ``COUNT_CAP`` rows."""

    # The list's rows: read once with the filters' counts where they are the
    # same queryset (.request_window), else counted.
    request: HttpRequest | None = None

    @cached_property
    def counted(self) -> Counted:
        queryset: Any = self.object_list
        if self.request is not None:
            return request_window(self.request, queryset).total()
        return count_capped(queryset, COUNT_CAP)

    @cached_property
    def count(self) -> int:
        counted = self.counted
        return AtLeast(counted.value) if counted.capped else counted.value

    @cached_property
    def note(self) -> str:
        """What the list says under its pages when its count stopped (else "")."""
        if not self.counted.capped:
            return ""
        return _(
            "More than %(cap)s Django tasks match. Counts here stop at %(cap)s rather than"
            " read every row: the pages are those of the %(cap)s newest, and a filter's"
            " count with a + is how many of them it holds (at least that many in all)."
            " Narrow the list with its filters or search to see others."
        ) % {"cap": f"{COUNT_CAP:,}"}


class CappedFilter(admin.SimpleListFilter):
    """A filter whose choices' counts are those of the newest ``COUNT_CAP``
    tasks the list's other filters and search hold (``newest_window``): exact
    when those are all of them, else "n+" each, a lower bound. One read of at
    most that many rows for every filter whose others are the same (one
    read a page, most often, two with a filter on), where Django's facets
    count every row of each choice."""

    column = ""  # the column this filter narrows by

    def get_facet_queryset(self, changelist: ChangeList) -> dict[str, Any]:
        others = changelist.get_queryset(self.request, exclude_parameters=[self.parameter_name])
        window = request_window(self.request, others)
        return {
            f"{index}__c": str(self.count(window, value))
            for index, (value, _title) in enumerate(self.lookup_choices)
        }

    def count(self, window: Window, value: Any) -> Counted:
        """How many of the window's tasks have ``value`` in ``column``."""
        return window.count(self.column, value)

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[QueuedTask]
    ) -> QuerySet[QueuedTask] | None:
        value = self.value()
        return self.narrow(queryset, value) if value else None

    def narrow(self, queryset: QuerySet[QueuedTask], value: str) -> QuerySet[QueuedTask]:
        """``queryset``'s tasks whose ``column`` is ``value``."""
        return queryset.filter(**{self.column: value})


# The columns the list's filters narrow by: one window of a queryset counts
# them all, for every filter that reads it.
FILTERED = ("status", "queue_name", "backend", "attempts")


def request_window(request: HttpRequest, queryset: QuerySet[QueuedTask]) -> Window:
    """The :class:`Window` of ``queryset`` by the filtered columns, read once a
    request (kept on it by the queryset's SQL)."""
    try:
        sql, params = queryset.order_by().query.sql_with_params()
    except EmptyResultSet:  # a filter no row can meet (a search for no task path)
        return newest_window(queryset.none(), FILTERED, COUNT_CAP)
    key = (sql, tuple(str(param) for param in params))
    windows: dict[Any, Window] = request.__dict__.setdefault("_bgtasks_windows", {})
    if key not in windows:
        # By an index, as every read of the page (QueuedTask.objects.index_reads):
        # under a GET it is the page's transaction; an action's POST builds
        # the list outside one, its writes being the queue's own, and there
        # the planner read the newest ready rows another way (0.5-0.6 s at
        # 10,000,000 rows, docs/benchmarks.md, "The dashboard").
        with QueuedTask.objects.index_reads():
            windows[key] = newest_window(queryset, FILTERED, COUNT_CAP)
    return windows[key]


class QueueStatusFilter(CappedFilter):
    """By status, in the words the list shows ("failed", not "FAILED")."""

    title = gettext_lazy("status")
    parameter_name = "status__exact"  # the field filter's: its links keep working
    column = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        statuses = [(status.value, status.label) for status in QueueStatus]
        return [*statuses, (RETRYING, _("will retry"))]

    def narrow(self, queryset: QuerySet[QueuedTask], value: str) -> QuerySet[QueuedTask]:
        # "will retry": the ready tasks that ran before, their attempts tested
        # row by row by the search (a bounded read), which finds the mark.
        if value == RETRYING:
            return of_status(queryset, READY).alias(**{RETRYING_MARK: Value(True)})
        return of_status(queryset, value)

    def count(self, window: Window, value: Any) -> Counted:
        if value != RETRYING:
            return super().count(window, value)
        retrying = sum(
            count
            for (status, _queue, _backend, attempts), count in window.combinations.items()
            if status == READY and attempts > 0
        )
        return Counted(retrying, not window.complete)


class QueueNameFilter(CappedFilter):
    """By queue: the queue names that have tasks."""

    title = gettext_lazy("queue")
    parameter_name = "queue_name"  # the field filter's, as above
    column = "queue_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in queue_names()]


class BackendFilter(CappedFilter):
    """By backend: the aliases of ``TASKS``' ``LeaseBackend``s (a task keeps
    the alias it was enqueued with)."""

    title = gettext_lazy("backend")
    parameter_name = "backend"  # the field filter's, as above
    column = "backend"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(alias, alias) for alias in sorted(lease_backends())]


def search(
    request: HttpRequest, queryset: QuerySet[QueuedTask], term: str
) -> QuerySet[QueuedTask]:
    """The tasks ``term`` finds: the task whose id it is, or those whose task
    path holds it (any case), among the task paths there are (read once a
    request: the list and each filter's counts search alike, and on MariaDB
    the paths are a statement each, 500 of them in the benchmark's table)."""
    term = term.strip()
    try:
        key = uuid.UUID(term)
    except ValueError:
        pass
    else:
        # By its seq, read first from the ids' index: the list and its
        # counts read newest first, and a filter by id alone, with sorts
        # off, was a read of the primary key past every row (3.3 s at
        # 10,000,000 rows).
        found = QueuedTask.objects.using(read_database.alias()).filter(uuid=key).order_by()
        return queryset.filter(seq__in=list(found.values_list("seq", flat=True)))
    folded = term.casefold()
    paths: list[str] | None = request.__dict__.get("_bgtasks_task_paths")
    if paths is None:
        paths = request.__dict__["_bgtasks_task_paths"] = task_paths()
    return queryset.filter(task_path__in=[path for path in paths if folded in path.casefold()])


# The search box's terms (``error:timeout``, ``args:{"user_id":5}``), each
# QueuedFilter's of that name (operations/search.py says what each matches);
# the list's filters have the status, queue and backend.
SEARCH_TERMS = ("task", "args", "error", "key", "since", "until")
# The alias the "will retry" choice marks its queryset with: the search,
# which tests each row's attempts, reads it there (the status filter may be
# left out of a facet's queryset, so no flag on the request would do).
RETRYING_MARK = "bgtasks_retrying"


def parse_search(term: str, queryset: QuerySet[QueuedTask]) -> tuple[str, QueuedFilter]:
    """The search box's ``term``, split into its words (an id, a part of a task
    path) and the filter of its ``name:value`` terms, with the "will retry"
    choice where ``queryset`` carries its mark; a ``ValueError`` names a bad term."""
    words: list[str] = []
    terms: dict[str, str] = {}
    for word in smart_split(term):
        name, colon, value = word.partition(":")
        if not colon or name not in SEARCH_TERMS:
            words.append(word)
            continue
        if value[:1] in "\"'" and value[:1] == value[-1:] and len(value) > 1:
            value = unescape_string_literal(value)
        if name in terms:
            raise ValueError(_("The search names %(term)s: twice.") % {"term": name})
        terms[name] = value
    if RETRYING_MARK in queryset.query.annotations:
        terms["status"] = RETRYING
    return " ".join(words), QueuedFilter.parse(**terms)


def searched(
    request: HttpRequest, queryset: QuerySet[QueuedTask], filters: QueuedFilter
) -> tuple[list[int], bool]:
    """The ``seq`` of the newest tasks of ``queryset`` that ``filters``' terms
    keep (``COUNT_CAP`` and one at most, within the search's budget of rows:
    search.scan_seqs), and whether that read every task of ``queryset``: read
    once a request for each (the list and each filter's counts search alike,
    most often the same rows)."""
    try:
        sql, params = queryset.order_by().query.sql_with_params()
    except EmptyResultSet:  # a filter no row can meet
        return [], True
    key = (sql, tuple(str(param) for param in params), repr(filters))
    scans: dict[Any, tuple[list[int], bool]] = request.__dict__.setdefault("_bgtasks_scans", {})
    if key not in scans:
        scans[key] = scan_seqs(queryset, filters.match, wanted=COUNT_CAP + 1)
    return scans[key]


def selected_across(request: HttpRequest) -> bool:
    """Whether an action's selection is every task the list holds ("Select
    all"), not the rows ticked on its page."""
    # (Django's ActionForm field, which its page's script sets to "1".)
    return request.POST.get("select_across", "0") == "1"


def acted_on(
    model_admin: Any, request: HttpRequest, queryset: QuerySet[QueuedTask]
) -> QuerySet[QueuedTask] | list[QueuedTask]:
    """The tasks an action takes: the ticked ones; of the whole selection,
    the ``ACTION_CAP`` newest, saying so when there were more."""
    if not selected_across(request):
        return queryset
    first = list(queryset.order_by("-seq")[: ACTION_CAP + 1])
    if len(first) > ACTION_CAP:
        text = _(
            "An action takes at most %(cap)d tasks at a time: this one took the %(cap)d newest"
            " of those selected. Run it again for the next ones."
        )
        model_admin.message_user(request, text % {"cap": ACTION_CAP}, messages.WARNING)
    return first[:ACTION_CAP]


def selected_queues(request: HttpRequest, queryset: QuerySet[QueuedTask]) -> list[str]:
    """The queue names of the selected tasks, each once, in order: of the
    whole selection, each queue there is that has a selected task (one
    indexed look a queue), not a read of every selected row."""
    if not selected_across(request):
        return sorted(set(queryset.values_list("queue_name", flat=True)))
    return [name for name in queue_names() if queryset.filter(queue_name=name).exists()]
