"""The checks of the ``BGTASKS_*`` settings (django_bgtasks/checks/settings.py),
and the test settings passing every check: each problem has its id and a hint
that names the fix."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from django_bgtasks import conf
from django_bgtasks.checks import settings as checks


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


# On Django 6 (seen with 6.1), `check` runs the model checks against every
# database (JSONField asks each backend whether it supports JSON): it connects.
CHECKS_TOUCH_DATABASES = pytest.mark.django_db(databases="__all__")


@CHECKS_TOUCH_DATABASES
def test_the_test_settings_pass_every_check() -> None:
    call_command("check", fail_level="WARNING")


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


@pytest.mark.parametrize("value", [1, 0, "true", "auto", []])
def test_bad_admin_events(settings: Any, value: Any) -> None:
    settings.BGTASKS_ADMIN_EVENTS = value
    assert ids(checks.check_push()) == ["bgtasks.E022"]


def test_push_defaults_and_good_values_are_fine(settings: Any) -> None:
    assert checks.check_push() == []
    settings.BGTASKS_CHANGES_POLL_INTERVAL = 0.05
    settings.BGTASKS_EVENTS_KEEPALIVE = 300
    assert checks.check_push() == []
    for value in (None, True, False):
        settings.BGTASKS_ADMIN_EVENTS = value
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
