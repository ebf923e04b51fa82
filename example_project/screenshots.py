"""Remake the README's screenshot of the example site: docs/tasks-page.png.

It runs ``serve.py --sqlite`` on two free ports with fresh data in a temporary
folder, logs in on replica A, starts storage-scan there, and photographs the
task page as replica B serves it (the task owned by A, mid-run). (The
admin's screenshots are made by tests/browser/test_fit.py, with
``BGTASKS_SCREENSHOTS=docs``.)

Needs Playwright for Python and a Chromium: ``pip install playwright`` and
Debian's ``chromium`` package (``CHROMIUM=/path`` for another one). Playwright's
own browser download is not used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_up(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve.py exited with {process.returncode}")
        # Only our own http://127.0.0.1 URLs.
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5):  # noqa: S310
            return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


def post(page: Page, url: str) -> int:
    """A POST from the page's own session, with its CSRF token, as its buttons send."""
    status: int = page.evaluate(
        """async (url) => {
            const token = document.querySelector("[name=csrfmiddlewaretoken]").value;
            const response = await fetch(url, {method: "POST", headers: {"X-CSRFToken": token}});
            return response.status;
        }""",
        url,
    )
    return status


def main() -> None:
    a, b = free_port(), free_port()
    data = Path(tempfile.mkdtemp(prefix="bgtasks-shots-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("BGTASKS_DEMO")}
    env["BGTASKS_DEMO_DATA"] = str(data)
    serve = subprocess.Popen(
        [sys.executable, str(HERE / "serve.py"), "--sqlite", "--ports", str(a), str(b)],
        env=env,
        start_new_session=True,
    )
    site_a, site_b = f"http://127.0.0.1:{a}", f"http://127.0.0.1:{b}"
    try:
        wait_until_up(f"{site_a}/admin/login/", serve)
        wait_until_up(f"{site_b}/admin/login/", serve)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1000, "height": 760})
            page.goto(f"{site_a}/admin/login/?next=/")
            page.fill("#id_username", "demo")
            page.fill("#id_password", "demo")
            page.click("input[type=submit]")
            page.wait_for_selector(".task")

            # A finished run to show, then storage-scan started on replica A...
            assert post(page, f"{site_a}/bgtasks/log-cleanup/run/") == 202
            page.wait_for_function(
                "document.querySelector('[data-name=log-cleanup] [data-field=outcome]')"
                ".textContent === 'succeeded'",
                timeout=30_000,
            )
            assert post(page, f"{site_a}/bgtasks/storage-scan/run/") == 202

            # ...as replica B shows it, part way through.
            page.goto(f"{site_b}/")
            page.wait_for_function(
                "(document.querySelector('[data-name=storage-scan] .bar > div')"
                ".style.width || '0').replace('%', '') > 45",
                timeout=30_000,
            )
            time.sleep(0.6)  # let the bar's transition end
            DOCS.mkdir(exist_ok=True)
            page.screenshot(path=str(DOCS / "tasks-page.png"), full_page=True)
            browser.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(15)
    print(f"wrote {DOCS / 'tasks-page.png'}")


if __name__ == "__main__":
    main()
