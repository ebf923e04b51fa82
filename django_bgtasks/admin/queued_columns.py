"""The columns of the Django tasks' list and the fields of a task's page
(:class:`~django_bgtasks.admin.queued.QueuedTaskAdmin`).

The list shows ten values in five columns, a value a line, so that it fits
a laptop's screen with the admin's sidebar open: the id (a UUID, whole), the
task's dotted path with its queue and priority, the status with the attempts
and the progress, the worker running it, and when it was enqueued with how
long it ran. Ids wrap only between their parts and times are Django's
(:mod:`django_bgtasks.admin.formats`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_bgtasks.admin.formats import id_html, time_html
from django_bgtasks.core.states import run_duration
from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations import display, queued
from django_bgtasks.operations.queues import paused_queues
from django_bgtasks.queue.manager import FAILED, READY, RUNNING

if TYPE_CHECKING:
    QueuedModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    QueuedModelAdmin = admin.ModelAdmin


class QueuedColumns(QueuedModelAdmin):
    """What each column of the list and each field of a task's page shows."""

    # --- the list's columns ---------------------------------------------------------

    @admin.display(description=gettext_lazy("id"), ordering="uuid")
    def id_cell(self, row: QueuedTask) -> str:
        return str(row.uuid)  # on one line (admin.css: .field-id_cell)

    @admin.display(description=gettext_lazy("task, queue, priority"), ordering="task_path")
    def task_cell(self, row: QueuedTask) -> str:
        return format_html(
            '{}<div class="bgtasks-quiet">{} {}, {} {}</div>',
            id_html(row.task_path),
            _("queue"),
            row.queue_name,
            _("priority"),
            row.priority,
        )

    @admin.display(description=gettext_lazy("status, attempts, progress"), ordering="status")
    def state_cell(self, row: QueuedTask) -> str:
        # A paused queue is said above the list (QueuedTaskAdmin), once. A
        # failed task, or a ready one that failed before and will run again,
        # says why in a line (in red), so that "why did these fail?" is one
        # look at the list, not a click a task.
        progress = self.progress_label(row)
        error = queued.last_error_line(row) if row.status in (FAILED, READY) else None
        # (An error's words wrap between their parts, as ids do.)
        why = format_html('<div class="bgtasks-error-line">{}</div>', id_html(error or ""))
        return format_html(
            '<span class="bgtasks-queued-{}">{}</span><div class="bgtasks-quiet">{} {}</div>{}{}',
            row.status.lower(),
            queued.status_label(row, paused=()),
            _("attempt"),
            self.attempts_label(row),
            format_html("<div>{}</div>", progress) if progress else "",
            why if error else "",
        )

    @admin.display(description=gettext_lazy("enqueued, duration"), ordering="enqueued_at")
    def enqueued_cell(self, row: QueuedTask) -> str:
        duration = self.duration(row)
        return format_html(
            "{}{}",
            time_html(row.enqueued_at),
            format_html('<div class="bgtasks-nowrap">{}</div>', duration) if duration else "",
        )

    # --- the values, each on the task's page ------------------------------------------

    @admin.display(description=gettext_lazy("status"), ordering="status")
    def status_label(self, row: QueuedTask) -> str:
        """The task's page's: with its queue's pause (one read)."""
        return queued.status_label(row, paused=paused_queues())

    @admin.display(description=gettext_lazy("attempts"))
    def attempts_label(self, row: QueuedTask) -> str:
        return f"{row.attempts} / {row.max_attempts}"

    @admin.display(description=gettext_lazy("progress"))
    def progress_label(self, row: QueuedTask) -> str:
        progress = row.progress
        if isinstance(progress, dict) and "done" in progress:
            total = progress.get("total")
            return f"{progress['done']} / {total}" if total is not None else str(progress["done"])
        return "" if progress is None else str(progress)[:60]

    @admin.display(description=gettext_lazy("worker"))
    def worker(self, row: QueuedTask) -> str:
        return id_html(row.owner) if row.status == RUNNING else ""

    @admin.display(description=gettext_lazy("last heartbeat"))
    def heartbeat_label(self, row: QueuedTask) -> str:
        """A running task's page's: how long ago its worker last beat, by the
        database's clock, against its ttl (a silent worker is said as such)."""
        if row.status != RUNNING or row.updated_at is None:
            return ""
        age = (BackgroundTask.objects.work.clock() - row.updated_at).total_seconds()
        said = _("%(age)s ago (ttl %(ttl)s)") % {
            "age": display.seconds(age),
            "ttl": display.seconds(row.ttl),
        }
        if age > row.ttl:
            said += " " + _("silent past its ttl: the next recovery takes the task back")
        return said

    @admin.display(description=gettext_lazy("workers"))
    def workers_list(self, row: QueuedTask) -> str:
        """Every worker that ran it, one a line."""
        ids = ((id_html(worker),) for worker in row.worker_ids)
        return format_html_join("", "<div>{}</div>", ids)

    # A task's times, alike on purpose: each as the list writes it (to the
    # second: admin/formats.py), where the page's own display of a
    # DateTimeField stops at the minute.
    @admin.display(description=gettext_lazy("enqueued"))
    def enqueued_time(self, row: QueuedTask) -> str:
        return time_html(row.enqueued_at) or self.get_empty_value_display()

    @admin.display(description=gettext_lazy("run after"))
    def run_after_time(self, row: QueuedTask) -> str:
        return time_html(row.run_after) or self.get_empty_value_display()

    @admin.display(description=gettext_lazy("started"))
    def started_time(self, row: QueuedTask) -> str:
        return time_html(row.started_at) or self.get_empty_value_display()

    @admin.display(description=gettext_lazy("finished"))
    def finished_time(self, row: QueuedTask) -> str:
        return time_html(row.finished_at) or self.get_empty_value_display()

    @admin.display(description=gettext_lazy("duration"))
    def duration(self, row: QueuedTask) -> str:
        return display.seconds(run_duration(row.started_at, row.finished_at))

    @admin.display(description=gettext_lazy("errors"))
    def errors_list(self, row: QueuedTask) -> str:
        return format_html_join(
            "",
            '<p><strong>{}</strong></p><pre class="bgtasks-error">{}</pre>',
            (
                (error.get("exception_class_path", ""), error.get("traceback", ""))
                for error in row.errors or []
            ),
        ) or format_html("{}", "")
