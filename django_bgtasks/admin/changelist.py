"""The changelist: its rows, and the status filter.

A ModelAdmin lists rows of its table; this one also lists every registered
task that has no lease row yet, as an unsaved row after the table's
(:func:`~.columns.never_run_row`, status "never run"), so that a task is on
the page from the day it is deployed. Nothing is written for it: its row is
made by the first claim, as for any task.

The status is derived from the row by the database's clock
(``list_states()``), so the status filter selects the names whose state
has it, read once per request and shared with the rows' cells.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal
from django.utils.translation import gettext_lazy

from django_bgtasks.admin.columns import NEVER_RUN, AnyTask, keep_state, never_run_row
from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.choices import Status
from django_bgtasks.core.states import TaskState
from django_bgtasks.models import BackgroundTask

_STATES = "_bgtasks_states"


def states_for(request: HttpRequest) -> dict[str, TaskState]:
    """Every task's state by name, read once for this request (database clock)."""
    states: dict[str, TaskState] | None = getattr(request, _STATES, None)
    if states is None:
        states = {state.name: state for state in BackgroundTask.objects.list_states()}
        setattr(request, _STATES, states)
    return states


class StatusFilter(admin.SimpleListFilter):
    """By status, as ``TaskState.status`` has it, or "never run"."""

    title = gettext_lazy("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [(status.value, status.label) for status in Status]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[BackgroundTask]
    ) -> QuerySet[BackgroundTask] | None:
        wanted = self.value()
        if wanted is None:
            return None
        if wanted == NEVER_RUN:  # the rows the changelist adds; none of the table's
            return queryset.none()
        names = [name for name, state in states_for(request).items() if state.status == wanted]
        return queryset.filter(name__in=names)


class TaskChangeList(ChangeList):
    """Pairs each row on the page with its ``TaskState``, read in one query,
    and adds, on the last page, the registered tasks that never ran and
    match the search and filters."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        states = states_for(request)
        rows = list(self.result_list)
        for task in rows:
            keep_state(task, states.get(task.name))
        never_run = [task for name, task in registered_tasks().items() if name not in states]
        listed = self._matching(never_run) if self._on_last_page() else []
        self.result_list = [*rows, *map(never_run_row, listed)]
        # The counts say what the page lists ("6 background tasks").
        self.result_count += len(listed)
        if self.full_result_count is not None:
            self.full_result_count += len(never_run)
        self.show_admin_actions = self.show_admin_actions or bool(listed)

    def _on_last_page(self) -> bool:
        if not self.multi_page or (self.show_all and self.can_show_all):
            return True
        return bool(self.page_num >= self.paginator.num_pages)

    def _matching(self, tasks: Iterable[AnyTask]) -> list[AnyTask]:
        """The never-run tasks this page's filters and search would keep:
        only the status filter can (with "never run"), and only by name."""
        for spec in self.filter_specs:
            if isinstance(spec, StatusFilter):
                if spec.value() not in (None, NEVER_RUN):
                    return []
            elif spec.used_parameters:
                return []  # e.g. an outcome: a task that never ran has none
        # As ModelAdmin.get_search_results() splits the words (each must match).
        words = [
            unescape_string_literal(word) if word[0] in "\"'" and word[0] == word[-1] else word
            for word in smart_split(self.query)
        ]
        return [task for task in tasks if all(word.lower() in task.name.lower() for word in words)]
