"""The ModelAdmin of ``BackgroundTask``: its configuration, who may do what,
its two pages (the changelist and the read-only detail page, with what
live.js needs), its actions and its URLs. The columns are in
:mod:`.columns`; the operator views, and the operations they share with the
actions, in :mod:`.views`.

The rows are written only by the lease operations, so the admin never adds,
saves or deletes a ``BackgroundTask``: the pages are read-only for everyone.
Changing what a task does is an *operation* (run now, request cancel, force
release), which needs the model's **change** permission.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..models import BackgroundTask
from ..tasks import registered_tasks
from ..views import outside_request_transactions
from .columns import TaskChangeList, TaskColumns, keep_state, state_names, state_of
from .views import OperatorViews, admin_url, parse_tokens

LIST_COLUMNS = (
    "name",
    "status_badge",
    "progress_bar",
    "owner_cell",
    "token_cell",
    "outcome_cell",
    "heartbeat",
    "started",
    "finished",
    "duration",
    "next_run",
)
DETAIL_FIELDS = (
    "name",
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


class BackgroundTaskAdmin(TaskColumns, OperatorViews):
    """Tasks, live: read-only rows, and run now / request cancel / force
    release for users with the change permission."""

    list_display_links = ["name"]
    search_fields = ["name", "owner"]
    actions = ["run_now", "request_cancel", "force_release"]
    change_list_template = "django_bgtasks/admin/change_list.html"
    change_form_template = "django_bgtasks/admin/change_form.html"
    fieldsets = [
        (None, {"fields": DETAIL_FIELDS}),
        (gettext_lazy("Value"), {"fields": ["value_json"]}),
        (gettext_lazy("Run history (newest first)"), {"fields": ["history"]}),
    ]
    readonly_fields = [*DETAIL_FIELDS, "value_json", "history"]

    class Media:
        css = {"all": ["django_bgtasks/admin.css"]}
        js = ["django_bgtasks/live.js"]

    # --- permissions: read-only data, change permission to operate -----------
    # Django's own has_change_permission() is what allows the operations; no
    # one may add or delete a row, and change_view() saves nothing.

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

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
        registered = registered_tasks()
        # Every task with a row now: live.js points out rows that appear later
        # (started on another replica), which only a reload can add.
        known = sorted(BackgroundTask.objects.values_list("name", flat=True))
        started = set(known)
        context = {
            **self._live_context(request),
            # The rows are read-only, for operators too: "view", not "change".
            "title": _("Select %s to view") % self.opts.verbose_name,
            "bgtasks_known": known,
            "bgtasks_never_run": [
                task for name, task in registered.items() if name not in started
            ],
            "bgtasks_workers": BackgroundTask.objects.work.workers(),
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
        if obj is not None:
            state = state_of(obj)
            context["bgtasks_buttons"] = (
                self.operate(obj) if context["bgtasks_can_operate"] else ""
            )
            context["bgtasks_state"] = state
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _live_context(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "bgtasks_status_url": admin_url(self, "status"),
            "bgtasks_can_operate": self.has_change_permission(request),
            "bgtasks_next": request.get_full_path(),
            "bgtasks_states": state_names(),
        }

    # --- the changelist's actions ------------------------------------------------

    @admin.action(description=gettext_lazy("Run now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for task in queryset:
            self.start_task(request, task.name)

    @admin.action(description=gettext_lazy("Request cancel"), permissions=["change"])
    def request_cancel(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for task in queryset:
            self.cancel_task(request, task.name)

    @admin.action(description=gettext_lazy("Force release…"), permissions=["change"])
    def force_release(
        self, request: HttpRequest, queryset: QuerySet[BackgroundTask]
    ) -> HttpResponse | None:
        if request.POST.get("post") == "yes":
            confirmed = parse_tokens(request.POST.get("confirmed", ""))
            for task in queryset:
                if task.name in confirmed:
                    self.release_task(request, task.name, confirmed[task.name])
            return None
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

    # --- URLs ----------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        # Named as Django names the admin's own: admin_urlname(opts, "run").
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("status/", wrap(self.status_view), name=f"{prefix}_status"),
            path("<str:name>/run/", wrap(self.run_view), name=f"{prefix}_run"),
            path("<str:name>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<str:name>/release/", wrap(self.release_view), name=f"{prefix}_release"),
            *super().get_urls(),
        ]
