"""System checks: each problem has its id and a hint that names the fix."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections

from django_bgtasks import checks


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


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
def test_a_heartbeat_interval_at_or_above_half_the_ttl(settings: Any, interval: Any) -> None:
    settings.BGTASKS_TTL = 120
    settings.BGTASKS_HEARTBEAT_INTERVAL = interval
    assert ids(checks.check_timing()) == ["bgtasks.E002"]


def test_a_heartbeat_interval_below_half_the_ttl_is_fine(settings: Any) -> None:
    settings.BGTASKS_TTL = 120
    settings.BGTASKS_HEARTBEAT_INTERVAL = 59.9
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


def test_use_tz_off_is_a_warning(settings: Any) -> None:
    settings.USE_TZ = False
    assert ids(checks.check_time_zone()) == ["bgtasks.W001"]


@CHECKS_TOUCH_DATABASES
def test_manage_py_check_reports_the_error(settings: Any) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 100
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
