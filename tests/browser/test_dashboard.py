"""The dashboard in Chromium, at a laptop's 1280 px and a desktop's 1920 px:
an operator opens it from the app's index, reads the charts, and sees them
change without a reload when more tasks end and a worker's rollup counts
them; then picks a queue's charts. (tests/browser/test_fit.py measures the
page's layout.)"""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks.admin import dashboard
from tests.dbtools import ended_a_minute_ago
from tests.tools import admin_log_in

APP = "/admin/django_bgtasks/"


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_dashboard_refreshes_live(
    tasks_site_alias: str,
    live_server: Any,
    make_staff: Any,
    page: Any,
    width: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1.0)
    make_staff("root", superuser=True)
    ended_a_minute_ago(tasks_site_alias)

    page.set_viewport_size({"width": width, "height": 900})
    page.goto(live_server.url + "/admin/login/?next=" + APP)
    admin_log_in(page, APP)
    page.click("a.bgtasks-dashboard-link")
    page.wait_for_url("**/dashboard/")

    # Measured in one read of the page: dashboard.js replaces the charts
    # every second here, and an element read between two calls may be gone.
    layout = page.evaluate(
        """() => [...document.querySelectorAll('.bgtasks-chart-figure')].map((figure) => {
            const box = figure.getBoundingClientRect();
            const plot = figure.querySelector('svg').getBoundingClientRect();
            return [box.x, box.y, box.width, plot.width];
        })"""
    )
    assert len(layout) == 4 and all(plot > 300 for *_box, plot in layout)
    # Two charts a row at either width: side by side, not stacked.
    (x0, y0, width0, _), (x1, y1, _, _) = layout[:2]
    assert y0 == y1 and x1 > x0 + width0
    summary = page.locator(".bgtasks-dashboard-summary")
    assert "3 succeeded, 1 failed" in summary.inner_text()
    assert page.evaluate("document.querySelectorAll('#bgtasks-chart-ended rect').length") == 2

    # More tasks end in the same minute, and a worker's roll counts them: the
    # page shows them at its next read, without a reload.
    page.evaluate("window.bgtasksLoaded = true")
    ended_a_minute_ago(tasks_site_alias)
    page.wait_for_function(
        "() => document.querySelector('.bgtasks-dashboard-summary')"
        ".innerText.includes('6 succeeded, 2 failed')"
    )
    box = page.locator("#bgtasks-dashboard")
    assert int(box.get_attribute("data-bgtasks-refreshes")) >= 1
    assert box.get_attribute("data-bgtasks-live") == "live"
    assert page.evaluate("window.bgtasksLoaded") is True  # the same page, not a reload

    page.click("#bgtasks-dashboard a:text-is('other')")
    page.wait_for_url("**queue=other*")
    assert "Queue other" in page.locator(".bgtasks-dashboard-summary").inner_text()
    assert "0 succeeded, 2 failed" in page.locator(".bgtasks-dashboard-summary").inner_text()
