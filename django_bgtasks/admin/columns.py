"""The columns of the changelist and the fields of the detail page.

Most are live cells: live.js finds them by task name and field and keeps them
current. The others are the value, the error, the run history and a row's
buttons. Every one reads the row's :class:`TaskState` (``state_of``), which
the changelist reads for all its rows in one query (``TaskChangeList``), by the
database's clock, so every replica shows the same page.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .. import display
from ..models import BackgroundTask, TaskRun
from ..states import TaskState
from ..tasks import registered_tasks
from .views import TaskModelAdmin, admin_url

# Where a row's TaskState for this request is kept, on the row's instance.
_STATE = "_bgtasks_state"
HISTORY_ROWS = 50


def state_of(task: BackgroundTask) -> TaskState | None:
    """The row's state as the lease manager reads it (database clock)."""
    state: TaskState | None = getattr(task, _STATE, None)
    if state is None:
        state = BackgroundTask.objects.get_state(task.name)
        setattr(task, _STATE, state)
    return state


def keep_state(task: BackgroundTask, state: TaskState | None) -> None:
    """Remember the row's state for this request, as read with others."""
    setattr(task, _STATE, state)


def _live(name: str, field: str, content: Any, css_class: str = "") -> SafeString:
    """A cell that live.js updates: it finds cells by task name and field."""
    return format_html(
        '<span class="bgtasks-{} {}" data-bgtasks-task="{}" data-bgtasks-field="{}">{}</span>',
        field,
        css_class,
        name,
        field,
        content,
    )


def _time(value: Any) -> SafeString | str:
    if value is None:
        return ""
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), display.when(value))


class TaskChangeList(ChangeList):
    """Pairs each row on the page with its ``TaskState``, read in one query."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        states = {state.name: state for state in BackgroundTask.objects.list_states()}
        for task in self.result_list:
            keep_state(task, states.get(task.name))


class TaskColumns(TaskModelAdmin):
    """The column renderers of :class:`BackgroundTaskAdmin`."""

    @admin.display(description=gettext_lazy("status"))
    def status_badge(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(
            state.name,
            "status",
            display.status_text(state),
            f"bgtasks-status-{state.status.slug}",
        )

    @admin.display(description=gettext_lazy("progress"))
    def progress_bar(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        progress = state.progress
        if progress is not None:
            bar = format_html('<progress max="1" value="{}"></progress>', progress)
        elif state.running:  # running without reporting progress: indeterminate
            bar = SafeString('<progress max="1"></progress>')
        else:
            bar = SafeString('<progress max="1" hidden></progress>')
        label = format_html('<span class="bgtasks-label">{}</span>', display.progress_label(state))
        return _live(state.name, "progress", format_html("{} {}", bar, label))

    @admin.display(description=gettext_lazy("owner"), ordering="owner")
    def owner_cell(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "owner", state.owner)

    @admin.display(description=gettext_lazy("token"), ordering="token")
    def token_cell(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "token", state.token)

    @admin.display(description=gettext_lazy("outcome"), ordering="outcome")
    def outcome_cell(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "outcome", state.outcome, f"bgtasks-outcome-{state.outcome}")

    @admin.display(description=gettext_lazy("last heartbeat"), ordering="updated_at")
    def heartbeat(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "heartbeat", display.ago(state.heartbeat_age))

    @admin.display(description=gettext_lazy("started"), ordering="started_at")
    def started(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "started", _time(state.started_at))

    @admin.display(description=gettext_lazy("finished"), ordering="finished_at")
    def finished(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "finished", _time(state.finished_at))

    @admin.display(description=gettext_lazy("duration"))
    def duration(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        return _live(state.name, "duration", display.seconds(state.duration))

    @admin.display(description=gettext_lazy("error"))
    def error_text(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None or not state.error:
            return self.get_empty_value_display()
        return format_html('<pre class="bgtasks-error">{}</pre>', state.error)

    @admin.display(description=gettext_lazy("value"))
    def value_json(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        text = json.dumps(state.value, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html(
            '<pre class="bgtasks-value" data-bgtasks-task="{}" data-bgtasks-field="{}">{}</pre>',
            state.name,
            "value",
            text,
        )

    @admin.display(description=gettext_lazy("runs"))
    def history(self, task: BackgroundTask) -> SafeString | str:
        runs = list(TaskRun.objects.for_task(task.name)[:HISTORY_ROWS])
        if not runs:
            return _("No finished runs yet.")
        rows = format_html_join(
            "",
            '<tr><td>{}</td><td class="bgtasks-outcome-{}">{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    run.token,
                    run.outcome,
                    run.get_outcome_display(),
                    run.owner,
                    _time(run.started_at),
                    _time(run.finished_at),
                    display.seconds(run.duration),
                    run.error.strip().splitlines()[-1] if run.error.strip() else "",
                )
                for run in runs
            ),
        )
        head = format_html_join(
            "",
            "<th>{}</th>",
            (
                (label,)
                for label in (
                    _("token"),
                    _("outcome"),
                    _("owner"),
                    _("started"),
                    _("finished"),
                    _("duration"),
                    _("error"),
                )
            ),
        )
        return format_html(
            '<table class="bgtasks-history"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
            head,
            rows,
        )

    @admin.display(description=gettext_lazy("operate"))
    def operate(self, task: BackgroundTask) -> SafeString | str:
        """Buttons for the row; live.js shows those that fit the current status.

        They submit the page's one hidden form (``form="bgtasks-row-actions"``),
        because a row sits inside the changelist's own form and forms can't nest.
        """
        state = state_of(task)
        if state is None:
            return self.get_empty_value_display()
        held, running = state.held, state.running
        buttons = []
        if task.name in registered_tasks():
            buttons.append(self._button(task.name, "run", _("Run now"), "idle", hidden=held))
        # The cancel button carries the token of the run on screen (live.js
        # keeps it current), so a cancel never reaches a run that took over since.
        buttons.append(
            self._button(
                task.name,
                "cancel",
                _("Request cancel"),
                "running",
                hidden=not running,
                token=state.token,
            )
        )
        buttons.append(
            format_html(
                '<a class="button bgtasks-button" href="{}" data-bgtasks-task="{}" '
                'data-bgtasks-show="held"{}>{}</a>',
                admin_url(self, "release", task.name),
                task.name,
                "" if held else SafeString(" hidden"),
                _("Force release…"),
            )
        )
        return format_html_join(" ", "{}", ((button,) for button in buttons))

    def _button(
        self,
        name: str,
        operation: str,
        label: str,
        show: str,
        hidden: bool,
        token: int | None = None,
    ) -> SafeString:
        return format_html(
            '<button type="submit" class="button bgtasks-button" form="bgtasks-row-actions" '
            'formaction="{}" data-bgtasks-task="{}" data-bgtasks-show="{}"{}{}>{}</button>',
            admin_url(self, operation, name),
            name,
            show,
            format_html(' name="token" value="{}"', token) if token is not None else "",
            SafeString(" hidden") if hidden else "",
            label,
        )
