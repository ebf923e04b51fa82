"""The background tasks' changelist (admin/changelist.py), on the surfaces'
engines: the registered tasks that never ran, listed as rows after the
table's (on its last page), and the status filter, with the outcome's and
the search."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate, rows

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
# test_views.py's task whose name is markup: registered whenever that module is
# imported, in the same process, so listed here too.
EVIL = '<script>alert("owned")<\\script> & <img onerror=x>'  # no '/': names can't have one


def test_registered_tasks_that_never_ran_are_rows_of_the_list(
    site_alias: str, superuser: Client, settle: Any, settings: Any, url: Any, row_of: Any
) -> None:
    settings.BGTASKS_SCHEDULES = {"surface-quick": "*/5 * * * *"}
    assert rows(site_alias) == []

    html = superuser.get(CHANGELIST).content.decode()

    row = row_of(html, "surface-quick")
    assert re.search(r'data-bgtasks-field="status">never run</span>', row)
    assert "bgtasks-status-never-run" in row
    assert "Counts to three, reporting each step." in row
    assert '<span class="bgtasks-schedule-text">*/5 * * * *</span>' in row
    assert f'formaction="{url("surface-quick", "run")}"' in row
    assert ">Run now</button>" in row
    assert "Registered tasks that have never run" not in html  # no second table
    assert f"{len(registered_tasks())} background tasks" in html  # the registered ones
    assert rows(site_alias) == []  # listing them wrote nothing

    superuser.post(url("surface-quick", "run"))

    assert settle("surface-quick").token == 1
    html = superuser.get(CHANGELIST).content.decode()
    assert "never run" not in row_of(html, "surface-quick")
    assert "bgtasks-status-idle" in row_of(html, "surface-quick")
    assert "never run" in row_of(html, "surface-slow")


def test_the_list_filters_by_status_and_outcome(site_alias: str, viewer: Client) -> None:
    objects.try_claim("live", "worker-1", ttl=30)
    objects.try_claim("silent", "worker-2", ttl=30)
    backdate(site_alias, "silent", 95)
    lease = objects.try_claim("done", "worker-3", ttl=30)
    objects.release("done", "worker-3", token=lease.token, outcome="failed", error="boom")

    def listed(query: str) -> list[str]:
        html = viewer.get(CHANGELIST + query).content.decode()
        names = re.findall(r'<th class="field-name"><a [^>]*>([^<]+)</a>', html)
        return [name for name in names if name != escape(EVIL)]

    never_run = ["surface-fails", "surface-quick", "surface-slow", "surface-sum"]
    assert listed("") == ["done", "live", "silent", *never_run]
    assert listed("?status=running") == ["live"]
    assert listed("?status=stale") == ["silent"]
    assert listed("?status=idle") == ["done"]
    assert listed("?status=never+run") == never_run
    assert listed("?outcome__exact=failed") == ["done"]
    assert listed("?q=surface-sl") == ["surface-slow"]
    assert listed("?q=worker-2") == ["silent"]  # search covers the owner too
    assert listed("?status=never+run&q=quick") == ["surface-quick"]
    page = viewer.get(CHANGELIST).content.decode()
    assert 'id="changelist-filter"' in page
    assert "?status=never+run" in page and "?outcome__exact=lost" in page


def test_never_run_rows_come_after_the_tables_on_its_last_page(
    site_alias: str, viewer: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_bgtasks.admin import BackgroundTaskAdmin

    monkeypatch.setattr(BackgroundTaskAdmin, "list_per_page", 2)
    for name in ("a", "b", "c"):
        objects.try_claim(name, "worker-1", ttl=30)
    never_run = len(registered_tasks())

    first = viewer.get(CHANGELIST).content.decode()
    last = viewer.get(CHANGELIST + "?p=2").content.decode()

    assert "bgtasks-status-never-run" not in first
    assert re.findall(r'<th class="field-name"><a [^>]*>(\w+)</a>', first) == ["a", "b"]
    assert last.count("bgtasks-status-never-run") == never_run
    assert f"{3 + never_run} background tasks" in last
