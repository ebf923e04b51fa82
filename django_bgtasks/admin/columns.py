"""The columns of the changelist and the fields of the detail page.

Most are live cells (``live_cell.html``): live.js finds them by task name and
field and keeps them current. The others are the error, the run history
(``history.html``) and a task's buttons (``buttons.html``). Every one reads
the row's :class:`TaskState` (``state_of``), which the changelist reads for
all its rows in one query (``TaskChangeList``), by the database's clock, so
every replica shows the same page. The words are :mod:`django_bgtasks.display`'s.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from .. import display
from ..choices import Status
from ..models import BackgroundTask, TaskRun
from ..states import TaskState
from ..tasks import registered_tasks
from .views import TaskModelAdmin, admin_url

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise

TEMPLATES = "django_bgtasks/admin/"
HISTORY_ROWS = 50
# Where a row's TaskState for this request is kept, on the row's instance.
_STATE = "_bgtasks_state"

Column = Callable[[TaskModelAdmin, BackgroundTask], str]


def state_of(task: BackgroundTask) -> TaskState | None:
    """The row's state as the lease manager reads it (database clock)."""
    state: TaskState | None = getattr(task, _STATE, None)
    if state is None:
        state = BackgroundTask.objects.get_state(task.name)
        keep_state(task, state)
    return state


def keep_state(task: BackgroundTask, state: TaskState | None) -> None:
    """Remember the row's state for this request, as read with others."""
    setattr(task, _STATE, state)


class TaskChangeList(ChangeList):
    """Pairs each row on the page with its ``TaskState``, read in one query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        states = {state.name: state for state in BackgroundTask.objects.list_states()}
        for task in self.result_list:
            keep_state(task, states.get(task.name))


def time_html(value: dt.datetime | None) -> SafeString | str:
    """A ``<time>`` in the server's time zone (live.js rewrites it in the browser's)."""
    if value is None:
        return ""
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), display.when(value))


def live_column(
    field: str,
    description: _StrOrPromise,
    content: Callable[[TaskState], object],
    *,
    kind: Callable[[TaskState], str] | None = None,
    ordering: str | None = None,
    template: str = "live_cell.html",
    tag: str = "span",
) -> Column:
    """A column showing ``content(state)`` in a cell that live.js keeps
    current as ``field``; ``kind(state)`` names its look (a CSS class)."""

    @admin.display(description=description, ordering=ordering)
    def column(model_admin: TaskModelAdmin, task: BackgroundTask) -> str:
        state = state_of(task)
        if state is None:
            return model_admin.get_empty_value_display()
        context = {
            "state": state,
            "field": field,
            "content": content(state),
            "kind": None if kind is None else kind(state),
            "tag": tag,
        }
        return render_to_string(TEMPLATES + template, context)

    return column


def _pretty(state: TaskState) -> str:
    return json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True)


def _last_line(error: str) -> str:
    lines = error.strip().splitlines()
    return lines[-1] if lines else ""


def state_names() -> dict[str, dict[str, str]]:
    """The state names live.js compares the API's ``status`` with, which the
    pages hand it with ``json_script``: each ``Status`` by its Python name,
    and the CSS class suffix (``slug``) of each."""
    return {
        "statuses": {status.name: status.value for status in Status},
        "slugs": {status.value: status.slug for status in Status},
    }


class TaskColumns(TaskModelAdmin):
    """The columns and detail fields of :class:`BackgroundTaskAdmin`."""

    status_badge = live_column(
        "status",
        gettext_lazy("status"),
        display.status_text,
        kind=lambda state: state.status.slug,
    )
    progress_bar = live_column(
        "progress", gettext_lazy("progress"), display.progress_label, template="progress_cell.html"
    )
    owner_cell = live_column("owner", gettext_lazy("owner"), attrgetter("owner"), ordering="owner")
    token_cell = live_column("token", gettext_lazy("token"), attrgetter("token"), ordering="token")
    outcome_cell = live_column(
        "outcome",
        gettext_lazy("outcome"),
        attrgetter("outcome"),
        kind=attrgetter("outcome"),
        ordering="outcome",
    )
    heartbeat = live_column(
        "heartbeat",
        gettext_lazy("last heartbeat"),
        lambda state: display.ago(state.heartbeat_age),
        ordering="updated_at",
    )
    started = live_column(
        "started",
        gettext_lazy("started"),
        lambda state: time_html(state.started_at),
        ordering="started_at",
    )
    finished = live_column(
        "finished",
        gettext_lazy("finished"),
        lambda state: time_html(state.finished_at),
        ordering="finished_at",
    )
    duration = live_column(
        "duration", gettext_lazy("duration"), lambda state: display.seconds(state.duration)
    )
    value_json = live_column("value", gettext_lazy("value"), _pretty, tag="pre")

    @admin.display(description=gettext_lazy("next run"), ordering="next_run_at")
    def next_run(self, task: BackgroundTask) -> str:
        """The schedule's next slot (moved on by the claim that runs it)."""
        state = state_of(task)
        if state is None or state.next_run_at is None:
            return self.get_empty_value_display()
        return time_html(state.next_run_at)

    @admin.display(description=gettext_lazy("requested"), ordering="requested_at")
    def requested(self, task: BackgroundTask) -> str:
        """When a pending request for a worker was filed."""
        state = state_of(task)
        if state is None or state.requested_at is None:
            return self.get_empty_value_display()
        return time_html(state.requested_at)

    @admin.display(description=gettext_lazy("trigger, attempt"))
    def run_trigger(self, task: BackgroundTask) -> str:
        """What started the current or last run, and which attempt it is."""
        state = state_of(task)
        if state is None or not state.trigger:
            return self.get_empty_value_display()
        return f"{state.trigger}, {state.attempt}"

    @admin.display(description=gettext_lazy("error"))
    def error_text(self, task: BackgroundTask) -> str:
        state = state_of(task)
        if state is None or not state.error:
            return self.get_empty_value_display()
        return format_html('<pre class="bgtasks-error">{}</pre>', state.error)

    @admin.display(description=gettext_lazy("runs"))
    def history(self, task: BackgroundTask) -> str:
        rows = [
            (
                run,
                time_html(run.started_at),
                time_html(run.finished_at),
                display.seconds(run.duration),
                _last_line(run.error),
            )
            for run in TaskRun.objects.for_task(task.name)[:HISTORY_ROWS]
        ]
        return render_to_string(TEMPLATES + "history.html", {"rows": rows})

    @admin.display(description=gettext_lazy("operate"))
    def operate(self, task: BackgroundTask) -> str:
        """The task's buttons (``buttons.html``): run now, request cancel, force release."""
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        name = state.name
        context: dict[str, Any] = {
            "state": state,
            "Status": Status,
            "run_url": admin_url(self, "run", name) if name in registered_tasks() else "",
            "cancel_url": admin_url(self, "cancel", name),
            "release_url": admin_url(self, "release", name),
        }
        return render_to_string(TEMPLATES + "buttons.html", context)
