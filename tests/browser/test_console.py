"""The Django tasks console in Chromium, at a laptop's 1280 px and a
desktop's 1920 px: an operator searches by arguments, opens "Retry all",
reads the count on its confirmation, retries, and is back on the list with
what it did; the database then holds the retried tasks ready and the others
as they were. (tests/browser/test_fit.py measures these pages' layout.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from django_bgtasks.models import QueuedTask
from tests import djtasks
from tests.tools import admin_log_in

QUEUED = "/admin/django_bgtasks/queuedtask/"


@pytest.mark.parametrize("width", [1280, 1920])
def test_search_then_retry_all_after_its_confirmation(
    tasks_site_alias: str, live_server: Any, make_staff: Any, page: Any, width: int
) -> None:
    make_staff("root", superuser=True)
    batch = djtasks.echo.get_backend().enqueue_many(
        djtasks.echo, [((n,), {"tenant": "a" if n < 3 else "b"}) for n in range(5)]
    )
    ids = [str(result.id) for result in batch]
    for one in ids:
        QueuedTask.objects.cancel(one)  # failed, as a task cancelled before it ran

    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_server.url + "/admin/login/?next=" + QUEUED)
    admin_log_in(page, QUEUED)

    page.fill("#searchbar", 'args:{"tenant":"a"}')
    page.press("#searchbar", "Enter")
    page.wait_for_url("**?q=*")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 3
    assert all(one in page.content() for one in ids[:3])
    assert page.locator(".bgtasks-error-line").first.inner_text().startswith("TaskCancelled")

    page.click("a.bgtasks-bulk:has-text('Retry all')")
    page.wait_for_url("**/bulk/retry/?q=*")
    count = page.locator(".bgtasks-bulk-count").inner_text()
    assert count.startswith("The list holds 3 Django tasks now.")
    page.click("input[type=submit]")
    page.wait_for_url("**" + QUEUED + "?q=*")
    said = page.locator(".messagelist").inner_text()
    assert "Retried 3 of the 3 Django Tasks the filter matched." in said

    table = QueuedTask.objects.using(tasks_site_alias)
    statuses = dict(table.values_list("uuid", "status"))
    assert [statuses[uuid.UUID(one)] for one in ids] == ["READY"] * 3 + ["FAILED"] * 2
