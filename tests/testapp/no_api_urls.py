"""A URLconf without django_bgtasks.urls (tests/http/test_monitoring.py: no bgtasks.I001)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
