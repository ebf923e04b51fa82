"""The site that benchmarks/status_api.py serves with gunicorn: settings,
URLs and the WSGI application in one module.

A production-like stack: the usual middleware (sessions, CSRF, auth),
database sessions, persistent connections (CONN_MAX_AGE; a pool instead with
``BENCH_POOL``), DEBUG off. Besides
the JSON API at /bgtasks/ it has two reference views:

* /bench/empty/: ``JsonResponse({})``, the cheapest Django JSON view;
* /bench/staff-empty/: the same behind the API's own permission check, so
  that the cost of authentication (session and user queries) can be told
  apart from the cost of reading the task.

The database comes from ``BENCH_DATABASE_URL``. ``application`` is the WSGI
application; ``asgi`` the ASGI one (benchmarks/watchers.py, with uvicorn).
"""

from __future__ import annotations

import os
from typing import Any

import dj_database_url

SECRET_KEY = "django-bgtasks-benchmark"  # noqa: S105  (benchmark only)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "benchmarks.status_api_site"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django_bgtasks",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("BENCH_DATABASE_URL", "sqlite:///bench.sqlite3"), conn_max_age=600
    )
}
if os.environ.get("BENCH_POOL") and "postgresql" in DATABASES["default"]["ENGINE"]:
    # benchmarks/watchers.py, under ASGI: where each request's sync code has a
    # thread of its own, persistent connections would be one per thread;
    # Django advises a pool there instead (it needs CONN_MAX_AGE 0).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 4, "max_size": 40}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATABASES["default"]["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 30}
LOGGING_CONFIG = None  # no request logging in the measured path
# benchmarks/watchers.py: a task that reports 10 times a second is streamed at that pace.
BGTASKS_PROGRESS_INTERVAL = float(os.environ.get("BENCH_PROGRESS_INTERVAL", "0.5"))


def _urlpatterns() -> list[Any]:
    from django.http import HttpRequest, JsonResponse
    from django.urls import include, path

    from django_bgtasks.http.responses import error
    from django_bgtasks.operations.permissions import user_may

    def empty(request: HttpRequest) -> JsonResponse:
        return JsonResponse({})

    def staff_empty(request: HttpRequest) -> JsonResponse:
        if not user_may(request, "view"):
            return error(403, "forbidden")
        return JsonResponse({})

    return [
        path("bench/empty/", empty),
        path("bench/staff-empty/", staff_empty),
        path("bgtasks/", include("django_bgtasks.urls")),
    ]


def __getattr__(name: str) -> Any:
    # This module is the settings module too, which is imported before the
    # apps are ready; the URLs (which import views and models) and the WSGI
    # application are built on first use instead.
    if name == "urlpatterns":
        return _urlpatterns()
    if name == "application":
        from django.core.wsgi import get_wsgi_application

        return get_wsgi_application()
    if name == "asgi":  # benchmarks/watchers.py serves it with uvicorn
        from django.core.asgi import get_asgi_application

        application = get_asgi_application()
        if os.environ.get("BENCH_GC_THRESHOLD"):  # benchmarks/watchers.py --server-gc-threshold
            import gc

            gc.set_threshold(*map(int, os.environ["BENCH_GC_THRESHOLD"].split(",")))
        return application
    raise AttributeError(name)
