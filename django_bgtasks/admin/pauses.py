"""The admin's pause and unpause: actions on the background tasks' list (the
selected tasks) and on the Django tasks' list (the queues of the selected
tasks), through :mod:`django_bgtasks.operations.pause`, behind the change
permission as every operator action of the admin."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_bgtasks.admin.queued_list import selected_queues
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations import pause as pausing
from django_bgtasks.operations.writes import NotRegistered


class TaskPauseActions:
    """``pause_tasks`` and ``unpause_tasks``, for ``BackgroundTaskAdmin``
    (which gives ``_selected_names``, ``_done`` and ``message_user``)."""

    _selected_names: Any
    _done: Any
    message_user: Any

    @admin.action(description=gettext_lazy("Pause"), permissions=["change"])
    def pause_tasks(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for name in self._selected_names(request, queryset):
            result = pausing.pause(name)
            if isinstance(result, NotRegistered):
                text = _("“%(name)s” is run by no process, so it was not paused.")
                self.message_user(request, text % {"name": name}, messages.ERROR)
            elif isinstance(result, pausing.TaskPaused) and result.changed:
                text = _("Paused “%(name)s”: workers start nothing of it until its unpause.")
                self._done(request, name, text % {"name": name}, "Paused.")
            else:
                text = _("“%(name)s” was already paused.")
                self.message_user(request, text % {"name": name}, messages.INFO)

    # Alike pause_tasks on purpose: each action words its own answers.
    @admin.action(description=gettext_lazy("Unpause"), permissions=["change"])
    def unpause_tasks(self, request: HttpRequest, queryset: QuerySet[BackgroundTask]) -> None:
        for name in self._selected_names(request, queryset):
            result = pausing.unpause(name)
            if isinstance(result, pausing.TaskUnpaused) and result.changed:
                text = _("Unpaused “%(name)s”.")
                self._done(request, name, text % {"name": name}, "Unpaused.")
            else:
                text = _("“%(name)s” was not paused.")
                self.message_user(request, text % {"name": name}, messages.INFO)


class QueuePauseActions:
    """``pause_queues`` and ``unpause_queues``, for ``QueuedTaskAdmin``: the
    queues of the selected tasks, each once."""

    message_user: Any

    @admin.action(description=gettext_lazy("Pause their queues"), permissions=["change"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[QueuedTask]) -> None:
        for queue in selected_queues(request, queryset):
            result = pausing.pause(queue=queue)
            if isinstance(result, pausing.UnknownQueue):
                text = _("No LeaseBackend has the queue “%(queue)s” any more; not paused.")
                self.message_user(request, text % {"queue": queue}, messages.ERROR)
            elif isinstance(result, pausing.QueuePaused) and result.changed:
                text = _(
                    "Paused the queue “%(queue)s”: no worker claims its tasks until its "
                    "unpause; running ones finish."
                )
                self.message_user(request, text % {"queue": queue}, messages.SUCCESS)
            else:
                text = _("The queue “%(queue)s” was already paused.")
                self.message_user(request, text % {"queue": queue}, messages.INFO)

    # Alike pause_queues on purpose: each action words its own answers.
    @admin.action(description=gettext_lazy("Unpause their queues"), permissions=["change"])
    def unpause_queues(self, request: HttpRequest, queryset: QuerySet[QueuedTask]) -> None:
        for queue in selected_queues(request, queryset):
            result = pausing.unpause(queue=queue)
            if isinstance(result, pausing.QueueUnpaused) and result.changed:
                text = _("Unpaused the queue “%(queue)s”.")
                self.message_user(request, text % {"queue": queue}, messages.SUCCESS)
            else:
                text = _("The queue “%(queue)s” was not paused.")
                self.message_user(request, text % {"queue": queue}, messages.INFO)
