"""The URLs benchmarks/scale.py times its surfaces through: the admin and the
JSON API (with its metrics and readiness views), as a site mounts them."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("bgtasks/", include("django_bgtasks.urls")),
]
