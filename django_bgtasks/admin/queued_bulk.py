"""The Django tasks list's actions on everything it holds, on the server:
"Retry all", "Cancel all" and "Delete all" under a filtered list open a
confirmation page (``<changelist>/bulk/<action>/?<the list's query>``,
``admin:django_bgtasks_queuedtask_bulk``) that says how many tasks match;
its POST does the action (operations/bulk.py: a batch a statement, each
task matched as its single action is) and goes back to the list, saying
what it did.

The selection is the list's own: its filters and its search, read by the
changelist as the list reads them, but whole, past the search's budget of
rows (the page lists the newest matches; the action takes every one). A
list with neither filter nor search selects nothing: a bulk action of every
task is not offered. Retry and cancel need the change permission, delete
the delete permission (operations/bulk.py's ``PERMISSIONS``); a bad search
term is said on the list, and nothing is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _

from django_bgtasks.admin.views import admin_url
from django_bgtasks.http.responses import outside_request_transactions
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import bulk, display
from django_bgtasks.operations.permissions import user_may
from django_bgtasks.operations.queued import QueuedFilter

if TYPE_CHECKING:
    BulkModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    BulkModelAdmin = admin.ModelAdmin

# The request's attribute where the search leaves its terms for a bulk
# action, rather than reading its budget of rows (admin/queued.py).
BULK_SELECTION = "_bgtasks_bulk_selection"
# The list's parameters that are no filter: its page, order and popup.
_NOT_FILTERS = {"p", "o", "_popup", "_to_field", "e"}
# Each action's button, and its confirmation's question.
WORDS = {
    "retry": (_("Retry all"), _("Retry every failed one of them?")),
    "cancel": (_("Cancel all"), _("Cancel them: a ready one fails, a running one stops?")),
    "delete": (_("Delete all"), _("Delete them (not the running ones)?")),
}


class QueuedBulk(BulkModelAdmin):
    """The bulk actions' view and the list's buttons, for the Django Tasks'
    ModelAdmin."""

    @method_decorator(outside_request_transactions)
    def bulk_view(self, request: HttpRequest, action: str) -> HttpResponse:
        """The confirmation of ``action`` on the list's selection (GET), and the
        action (POST)."""
        if action not in bulk.ACTIONS:
            raise Http404(f"No bulk action {action!r}.")
        chosen = bulk.checked(action)
        if not user_may(request, bulk.PERMISSIONS[chosen]):
            raise PermissionDenied
        back = admin_url(self, "changelist") + _query(request)
        if not filtered(request):
            text = _("Filter or search the list first: a bulk action takes what the list holds.")
            self.message_user(request, text, messages.WARNING)
            return HttpResponseRedirect(back)
        # The list's reads as the list makes them: by an index, whatever the
        # planner's statistics (QueuedTask.objects.index_reads); the action's
        # writes after, outside that transaction.
        with QueuedTask.objects.index_reads():
            selection = self._selection(request)
        if selection is None:  # a bad search term or filter: said on the list
            return HttpResponseRedirect(back)
        if request.method == "POST":
            result = bulk.act(chosen, selection)
            self.message_user(request, display.bulk_result(result), messages.SUCCESS)
            return HttpResponseRedirect(back)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": WORDS[chosen][0],
            "action": chosen,
            "question": WORDS[chosen][1],
            "count": bulk.matching(selection),
            "filters": [
                (name, request.GET.get(name, ""))
                for name in request.GET
                if name not in _NOT_FILTERS
            ],
            "cancel_url": back,
        }
        return TemplateResponse(request, "django_bgtasks/admin/queued_bulk.html", context)

    def _selection(self, request: HttpRequest) -> bulk.Selection | None:
        """The list's selection, whole: its changelist's queryset, and its
        search's terms; ``None`` when the list refused its query."""
        setattr(request, BULK_SELECTION, QueuedFilter())
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            self.message_user(request, _("The list's filters are not valid."), messages.ERROR)
            return None
        filters = getattr(request, BULK_SELECTION)
        if isinstance(filters, ValueError):  # a bad search term: the list says it
            return None
        return bulk.Selection(changelist.queryset, filters.match, filters.scans)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        name = f"{self.opts.app_label}_{self.opts.model_name}_bulk"
        return [path("bulk/<str:action>/", wrap(self.bulk_view), name=name), *super().get_urls()]

    def bulk_buttons(self, request: HttpRequest) -> list[tuple[str, str]]:
        """The list's "Retry all" etc. that this user may use, as (label, URL),
        under a filtered list only."""
        if not filtered(request):
            return []
        return [
            (WORDS[action][0], admin_url(self, "bulk", action) + _query(request))
            for action in bulk.ACTIONS
            if user_may(request, bulk.PERMISSIONS[action])
        ]


def filtered(request: HttpRequest) -> bool:
    """Whether the list's query has a filter or a search."""
    return any(
        str(request.GET.get(name, "")).strip() for name in request.GET if name not in _NOT_FILTERS
    )


def _query(request: HttpRequest) -> str:
    """The list's query string, with its leading ``?`` (or nothing)."""
    query = request.GET.urlencode()
    return f"?{query}" if query else ""
