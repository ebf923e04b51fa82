"""The Django Tasks benchmarks/fairness.py enqueues (a module of its own, so
that every worker process imports them by the same path): three tasks alike
but for their fair share, one without a key, one keyed by tenant, and one
keyed by tenant with tenant 1 weighing 3. Each sleeps ``seconds`` (5 ms in
the issue's run, none in the drains)."""

from __future__ import annotations

import time

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


def _sleep(seconds: float) -> None:
    if seconds:
        time.sleep(seconds)


@task
def plain(tenant: int, seconds: float = 0.0) -> int:
    _sleep(seconds)
    return tenant


@task(fairness_key="tenant:{tenant}")
def keyed(tenant: int, seconds: float = 0.0) -> int:
    _sleep(seconds)
    return tenant


@task(fairness_key="tenant:{tenant}", fairness_weight={"tenant:1": 3})
def weighted(tenant: int, seconds: float = 0.0) -> int:
    _sleep(seconds)
    return tenant
