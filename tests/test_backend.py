"""The public path ``TASKS`` names (backend.py, ``django_bgtasks.backend``):
the queue's backend and ``task_lease`` under their public names, the
backend a site's ``TASKS`` gets by that path, and a path that Django's
Tasks framework can import where the app is not installed (it imports
every configured backend whatever ``INSTALLED_APPS`` says). The backend
itself: tests/queue/test_backend.py."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from django_bgtasks import backend, compat
from django_bgtasks.queue import backend as queue_backend
from django_bgtasks.queue import execute
from tests.procs import run_python


def test_the_public_names_are_the_queues() -> None:
    assert backend.__all__ == ["LeaseBackend", "LeaseTask", "task_lease"]
    assert backend.LeaseBackend is queue_backend.LeaseBackend
    assert backend.LeaseTask is queue_backend.LeaseTask
    assert backend.task_lease is execute.task_lease
    assert import_string("django_bgtasks.backend.LeaseBackend") is queue_backend.LeaseBackend


def test_tasks_naming_the_path_gets_a_lease_backend_for_each_alias() -> None:
    named = [
        alias
        for alias, options in settings.TASKS.items()
        if options["BACKEND"] == "django_bgtasks.backend.LeaseBackend"
    ]
    assert named == ["default", "retrying", "short", "backoff"]  # tests/settings.py
    for alias in named:
        configured = compat.task_backends[alias]
        assert type(configured) is backend.LeaseBackend and configured.alias == alias


# A project with the backend in TASKS and without the app: the path imports,
# the backend is made, and no model was imported (which would raise there).
WITHOUT_THE_APP = """
import sys

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django_tasks"] if django.VERSION < (6,) else [],
    TASKS={"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"}},
)
django.setup()
from django_bgtasks import compat

configured = compat.task_backends["default"]
print(type(configured).__module__, type(configured).__name__)
print(sorted(name for name in sys.modules if name.startswith("django_bgtasks.models")))
"""


def test_the_path_imports_where_the_app_is_not_installed() -> None:
    done = run_python(WITHOUT_THE_APP)
    assert done.stdout.splitlines() == ["django_bgtasks.queue.backend LeaseBackend", "[]"]
