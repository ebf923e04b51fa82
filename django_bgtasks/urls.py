"""The JSON status API: ``path("bgtasks/", include("django_bgtasks.urls"))``.

Names are reversed as ``bgtasks:list``, ``bgtasks:task``, ``bgtasks:run`` and
``bgtasks:cancel``. A task name is always one path segment (names may not
contain ``/``, nor be ``.`` or ``..``).
"""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "bgtasks"

urlpatterns = [
    path("", views.task_list, name="list"),
    path("<str:name>/", views.task_detail, name="task"),
    path("<str:name>/run/", views.task_run, name="run"),
    path("<str:name>/cancel/", views.task_cancel, name="cancel"),
]
