"""System checks: each problem has its id and a hint that names the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.test import override_settings

from django_bgtasks import checks, conf
from django_bgtasks.backend import LeaseBackend
from django_bgtasks.background import registry as task_registry
from django_bgtasks.background.functions import background_task

ROOT = Path(__file__).resolve().parent.parent


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An empty task registry for one test: the tasks other tests (and the test
    project) registered are not checked, and what this test registers goes."""
    empty: dict[str, Any] = {}
    monkeypatch.setattr(task_registry, "_tasks", empty)
    return empty


# On Django 6 (seen with 6.1), `check` runs the model checks against every
# database (JSONField asks each backend whether it supports JSON): it connects.
CHECKS_TOUCH_DATABASES = pytest.mark.django_db(databases="__all__")


@CHECKS_TOUCH_DATABASES
def test_the_test_settings_pass_every_check() -> None:
    call_command("check", fail_level="WARNING")


def test_an_unknown_alias(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "nope"
    [error] = checks.check_database()
    assert error.id == "bgtasks.E003" and "'nope'" in error.msg and "default" in error.hint


def test_an_unsupported_vendor(settings: Any) -> None:
    # Django's dummy backend stands in for any vendor without lease SQL.
    connections.settings["other"] = {
        **connections.settings["default"],
        "ENGINE": "django.db.backends.dummy",
    }
    # Django warns that overriding DATABASES is unusual; this test means it
    # (the check only reads the alias's ENGINE) and restores it on exit.
    with pytest.warns(UserWarning, match="Overriding setting DATABASES"):
        settings.DATABASES = {**settings.DATABASES, "other": connections.settings["other"]}
    settings.BGTASKS_DATABASE = "other"
    try:
        [error] = checks.check_database()
    finally:
        del connections.settings["other"]
    assert error.id == "bgtasks.E001" and "'other' is unknown" in error.msg


def test_sqlite_older_than_3_35(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks.sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(checks.sqlite3, "sqlite_version", "3.34.1")
    [error] = checks.check_database()
    assert error.id == "bgtasks.E004" and "3.34.1" in error.msg


@pytest.mark.parametrize("interval", [60, 61, 0, -1, "10", float("nan"), 10**400])
def test_a_heartbeat_interval_at_or_above_half_the_ttl(
    settings: Any, registry: dict[str, Any], interval: Any
) -> None:
    settings.BGTASKS_TTL = 120
    settings.BGTASKS_HEARTBEAT_INTERVAL = interval
    assert ids(checks.check_timing()) == ["bgtasks.E002"]


def test_a_heartbeat_interval_below_half_the_ttl_is_fine(
    settings: Any, registry: dict[str, Any]
) -> None:
    settings.BGTASKS_TTL = 120
    settings.BGTASKS_HEARTBEAT_INTERVAL = 59.9
    settings.TASKS = {}  # the test project's backends have TTLs of 2 s
    assert checks.check_timing() == []


def test_a_heartbeat_interval_too_long_for_a_tasks_ttl_is_reported(
    settings: Any, registry: dict[str, Any]
) -> None:
    """Registering a task (at import, before any check runs) reads no
    setting: a ttl the interval does not fit is the check's to report."""
    settings.BGTASKS_TTL = 600
    settings.BGTASKS_HEARTBEAT_INTERVAL = 100  # below 300: fine for BGTASKS_TTL
    settings.TASKS = {}  # the test project's backends have TTLs of 2 s

    @background_task(name="t-short", ttl=10)
    def short(running: Any) -> None: ...

    @background_task(name="t-long", ttl=300)
    def long(running: Any) -> None: ...

    [error] = checks.check_timing()
    assert error.id == "bgtasks.E002"
    assert "'t-short'" in error.msg and "ttl of 10 s" in error.msg and "below 5 s" in error.msg
    assert "ttl" in error.hint


def test_a_heartbeat_interval_too_long_for_a_lease_backends_ttl_is_reported(
    settings: Any, registry: dict[str, Any]
) -> None:
    """A worker renews its Django Tasks with the same interval, against the
    TTL their backend's OPTIONS give them: a crash at the first claim, unless
    the check says so."""
    backend = "django_bgtasks.backend.LeaseBackend"
    settings.BGTASKS_TTL = 600
    settings.BGTASKS_HEARTBEAT_INTERVAL = 5  # below 300: fine for BGTASKS_TTL
    settings.TASKS = {
        "default": {"BACKEND": backend},  # BGTASKS_TTL's
        "fast": {"BACKEND": backend, "OPTIONS": {"TTL": 10}},
        "slow": {"BACKEND": backend, "OPTIONS": {"TTL": 10.1}},
        "bad": {"BACKEND": backend, "OPTIONS": {"TTL": "10"}},  # bgtasks.E016's
        "other": {"BACKEND": "tests.settings.NoSuchBackend", "OPTIONS": {"TTL": 1}},
    }
    [error] = checks.check_timing()
    assert error.id == "bgtasks.E002"
    assert "TASKS['fast']" in error.msg and "TTL of 10 s" in error.msg
    assert "below 5 s" in error.msg and 'OPTIONS["TTL"]' in error.hint
    settings.BGTASKS_HEARTBEAT_INTERVAL = 4.9
    assert checks.check_timing() == []


@pytest.mark.parametrize("ttl", [0, -5, 0.05, 0.0999, "120", None, float("inf"), 86401, 10**400])
def test_a_bad_ttl(settings: Any, ttl: Any) -> None:
    settings.BGTASKS_TTL = ttl
    assert ids(checks.check_timing()) == ["bgtasks.E005"]


def test_the_ttl_check_names_the_range(settings: Any) -> None:
    settings.BGTASKS_TTL = 0.05
    [error] = checks.check_timing()
    assert "from 0.1 to 86400" in error.msg and "0.05" in error.msg


@pytest.mark.parametrize("ttl", [0.1, 1, 120, 86400])
def test_a_ttl_in_range_is_fine(settings: Any, ttl: Any) -> None:
    settings.BGTASKS_TTL = ttl
    assert checks.check_timing() == []


@pytest.mark.parametrize("days", [-1, "30", None, 10**400])
def test_bad_history_days(settings: Any, days: Any) -> None:
    settings.BGTASKS_HISTORY_DAYS = days
    assert ids(checks.check_history()) == ["bgtasks.E006"]


@pytest.mark.parametrize("interval", [-0.1, "0.5", None, float("inf"), True])
def test_bad_progress_interval(settings: Any, interval: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = interval
    assert ids(checks.check_progress_interval()) == ["bgtasks.E014"]


@pytest.mark.parametrize("interval", [0, 0.5, 10])
def test_good_progress_interval(settings: Any, interval: Any) -> None:
    settings.BGTASKS_PROGRESS_INTERVAL = interval
    assert checks.check_progress_interval() == []


@pytest.mark.parametrize("interval", [0, -1, "0.5", None, float("nan"), 61, True])
def test_bad_changes_poll_interval(settings: Any, interval: Any) -> None:
    settings.BGTASKS_CHANGES_POLL_INTERVAL = interval
    assert ids(checks.check_push()) == ["bgtasks.E020"]


@pytest.mark.parametrize("keepalive", [0, -15, "15", None, float("inf"), 301])
def test_bad_events_keepalive(settings: Any, keepalive: Any) -> None:
    settings.BGTASKS_EVENTS_KEEPALIVE = keepalive
    assert ids(checks.check_push()) == ["bgtasks.E021"]


def test_push_defaults_and_good_values_are_fine(settings: Any) -> None:
    assert checks.check_push() == []
    settings.BGTASKS_CHANGES_POLL_INTERVAL = 0.05
    settings.BGTASKS_EVENTS_KEEPALIVE = 300
    assert checks.check_push() == []


@pytest.mark.parametrize("limit", ["1MB", 0, -1, 1.5, True, None, float("inf")])
def test_a_max_value_bytes_that_is_not_a_whole_number_of_bytes(settings: Any, limit: Any) -> None:
    settings.BGTASKS_MAX_VALUE_BYTES = limit
    [error] = checks.check_max_value_bytes()
    assert error.id == "bgtasks.E019" and repr(limit) in error.msg
    assert "1 << 20" in error.hint


@pytest.mark.parametrize("limit", [1, 1 << 20, 10**12])
def test_a_max_value_bytes_above_zero_is_fine(settings: Any, limit: int) -> None:
    settings.BGTASKS_MAX_VALUE_BYTES = limit
    assert checks.check_max_value_bytes() == []


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("BGTASKS_EXECUTER", "BGTASKS_EXECUTOR"),
        ("BGTASKS_SCHEDULE", "BGTASKS_SCHEDULES"),
        ("BGTASKS_HEARTBEAT", "BGTASKS_HEARTBEAT_INTERVAL"),
        ("BGTASKS_MAX_VALUE_SIZE", "BGTASKS_MAX_VALUE_BYTES"),
    ],
)
def test_a_misspelled_setting_is_a_warning_with_the_right_spelling(
    settings: Any, typo: str, meant: str
) -> None:
    setattr(settings, typo, "anything")
    [warning] = checks.check_setting_names()
    assert warning.id == "bgtasks.W006" and typo in warning.msg
    assert f"Did you mean {meant}?" in warning.hint


def test_an_unknown_setting_like_no_other_lists_the_settings(settings: Any) -> None:
    settings.BGTASKS_COLOUR = "blue"
    [warning] = checks.check_setting_names()
    assert warning.id == "bgtasks.W006" and "BGTASKS_COLOUR" in warning.msg
    assert "Did you mean" not in warning.hint and "docs/settings.md" in warning.hint


def test_every_setting_the_app_reads_is_known(settings: Any) -> None:
    # The known names are conf.Settings' properties: set each of them.
    for name in [name for name in dir(conf.Settings) if name.isupper()]:
        setattr(settings, f"BGTASKS_{name}", getattr(conf.conf, name))
    assert checks.check_setting_names() == []


def test_use_tz_off_is_a_warning(settings: Any) -> None:
    settings.USE_TZ = False
    assert ids(checks.check_time_zone()) == ["bgtasks.W001"]


@CHECKS_TOUCH_DATABASES
def test_manage_py_check_reports_the_error(settings: Any, registry: dict[str, Any]) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 100

    @background_task(name="t-short", ttl=10)  # as a tasks module would at start-up
    def short(running: Any) -> None: ...

    with pytest.raises(SystemCheckError, match=r"bgtasks\.E002"):
        call_command("check")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("django_bgtasks.authentication.signed_token", "must be a list"),
        (None, "must be a list"),
        (["django_bgtasks.authentication.no_such_hook"], "can't be imported"),
        (["no_such_module.hook"], "can't be imported"),
        (["nodots"], "can't be imported"),
        (["django_bgtasks.authentication.SALT"], "is not a callable"),
        ([42], "is not a dotted path"),
    ],
)
def test_a_bad_api_authentication(settings: Any, value: Any, problem: str) -> None:
    settings.BGTASKS_API_AUTHENTICATION = value
    [error] = checks.check_api_authentication()
    assert error.id == "bgtasks.E009" and problem in error.msg
    assert "signed_token" in error.hint


def test_good_api_authentication(settings: Any) -> None:
    assert checks.check_api_authentication() == []  # the default: none
    settings.BGTASKS_API_AUTHENTICATION = ("django_bgtasks.authentication.signed_token",)
    assert checks.check_api_authentication() == []


# --- MySQL / MariaDB: database checks, read from the server -------------------------


def mysql_checks(alias: str) -> list[str]:
    return ids(checks.check_mysql_server(databases=[alias]))


def test_the_mysql_server_of_the_test_settings_passes(mysql_alias: str) -> None:
    assert mysql_checks(mysql_alias) == []
    # Only on the lease alias, and only as a database check.
    assert checks.check_mysql_server(databases=None) == []
    assert checks.check_mysql_server(databases=["default"]) == []


def test_a_mysql_server_older_than_the_minimum(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    old = (10, 5, 9) if connection.mysql_is_mariadb else (5, 7, 44)
    # mysql_version is a cached property: an older server, as Django would read it.
    connection.__dict__["mysql_version"] = old
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        del connection.__dict__["mysql_version"]
    assert error.id == "bgtasks.E010" and ".".join(map(str, old)) in error.msg


def _session(alias: str, statement: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(statement)


def test_a_session_time_zone_other_than_utc(mysql_alias: str) -> None:
    _session(mysql_alias, "SET time_zone = '+02:00'")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        _session(mysql_alias, "SET time_zone = '+00:00'")
    assert error.id == "bgtasks.E011" and "'+02:00'" in error.msg
    assert "init_command" in error.hint


def test_an_sql_mode_that_breaks_the_statements(mysql_alias: str) -> None:
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:
        pytest.skip("EMPTY_STRING_IS_NULL is MariaDB's")
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@session.sql_mode")
        [[saved]] = cursor.fetchall()
    _session(mysql_alias, "SET sql_mode = CONCAT(@@sql_mode, ',EMPTY_STRING_IS_NULL')")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET sql_mode = %s", [saved])
    assert error.id == "bgtasks.E013" and "EMPTY_STRING_IS_NULL" in error.msg


def test_a_lease_table_that_is_not_innodb(mysql_alias: str) -> None:
    _session(mysql_alias, "ALTER TABLE django_bgtasks_worker ENGINE=MyISAM")
    try:
        [error] = checks.check_mysql_server(databases=[mysql_alias])
    finally:
        _session(mysql_alias, "ALTER TABLE django_bgtasks_worker ENGINE=InnoDB")
    assert error.id == "bgtasks.E012" and "django_bgtasks_worker" in error.msg


def test_sysdate_is_now_and_statement_based_binary_logging_are_warned_about(
    mysql_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither can be switched on at run time (both are server start options),
    so the server's answers are replaced by what such a server answers: a
    SYSDATE() that does not move, and log_bin with binlog_format=STATEMENT."""
    from django_bgtasks.db import probes

    monkeypatch.setattr(probes, "MYSQL_SYSDATE_MOVES", "SELECT SLEEP(0.01), NOW(6) < NOW(6)")
    monkeypatch.setattr(
        probes,
        "MYSQL_SERVER_SETTINGS",
        probes.MYSQL_SERVER_SETTINGS.replace("@@global.log_bin", "1").replace(
            "@@global.binlog_format", "'STATEMENT'"
        ),
    )
    assert mysql_checks(mysql_alias) == ["bgtasks.W003", "bgtasks.W004"]


class KeepsTheLeaseTablesOff:
    """A router that migrates django_bgtasks nowhere (a site's mistake)."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if app_label == "django_bgtasks" else None


def test_routers_that_keep_the_lease_tables_off_the_lease_database(settings: Any) -> None:
    settings.DATABASE_ROUTERS = ["tests.test_checks.KeepsTheLeaseTablesOff"]
    [error] = checks.check_separate_database()
    assert error.id == "bgtasks.E030"
    assert "'default'" in error.msg and "django_bgtasks.BackgroundTask" in error.msg
    assert "migrate --database default" in error.hint


def test_a_lease_database_other_than_default_says_what_fence_guards(settings: Any) -> None:
    settings.BGTASKS_DATABASE = "postgres"
    [warning] = checks.check_separate_database()
    assert warning.id == "bgtasks.W010"
    assert "'postgres'" in warning.msg and "FenceOnOtherDatabase" in warning.msg


def test_the_lease_table_on_default_needs_no_word() -> None:
    assert checks.check_separate_database() == []


# --- BGTASKS_REQUIRE_SYNC_REPLICATION (a primary with a synchronous standby:
# tests/faults/test_failover.py runs these against a real one) ---------------


def test_sync_replication_not_required_reads_nothing(pg_alias: str) -> None:
    assert checks.check_sync_replication(databases=[pg_alias]) == []
    assert checks.check_sync_replication_setting() == []


def test_a_primary_without_a_synchronous_standby(pg_alias: str, settings: Any) -> None:
    # The suite's servers replicate to nobody.
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    assert checks.check_sync_replication_setting() == []
    [error] = checks.check_sync_replication(databases=[pg_alias])
    assert error.id == "bgtasks.E031" and "synchronous_standby_names is empty" in error.msg
    assert "ALTER SYSTEM SET synchronous_standby_names" in error.hint


def test_a_session_whose_commits_do_not_wait_for_the_standby(pg_alias: str, settings: Any) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    connection = connections[pg_alias]
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = local")
    try:
        found = ids(checks.check_sync_replication(databases=[pg_alias]))
    finally:
        connection.close()  # the next test gets a session of the server's settings
    assert found == ["bgtasks.E031", "bgtasks.E032"]


def test_sync_replication_required_of_a_database_that_is_not_postgresql(
    sqlite_alias: str, settings: Any
) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = True
    [error] = checks.check_sync_replication_setting()
    assert error.id == "bgtasks.E034" and "sqlite" in error.msg
    assert checks.check_sync_replication(databases=[sqlite_alias]) == []


def test_a_require_sync_replication_that_is_not_a_bool(settings: Any) -> None:
    settings.BGTASKS_REQUIRE_SYNC_REPLICATION = "yes"
    [error] = checks.check_sync_replication_setting()
    assert error.id == "bgtasks.E035" and "'yes'" in error.msg


# --- LeaseBackend in TASKS without the app in INSTALLED_APPS ---------------------
# Django's Tasks framework imports the backend and calls its check() whatever
# INSTALLED_APPS says; this app's ready() (and so checks.py) never runs then.

WITHOUT_THE_APP = [app for app in django_settings.INSTALLED_APPS if app != "django_bgtasks"]


def test_the_backend_without_the_app_is_a_check_error() -> None:
    backend = LeaseBackend("default", {})
    with override_settings(INSTALLED_APPS=WITHOUT_THE_APP):
        [error] = backend.check()
    assert error.id == "bgtasks.E018" and "INSTALLED_APPS" in error.msg
    assert '"django_bgtasks"' in error.hint and "migrate" in error.hint
    assert backend.check() == []  # the app registry is whole again


def test_enqueue_and_get_result_without_the_app_say_how_to_fix_it() -> None:
    from tests import djtasks

    backend = LeaseBackend("default", {})
    with override_settings(INSTALLED_APPS=WITHOUT_THE_APP):
        with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS.*bgtasks\.E018"):
            backend.enqueue(djtasks.add, (1, 2), {})
        with pytest.raises(ImproperlyConfigured, match=r"INSTALLED_APPS"):
            backend.get_result("00000000-0000-0000-0000-000000000000")


# A project whose only mistake is the missing app. Django 5.2 runs the Tasks
# backends' checks only with the backport's app installed (docs/django-tasks.md).
NO_APP_SETTINGS = """
import django

SECRET_KEY = "not-secret"
USE_TZ = True
INSTALLED_APPS = ["django_tasks"] if django.VERSION < (6,) else []
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
TASKS = {"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"}}
"""

NO_APP_SCRIPT = """
from importlib import import_module

import django

django.setup()
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_bgtasks import compat

try:
    call_command("check")
except SystemCheckError as exc:
    print(exc)


@import_module(compat.SOURCE).task
def job():
    pass


try:
    job.enqueue()
except ImproperlyConfigured as exc:
    print("ImproperlyConfigured:", exc)
"""


def test_a_project_with_the_backend_and_without_the_app(tmp_path: Path) -> None:
    """The models can't even be imported there (RuntimeError), so this runs in
    a process of its own: in this one they were imported long ago."""
    (tmp_path / "no_app_settings.py").write_text(NO_APP_SETTINGS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "DJANGO_SETTINGS_MODULE": "no_app_settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NO_APP_SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "bgtasks.E018" in done.stdout and "RuntimeError" not in done.stderr
    assert "ImproperlyConfigured: TASKS['default']" in done.stdout
