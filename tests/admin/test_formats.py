"""How the admin writes times (admin/formats.py), on the surfaces' engines:
Django's DATETIME_FORMAT as the site sets it (FORMAT_MODULE_PATH, the time
zone), to the second, on the changelist, a task's page and its run
history, and what live.js is handed to write them alike."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import pytest
from django.test import Client
from django.utils import translation
from django.utils.formats import date_format, get_format
from django.utils.timezone import localtime

from django_bgtasks.admin.formats import admin_time
from django_bgtasks.models import BackgroundTask
from tests.dbtools import runs

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"


@pytest.mark.usefixtures("site_formats")
def test_every_time_is_written_in_djangos_format_as_the_site_sets_it(
    site_alias: str, viewer: Client, change_url: Any
) -> None:
    """The changelist, the detail page and its run history write each time as
    Django's admin writes its own: DATETIME_FORMAT of the active language (or
    FORMAT_MODULE_PATH's), in the current time zone; live.js is handed the same."""
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.release("cleanup", "worker-1", token=lease.token)
    objects.try_claim("cleanup", "worker-1", ttl=30)
    state = objects.get_state("cleanup")
    [run] = runs(site_alias, "cleanup")

    def written(value: Any) -> str:
        return f'<time datetime="{value.isoformat()}">{paris(value)}</time>'

    def paris(value: Any) -> str:
        return date_format(localtime(value), "DATETIME_FORMAT")

    listed = viewer.get(CHANGELIST).content.decode()
    detail = viewer.get(change_url("cleanup")).content.decode()
    assert written(state.started_at) in listed and written(state.started_at) in detail
    assert written(run["started_at"]) in detail and written(run["finished_at"]) in detail
    # The test formats' DATETIME_FORMAT, in Paris's time zone (CET or CEST).
    assert re.search(r"\d\d:\d\d:\d\d\.\d{6} CES?T, ", paris(state.started_at))
    given = re.search(r'<script id="bgtasks-dates"[^>]*>(.*?)</script>', listed)
    assert given is not None
    dates = json.loads(given.group(1))
    assert dates["format"] == get_format("DATETIME_FORMAT") and dates["zone"] == "Europe/Paris"


def test_times_are_written_to_the_second_whatever_the_sites_format(settings: Any) -> None:
    """Django's English DATETIME_FORMAT stops at the minute ("2:30 p.m."):
    the admin writes the same format with seconds, so that two attempts a
    few seconds apart read apart. A format with seconds is kept."""
    from django.utils import timezone

    from django_bgtasks.admin.formats import datetime_format

    value = dt.datetime(2026, 12, 6, 14, 30, 5, tzinfo=dt.UTC)
    with timezone.override("UTC"):
        assert admin_time(value) == "Dec. 6, 2026, 2:30:05 p.m."
    cases = {
        "N j, Y, P": "N j, Y, g:i:s a",
        "d.m.Y H:i": "d.m.Y H:i:s",
        "Y-m-d G:i:s": "Y-m-d G:i:s",
        r"j \P, f": r"j \P, g:i:s",
    }
    for given, written in cases.items():
        settings.DATETIME_FORMAT = given
        with translation.override(None):  # the setting, not the language's format
            assert datetime_format() == written, given
