"""The admin's dashboard (``admin:django_bgtasks_dashboard``, linked from
the app's index and from the Django tasks list): the last hour or day of the
Django Tasks, for the cluster, a queue or a task path, in charts drawn on the
server (admin/charts.py): tasks ended per minute by outcome, the failure
ratio, the lag and the run time's p50 and p95; beside them what is true now
(ready and running by queue, the paused queues, the live workers) and the
queues' and the busiest task paths' totals, each a link to its own charts.

What it shows is :func:`django_bgtasks.operations.dashboard.dashboard`'s,
read from the database (the rollup the workers keep), so every replica shows
the same, at any size of the queue's table. ``static/django_bgtasks/dashboard.js``
reads the page again every ``REFRESH_SECONDS`` and puts the new numbers in
place. Users who may view the tasks may view it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.formats import time_format
from django.utils.translation import gettext as _

from django_bgtasks.admin.charts import Chart, Series, bars, lines
from django_bgtasks.admin.formats import id_html
from django_bgtasks.admin.read_from import listing
from django_bgtasks.conf import lease_backends
from django_bgtasks.limits import COUNT_CAP
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import display
from django_bgtasks.operations.dashboard import WINDOWS, Dashboard, dashboard
from django_bgtasks.operations.permissions import user_may

if TYPE_CHECKING:
    DashboardModelAdmin = admin.ModelAdmin[QueuedTask]
else:  # ModelAdmin is generic only in django-stubs
    DashboardModelAdmin = admin.ModelAdmin

# How often the page reads itself again (dashboard.js): the rollup moves a
# minute at a time, the counts of now at every read.
REFRESH_SECONDS = 10.0
# The rollup is this far behind the clock when no worker has rolled it up
# for a while (a minute, its settling time, and a worker's interval): said
# on the page, which otherwise shows an hour that ended long ago.
STALE_AFTER_SECONDS = 180


class QueuedDashboard(DashboardModelAdmin):
    """The dashboard's view, on the Django tasks' admin (see the module docstring)."""

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not lease_backends():  # no Django tasks here (as the list: .queued)
            raise Http404(_("No LeaseBackend in TASKS: there are no Django tasks here."))
        if not user_may(request, "view"):
            raise PermissionDenied
        window = request.GET.get("window", "hour")
        queue, task = request.GET.get("queue", ""), request.GET.get("task", "")
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Django tasks dashboard"),
            "windows": list(WINDOWS),
            "window": window,
            "queue": queue,
            "task": task,
            "refresh": REFRESH_SECONDS,
        }
        # Read from the read database (admin/read_from.py), but for the
        # rollups, which the dashboard's catch-up writes on the primary.
        with listing(request):
            try:
                board = dashboard(window, queue, task)
            except ValueError as exc:
                context["error"] = str(exc)
                return TemplateResponse(
                    request, "django_bgtasks/admin/dashboard.html", context, status=400
                )
        context.update(
            board=board,
            charts=charts(board),
            stale=_stale(board),
            queues_now=_queues_now(board),
            queue_rows=[(total.name, total) for total in board.queues],
            task_rows=[(id_html(total.name), total) for total in board.tasks],
            worker_rows=[(id_html(worker.id), worker) for worker in board.workers],
        )
        return TemplateResponse(request, "django_bgtasks/admin/dashboard.html", context)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # login, staff, CSRF, never_cache
        name = f"{self.opts.app_label}_dashboard"
        return [path("dashboard/", wrap(self.dashboard_view), name=name), *super().get_urls()]


def charts(board: Dashboard) -> list[Chart]:
    """The dashboard's four charts (three for a task path: the lag is a queue's)."""
    when = [time_format(timezone.localtime(point.start)) for point in board.points]
    per_minute = board.window.step // 60
    made = [
        bars(
            "ended",
            _("Tasks ended per minute")
            if per_minute == 1
            else _("Tasks ended per minute, a point every %(n)s min") % {"n": per_minute},
            when,
            [
                Series(
                    _("succeeded"), "succeeded", [p.succeeded_per_minute for p in board.points]
                ),
                Series(_("failed"), "failed", [p.failed_per_minute for p in board.points]),
            ],
            _rate,
        ),
        lines(
            "failure-ratio",
            _("Failure ratio"),
            when,
            [Series(_("failed"), "failed", [p.failure_ratio for p in board.points])],
            _percent,
        ),
    ]
    if not board.task:
        made.append(
            lines(
                "lag",
                _("Lag (the oldest due ready task's wait)"),
                when,
                [Series(_("lag"), "lag", [p.lag for p in board.points])],
                display.seconds,
            )
        )
    made.append(
        lines(
            "run-time",
            _("Run time"),
            when,
            [
                Series("p50", "p50", [p.p50 for p in board.points]),
                Series("p95", "p95", [p.p95 for p in board.points]),
            ],
            _run_time,
        )
    )
    return made


def _capped(count: int) -> str:
    """A ready count, which stops at ``COUNT_CAP`` (as the metrics' does)."""
    return f"{count:,}+" if count >= COUNT_CAP else f"{count:,}"


def _run_time(value: float) -> str:
    """``12 ms`` under a second, else as :func:`display.seconds` writes it."""
    return _("%(n)s ms") % {"n": f"{value * 1000:.3g}"} if value < 1 else display.seconds(value)


def _rate(value: float) -> str:
    return _("%(n)s/min") % {"n": f"{value:.3g}"}


def _percent(value: float) -> str:
    return f"{value:.0%}"


def _stale(board: Dashboard) -> bool:
    """The rollup has not moved for ``STALE_AFTER_SECONDS``: no worker of the queue runs."""
    if board.end is None:
        return True
    return (board.clock - board.end).total_seconds() > STALE_AFTER_SECONDS


def _queues_now(board: Dashboard) -> list[dict[str, Any]]:
    """Each queue's ready and running tasks, lag and pause, now."""
    counts = board.now
    return [
        {
            "name": queue,
            "ready": _capped(counts.queue_tasks.get((queue, "READY"), 0)),
            "running": counts.queue_tasks.get((queue, "RUNNING"), 0),
            "lag": display.seconds(lag) if lag else "",
            "paused": counts.queue_paused.get(queue, False),
        }
        for queue, lag in counts.queue_lag.items()
    ]
