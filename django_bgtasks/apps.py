from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BgTasksConfig(AppConfig):
    name = "django_bgtasks"
    verbose_name = _("Background tasks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
