"""The admin's retry of failed Django Tasks: the list's *Retry* action and the
*Retry* button on a failed task's page (``<id>/retry/``, a POST:
:data:`RETRY_BUTTON`, admin/queued_buttons.py), for users with the change
permission only.

Both call ``writes.retry_queued()``, as the JSON API's ``retry/`` and
``bgtasks retry`` do, and only put what it answered into messages: one for
each kind of answer (a batch of a hundred says what became of them in a few
lines), and one when nothing matched (the selected tasks were pruned since).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_bgtasks.admin.queued_buttons import Button
from django_bgtasks.admin.queued_list import acted_on
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import writes
from django_bgtasks.queue.manager import FAILED

if TYPE_CHECKING:
    RetryModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    RetryModelAdmin = admin.ModelAdmin

# How many task ids a message names before it counts the rest.
LISTED_IDS = 5


class QueuedRetry(RetryModelAdmin):
    """The retry action, for the Django Tasks' ModelAdmin (``QueuedTaskAdmin``
    lists ``"retry"`` in its actions)."""

    @admin.action(description=gettext_lazy("Retry"), permissions=["change"])
    def retry(self, request: HttpRequest, queryset: QuerySet[QueuedTask]) -> None:
        rows = acted_on(self, request, queryset)
        results = [writes.retry_queued(str(row.uuid)) for row in rows]
        if not results:
            text = _("None of the selected Django tasks exists any more; nothing was retried.")
            self.message_user(request, text, messages.WARNING)
        for level, text in retry_messages(results):
            self.message_user(request, text, level)


def retry_messages(
    results: Sequence[writes.QueuedRetryResult],
) -> list[tuple[int, str]]:
    """What the retries did, as ``(level, text)``: one message for each kind
    of answer, naming the tasks (the first few, then how many more)."""
    retried: list[str] = []
    not_failed: list[str] = []
    held: list[str] = []
    unknown: list[str] = []
    for result in results:
        match result:
            case writes.QueuedRetried(row):
                retried.append(str(row.uuid))
            case writes.QueuedNotFailed(row):
                not_failed.append(f"{row.uuid} ({row.status.lower()})")
            case writes.QueuedKeyHeld(row, holder):
                by = str(holder.uuid) if holder is not None else _("a task that just ended")
                held.append(
                    _("%(id)s (key “%(key)s”, held by %(by)s)")
                    % {"id": row.uuid, "key": row.unique_key, "by": by}
                )
            case writes.QueuedUnknown(result_id):
                unknown.append(f"“{result_id}”")
    said = []
    if retried:
        text = ngettext(
            "Retried %(count)d Django task; it is ready to run again: %(ids)s.",
            "Retried %(count)d Django tasks; they are ready to run again: %(ids)s.",
            len(retried),
        )
        said.append((messages.SUCCESS, text % {"count": len(retried), "ids": listed(retried)}))
    if not_failed:
        text = _("Not retried, as only a failed task can be: %(ids)s.")
        said.append((messages.WARNING, text % {"ids": listed(not_failed)}))
    if held:
        text = _(
            "Not retried, as another run of the same unique task is ready or running: %(ids)s."
        )
        said.append((messages.WARNING, text % {"ids": listed(held)}))
    if unknown:
        text = _("No Django task has the id %(ids)s (an id is the UUID of its result).")
        said.append((messages.WARNING, text % {"ids": listed(unknown)}))
    return said


def listed(items: list[str]) -> str:
    """``items`` for a message: the first few, then how many more."""
    shown = ", ".join(items[:LISTED_IDS])
    rest = len(items) - LISTED_IDS
    if rest <= 0:
        return shown
    return _("%(shown)s and %(count)d more") % {"shown": shown, "count": rest}


RETRY_BUTTON = Button(
    name="retry",
    label=gettext_lazy("Retry"),
    title=gettext_lazy("Run it again: ready at once, with one more attempt if it used them all"),
    shown=lambda row: row.status == FAILED,
    operation=writes.retry_queued,
    said=retry_messages,
)
