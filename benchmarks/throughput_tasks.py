"""The no-op Django Task that benchmarks/tasks_throughput.py enqueues, on
each backend it compares (a module of its own, so that every worker process
imports it by the same path)."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


@task(backend="bgtasks")
def noop_bgtasks() -> None:
    """Does nothing, on django_bgtasks.backend.LeaseBackend."""


@task(backend="db")
def noop_db() -> None:
    """Does nothing, on django-tasks-db's DatabaseBackend."""
