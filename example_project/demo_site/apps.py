from __future__ import annotations

from django.apps import AppConfig


class DemoSiteConfig(AppConfig):
    name = "demo_site"
    verbose_name = "Example site"
    default_auto_field = "django.db.models.BigAutoField"
