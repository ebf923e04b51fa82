"""Django's Tasks framework wherever it lives (compat.py): each name from
``django.tasks`` on Django 6, from the ``django-tasks`` backport on Django
5.2 (under its own spellings there), and without either an ``ImportError``
that says what to install."""

from __future__ import annotations

from importlib import import_module
from typing import Any

import django

from django_bgtasks import compat
from tests.procs import run_python

# Where each name of compat.py comes from, by the framework's package.
SPELLINGS = {
    "django.tasks": {
        "Task": "django.tasks.Task",
        "InvalidTask": "django.tasks.exceptions.InvalidTask",
    },
    "django_tasks": {
        "Task": "django_tasks.base.Task",
        "InvalidTask": "django_tasks.exceptions.InvalidTaskError",
    },
}
ALIKE = {
    "DEFAULT_TASK_QUEUE_NAME": "{}.DEFAULT_TASK_QUEUE_NAME",
    "TaskContext": "{}.TaskContext",
    "TaskResult": "{}.TaskResult",
    "TaskResultStatus": "{}.TaskResultStatus",
    "task_backends": "{}.task_backends",
    "BaseTaskBackend": "{}.backends.base.BaseTaskBackend",
    "TaskError": "{}.base.TaskError",
    "TaskResultDoesNotExist": "{}.exceptions.TaskResultDoesNotExist",
    "task_enqueued": "{}.signals.task_enqueued",
    "task_finished": "{}.signals.task_finished",
    "task_started": "{}.signals.task_started",
}


def _named(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(import_module(module), name)


def test_each_name_is_the_installed_frameworks() -> None:
    source = "django.tasks" if django.VERSION >= (6,) else "django_tasks"
    assert source == compat.SOURCE
    paths = {name: path.format(source) for name, path in ALIKE.items()}
    paths.update(SPELLINGS[source])
    assert sorted(compat.__all__) == sorted(paths)
    assert {name: getattr(compat, name) for name in paths} == {
        name: _named(path) for name, path in paths.items()
    }
    assert issubclass(compat.InvalidTask, Exception)


# A Python where neither package can be imported.
WITHOUT_EITHER = """
import sys

class Without:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "django_tasks" or name.startswith("django.tasks"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Without())
try:
    import django_bgtasks.compat
except ImportError as exc:
    print(exc)
"""


def test_without_the_framework_the_import_says_what_to_install() -> None:
    done = run_python(WITHOUT_EITHER)
    assert done.stdout.strip() == (
        "django_bgtasks.backend needs Django's Tasks framework: Django 6.0 or newer, or on "
        'Django 5.2 the django-tasks backport (pip install "django-bgtasks[tasks]").'
    )
