"""The admin: a live view of every task's lease, with run now, request cancel
and force release.

The rows are written only by the lease operations, so the admin never adds,
saves or deletes a ``BackgroundTask``: the pages are read-only for everyone.
Changing what a task does is an *operation*: run now, request cancel and
force release go through the task registry and ``BackgroundTask.objects``
like the API and the command do, need the model's **change** permission
(``has_operate_permission``), and are logged to the admin's ``LogEntry``.

Status, staleness and heartbeat ages come from ``list_states()``/``get_state()``,
which use the database's clock, so every replica shows the same page.
``static/django_bgtasks/live.js`` keeps the rows current by polling the
``status/`` URL here (the same JSON as the API, behind the admin's login).

"Run now" starts the task in a thread of the web process that handled the
click (``BackgroundTaskFunction.start()``): if that process exits, the lease
goes stale and the run is recorded as lost.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from . import display
from .exceptions import UnknownTask
from .models import BackgroundTask, TaskRun
from .states import TaskState
from .tasks import get_task, registered_tasks
from .views import outside_request_transactions, task_list_response

if TYPE_CHECKING:
    TaskModelAdmin = admin.ModelAdmin[BackgroundTask]
else:  # ModelAdmin is generic only in django-stubs
    TaskModelAdmin = admin.ModelAdmin

# Where a row's TaskState for this request is kept, on the row's instance.
_STATE = "_bgtasks_state"
HISTORY_ROWS = 50
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
    "error_text",
)
EMPTY = "-"


def state_of(task: BackgroundTask) -> TaskState | None:
    """The row's state as the lease manager reads it (database clock)."""
    state: TaskState | None = getattr(task, _STATE, None)
    if state is None:
        state = BackgroundTask.objects.get_state(task.name)
        setattr(task, _STATE, state)
    return state


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
            setattr(task, _STATE, states.get(task.name))


@admin.register(BackgroundTask)
class BackgroundTaskAdmin(TaskModelAdmin):
    """Tasks, live: read-only rows, and run now / request cancel / force
    release for users with the change permission."""

    list_display_links = ["name"]
    search_fields = ["name", "owner"]
    actions = ["run_now", "request_cancel", "force_release"]
    change_list_template = "django_bgtasks/admin/change_list.html"
    change_form_template = "django_bgtasks/admin/change_form.html"
    release_confirmation_template = "django_bgtasks/admin/force_release.html"
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A save() would write the row around the lease operations (and over
        # the holder's heartbeat); the lease manager is the only writer.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Run now, request cancel and force release: the model's change permission."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('change', opts)}")

    # --- the changelist --------------------------------------------------------

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        if self.has_operate_permission(request):
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
            "bgtasks_known": known,
            "bgtasks_never_run": [
                task for name, task in registered.items() if name not in started
            ],
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> BackgroundTask | None:
        task = super().get_object(request, object_id, from_field)
        if task is not None:
            setattr(task, _STATE, BackgroundTask.objects.get_state(task.name))
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
            "bgtasks_status_url": self._url("status"),
            "bgtasks_can_operate": self.has_operate_permission(request),
            "bgtasks_next": request.get_full_path(),
        }

    # --- columns (each one a cell that live.js keeps current) -----------------

    @admin.display(description=gettext_lazy("status"))
    def status_badge(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return EMPTY
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
            return EMPTY
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
        return EMPTY if state is None else _live(state.name, "owner", state.owner)

    @admin.display(description=gettext_lazy("token"), ordering="token")
    def token_cell(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        return EMPTY if state is None else _live(state.name, "token", state.token)

    @admin.display(description=gettext_lazy("outcome"), ordering="outcome")
    def outcome_cell(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return EMPTY
        return _live(state.name, "outcome", state.outcome, f"bgtasks-outcome-{state.outcome}")

    @admin.display(description=gettext_lazy("last heartbeat"), ordering="updated_at")
    def heartbeat(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return EMPTY
        age = "" if state.heartbeat_age is None else f"{display.seconds(state.heartbeat_age)} ago"
        return _live(state.name, "heartbeat", age)

    @admin.display(description=gettext_lazy("started"), ordering="started_at")
    def started(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        return EMPTY if state is None else _live(state.name, "started", _time(state.started_at))

    @admin.display(description=gettext_lazy("finished"), ordering="finished_at")
    def finished(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        return EMPTY if state is None else _live(state.name, "finished", _time(state.finished_at))

    @admin.display(description=gettext_lazy("duration"))
    def duration(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return EMPTY
        return _live(state.name, "duration", display.seconds(state.duration))

    @admin.display(description=gettext_lazy("error"))
    def error_text(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None or not state.error:
            return EMPTY
        return format_html('<pre class="bgtasks-error">{}</pre>', state.error)

    @admin.display(description=gettext_lazy("value"))
    def value_json(self, task: BackgroundTask) -> SafeString | str:
        state = state_of(task)
        if state is None:
            return EMPTY
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
                    display.seconds(
                        (run.finished_at - run.started_at).total_seconds()
                        if run.started_at and run.finished_at
                        else None
                    ),
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
            return EMPTY
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
                self._url("release", task.name),
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
            self._url(operation, name),
            name,
            show,
            format_html(' name="token" value="{}"', token) if token is not None else "",
            SafeString(" hidden") if hidden else "",
            label,
        )

    # --- operations: the admin actions and the row buttons share these ---------

    def _run_now(self, request: HttpRequest, name: str) -> None:
        try:
            task = get_task(name)
        except UnknownTask:
            self.message_user(
                request,
                _("“%(name)s” is not a registered task, so it can't be started here.")
                % {"name": name},
                messages.ERROR,
            )
            return
        running = task.start()
        if running is None:
            state = BackgroundTask.objects.get_state(name)
            self.message_user(
                request,
                _("“%(name)s” is already running on %(owner)s.")
                % {"name": name, "owner": state.owner if state else "?"},
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            _("Started “%(name)s” (token %(token)s) on %(owner)s.")
            % {"name": name, "token": running.token, "owner": running.owner},
            messages.SUCCESS,
        )
        self.log_change(
            request,
            BackgroundTask(name=name),
            f"Ran now (token {running.token}, owner {running.owner}).",
        )

    def _request_cancel(self, request: HttpRequest, name: str, token: int | None = None) -> None:
        try:
            requested = BackgroundTask.objects.request_cancel(name, token=token)
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        state = BackgroundTask.objects.get_state(name)
        if not requested and token is not None and state is not None and state.token != token:
            self.message_user(
                request,
                _(
                    "“%(name)s” was not cancelled: token %(token)s no longer holds it "
                    "(another run, token %(now)s, took over)."
                )
                % {"name": name, "token": token, "now": state.token},
                messages.WARNING,
            )
            return
        if not requested or state is None:
            self.message_user(
                request,
                _("“%(name)s” is not running; there is nothing to cancel.") % {"name": name},
                messages.WARNING,
            )
            return
        self.message_user(
            request,
            _(
                "Asked %(owner)s to stop “%(name)s” (token %(token)s); "
                "it stops at its next heartbeat or update."
            )
            % {"name": name, "owner": state.owner, "token": state.token},
            messages.SUCCESS,
        )
        self.log_change(
            request,
            BackgroundTask(name=name),
            f"Requested cancel (token {state.token}, owner {state.owner}).",
        )

    def _force_release(self, request: HttpRequest, state: TaskState) -> None:
        """End the claim the operator confirmed (by its token), and no other."""
        if BackgroundTask.objects.force_release(state.name, token=state.token):
            self.message_user(
                request,
                _(
                    "Released “%(name)s” (token %(token)s). Its holder %(owner)s can no "
                    "longer renew it or write through it."
                )
                % {"name": state.name, "token": state.token, "owner": state.owner},
                messages.SUCCESS,
            )
            self.log_change(
                request,
                BackgroundTask(name=state.name),
                f"Force-released (token {state.token}, owner {state.owner}).",
            )
        else:
            self.message_user(
                request,
                _(
                    "“%(name)s” was not released: token %(token)s no longer holds it "
                    "(it finished, or another run took over)."
                )
                % {"name": state.name, "token": state.token},
                messages.WARNING,
            )

    @admin.action(description=gettext_lazy("Run now"), permissions=["operate"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for task in queryset:
            self._run_now(request, task.name)

    @admin.action(description=gettext_lazy("Request cancel"), permissions=["operate"])
    def request_cancel(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for task in queryset:
            self._request_cancel(request, task.name)

    @admin.action(description=gettext_lazy("Force release…"), permissions=["operate"])
    def force_release(
        self, request: HttpRequest, queryset: QuerySet[BackgroundTask]
    ) -> HttpResponse | None:
        if request.POST.get("post") == "yes":
            confirmed = _confirmed_tokens(request.POST.get("confirmed", ""))
            for task in queryset:
                if task.name in confirmed:
                    state = state_of(task)
                    if state is not None:
                        self._force_release(request, _with_token(state, confirmed[task.name]))
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
        return self._release_confirmation(request, held, "", hidden)

    # --- the admin's own URLs --------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        return [
            path("status/", wrap(self.status_view), name="{}_{}_status".format(*info)),
            path("<str:name>/run/", wrap(self.run_view), name="{}_{}_run".format(*info)),
            path("<str:name>/cancel/", wrap(self.cancel_view), name="{}_{}_cancel".format(*info)),
            path(
                "<str:name>/release/", wrap(self.release_view), name="{}_{}_release".format(*info)
            ),
            *super().get_urls(),
        ]

    def _url(self, operation: str, *args: str) -> str:
        info = self.opts.app_label, self.opts.model_name, operation
        return reverse("admin:{}_{}_{}".format(*info), args=args, current_app=self.admin_site.name)

    def status_view(self, request: HttpRequest) -> HttpResponse:
        """Every task's state as JSON, for live.js (the API's list, behind the admin login)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return task_list_response(request)

    @outside_request_transactions
    def run_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        self._run_now(request, name)
        return self._back(request)

    @outside_request_transactions
    def cancel_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        # The row's button sends the token on screen; without one (an older
        # page, a hand-made request) the current holder is asked.
        token = _confirmed_token(request.POST.get("token", ""))
        if token is None and "token" in request.POST:
            self.message_user(request, _("That is not a valid token."), messages.ERROR)
        else:
            self._request_cancel(request, name, token)
        return self._back(request)

    @outside_request_transactions
    def release_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        """GET: what would be released, and a confirmation. POST: release
        exactly the claim (token) that page showed."""
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        try:
            state = BackgroundTask.objects.get_state(name)
        except ValueError:
            state = None
        if state is None:
            raise Http404(_("No task named “%(name)s” has run.") % {"name": name})
        if request.method == "POST":
            token = _confirmed_token(request.POST.get("token", ""))
            if token is None:
                self.message_user(
                    request, _("The confirmation had no valid token."), messages.ERROR
                )
            else:
                self._force_release(request, _with_token(state, token))
            return self._back(request)
        if not state.held:
            self.message_user(
                request,
                _("“%(name)s” is not held; there is nothing to release.") % {"name": name},
                messages.INFO,
            )
            return HttpResponseRedirect(self._changelist_url())
        return self._release_confirmation(
            request, [state], request.path, [("token", str(state.token))]
        )

    def _release_confirmation(
        self,
        request: HttpRequest,
        states: list[TaskState],
        form_action: str,
        hidden: list[tuple[str, str]],
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": _("Force release"),
            "opts": self.opts,
            "rows": [
                (state, display.status_text(state), display.seconds(state.heartbeat_age))
                for state in states
            ],
            "form_action": form_action,
            "hidden": hidden,
            "cancel_url": self._changelist_url(),
            "next": self._changelist_url(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.release_confirmation_template, context)

    def _changelist_url(self) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse("admin:{}_{}_changelist".format(*info), current_app=self.admin_site.name)

    def _back(self, request: HttpRequest) -> HttpResponseRedirect:
        """To the page the button was on (``next``), if it is ours; else the changelist."""
        target = request.POST.get("next", "")
        safe = url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return HttpResponseRedirect(target if target and safe else self._changelist_url())


def _confirmed_token(text: str) -> int | None:
    try:
        token = int(text)
    except ValueError:
        return None
    return token if 1 <= token < 2**63 else None


def _confirmed_tokens(text: str) -> dict[str, int]:
    """``{name: token}`` from the bulk confirmation page; bad entries are dropped."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        name: token
        for name, token in data.items()
        if isinstance(token, int) and not isinstance(token, bool) and 1 <= token < 2**63
    }


def _with_token(state: TaskState, token: int) -> TaskState:
    """The state as the operator confirmed it: the claim with ``token``."""
    return replace(state, token=token)
