"""The app's configuration (django_bgtasks.apps): ``django_bgtasks`` in
``INSTALLED_APPS`` is ``BgTasksConfig``, whose ``ready()`` registers the
app's system checks and imports every app's ``tasks`` module, so that a
process set up by Django alone (a replica, a worker) knows every
``@background_task``. Run in a fresh interpreter: in this one, the test
modules import the checks themselves."""

from __future__ import annotations

import json

from django.apps import apps
from django.core.checks.registry import registry
from django.db import models

from django_bgtasks.apps import BgTasksConfig
from django_bgtasks.models import TaskRun
from tests.procs import run_python


def test_the_installed_app_is_bgtasksconfig() -> None:
    config = apps.get_app_config("django_bgtasks")
    assert type(config) is BgTasksConfig
    assert str(config.verbose_name) == "Background tasks"
    # Its default_auto_field: the models without a primary key of their own.
    assert isinstance(TaskRun._meta.pk, models.BigAutoField)


SET_UP = """
import json, sys
import django
django.setup()
from django.core.checks.registry import registry
from django_bgtasks import registered_tasks
print(json.dumps({
    "checks": sorted(
        f"{check.__module__}.{check.__name__}"
        for check in registry.registered_checks
        if check.__module__.startswith("django_bgtasks.")
    ),
    "tasks_module": "tests.testapp.tasks" in sys.modules,
    "tasks": sorted(registered_tasks()),
}))
"""


def test_setting_up_django_registers_the_checks_and_every_app_s_tasks() -> None:
    done = run_python(SET_UP, settings="tests.settings", timeout=60)
    found = json.loads(done.stdout.splitlines()[-1])
    # Every check of the app, as this process (which imported them all) has them.
    ours = sorted(
        f"{check.__module__}.{check.__name__}"
        for check in registry.registered_checks
        if check.__module__.startswith("django_bgtasks.")
    )
    assert "django_bgtasks.checks.metrics_view.check_metrics_extra" in ours
    assert found["checks"] == ours
    assert found["tasks_module"] is True
    assert {"surface-quick", "surface-slow", "surface-fails", "surface-sum"} <= set(found["tasks"])
