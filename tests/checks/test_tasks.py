"""The checks of the lease timing and the schedules (django_bgtasks/checks/tasks.py):
``BGTASKS_TTL``, and the heartbeat interval against it, every registered
task's ttl and every lease backend's TTL. (The schedules' check is
tests/worker/test_loop.py's, beside the worker that runs them.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_bgtasks.background import registry as task_registry
from django_bgtasks.background.functions import background_task
from django_bgtasks.checks import tasks as checks
from tests.checks.test_settings import CHECKS_TOUCH_DATABASES, ids


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An empty task registry for one test: the tasks other tests (and the test
    project) registered are not checked, and what this test registers goes."""
    empty: dict[str, Any] = {}
    monkeypatch.setattr(task_registry, "_tasks", empty)
    return empty


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


@CHECKS_TOUCH_DATABASES
def test_manage_py_check_reports_the_error(settings: Any, registry: dict[str, Any]) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 100

    @background_task(name="t-short", ttl=10)  # as a tasks module would at start-up
    def short(running: Any) -> None: ...

    with pytest.raises(SystemCheckError, match=r"bgtasks\.E002"):
        call_command("check")
