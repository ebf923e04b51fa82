"""The ModelAdmin of ``BackgroundTask``: its configuration, who may do what,
its two pages (the changelist and the read-only detail page, with what
live.js needs), its actions and its URLs. The columns are in
:mod:`.columns`, the rows and the status filter in :mod:`.changelist`; the
operator views, and the operations they share with the actions, in
:mod:`.views`.

The rows are written only by the lease operations, so the admin never adds,
saves or deletes a ``BackgroundTask``: the pages are read-only for everyone.
Changing what a task does is an *operation* (run now, request cancel, force
release), which needs the model's **change** permission. A registered task
that never ran has no row: the changelist lists it anyway, and its detail
page shows it, both from an unsaved instance.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_bgtasks.admin.changelist import StatusFilter, TaskChangeList, states_for
from django_bgtasks.admin.columns import (
    TaskColumns,
    keep_query,
    keep_state,
    never_run_row,
    never_run_task,
    state_names,
    state_of,
)
from django_bgtasks.admin.formats import date_settings, id_html
from django_bgtasks.admin.pauses import TaskPauseActions
from django_bgtasks.admin.read_from import listing
from django_bgtasks.admin.views import OperatorViews, admin_url, parse_tokens
from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.core.states import WorkerState
from django_bgtasks.http.events import events as event_stream
from django_bgtasks.http.events import stream_offered
from django_bgtasks.http.responses import outside_request_transactions
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display
from django_bgtasks.operations import workers as worker_views
from django_bgtasks.validation import ARGUMENTS_EXAMPLE

# Owner, token and heartbeat share a column, and so do the start and the
# duration (the finish on hover), so that the list fits a laptop's screen
# with the admin's sidebar and the filters open.
LIST_COLUMNS = (
    "name",
    "status_badge",
    "progress_bar",
    "holder",
    "outcome_cell",
    "when",
    "about",
)
DETAIL_FIELDS = (
    "name",
    "about",
    "status_badge",
    "progress_bar",
    "owner_cell",
    "token_cell",
    "ttl",
    "heartbeat",
    "started",
    "finished",
    "duration",
    "outcome_cell",
    "run_trigger",
    "requested",
    "next_run",
    "error_text",
)

# What the detail page's submit row leaves out: all but its "Close" link.
READ_ONLY_PAGE = {
    "show_save": False,
    "show_save_and_continue": False,
    "show_save_and_add_another": False,
    "show_delete": False,
}


class BackgroundTaskAdmin(TaskPauseActions, TaskColumns, OperatorViews):
    """Tasks, live: read-only rows, and run now / request cancel / force
    release for users with the change permission."""

    list_display_links = ["name"]
    list_filter = [StatusFilter, "outcome"]
    # Facet counts would say 0 for "never run": those rows are not in the table.
    show_facets = admin.ShowFacets.NEVER
    search_fields = ["name", "owner"]
    actions = ["run_now", "request_cancel", "force_release", "pause_tasks", "unpause_tasks"]
    change_list_template = "django_bgtasks/admin/change_list.html"
    change_form_template = "django_bgtasks/admin/change_form.html"
    fieldsets = [
        (None, {"fields": DETAIL_FIELDS}),
        (gettext_lazy("Value and result"), {"fields": ["value_json", "result_json"]}),
        (gettext_lazy("Run history (newest first)"), {"fields": ["history"]}),
    ]
    readonly_fields = [*DETAIL_FIELDS, "value_json", "result_json", "history"]

    class Media:
        css = {"all": ["django_bgtasks/admin.css"]}
        js = ["django_bgtasks/dates.js", "django_bgtasks/live.js"]

    # --- permissions: read-only data, change permission to operate -----------
    # Django's own has_change_permission() is what allows the operations; no
    # one may add or delete a row, and change_view() saves nothing.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(
        self, request: HttpRequest, obj: BackgroundTask, form: Any, change: bool
    ) -> None:
        """Never: the lease operations are the rows' only writers (this guards
        any other way to a save than change_view(), such as ``list_editable``)."""
        raise PermissionDenied

    # --- the changelist and the detail page ------------------------------------

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        if self.has_change_permission(request):
            return (*LIST_COLUMNS, "operate")
        return LIST_COLUMNS

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    @outside_request_transactions
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Every task with a row now, and every registered one (listed as never
        # run): live.js points out rows that appear later (started on another
        # replica), which only a reload can add. Read from the read database
        # (admin/read_from.py), rendered there; an action (POST) acts on the primary.
        if request.method == "POST":
            return self._changelist(request, extra_context)
        with listing(request):
            response = self._changelist(request, extra_context)
            if isinstance(response, TemplateResponse):
                response.render()
            return response

    def _changelist(
        self, request: HttpRequest, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        names = BackgroundTask.objects.values_list("name", flat=True)
        known = sorted({*names, *registered_tasks()})
        context = {
            **self._live_context(request),
            # The rows are read-only, for operators too: "view", not "change".
            "title": _("Select %s to view") % self.opts.verbose_name,
            "bgtasks_known": known,
            "bgtasks_workers": [
                {
                    "worker": worker,
                    "host": id_html(worker.host),
                    "status": display.worker_status(worker),
                    "runs": _runs_html(worker),
                }
                for worker in worker_views.workers()
            ],
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The detail page, read-only for everyone: a save() would write the
        row around the lease operations (and over the holder's heartbeat), and
        the lease manager is its only writer. So: no save buttons, and no POST."""
        if request.method == "POST":
            raise PermissionDenied
        context = {**READ_ONLY_PAGE, "title": _("View %s") % self.opts.verbose_name}
        return super().change_view(request, object_id, form_url, context | (extra_context or {}))

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> BackgroundTask | None:
        task = super().get_object(request, object_id, from_field)
        if task is not None:
            keep_state(task, BackgroundTask.objects.get_state(task.name))
        elif from_field is None and object_id in registered_tasks():
            task = never_run_row(registered_tasks()[object_id])  # unsaved: nothing is written
        if task is not None:
            keep_query(task, request.GET)
        return task

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: BackgroundTask | None = None,
    ) -> HttpResponse:
        context.update(self._live_context(request))
        if obj is not None and (state_of(obj) is not None or never_run_task(obj) is not None):
            context["bgtasks_buttons"] = (
                self.operate(obj) if context["bgtasks_can_operate"] else ""
            )
        task = registered_tasks().get(obj.name) if obj is not None else None
        if task is not None and context["bgtasks_can_operate"]:
            # Run now with arguments (change_form.html), checked by start().
            signature, required = display.parameters(task.func)
            context["bgtasks_arguments"] = {
                "run_url": admin_url(self, "run", task.name),
                "signature": f"{task.name}{signature}",
                "required": required,
                "example": ARGUMENTS_EXAMPLE,
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _live_context(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "bgtasks_status_url": admin_url(self, "status"),
            # Empty under WSGI, where the stream answers 501: live.js polls at once.
            "bgtasks_events_url": admin_url(self, "events") if stream_offered(request) else "",
            "bgtasks_can_operate": self.has_change_permission(request),
            "bgtasks_next": request.get_full_path(),
            "bgtasks_states": state_names(),
            "bgtasks_dates": date_settings(),
        }

    # --- the changelist's actions ------------------------------------------------

    @admin.action(description=gettext_lazy("Run now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for name in self._selected_names(request, queryset):
            self.start_task(request, name)

    @admin.action(description=gettext_lazy("Request cancel"), permissions=["change"])
    def request_cancel(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for name in self._selected_names(request, queryset):
            self.cancel_task(request, name)

    @admin.action(description=gettext_lazy("Force release…"), permissions=["change"])
    def force_release(
        self, request: HttpRequest, queryset: QuerySet[BackgroundTask]
    ) -> HttpResponse | None:
        if request.POST.get("post") == "yes":
            confirmed = parse_tokens(request.POST.get("confirmed", ""))
            if not confirmed:
                text = _("The confirmation had no valid token.")
                self.message_user(request, text, messages.ERROR)
            found = [task.name for task in queryset if task.name in confirmed]
            for name in found:
                self.release_task(request, name, confirmed[name])
            self._say_missing(request, [name for name in confirmed if name not in found])
            return None
        self._selected_names(request, queryset)  # says which it did not find
        held = [state for state in map(state_of, queryset) if state and state.held]
        if not held:
            self.message_user(
                request,
                _("None of the selected tasks is held; nothing to release."),
                messages.INFO,
            )
            return None
        hidden = [
            ("action", "force_release"),
            ("post", "yes"),
            ("confirmed", json.dumps({state.name: state.token for state in held})),
            *(("_selected_action", state.name) for state in held),
        ]
        return self.release_confirmation(request, held, "", hidden)

    def _selected_names(
        self, request: HttpRequest, queryset: QuerySet[BackgroundTask]
    ) -> list[str]:
        """The selected rows' names, then the selected registered tasks that
        have no row (listed as never run), which no queryset holds; the
        others (no row any more, or never one) are named in a message."""
        names = [task.name for task in queryset]
        states = states_for(request)
        registered = registered_tasks()
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        for name in selected:
            if name in registered and name not in states and name not in names:
                names.append(name)
        self._say_missing(request, [name for name in selected if name not in names])
        return names

    def _say_missing(self, request: HttpRequest, names: list[str]) -> None:
        """An action says what it did for each selected task, for those it
        found no task of too (deleted since the page was made, or a made-up name)."""
        if names:
            text = _("There is no task %(names)s (any more); nothing was done to it.")
            quoted = ", ".join(f"“{name}”" for name in names)
            self.message_user(request, text % {"names": quoted}, messages.WARNING)

    # --- URLs ----------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        # Named as Django names the admin's own: admin_urlname(opts, "run").
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("status/", wrap(self.status_view), name=f"{prefix}_status"),
            # The event stream checks access itself (the API's rule, the
            # admin's too), and is async: not wrapped in the sync admin_view.
            path("events/", event_stream, name=f"{prefix}_events"),
            path("<str:name>/run/", wrap(self.run_view), name=f"{prefix}_run"),
            path("<str:name>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<str:name>/release/", wrap(self.release_view), name=f"{prefix}_release"),
            *super().get_urls(),
        ]


def _runs_html(worker: WorkerState) -> SafeString:
    """The workers table's "running now": as ``bgtasks workers`` says it
    (display.worker_runs), each Django Task's path an id that wraps between
    its parts and its id (a UUID) on one line."""
    each = '{} <span class="bgtasks-nowrap">{}</span> ({})'
    held = format_html_join(
        "; ",
        each,
        ((id_html(task.task), task.id, display.held_state(task)) for task in worker.django_tasks),
    )
    lost = format_html_join(
        "; ",
        each,
        (
            (id_html(task.task or "?"), task.id, display.lost_state(task))
            for task in worker.lost_tasks
        ),
    )
    parts = [format_html("{}", display.background_runs(worker))]
    if worker.django_tasks:
        parts.append(format_html("{}: {}", display.HELD_TASKS, held))
    if worker.lost_tasks:
        parts.append(format_html("{}: {}", display.LOST_TASKS, lost))
    return format_html_join("; ", "{}", ((part,) for part in parts if part))
