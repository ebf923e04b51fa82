"""Settings of a site whose lease table is on its own database, for
tests/topology/test_lease_database.py: ``BGTASKS_DATABASE = "leases"``, the
data (users, sessions, the test app) on ``default``, and a router whose
``allow_migrate`` keeps each app on its database only.

The router has no ``db_for_read``/``db_for_write``: the app itself must send
every lease read and write to ``BGTASKS_DATABASE`` (a read that went to
``default`` would find no table there and fail). Both databases come from
the environment (``BGTASKS_LEASEDB``: a JSON object of the two DATABASES
entries), so that the test can put them on SQLite or PostgreSQL.
"""

from __future__ import annotations

import json
import os
from typing import Any

SECRET_KEY = "django-bgtasks-tests"  # noqa: S105  (tests only)
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_bgtasks",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES: dict[str, dict[str, Any]] = json.loads(os.environ.get("BGTASKS_LEASEDB", "{}"))
BGTASKS_DATABASE = "leases"
DATABASE_ROUTERS = ["tests.topology.leasedb_settings.LeaseRouter"]

LEASE_APPS = {"django_bgtasks"}


class LeaseRouter:
    """django_bgtasks on "leases" only; every other app on "default" only."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (db == "leases") == (app_label in LEASE_APPS)
