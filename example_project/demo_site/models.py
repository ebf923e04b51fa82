"""The example site's data: an application log that grows until cleaned up."""

from __future__ import annotations

from django.db import models


class LogEntry(models.Model):
    """One line of the site's application log. log-cleanup deletes old ones."""

    class Level(models.TextChoices):
        DEBUG = "debug"
        INFO = "info"
        WARNING = "warning"
        ERROR = "error"

    created_at = models.DateTimeField(db_index=True)
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.INFO)
    message = models.CharField(max_length=200)

    class Meta:
        verbose_name_plural = "log entries"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.level}: {self.message}"
