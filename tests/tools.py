"""The optional programs some tests drive (Debian's Chromium and Prometheus),
and what a test does when one is missing: under ``CI`` it fails, since
.ci/run installs them; elsewhere it skips, naming the package, so that ``make test`` passes on a
machine with nothing but Python, and pytest's summary (``-ra``) says what was
left out and how to add it."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from django.conf import settings

CHROMIUM = "/usr/bin/chromium"
PROMETHEUS = "/usr/bin/prometheus"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    # This machine has no network: without these Chromium keeps trying to
    # reach Google's services, and logs refused connections.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require(path: str, package: str) -> None:
    """Fail under CI, else skip, unless the program at ``path`` is there."""
    if os.access(path, os.X_OK):
        return
    why = f"{path} is missing: apt-get install -y {package} (.ci/run does it)"
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def require_prometheus() -> str:
    """Prometheus' path (Debian's ``prometheus``), once :func:`require` has let the test go on."""
    require(PROMETHEUS, "prometheus")
    return PROMETHEUS


def require_chromium() -> str:
    """Chromium's path, once :func:`require` has let the test go on."""
    require(CHROMIUM, "chromium")
    return CHROMIUM


# The suite's PgBouncers (tests/settings.py): left out on purpose
# (BGTASKS_PGBOUNCER=0, as the Django 6 leg and make test-fast do), or not
# installed, which tests/settings.py names and which fails under CI.
needs_pgbouncer = pytest.mark.skipif(
    "pgbouncer" not in settings.DATABASES,
    reason=getattr(settings, "PGBOUNCER_UNAVAILABLE", None) or "BGTASKS_PGBOUNCER=0",
)


@contextlib.contextmanager
def without_prometheus_client(*modules: ModuleType) -> Iterator[None]:
    """``modules`` as they are without the metrics extra (imported anew with
    prometheus_client unimportable), and as they were afterwards."""
    saved = sys.modules.get("prometheus_client")
    sys.modules["prometheus_client"] = None  # type: ignore[assignment]  # import fails
    try:
        for module in modules:
            importlib.reload(module)
        yield
    finally:
        if saved is not None:
            sys.modules["prometheus_client"] = saved
        for module in modules:
            importlib.reload(module)


def admin_log_in(page: Any, landing: str) -> None:
    """On the admin's login form (``page``, Playwright's), log in as the
    browser tests' superuser ("root", made by ``make_staff``) and wait for
    the page the login goes on to, whose path ends ``landing``."""
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**" + landing)
