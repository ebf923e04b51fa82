from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from demo_site import views

urlpatterns = [
    path("", views.tasks_page, name="tasks"),
    path("admin/", admin.site.urls),
    # The JSON API that the task page polls.
    path("bgtasks/", include("django_bgtasks.urls")),
]
