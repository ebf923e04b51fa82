"""The buttons of a Django task's page in the admin: *Retry* while it is
failed (admin/queued_retry.py), *Cancel* while it is ready, or running and
not yet asked to stop (admin/queued_cancel.py), for users with the change
permission only.

Each is a POST to ``<id>/<button>/`` that calls its operation (the one the
list's action calls, as the API and ``bgtasks`` do), says what it answered
in the action's messages, and goes back to the task's page (to the list for
an id no task has). A button is one :class:`Button` in
:data:`QueuedButtons.buttons`; its view, its URL and its place on the page
are written here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.urls import URLPattern, path
from django.utils.decorators import method_decorator
from django.utils.functional import Promise
from django.views.decorators.http import require_POST

from django_bgtasks.admin.views import admin_url
from django_bgtasks.http.responses import outside_request_transactions
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import writes

# A text, or one translated when it is shown (gettext_lazy).
StrOrPromise = str | Promise

if TYPE_CHECKING:
    ButtonsModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    ButtonsModelAdmin = admin.ModelAdmin


@dataclass(frozen=True)
class Button:
    """A task page's button: its ``name`` (its URL's last part), ``label`` and
    ``title``; ``shown``, whether a task's page has it; ``operation`` (a
    task's id to its result) and ``said`` (results to messages, ``(level,
    text)``), the list's action's."""

    name: str
    label: StrOrPromise
    title: StrOrPromise
    shown: Callable[[QueuedTask], bool]
    operation: Callable[[str], Any]
    said: Callable[[Sequence[Any]], list[tuple[int, str]]]


class QueuedButtons(ButtonsModelAdmin):
    """The buttons' views, URLs and places, for the Django Tasks' ModelAdmin."""

    change_form_template = "django_bgtasks/admin/queued_change_form.html"
    buttons: tuple[Button, ...] = ()

    @outside_request_transactions
    @method_decorator(require_POST)
    def button_view(self, request: HttpRequest, object_id: str, name: str) -> HttpResponseBase:
        """The button ``name`` of a task's page: its operation, its messages,
        and back to the page."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        [button] = [button for button in self.buttons if button.name == name]
        result = button.operation(unquote(object_id))
        for level, text in button.said([result]):
            self.message_user(request, text, level)
        if isinstance(result, writes.QueuedUnknown):
            return HttpResponseRedirect(admin_url(self, "changelist"))
        return HttpResponseRedirect(admin_url(self, "change", quote(str(result.row.uuid))))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        own = [
            path(
                f"<path:object_id>/{button.name}/",
                wrap(self.button_view),
                {"name": button.name},
                name=f"{self.opts.app_label}_{self.opts.model_name}_{button.name}",
            )
            for button in self.buttons
        ]
        return [*own, *super().get_urls()]

    # Alike Django's ModelAdmin's on purpose: the signature of the hook.
    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: QueuedTask | None = None,
    ) -> HttpResponse:
        # The buttons the task has now, only for who may use them (the change
        # permission is asked without a row: no row is editable).
        if obj is not None and self.has_change_permission(request):
            context["bgtasks_buttons"] = [
                (button, admin_url(self, button.name, quote(str(obj.uuid))))
                for button in self.buttons
                if button.shown(obj)
            ]
        return super().render_change_form(request, context, add, change, form_url, obj)
