"""The columns of the changelist and the fields of the detail page.

Most show live cells (:class:`Cell`, ``live_cell.html``): live.js finds them
by task name and field and keeps them current; a column may hold several
(owner, token and heartbeat share one). The others are the description and
schedule, the error, the run history (``history.html``, a page at a time) and
a task's buttons (``buttons.html``). Every one reads the row's
:class:`TaskState` (``state_of``), which the changelist reads for all its
rows in one query, by the database's clock, so every replica shows the same
page. The words are :mod:`django_bgtasks.operations.display`'s.

A registered task with no lease row yet is listed too, as an unsaved row
(``never_run_row``, never written) whose status reads "never run"; its live
cells start empty, for live.js to fill in once it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_lazy

from django_bgtasks.admin.formats import admin_time, id_html, time_html
from django_bgtasks.admin.views import TaskModelAdmin, admin_url
from django_bgtasks.background.functions import BackgroundTaskFunction, registered_tasks
from django_bgtasks.choices import Status
from django_bgtasks.core.states import TaskState
from django_bgtasks.models import BackgroundTask, TaskRun
from django_bgtasks.operations import display
from django_bgtasks.queue.task_schedules import ScheduleError, task_schedules

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise

TEMPLATES = "django_bgtasks/admin/"
# The run history on the detail page: this many runs a page, newest first,
# and the query parameter that names the page (?runs=2).
HISTORY_PAGE = 20
RUNS_VAR = "runs"

# The status of a registered task that has no lease row yet, and its badge's
# CSS class suffix.
NEVER_RUN = Status.NEVER_RUN.value
NEVER_RUN_LABEL = Status.NEVER_RUN.label
NEVER_RUN_SLUG = Status.NEVER_RUN.slug

# What a row's instance carries for this request: its TaskState, the
# registered task it stands for when it has no lease row, and the page's
# query (for the history's page links).
_STATE = "_bgtasks_state"
_NEVER_RUN = "_bgtasks_never_run"
_QUERY = "_bgtasks_query"
_UNREAD = object()

Column = Callable[[TaskModelAdmin, BackgroundTask], str]
AnyTask = BackgroundTaskFunction[..., Any]


def state_of(task: BackgroundTask) -> TaskState | None:
    """The row's state as the lease manager reads it (database clock)."""
    state: Any = getattr(task, _STATE, _UNREAD)
    if state is _UNREAD:
        state = BackgroundTask.objects.get_state(task.name)
        keep_state(task, state)
    return state  # type: ignore[no-any-return]


def keep_state(task: BackgroundTask, state: TaskState | None) -> None:
    """Remember the row's state for this request, as read with others."""
    setattr(task, _STATE, state)


def never_run_row(task: AnyTask) -> BackgroundTask:
    """An unsaved row standing for registered ``task``, which has no lease
    row yet: the pages show it as "never run". Nothing is written: only a
    claim creates the real row."""
    row = BackgroundTask(name=task.name)
    keep_state(row, None)
    setattr(row, _NEVER_RUN, task)
    return row


def never_run_task(row: BackgroundTask) -> AnyTask | None:
    """The registered task an unsaved "never run" row stands for, else ``None``."""
    return getattr(row, _NEVER_RUN, None)


def keep_query(task: BackgroundTask, query: QueryDict) -> None:
    """Remember the detail page's query, for the run history's page links."""
    setattr(task, _QUERY, query)


@dataclass(frozen=True, slots=True)
class Cell:
    """A value that live.js keeps current as ``field`` (``live_cell.html``):
    ``content(state)``, in the look ``kind(state)`` (a CSS class), with
    ``title(state)`` on hover; ``label`` goes before it when it shares a
    column; ``never_run`` is the (content, kind) of a task that never ran."""

    field: str
    content: Callable[[TaskState], object]
    kind: Callable[[TaskState], str] | None = None
    title: Callable[[TaskState], str] | None = None
    label: _StrOrPromise = ""
    template: str = "live_cell.html"
    tag: str = "span"
    never_run: tuple[_StrOrPromise, str] | None = None

    def render(self, task: BackgroundTask, state: TaskState | None) -> str:
        """The cell; for a task that never ran (``state`` is ``None``), an
        empty one that live.js fills in once it runs."""
        context: dict[str, Any] = {
            "name": task.name,
            "state": state,
            "field": self.field,
            "tag": self.tag,
            "content": "",
            "kind": None,
            "title": "",
        }
        if state is not None:
            context["content"] = self.content(state)
            context["kind"] = None if self.kind is None else self.kind(state)
            context["title"] = "" if self.title is None else self.title(state)
        elif self.never_run is not None:
            context["content"], context["kind"] = self.never_run
        return render_to_string(TEMPLATES + self.template, context)


def live_column(description: _StrOrPromise, *cells: Cell, ordering: str | None = None) -> Column:
    """A column of live cells: one, or several on lines of their own (``cells.html``)."""

    @admin.display(description=description, ordering=ordering)
    def column(model_admin: TaskModelAdmin, task: BackgroundTask) -> str:
        state = state_of(task)
        if state is None and never_run_task(task) is None:
            return model_admin.get_empty_value_display()  # its row was deleted meanwhile
        if len(cells) == 1:
            return cells[0].render(task, state)
        lines = [(cell.label, cell.render(task, state)) for cell in cells]
        return render_to_string(TEMPLATES + "cells.html", {"lines": lines})

    return column


def _pretty(state: TaskState) -> str:
    return json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True)


def _result_text(result: Any, note: str) -> str:
    """A run's result as compact JSON, which may wrap after each comma, or
    the note saying why it wasn't stored."""
    if result is None:
        return note
    text = json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return format_html_join(SafeString(",<wbr>"), "{}", ((part,) for part in text.split(",")))


def _last_line(error: str) -> str:
    lines = error.strip().splitlines()
    return lines[-1] if lines else ""


def _finished(state: TaskState) -> str:
    # The duration's hover text (live.js's finishedTitle() writes the same).
    if state.finished_at is None:
        return ""
    return gettext("finished %(when)s") % {"when": admin_time(state.finished_at)}


def state_names() -> dict[str, dict[str, str]]:
    """The state names live.js compares the API's ``status`` with, which the
    pages hand it with ``json_script``: each ``Status`` by its Python name,
    and the CSS class suffix (``slug``) of each."""
    return {
        "statuses": {status.name: status.value for status in Status},
        "slugs": {status.value: status.slug for status in Status},
    }


STATUS = Cell(
    "status",
    display.status_text,
    kind=lambda state: state.status.slug,
    never_run=(NEVER_RUN_LABEL, NEVER_RUN_SLUG),
)
PROGRESS = Cell("progress", display.progress_label, template="progress_cell.html")
OWNER = Cell("owner", lambda state: id_html(state.owner), title=lambda state: gettext("owner"))
TOKEN = Cell("token", attrgetter("token"), label=gettext_lazy("token"))
HEARTBEAT = Cell(
    "heartbeat",
    lambda state: display.ago(state.heartbeat_age),
    title=lambda state: gettext("last heartbeat"),
)
OUTCOME = Cell("outcome", attrgetter("outcome"), kind=attrgetter("outcome"))
STARTED = Cell("started", lambda state: time_html(state.started_at))
FINISHED = Cell("finished", lambda state: time_html(state.finished_at))
DURATION = Cell("duration", lambda state: display.seconds(state.duration), title=_finished)
VALUE = Cell("value", _pretty, tag="pre")


class TaskColumns(TaskModelAdmin):
    """The columns and detail fields of :class:`BackgroundTaskAdmin`."""

    status_badge = live_column(gettext_lazy("status"), STATUS)
    progress_bar = live_column(gettext_lazy("progress"), PROGRESS)
    owner_cell = live_column(gettext_lazy("owner"), OWNER, ordering="owner")
    token_cell = live_column(gettext_lazy("token"), TOKEN, ordering="token")
    outcome_cell = live_column(gettext_lazy("outcome"), OUTCOME, ordering="outcome")
    heartbeat = live_column(gettext_lazy("last heartbeat"), HEARTBEAT, ordering="updated_at")
    started = live_column(gettext_lazy("started"), STARTED, ordering="started_at")
    finished = live_column(gettext_lazy("finished"), FINISHED, ordering="finished_at")
    duration = live_column(gettext_lazy("duration"), DURATION)
    value_json = live_column(gettext_lazy("value"), VALUE)
    # The changelist's shared columns, narrow enough for a laptop's screen.
    holder = live_column(
        gettext_lazy("owner, token, heartbeat"), OWNER, TOKEN, HEARTBEAT, ordering="owner"
    )
    when = live_column(gettext_lazy("started, duration"), STARTED, DURATION, ordering="started_at")

    @admin.display(description=gettext_lazy("description, schedule"))
    def about(self, task: BackgroundTask) -> str:
        """What the registered task does (its docstring's first line), the
        schedule workers follow, and its next slot."""
        registered = registered_tasks().get(task.name)
        schedule = registered.effective_schedule if registered is not None else None
        state = state_of(task)
        context = {
            "description": registered.description if registered is not None else "",
            # A task not registered here: the schedule its row was last given.
            "schedule": schedule.text if schedule is not None else task.schedule,
            "next_run": time_html(state.next_run_at if state is not None else None),
        }
        enqueues = _enqueued_by(task.name)
        if enqueues is not None:  # a Django Tasks schedule's row: it never runs
            context["description"] = gettext("Enqueues the Django Task %(path)s.") % {
                "path": enqueues
            }
            last = state.scheduled_for if state is not None else None
            context["last_slot"] = time_html(last)
        return render_to_string(TEMPLATES + "about_cell.html", context)

    @admin.display(description=gettext_lazy("next run"), ordering="next_run_at")
    def next_run(self, task: BackgroundTask) -> str:
        """The schedule's next slot (moved on by the claim that runs it)."""
        return self._time_of(task, attrgetter("next_run_at"))

    @admin.display(description=gettext_lazy("requested"), ordering="requested_at")
    def requested(self, task: BackgroundTask) -> str:
        """When a pending request for a worker was filed."""
        return self._time_of(task, attrgetter("requested_at"))

    def _time_of(self, task: BackgroundTask, pick: Callable[[TaskState], Any]) -> str:
        state = state_of(task)
        value = None if state is None else pick(state)
        return self.get_empty_value_display() if value is None else time_html(value)

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

    @admin.display(description=gettext_lazy("result"))
    def result_json(self, task: BackgroundTask) -> str:
        """What the last run returned (``TaskState.result``), or why it wasn't stored."""
        state = state_of(task)
        if state is None or (state.result is None and not state.result_note):
            return self.get_empty_value_display()
        if state.result is None:
            return state.result_note
        text = json.dumps(state.result, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="bgtasks-result">{}</pre>', text)

    @admin.display(description=gettext_lazy("runs"))
    def history(self, task: BackgroundTask) -> str:
        """The ended runs, newest first, ``HISTORY_PAGE`` a page (``?runs=N``)."""
        query = getattr(task, _QUERY, None)
        if not isinstance(query, QueryDict):
            query = QueryDict()
        paginator = Paginator(TaskRun.objects.for_task(task.name), HISTORY_PAGE)
        page = paginator.get_page(query.get(RUNS_VAR))
        rows = [
            (
                run,
                id_html(run.owner),
                time_html(run.started_at),
                time_html(run.finished_at),
                display.seconds(run.duration),
                _result_text(run.result, run.result_note),
                _last_line(run.error),
            )
            for run in page
        ]

        def link(number: int) -> str:
            linked = query.copy()
            linked[RUNS_VAR] = str(number)
            return "?" + linked.urlencode()

        context = {
            "rows": rows,
            "page": page,
            "newer": link(page.previous_page_number()) if page.has_previous() else "",
            "older": link(page.next_page_number()) if page.has_next() else "",
        }
        return render_to_string(TEMPLATES + "history.html", context)

    @admin.display(description=gettext_lazy("operate"))
    def operate(self, task: BackgroundTask) -> str:
        """The task's buttons (``buttons.html``): run now (or take over a
        silent holder), request cancel, force release."""
        state = state_of(task)
        if state is None and never_run_task(task) is None:
            return self.get_empty_value_display()
        name = task.name
        context: dict[str, Any] = {
            "name": name,
            "state": state,
            "Status": Status,
            "run_url": admin_url(self, "run", name) if name in registered_tasks() else "",
            "cancel_url": admin_url(self, "cancel", name),
            "release_url": admin_url(self, "release", name),
        }
        return render_to_string(TEMPLATES + "buttons.html", context)


def _enqueued_by(name: str) -> str | None:
    """The task path the Django Tasks schedule whose row is ``name`` enqueues
    (queue/task_schedules.py), or ``None`` for another row."""
    try:
        schedules = task_schedules()
    except ScheduleError:  # said by its system check
        return None
    return next((entry.task_path for entry in schedules if entry.name == name), None)
