"""The admin's cancel of Django Tasks: the list's *Cancel* action and the
*Cancel* button on a ready or running task's page (``<id>/cancel/``, a
POST: :data:`CANCEL_BUTTON`, admin/queued_buttons.py), for users with the
change permission only.

Both call ``writes.cancel_queued()``, as the JSON API's ``cancel/`` and
``bgtasks cancel`` do, and only put what it answered into messages: one for
each kind of answer (a ready task will not run; a running one is asked to
stop at its next ``check()``; a finished one is left), naming the tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_bgtasks.admin.queued_buttons import Button
from django_bgtasks.admin.queued_list import acted_on, selected_across
from django_bgtasks.admin.queued_retry import listed
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import writes
from django_bgtasks.queue.manager import READY, RUNNING

if TYPE_CHECKING:
    CancelModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    CancelModelAdmin = admin.ModelAdmin


class QueuedCancel(CancelModelAdmin):
    """The cancel action, for the Django Tasks' ModelAdmin (``QueuedTaskAdmin``
    lists ``"cancel"`` in its actions)."""

    @admin.action(description=gettext_lazy("Cancel"), permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[QueuedTask]) -> None:
        rows = acted_on(self, request, queryset)
        gone = len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)) - len(rows)
        if gone > 0 and not selected_across(request):
            text = ngettext(
                "%(count)d selected Django task no longer exists; nothing was done to it.",
                "%(count)d selected Django tasks no longer exist; nothing was done to them.",
                gone,
            )
            self.message_user(request, text % {"count": gone}, messages.WARNING)
        results = [writes.cancel_queued(str(row.uuid)) for row in rows]
        for level, text in cancel_messages(results):
            self.message_user(request, text, level)


def cancel_messages(
    results: Sequence[writes.QueuedCancelResult],
) -> list[tuple[int, str]]:
    """What the cancels did, as ``(level, text)``: one message for each kind of
    answer, naming the task, or the first few and how many more."""
    kinds: dict[str, list[str]] = {"cancelled": [], "stopping": [], "finished": [], "gone": []}
    for result in results:
        match result:
            case writes.QueuedCancelled(row, started):
                kinds["stopping" if started else "cancelled"].append(str(row.uuid))
            case writes.QueuedFinished(row):
                kinds["finished"].append(str(row.uuid))
            case writes.QueuedUnknown(result_id):
                kinds["gone"].append(str(result_id))
    words = {
        "cancelled": (messages.SUCCESS, _("Cancelled %(ids)s; it will not run."),
                      _("Cancelled %(count)d Django tasks; they will not run: %(ids)s.")),
        "stopping": (messages.SUCCESS, _("Asked the worker to stop %(ids)s at its next check()."),
                     _("Asked the workers to stop %(count)d Django tasks at their next check():"
                       " %(ids)s.")),
        "finished": (messages.WARNING, _("%(ids)s had already finished."),
                     _("%(count)d Django tasks had already finished: %(ids)s.")),
        "gone": (messages.WARNING, _("%(ids)s no longer exists."),
                 _("%(count)d Django tasks no longer exist: %(ids)s.")),
    }  # fmt: skip
    said = []
    for kind, ids in kinds.items():
        if ids:
            level, one, many = words[kind]
            text = one if len(ids) == 1 else many
            said.append((level, text % {"count": len(ids), "ids": listed(ids)}))
    return said


CANCEL_BUTTON = Button(
    name="cancel",
    label=gettext_lazy("Cancel"),
    title=gettext_lazy("A ready task will not run; a running one stops at its next check()"),
    # While it can act: ready (it will not run), or running and not yet asked.
    shown=lambda row: row.status == READY or (row.status == RUNNING and not row.cancel_requested),
    operation=writes.cancel_queued,
    said=cancel_messages,
)
