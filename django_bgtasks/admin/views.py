"""The admin's operator views: ``status/`` (the JSON live.js polls), and run
now, request cancel and force release (with its confirmation page), as the
row buttons and the changelist's actions use them.

Each operation is :mod:`django_bgtasks.operations`, as for the API and the
command; here its result only becomes a message (``message_user``) and, when
something changed, an entry in the admin's ``LogEntry``. Each needs the
model's change permission.

"Run now" starts the task in a thread of the web process that handled the
click (``BackgroundTaskFunction.start()``): if that process exits, the lease
goes stale and the run is recorded as lost (and resumed by a worker, for a
resumable task). With ``BGTASKS_EXECUTOR = "worker"`` it files a request that
a ``bgtasks worker`` performs instead.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.templatetags.admin_urls import admin_urlname
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from django_bgtasks.admin.formats import id_html
from django_bgtasks.core.states import TaskState
from django_bgtasks.http.responses import outside_request_transactions, task_list_response
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display, writes
from django_bgtasks.validation import arguments_from_json, validate_name, validate_token

# How much of a run's arguments the task's history (LogEntry) keeps.
LOGGED_ARGUMENTS = 500

if TYPE_CHECKING:
    TaskModelAdmin = admin.ModelAdmin[BackgroundTask]
else:  # ModelAdmin is generic only in django-stubs
    TaskModelAdmin = admin.ModelAdmin


def admin_url(model_admin: admin.ModelAdmin[Any], page: str, *args: str) -> str:
    """The URL of one of ``model_admin``'s pages: ``"changelist"``, ``"run"``…"""
    # (The filter's argument is typed as a template hands it over.)
    name = admin_urlname(model_admin.opts, SafeString(page))
    return reverse(name, args=args, current_app=model_admin.admin_site.name)


class OperatorViews(TaskModelAdmin):
    """The operator views and the operations they share with the actions."""

    release_confirmation_template = "django_bgtasks/admin/force_release.html"

    def check_operator(self, request: HttpRequest) -> None:
        """Operations need the model's change permission."""
        if not self.has_change_permission(request):
            raise PermissionDenied

    # --- operations: what the row buttons and the actions did, in words ---------

    def start_task(self, request: HttpRequest, name: str, arguments: str = "") -> None:
        """Run now: start ``name`` in this process, with ``arguments`` (the
        detail page's JSON field, ``{"args": [...], "kwargs": {...}}``; blank:
        none), and say how that went."""
        given = ""  # the arguments, for the task's history
        try:
            validate_name(name)
        except ValueError:  # a name no task can have, so not a registered one
            result: writes.StartResult = writes.NotRegistered(name, ())
        else:
            try:
                args, kwargs = arguments_from_json(arguments)
                if args or kwargs:
                    given = " with " + Truncator(
                        json.dumps({"args": args, "kwargs": kwargs})
                    ).chars(LOGGED_ARGUMENTS)
                result = writes.start(
                    name, args=args, kwargs=kwargs, requested_by=f"admin: {request.user}"
                )
            except (ValueError, TypeError) as exc:  # arguments the task can't take
                text = _("“%(name)s” can't be started here: %(reason)s")
                self.message_user(request, text % {"name": name, "reason": exc}, messages.ERROR)
                return
        match result:
            case writes.Started(running):
                self._done(
                    request,
                    name,
                    _("Started “%(name)s” (token %(token)s) on %(owner)s.")
                    % {"name": name, "token": running.token, "owner": running.owner},
                    f"Ran now{given} (token {running.token}, owner {running.owner}).",
                )
            case writes.Requested(state):
                self._done(
                    request,
                    name,
                    _("Requested “%(name)s”; a worker will run it.") % {"name": name},
                    f"Requested a run for a worker{given}.",
                )
            case writes.AlreadyRequested():
                text = _("“%(name)s” already has a pending request.")
                self.message_user(request, text % {"name": name}, messages.WARNING)
            case writes.AlreadyHeld(state):
                text = _("“%(name)s” is already running on %(owner)s.")
                owner = state.owner if state else "?"
                self.message_user(request, text % {"name": name, "owner": owner}, messages.WARNING)
            case writes.NotRegistered():
                text = _("“%(name)s” is not a registered task, so it can't be started here.")
                self.message_user(request, text % {"name": name}, messages.ERROR)

    def cancel_task(self, request: HttpRequest, name: str, token: int | None = None) -> None:
        """Request cancel: ask the holder of ``name`` (with ``token``, only that
        claim) to stop, and say how that went."""
        try:
            result = writes.request_cancel(name, token=token)
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        match result:
            case writes.CancelRequested(state):
                self._done(
                    request,
                    name,
                    _(
                        "Asked %(owner)s to stop “%(name)s” (token %(token)s); "
                        "it stops at its next heartbeat or update."
                    )
                    % {"name": name, "owner": state.owner, "token": state.token},
                    f"Requested cancel (token {state.token}, owner {state.owner}).",
                )
            case writes.TookOverSince(asked, state):
                text = _(
                    "“%(name)s” was not cancelled: token %(token)s no longer holds it "
                    "(another run, token %(now)s, took over)."
                )
                values = {"name": name, "token": asked, "now": state.token}
                self.message_user(request, text % values, messages.WARNING)
            case writes.NotRunning() | writes.NeverRun():
                text = _("“%(name)s” is not running; there is nothing to cancel.")
                self.message_user(request, text % {"name": name}, messages.WARNING)

    def release_task(self, request: HttpRequest, name: str, token: int) -> None:
        """Force release: end the claim the operator confirmed (``token``) and
        no other, and say how that went."""
        match writes.force_release(name, token=token):
            case writes.Released(state):
                self._done(
                    request,
                    name,
                    _(
                        "Released “%(name)s” (token %(token)s). Its holder %(owner)s can no "
                        "longer renew it or write through it."
                    )
                    % {"name": name, "token": state.token, "owner": state.owner},
                    f"Force-released (token {state.token}, owner {state.owner}).",
                )
            case writes.NotRunning() | writes.TookOverSince() | writes.NeverRun():
                text = _(
                    "“%(name)s” was not released: token %(token)s no longer holds it "
                    "(it finished, or another run took over)."
                )
                self.message_user(request, text % {"name": name, "token": token}, messages.WARNING)

    def _done(self, request: HttpRequest, name: str, text: str, change: str) -> None:
        """An operation that changed the task: say so, and log it to the task's history."""
        self.message_user(request, text, messages.SUCCESS)
        self.log_change(request, BackgroundTask(name=name), change)

    # --- the views ---------------------------------------------------------------

    def status_view(self, request: HttpRequest) -> HttpResponse:
        """Every task's state as JSON, for live.js (the API's list, behind the admin login)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return task_list_response(request)

    @outside_request_transactions
    @method_decorator(require_POST)
    def run_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        self.check_operator(request)
        self.start_task(request, name, request.POST.get("arguments", ""))
        return self._back(request)

    @outside_request_transactions
    @method_decorator(require_POST)
    def cancel_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        self.check_operator(request)
        # The row's button sends the token on screen; without one (an older
        # page, a hand-made request) the current holder is asked.
        token = parse_token(request.POST.get("token", ""))
        if token is None and "token" in request.POST:
            self.message_user(request, _("That is not a valid token."), messages.ERROR)
        else:
            self.cancel_task(request, name, token)
        return self._back(request)

    @outside_request_transactions
    @method_decorator(require_http_methods(["GET", "HEAD", "POST"]))
    def release_view(self, request: HttpRequest, name: str) -> HttpResponseBase:
        """GET: what would be released, and a confirmation. POST: release
        exactly the claim (token) that page showed."""
        self.check_operator(request)
        try:
            state = BackgroundTask.objects.get_state(name)
        except ValueError:
            state = None
        if state is None:
            raise Http404(_("No task named “%(name)s” has run.") % {"name": name})
        if request.method == "POST":
            token = parse_token(request.POST.get("token", ""))
            if token is None:
                self.message_user(
                    request, _("The confirmation had no valid token."), messages.ERROR
                )
            else:
                self.release_task(request, name, token)
            return self._back(request)
        if not state.held:
            self.message_user(
                request,
                _("“%(name)s” is not held; there is nothing to release.") % {"name": name},
                messages.INFO,
            )
            return HttpResponseRedirect(admin_url(self, "changelist"))
        return self.release_confirmation(
            request, [state], request.path, [("token", str(state.token))]
        )

    def release_confirmation(
        self,
        request: HttpRequest,
        states: list[TaskState],
        form_action: str,
        hidden: list[tuple[str, str]],
    ) -> TemplateResponse:
        """The force release confirmation: what would end (holder, token), and
        a form that posts back exactly those claims (``hidden``)."""
        context = {
            **self.admin_site.each_context(request),
            "title": _("Force release"),
            "opts": self.opts,
            "rows": [
                (
                    state,
                    display.status_text(state),
                    id_html(state.owner),
                    display.ago(state.heartbeat_age),
                )
                for state in states
            ],
            "form_action": form_action,
            "hidden": hidden,
            "cancel_url": admin_url(self, "changelist"),
            "next": admin_url(self, "changelist"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.release_confirmation_template, context)

    def _back(self, request: HttpRequest) -> HttpResponseRedirect:
        """To the page the button was on (``next``), if it is ours; else the changelist."""
        target = request.POST.get("next", "")
        safe = url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
        return HttpResponseRedirect(target if target and safe else admin_url(self, "changelist"))


def parse_token(text: str) -> int | None:
    """The token a confirmation or a row's button sent, or ``None`` if it is
    not one (``validate_token`` has the bounds)."""
    try:
        return validate_token(int(text))
    except ValueError:
        return None


def parse_tokens(text: str) -> dict[str, int]:
    """``{name: token}`` from the bulk confirmation page; bad entries are dropped."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    tokens = {}
    for name, token in data.items():
        try:
            checked = validate_token(token)
        except (TypeError, ValueError):
            continue
        if checked is not None:
            tokens[name] = checked
    return tokens
