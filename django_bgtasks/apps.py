"""The app configuration: registers the system checks and every app's tasks."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BgTasksConfig(AppConfig):
    """``django_bgtasks`` in ``INSTALLED_APPS``."""

    name = "django_bgtasks"
    verbose_name = _("Background tasks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks and import every app's ``tasks`` module."""
        from django.utils.module_loading import autodiscover_modules

        # Importing a check module registers its checks.
        from django_bgtasks.checks import database, metrics_view, settings, tasks  # noqa: F401

        # Register every app's @background_task functions, so that the admin,
        # the API and the command can start them by name on any replica.
        autodiscover_modules("tasks")
