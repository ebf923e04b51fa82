"""The lease table and its history.

``BackgroundTask`` holds one row per task name: the lease (running, owner,
token, ttl, heartbeat) and the task's shared state (value, outcome). Every
replica reads and writes this row and nothing else, so they all agree.
``TaskRun`` keeps one row per finished run. Rows are written only by the lease
operations in :mod:`django_bgtasks.leases`, never by ``save()``.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .choices import Outcome
from .leases import LeaseManager, RunQuerySet
from .states import run_duration

__all__ = ["BackgroundTask", "Outcome", "TaskRun"]


class BackgroundTask(models.Model):
    """One task name: its lease and its shared state. Written only through
    ``BackgroundTask.objects`` (:class:`~django_bgtasks.leases.LeaseManager`)."""

    name = models.CharField(_("name"), max_length=200, primary_key=True)
    value = models.JSONField(_("value"), null=True, blank=True)
    running = models.BooleanField(_("running"), default=False)
    owner = models.CharField(_("owner"), max_length=200, blank=True, default="")
    token = models.BigIntegerField(
        _("token"),
        default=0,
        help_text=_("Fencing token: strictly increases on every claim of this name."),
    )
    ttl = models.FloatField(_("ttl (s)"))
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    updated_at = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    outcome = models.CharField(
        _("outcome"), max_length=32, choices=Outcome.choices, blank=True, default=""
    )
    error = models.TextField(_("error"), blank=True, default="")

    objects = LeaseManager()

    class Meta:
        verbose_name = _("background task")
        verbose_name_plural = _("background tasks")
        ordering = ["name"]
        # Only the primary key is indexed, and no lease operation changes it:
        # a heartbeat rewrites ``updated_at`` alone, so PostgreSQL can do it as
        # a HOT update (no index write). The fillfactor that leaves room for
        # that is set in migration 0001.

    def __str__(self) -> str:
        return self.name


class TaskRun(models.Model):
    """One finished run of a task (history), written in the statement that ended it."""

    name = models.CharField(_("task"), max_length=200)
    token = models.BigIntegerField(_("token"))
    owner = models.CharField(_("owner"), max_length=200)
    started_at = models.DateTimeField(_("started"), null=True)
    finished_at = models.DateTimeField(_("finished"), null=True)
    outcome = models.CharField(_("outcome"), max_length=32, choices=Outcome.choices)
    error = models.TextField(_("error"), blank=True, default="")
    value = models.JSONField(_("final value"), null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        verbose_name = _("task run")
        verbose_name_plural = _("task runs")
        ordering = ["name", "-token"]
        constraints = [
            # A run is recorded once: the writes use ON CONFLICT DO NOTHING /
            # INSERT OR IGNORE on this key, and it serves "newest runs of a task".
            models.UniqueConstraint(fields=["name", "token"], name="bgtasks_run_name_token"),
        ]
        # No index on finished_at: every release would pay for it, and the one
        # query that filters on it (prune, daily at most) can afford a scan.

    def __str__(self) -> str:
        return f"{self.name} #{self.token}"

    @property
    def duration(self) -> float | None:
        """Seconds the run took, or ``None`` if either end is unknown."""
        return run_duration(self.started_at, self.finished_at)
