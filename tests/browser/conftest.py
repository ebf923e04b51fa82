"""The browser tests' page: Debian's Chromium, driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from tests.tools import CHROMIUM, CHROMIUM_ARGS, require_chromium


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Chromium page, closed before the test database is flushed."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    # Playwright's sync API runs an event loop under this thread, which makes
    # Django's async-safety check refuse the test's own (synchronous) ORM
    # calls. They are not async code, so the check is switched off while the
    # browser is open.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1920, "height": 560})
        context.set_default_timeout(20_000)
        yield context.new_page()
        browser.close()
        # Connections the test opened while the browser ran belong to the
        # context Playwright runs the test in: close them there, or the test
        # database can't be dropped at the end of the session.
        connections.close_all()
