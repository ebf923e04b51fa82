from __future__ import annotations

from importlib.util import find_spec

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

from demo_site import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.tasks_page, name="tasks"),
    path("admin/", admin.site.urls),
]

# The JSON API that the task page polls.
if find_spec("django_bgtasks.urls") is not None:
    urlpatterns.append(path("bgtasks/", include("django_bgtasks.urls")))
