"""Settings for the example site: a small site that runs as several replicas.

The database is chosen in :mod:`demo_site.database`: SQLite with
``BGTASKS_DEMO_DB=sqlite``, else ``DATABASE_URL``, else an embedded PostgreSQL.
Everything the site writes to disk (the SQLite file, the embedded server's
data, the folder tree that storage-scan walks) lives in ``.data/`` beside
manage.py, or in ``BGTASKS_DEMO_DATA``.

For a local demo only: DEBUG is on and the secret key is public.
"""

from __future__ import annotations

import os
from pathlib import Path

from demo_site import database

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("BGTASKS_DEMO_DATA") or BASE_DIR / ".data").resolve()

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-bgtasks-demo-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_bgtasks",
    "demo_site",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "demo_site.urls"
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
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "admin:login"

DATABASES = database.databases(DATA_DIR)

# A lease expires 3 s after its holder's last heartbeat (renewed every 1 s), so
# that a takeover is quick to watch. Production sites keep the default (120 s).
BGTASKS_TTL = float(os.environ.get("BGTASKS_DEMO_TTL", "3"))

# Where storage-scan walks (demo_site/storage.py makes the tree on first use).
DEMO_STORAGE_ROOT = DATA_DIR / "storage"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # A time on every line (docs/operations.md, "Logging"): demo.py reads past it.
    "formatters": {"timed": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "timed"}},
    "loggers": {
        # The runner says when a lease is lost; the demo wants to show that.
        "django_bgtasks": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # And `bgtasks worker` says what it claims and when it stops.
        "django_bgtasks.worker": {"level": "INFO"},
        # Django's own lines about Django Tasks, through the same formatter.
        "django.tasks": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "django_tasks": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
