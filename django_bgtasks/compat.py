"""Django's Tasks framework, wherever it lives: ``django.tasks`` (Django 6.x)
or the ``django-tasks`` backport (Django 5.2, the ``tasks`` extra).

Every module of this app that touches the Tasks framework imports it from
here, so the two spellings (module paths, exception names) differ in one
place only. Importing this module without either raises ``ImportError`` with
the fix in its message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        # Alike the import above on purpose: mypy reads that one (django.tasks only),
        # Python this one, with the backport's spellings as the fallback.
        from django.tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            Task,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started

        SOURCE = "django.tasks"
    except ImportError:
        try:
            from django_tasks import (
                DEFAULT_TASK_QUEUE_NAME,
                TaskContext,
                TaskResult,
                TaskResultStatus,
                task_backends,
            )
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
        except ImportError:
            raise ImportError(
                "django_bgtasks.backend needs Django's Tasks framework: Django 6.0 or "
                "newer, or on Django 5.2 the django-tasks backport "
                '(pip install "django-bgtasks[tasks]").'
            ) from None
        SOURCE = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
