"""The example site's settings, with Django Tasks on LeaseBackend
(docs/django-tasks.md): ``default`` runs each task once, ``retrying`` up to
three times."""

from demo_site.settings import *  # noqa: F403
from demo_site.settings import INSTALLED_APPS

try:
    import django.tasks  # noqa: F401  (Django 6)
except ImportError:  # Django 5.2: the django-tasks backport
    INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks"]

TASKS = {
    "default": {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": ["default", "emails"]},
    "retrying": {
        "BACKEND": "django_bgtasks.backend.LeaseBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    },
}
