"""The JSON status API: ``path("bgtasks/", include("django_bgtasks.urls"))``.

Names are reversed as ``bgtasks:list``, ``bgtasks:task``, ``bgtasks:run``,
``bgtasks:cancel``, ``bgtasks:pause`` and ``bgtasks:unpause``; Django Tasks'
as ``bgtasks:django-tasks``, ``bgtasks:django-task``,
``bgtasks:django-task-cancel``, ``bgtasks:django-task-retry``,
``bgtasks:django-tasks-pause`` and ``bgtasks:django-tasks-unpause``, and the
bulk actions by filter as ``bgtasks:django-tasks-retry``,
``bgtasks:django-tasks-cancel`` and ``bgtasks:django-tasks-delete``;
Prometheus' metrics and the readiness probe as ``bgtasks:metrics`` and
``bgtasks:ready``. A task name is
always one path segment (names may not contain ``/``, nor be ``.`` or ``..``).
"""

from __future__ import annotations

from django.urls import path

from django_bgtasks.http import api as views
from django_bgtasks.http import bulk, events, monitoring

app_name = "bgtasks"

urlpatterns = [
    path("", views.task_list, name="list"),
    # The event streams (ASGI) and signed watch URLs; before "<name>/", so
    # tasks named "events" or "watch" are not reachable by GET here.
    path("events/", events.events, name="events"),
    path("watch/<str:signed>/", events.watch, name="watch"),
    path("watch/<str:signed>/events/", events.watch_events, name="watch-events"),
    # Prometheus' metrics and the orchestrators' readiness probe; before
    # "<name>/", so tasks named "metrics" or "ready" are not reachable by GET here.
    path("metrics/", monitoring.metrics, name="metrics"),
    path("ready/", monitoring.ready, name="ready"),
    # The workers; before "<name>/", so a task named "workers" is not reachable by GET here.
    path("workers/", views.worker_list, name="workers"),
    # Django Tasks (LeaseBackend), by result id; before "<name>/", so a
    # background task named "django-tasks" is not reachable by GET here, and
    # its cancel is the bulk cancel by filter (its run is still its own).
    # (Alike lines on purpose: a route a line, as Django's URLconfs write them.)
    path("django-tasks/", views.queued_list, name="django-tasks"),
    path("django-tasks/queues/", views.queue_list, name="django-tasks-queues"),
    path("django-tasks/retry/", bulk.retry_matching, name="django-tasks-retry"),
    path("django-tasks/cancel/", bulk.cancel_matching, name="django-tasks-cancel"),
    path("django-tasks/delete/", bulk.delete_matching, name="django-tasks-delete"),
    path("django-tasks/queues/pause/", views.queue_pause, name="django-tasks-pause"),
    path("django-tasks/queues/unpause/", views.queue_unpause, name="django-tasks-unpause"),
    path("django-tasks/<uuid:result_id>/", views.queued_detail, name="django-task"),
    path("django-tasks/<uuid:result_id>/cancel/", views.queued_cancel, name="django-task-cancel"),
    path("django-tasks/<uuid:result_id>/retry/", views.queued_retry, name="django-task-retry"),
    path("<str:name>/", views.task_detail, name="task"),
    path("<str:name>/events/", events.task_events, name="task-events"),
    path("<str:name>/run/", views.task_run, name="run"),
    path("<str:name>/cancel/", views.task_cancel, name="cancel"),
    path("<str:name>/pause/", views.task_pause, name="pause"),
    path("<str:name>/unpause/", views.task_unpause, name="unpause"),
    # Last: a Django Task id that is no UUID, which no route above took, gets
    # the views' JSON 404 (not Django's HTML one). After "<name>/run/", which
    # a background task named "django-tasks" keeps.
    path("django-tasks/<str:result_id>/", views.queued_detail),
    path("django-tasks/<str:result_id>/cancel/", views.queued_cancel),
    path("django-tasks/<str:result_id>/retry/", views.queued_retry),
    # Last of all: any other path ending in "/" is the API's JSON 404. Only
    # those: a path without its slash still reaches CommonMiddleware's
    # APPEND_SLASH redirect when the slashed one is a route above.
    path("<path:rest>/", views.no_endpoint),
]
