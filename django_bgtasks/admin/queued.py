"""The admin of Django Tasks (``django_bgtasks.backend.LeaseBackend``):
queued, running and recent tasks with their status, queue, priority, attempts,
progress, worker, duration and errors (the columns are
:mod:`.queued_columns`'); and the operator's cancel. It is listed only where
``TASKS`` configures a ``LeaseBackend``: elsewhere there are none to show.

A task's page is found by its id, the one ``get_result()``, the JSON API and
``bgtasks show`` use (the row's ``uuid``):
``/admin/django_bgtasks/queuedtask/<id>/change/``, and the list links there.
An old link by the row's sequence number (its primary key) is sent on to
that URL; an id no task has goes to the list, with a message saying why.

Read-only, with the background tasks' permission rule
(:mod:`django_bgtasks.operations.permissions`): view to see, change to cancel
and retry, delete to delete. The cancel (an action, and a button on a ready
or running task's page) is :mod:`.queued_cancel`'s, the retry of a failed
task (likewise) :mod:`.queued_retry`'s, the actions on everything a filtered
list holds :mod:`.queued_bulk`'s. A task's page is a view, for superusers too
(no Save: the rows are written only by the queue's fenced operations). The
filters show how many tasks each choice has (``show_facets``): the count of
each status at a glance.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_bgtasks.admin.dashboard import QueuedDashboard
from django_bgtasks.admin.pauses import QueuePauseActions
from django_bgtasks.admin.queued_bulk import BULK_SELECTION, QueuedBulk
from django_bgtasks.admin.queued_buttons import QueuedButtons
from django_bgtasks.admin.queued_cancel import CANCEL_BUTTON, QueuedCancel
from django_bgtasks.admin.queued_columns import QueuedColumns
from django_bgtasks.admin.queued_list import (
    BackendFilter,
    CappedPaginator,
    QueueNameFilter,
    QueueStatusFilter,
    parse_search,
    search,
    searched,
)
from django_bgtasks.admin.queued_retry import RETRY_BUTTON, QueuedRetry
from django_bgtasks.admin.read_from import listing
from django_bgtasks.admin.views import admin_url
from django_bgtasks.conf import lease_backends
from django_bgtasks.db import read_database
from django_bgtasks.limits import COUNT_CAP
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import display
from django_bgtasks.operations import search as task_search
from django_bgtasks.operations.permissions import user_may
from django_bgtasks.operations.queues import paused_queues

# The row's sequence number (its primary key), which these URLs carried
# before they carried the task's id.
SEQUENCE = re.compile("[0-9]{1,18}")  # below 2**63: a bigint, on every database


class QueuedChangeList(ChangeList):
    """The list, whose rows link to each task's page by its id."""

    def url_for_result(self, result: Model) -> str:
        assert isinstance(result, QueuedTask)
        return admin_url(self.model_admin, "change", quote(str(result.uuid)))


class QueuedTaskAdmin(
    QueuePauseActions,
    QueuedDashboard,
    QueuedBulk,
    QueuedButtons,
    QueuedCancel,
    QueuedRetry,
    QueuedColumns,
):
    # (QueuedDashboard's and QueuedBulk's URLs first: "bulk/retry/" is no
    # task's "<id>/retry/", "dashboard/" no task's "<id>/".)
    """Django Tasks, newest first."""

    buttons = (RETRY_BUTTON, CANCEL_BUTTON)  # a task page's (admin/queued_buttons.py)

    # Ten values in five columns, so that the list fits a laptop's screen
    # with the admin's sidebar open: the UUID whole, the rest a value a line.
    list_display = ("id_cell", "task_cell", "state_cell", "worker", "enqueued_cell")
    list_filter = (QueueStatusFilter, QueueNameFilter, BackendFilter)
    # Counts by state (and queue, backend) beside each filter's choices, each
    # stopping at a cap; the list's count too, and not the whole table's:
    # every count a bounded read at any size of the table (.queued_list).
    show_facets = admin.ShowFacets.ALWAYS
    paginator = CappedPaginator
    show_full_result_count = False
    change_list_template = "django_bgtasks/admin/queued_change_list.html"
    # (What the search box offers; .queued_list's search() is what it does.)
    search_fields = ("uuid", "task_path")
    search_help_text = gettext_lazy(
        'A task\'s id, or a part of its task path; and terms: error:timeout, args:{"user_id":5}'
        " (its arguments hold it), key:KEY (concurrency or rate), task:PATH, since:2h,"
        " until:2026-12-06T14:00."
    )
    ordering = ("-seq",)
    actions = ("cancel", "retry", "pause_queues", "unpause_queues")
    readonly_fields = (
        "uuid",
        "task_path",
        "backend",
        "queue_name",
        "priority",
        "status_label",
        "attempts_label",
        "progress_label",
        "worker",
        "heartbeat_label",
        "workers_list",
        "token",
        "args_kwargs",
        "return_value",
        "enqueued_time",
        "run_after_time",
        "started_time",
        "finished_time",
        "duration",
        "errors_list",
    )
    fields = readonly_fields

    class Media:
        css = {"all": ["django_bgtasks/admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueuedTask]:
        return super().get_queryset(request).using(read_database.alias())

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[QueuedTask],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> CappedPaginator:
        paginator = CappedPaginator(queryset, per_page, orphans, allow_empty_first_page)
        if queryset.model is QueuedTask:  # (the history page pages the admin's log)
            paginator.request = request  # its count shares the filters' read of the rows
        return paginator

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[QueuedTask], search_term: str
    ) -> tuple[QuerySet[QueuedTask], bool]:
        try:
            words, filters = parse_search(search_term, queryset)
        except ValueError as exc:
            if hasattr(request, BULK_SELECTION):  # the list it goes back to says it
                setattr(request, BULK_SELECTION, exc)
            else:
                _say_once(request, "bad_search", str(exc), messages.ERROR)
            return queryset.none(), False
        if words.strip():
            queryset = search(request, queryset, words)
        if not filters.scans:
            return queryset, False
        if hasattr(request, BULK_SELECTION):  # a bulk action reads the whole selection
            setattr(request, BULK_SELECTION, filters)
            return queryset, False
        seqs, complete = searched(request, queryset, filters)
        if not complete:
            text = _(
                "The search tested the newest %(budget)s Django tasks of the list and shows what"
                " it found there (%(cap)s at most). Narrow it with the filters, or with"
                " since: and until:, to search older ones."
            ) % {"budget": f"{task_search.SCAN_BUDGET:,}", "cap": f"{COUNT_CAP:,}"}
            _say_once(request, "search_stopped", text, messages.INFO)
        return queryset.filter(seq__in=seqs), False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The rows are read-only, for operators too: "view", not "change".
        title = _("Select %s to view") % self.opts.verbose_name
        buttons = self.bulk_buttons(request)
        context = {"title": title, "bgtasks_bulk_buttons": buttons, **(extra_context or {})}
        if request.method == "POST":  # an action: the queue's own writes
            return super().changelist_view(request, context)
        # Every read of the page (rendered here, not after) from the read
        # database (admin/read_from.py), and by an index
        # (QueuedTask.objects.index_reads, .queued_list).
        with listing(request), QueuedTask.objects.index_reads():
            _say_paused(request)
            response = super().changelist_view(request, context)
            if isinstance(response, TemplateResponse):
                response.render()
        return response

    # Alike BackgroundTaskAdmin's: the signature is Django's ModelAdmin's.
    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: QueuedTask | None = None,
    ) -> HttpResponse:
        if obj is not None:
            # The id first, where the heading's line can't break it at a hyphen.
            context["subtitle"] = f"{obj.uuid} {obj.task_path}"
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- a task's pages, by its id --------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueuedChangeList

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> QueuedTask | None:
        """The Django Task whose id (its result's, a UUID) is ``object_id``."""
        if from_field is not None:
            return super().get_object(request, object_id, from_field)
        if not _is_uuid(object_id):
            return None
        return self.get_queryset(request).filter(uuid=uuid.UUID(object_id)).first()

    def change_view(
        self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        # The page is a view for everyone: no POST (see has_change_permission).
        if request.method == "POST":
            raise PermissionDenied
        elsewhere = self._elsewhere(request, object_id, "change")
        return elsewhere or super().change_view(request, object_id, *args, **kwargs)

    def history_view(
        self, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        elsewhere = self._elsewhere(request, object_id, "history")
        return elsewhere or super().history_view(request, object_id, *args, **kwargs)

    def _elsewhere(self, request: HttpRequest, object_id: str, page: str) -> HttpResponse | None:
        """``None`` when ``object_id`` names a Django Task: Django's own view
        shows it. Else an old link by the row's sequence number (the primary
        key, which these URLs used to carry) is sent on to the task's own
        URL, and any other id goes to the list, with a message that says
        where the task went or what an id is. Refused first (403) for whoever
        may not see Django Tasks, so that no answer tells them what exists."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        object_id = unquote(object_id)
        if self.get_object(request, object_id) is not None:
            return None
        if SEQUENCE.fullmatch(object_id):
            row = self.get_queryset(request).filter(seq=int(object_id)).first()
            if row is not None:
                return HttpResponseRedirect(admin_url(self, page, str(row.uuid)))
        if SEQUENCE.fullmatch(object_id) or _is_uuid(object_id):
            text = _(
                "No Django task has the id “%(id)s”: it never existed, or it finished more "
                "than BGTASKS_HISTORY_DAYS ago and bgtasks prune deleted it."
            )
        else:
            text = _(
                "“%(id)s” is not a Django task's id: that is the UUID of its result "
                "(get_result().id, the JSON API's “id”, bgtasks show)."
            )
        self.message_user(request, text % {"id": object_id}, messages.WARNING)
        return HttpResponseRedirect(admin_url(self, "changelist"))

    # --- permissions: the background tasks' rule --------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return user_may(request, "view")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # "Change" is the cancel action's permission (asked without a row);
        # a row itself is never changed here. Its Save would rewrite every
        # column with the values it read, outside every fence: raced against
        # the task's end, it set a finished task back to RUNNING. So a row's
        # page is Django's view-only page for everyone: no Save, and a POST
        # is refused (403) before any form is saved.
        if obj is not None:
            return False
        return user_may(request, "change")

    def has_module_permission(self, request: HttpRequest) -> bool:
        # Listed (index, sidebar) only on a site whose TASKS has a LeaseBackend.
        return bool(lease_backends()) and user_may(request, "view")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: QueuedTask, form: Any, change: bool) -> None:
        """Never: the queue's fenced operations are the rows' only writers
        (this guards any other way to a save, such as ``list_editable``)."""
        raise PermissionDenied


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _say_once(request: HttpRequest, kind: str, text: str, level: int) -> None:
    """``text`` as a message, once a request (the list reads its search for
    each filter's counts too)."""
    said: set[str] = request.__dict__.setdefault("_bgtasks_said", set())
    if kind not in said:
        said.add(kind)
        messages.add_message(request, level, text)


def _say_paused(request: HttpRequest) -> None:
    """Above the list, each paused queue: its ready tasks wait for its unpause."""
    for queue, since in paused_queues().items():
        messages.warning(
            request,
            _(
                "Queue %(queue)s is paused (since %(since)s): no worker claims its tasks "
                "until it is unpaused."
            )
            % {"queue": queue, "since": display.when(since)},
        )
