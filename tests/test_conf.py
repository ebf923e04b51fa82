"""The ``BGTASKS_*`` settings as the app reads them (django_bgtasks.conf):
each with its default, read once and kept until Django's ``setting_changed``
says a ``BGTASKS_*`` setting changed; ``SETTING_NAMES`` the very names the
properties read; and ``lease_backends()``, the ``TASKS`` entries whose
backend is ``LeaseBackend`` or a subclass. Whether each value is valid is
the system checks' (tests/checks/test_settings.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from django_bgtasks.backend import LeaseBackend
from django_bgtasks.conf import SETTING_NAMES, conf, lease_backends
from django_bgtasks.limits import DEFAULT_TTL

LEASE_ALIASES = {"default", "retrying", "short", "backoff"}  # tests/settings.py's TASKS


class OwnLeaseBackend(LeaseBackend):
    """A site's own subclass of the backend."""


def test_a_setting_is_read_once_and_again_when_django_says_it_changed(settings: Any) -> None:
    # The defaults: the test settings set no BGTASKS_* setting.
    assert (conf.TTL, conf.HISTORY_DAYS, conf.DATABASE) == (DEFAULT_TTL, 30, "default")
    settings.BGTASKS_HISTORY_DAYS = 7  # override_settings: setting_changed is sent
    assert conf.HISTORY_DAYS == 7
    # Assigned without the signal, a value is not read again: the one read is kept,
    # and so it is when another setting than a BGTASKS_* one changes.
    django_settings.BGTASKS_HISTORY_DAYS = 8
    setting_changed.send(sender=None, setting="OTHER_SETTING", value=1, enter=True)
    assert conf.HISTORY_DAYS == 7
    setting_changed.send(sender=None, setting="BGTASKS_HISTORY_DAYS", value=8, enter=True)
    assert conf.HISTORY_DAYS == 8


def test_each_setting_name_is_the_one_its_property_reads(settings: Any) -> None:
    assert {"BGTASKS_TTL", "BGTASKS_DATABASE", "BGTASKS_EXECUTOR"} <= set(SETTING_NAMES)
    given = {name: object() for name in SETTING_NAMES}
    for name, value in given.items():
        setattr(settings, name, value)
    for name, value in given.items():
        assert getattr(conf, name.removeprefix("BGTASKS_")) is value, name


def test_lease_backends_are_the_tasks_entries_of_leasebackend_or_a_subclass(
    settings: Any,
) -> None:
    found = lease_backends()
    assert set(found) == LEASE_ALIASES  # not "immediate", Django's ImmediateBackend
    assert all(found[alias] is settings.TASKS[alias] for alias in found)
    settings.TASKS = {
        **settings.TASKS,
        "own": {"BACKEND": f"{__name__}.OwnLeaseBackend"},
        "gone": {"BACKEND": "no_such_module.LeaseBackend"},
        "unnamed": {"QUEUES": ["default"]},
        "not a backend": {"BACKEND": "django_bgtasks.limits.DEFAULT_TTL"},
    }
    assert set(lease_backends()) == LEASE_ALIASES | {"own"}
