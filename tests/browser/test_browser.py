"""The admin in a real browser: Debian's Chromium, driven by Playwright,
against a live server on each database.

An operator logs in, starts a registered task with "Run now", watches its
progress bar advance with no reload (live.js polling the status URL), asks
it to stop, and sees it stop; a task started elsewhere is pointed out for a
reload to add.

The changelist fits a laptop's 1280 px and a desktop's 1920 px with the
admin's sidebar and the filters open, and a stale row offers a takeover and
a release (test_fit.py measures every page, filled as a production site
fills it, and saves the screenshots in docs/). Under ASGI the page follows
the event stream; under WSGI it polls from the start, asks for no stream and
logs no error; either way it writes times as Django does.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.utils.formats import date_format
from django.utils.timezone import localtime

from django_bgtasks import get_task
from django_bgtasks.admin.formats import admin_time
from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate
from tests.tools import admin_log_in

CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
objects = BackgroundTask.objects


def a_few_other_tasks(alias: str) -> None:
    """Rows in other states, so the page shows them all."""
    get_task("surface-quick").run()
    with pytest.raises(RuntimeError, match="disk on fire"):
        get_task("surface-fails").run()
    objects.try_claim("nightly-report", "web-2:4711:5e1f", {"progress": 0.62}, ttl=30)
    backdate(alias, "nightly-report", 47)  # its holder went silent


def test_run_watch_and_cancel_in_a_real_browser(
    site_alias: str,
    live_server: Any,
    make_staff: Any,
    page: Any,
    settle: Any,
) -> None:
    make_staff("root", superuser=True)
    a_few_other_tasks(site_alias)
    polls: list[Any] = []
    page.on(
        "response", lambda response: polls.append(response) if "/status/" in response.url else None
    )

    page.goto(live_server.url + "/admin/login/?next=" + CHANGELIST)
    # The admin's navigation sidebar, closed: room for every column.
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    admin_log_in(page, CHANGELIST)

    # Never run so far: it is a row of the list, with "Run now".
    never_run = page.locator("#result_list tbody tr", has_text="surface-slow")
    assert never_run.locator('[data-bgtasks-field="status"]').inner_text() == "never run"
    never_run.get_by_role("button", name="Run now", exact=True).click()
    page.wait_for_url("**" + CHANGELIST)
    assert "Started “surface-slow”" in page.locator(".messagelist").inner_text()

    # From here on, a reload would lose this mark.
    page.evaluate("window.bgtasksSameDocument = true")
    bar = page.locator(
        '[data-bgtasks-task="surface-slow"][data-bgtasks-field="progress"] progress'
    )
    label = page.locator(
        '[data-bgtasks-task="surface-slow"][data-bgtasks-field="progress"] .bgtasks-label'
    )
    status = page.locator('[data-bgtasks-task="surface-slow"][data-bgtasks-field="status"]')
    first = float(bar.get_attribute("value") or 0)
    page.wait_for_function("([el, v]) => el.value >= v + 0.2", arg=[bar.element_handle(), first])
    later = bar.evaluate("el => el.value")
    assert later >= first + 0.2
    assert status.inner_text() == "running"
    assert label.inner_text().endswith("/240)")
    assert page.evaluate("window.bgtasksSameDocument") is True
    assert (
        "stale: holder silent for"
        in page.locator(
            '[data-bgtasks-task="nightly-report"][data-bgtasks-field="status"]'
        ).inner_text()
    )

    # Ask it to stop, from its row.
    page.locator('button[data-bgtasks-task="surface-slow"]', has_text="Request cancel").click()
    page.wait_for_url("**" + CHANGELIST)
    assert "Asked " in page.locator(".messagelist").inner_text()
    outcome = page.locator('[data-bgtasks-task="surface-slow"][data-bgtasks-field="outcome"]')
    page.evaluate("window.bgtasksSameDocument = true")
    outcome.filter(has_text="cancelled").wait_for()
    assert status.inner_text() == "idle"
    # Idle again: "Run now" is offered once more, without a reload.
    page.locator(
        'button[data-bgtasks-task="surface-slow"]', has_text=re.compile("^Run now$")
    ).wait_for()
    assert page.evaluate("window.bgtasksSameDocument") is True

    state = settle("surface-slow")
    assert state.outcome == "cancelled" and 0 < state.value["done"] < 240
    assert [entry.change_message.split(" (")[0] for entry in LogEntry.objects.order_by("pk")] == [
        "Ran now",
        "Requested cancel",
    ]
    # While the task ran every poll brought news (200); once it stopped,
    # polls are answered 304 Not Modified. Two in a row, within 8 s: one CI
    # run saw a 200 as the last poll 2.5 s after the cancel, which 16 runs on
    # a loaded machine here did not repeat; a failure now shows what changed.
    deadline = time.monotonic() + 8
    statuses = [response.status for response in polls]
    while statuses[-2:] != [304, 304] and time.monotonic() < deadline:
        page.wait_for_timeout(250)
        statuses = [response.status for response in polls]
    if not (200 in statuses and statuses[-2:] == [304, 304]):
        # What changed: the two latest bodies that came with a 200.
        bodies = [response.text() for response in polls if response.status == 200][-2:]
        pytest.fail(f"polls answered {statuses}; the last two 200s: {bodies}")

    # A task started elsewhere gets a row only on a reload; the page says so.
    notice = page.locator("[data-bgtasks-notice]")
    assert notice.is_hidden()
    objects.try_claim("started-elsewhere", "web-3:99:ab", ttl=30)
    notice.filter(has_text="Started since this page loaded: started-elsewhere.").wait_for()
    assert page.evaluate("window.bgtasksSameDocument") is True
    page.reload()
    page.locator('[data-bgtasks-task="started-elsewhere"]').first.wait_for()
    page.wait_for_timeout(1500)
    assert notice.is_hidden()


def visible_buttons(page: Any, name: str) -> list[str]:
    """The operation buttons the row of ``name`` shows now."""
    buttons = page.locator(f'#result_list .bgtasks-button[data-bgtasks-task="{name}"]')
    return [button.inner_text() for button in buttons.all() if button.is_visible()]


def test_the_changelist_fits_common_widths_with_the_sidebar_open(
    site_alias: str,
    live_server: Any,
    make_staff: Any,
    page: Any,
) -> None:
    make_staff("root", superuser=True)
    get_task("surface-quick").run()
    with pytest.raises(RuntimeError, match="disk on fire"):
        get_task("surface-fails").run()
    # A registered task whose holder went silent: it can be taken over.
    objects.try_claim("surface-fails", "web-2:4711:5e1f", {"done": 1, "total": 2}, ttl=30)
    backdate(site_alias, "surface-fails", 47)
    objects.try_claim("nightly-report", "web-1:8123:9a0c", {"progress": 0.62}, ttl=600)
    # surface-slow never ran: it is listed all the same.

    page.goto(live_server.url + "/admin/login/?next=" + CHANGELIST)
    page.evaluate("localStorage.setItem('django.admin.navSidebarIsOpen', 'true')")
    admin_log_in(page, CHANGELIST)

    for width in (1280, 1920):
        page.set_viewport_size({"width": width, "height": 720})
        # The reloaded page's first poll has no ETag to send, so it is answered
        # 200, and live.js draws the cells and buttons from it. (Its response
        # can come before reload() returns: it is awaited from before.)
        with page.expect_response(
            lambda response: "/status/" in response.url and response.status == 200
        ):
            page.reload()
        page.wait_for_function("document.querySelector('#result_list')")
        page.wait_for_timeout(1500)  # a poll or two: the cells and buttons live.js keeps
        assert page.locator("#nav-sidebar").is_visible(), width
        assert page.locator("#changelist-filter").is_visible(), width
        fits = page.evaluate(
            """() => {
                const table = document.querySelector('#result_list');
                return [table.scrollWidth, table.parentElement.clientWidth,
                        document.documentElement.scrollWidth, window.innerWidth];
            }"""
        )
        assert fits[0] <= fits[1], f"the table overflows at {width} px: {fits}"
        assert fits[2] <= fits[3], f"the page scrolls sideways at {width} px: {fits}"

        # The silent holder: a takeover or a release, each saying what it does.
        assert visible_buttons(page, "surface-fails") == ["Run now (take over)", "Force release…"]
        takeover = page.get_by_role("button", name="Run now (take over)")
        assert "the silent run is recorded as lost" in (takeover.get_attribute("title") or "")
        assert visible_buttons(page, "nightly-report") == ["Request cancel", "Force release…"]
        assert visible_buttons(page, "surface-slow") == ["Run now"]
        assert visible_buttons(page, "surface-quick") == ["Run now"]
        # Every value is still there: the finish on the duration's hover.
        duration = page.locator(
            '[data-bgtasks-task="surface-quick"][data-bgtasks-field="duration"]'
        )
        finished = objects.get_state("surface-quick").finished_at
        assert duration.get_attribute("title") == (f"finished {admin_time(finished)}")
        assert (
            "stale: holder silent for"
            in page.locator(
                '[data-bgtasks-task="surface-fails"][data-bgtasks-field="status"]'
            ).inner_text()
        )

    # The never-run row is live too: started elsewhere, it fills in, no reload.
    page.evaluate("window.bgtasksSameDocument = true")
    objects.try_claim("surface-slow", "web-3:99:ab", {"done": 2, "total": 8}, ttl=30)
    slow = page.locator('[data-bgtasks-task="surface-slow"][data-bgtasks-field="status"]')
    slow.filter(has_text="running").wait_for()
    owner = page.locator('[data-bgtasks-task="surface-slow"][data-bgtasks-field="owner"]')
    assert owner.is_visible() and owner.inner_text() == "web-3:99:ab"
    assert visible_buttons(page, "surface-slow") == ["Request cancel", "Force release…"]
    assert page.locator("[data-bgtasks-notice]").is_hidden()  # its row is on the page
    assert page.evaluate("window.bgtasksSameDocument") is True


def test_under_an_asgi_server_the_changelist_follows_the_event_stream(
    site_alias: str, make_staff: Any, page: Any
) -> None:
    """uvicorn serves the admin; this process is the replica that runs the
    task. Its progress reaches the page pushed, with no poll of the status URL."""
    from tests.asgiserver import uvicorn

    make_staff("root", superuser=True)
    lease = objects.try_claim("pushed", "web-2:77:cd", {"done": 0, "total": 10}, ttl=60)
    assert lease is not None
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    with uvicorn(sorted({"default", site_alias}), BGTASKS_DATABASE=site_alias) as host:
        page.goto(f"http://{host}/admin/login/?next={CHANGELIST}")
        admin_log_in(page, CHANGELIST)
        page.wait_for_function(
            "document.getElementById('bgtasks-live').dataset.bgtasksMode === 'events'"
        )
        page.evaluate("window.bgtasksSameDocument = true")
        label = page.locator(
            '[data-bgtasks-task="pushed"][data-bgtasks-field="progress"] .bgtasks-label'
        )
        for done in (3, 7):
            objects.update_state("pushed", "web-2:77:cd", {"done": done, "total": 10})
            label.filter(has_text=f"({done}/10)").wait_for(timeout=5000)
        objects.release("pushed", "web-2:77:cd", token=lease.token)
        outcome = page.locator('[data-bgtasks-task="pushed"][data-bgtasks-field="outcome"]')
        outcome.filter(has_text="succeeded").wait_for(timeout=5000)
        assert page.evaluate("window.bgtasksSameDocument") is True
        assert page.evaluate("document.getElementById('bgtasks-live').dataset.bgtasksMode") == (
            "events"
        )
        assert not [url for url in requests if "/status/" in url]  # pushed, never polled
        page.close()  # before uvicorn stops: no stream left open


# Every format character of Django's, at moments that try them: midnight,
# noon, a leap day, the last microsecond of a year, ISO week 53, each side
# of Paris's summer time.
DATE_FORMATS = [
    "N j, Y, P",
    r"l jS \o\f F Y, H:i:s.u T, \w\e\e\k W",
    "D d M y a A b E f g G h i s I L m n o O t w z Z e",
    "c",
    "r",
    "U",
]
MOMENTS = [
    dt.datetime(2026, 1, 1, 0, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 3, 29, 0, 59, 59, 999_999, tzinfo=dt.UTC),
    dt.datetime(2026, 3, 29, 1, 0, tzinfo=dt.UTC),
    dt.datetime(2024, 2, 29, 11, 0, 0, 1, tzinfo=dt.UTC),
    dt.datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
    dt.datetime(2027, 1, 1, 12, 30, tzinfo=dt.UTC),
    dt.datetime(2026, 7, 14, 16, 5, 9, 123_000, tzinfo=dt.UTC),
]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]


def django_dates() -> list[dict[str, Any]]:
    """(instant, what the page hands dates.js, Django's own text) for each
    format, moment and zone, and in German once."""
    from django.utils import dateformat, timezone, translation

    from django_bgtasks.admin.formats import date_settings

    cases = []
    for zone, language in [*((zone, "en") for zone in ZONES), ("Europe/Paris", "de")]:
        with timezone.override(zone), translation.override(language):
            given = date_settings()
            for text in DATE_FORMATS:
                for moment in MOMENTS:
                    cases.append(
                        {
                            "iso": moment.isoformat(),
                            "settings": {**given, "format": text},
                            "django": dateformat.format(timezone.localtime(moment), text),
                        }
                    )
    return cases


@pytest.mark.usefixtures("site_formats")
def test_under_wsgi_the_admin_polls_from_the_start_and_writes_times_as_django(
    site_alias: str, live_server: Any, make_staff: Any, page: Any
) -> None:
    """The page served under WSGI names no event stream: live.js polls from
    the start, no request is answered 501 and the console has no error. The
    times it writes are Django's, as the site sets them (here a format to
    the microsecond, in Paris's time zone)."""
    make_staff("root", superuser=True)
    lease = objects.try_claim("polled", "web-2:77:cd", {"done": 0, "total": 10}, ttl=60)
    assert lease is not None
    errors: list[str] = []
    requested: list[str] = []
    page.on(
        "console",
        lambda line: (
            errors.append(f"{line.text} {line.location['url']}")
            # The live server has no favicon: Chromium asks for one all the same.
            if line.type == "error" and not line.location["url"].endswith("/favicon.ico")
            else None
        ),
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requested.append(request.url))
    page.goto(live_server.url + "/admin/login/?next=" + CHANGELIST)
    admin_log_in(page, CHANGELIST)
    assert page.evaluate("document.getElementById('bgtasks-live').dataset.bgtasksMode") == (
        "polling"
    )
    objects.update_state("polled", "web-2:77:cd", {"done": 4, "total": 10})
    page.locator(
        '[data-bgtasks-task="polled"][data-bgtasks-field="progress"] .bgtasks-label'
    ).filter(has_text="(4/10)").wait_for(timeout=5000)

    # A run that starts after the page was made: live.js writes its start
    # as the server writes it on a reload.
    objects.release("polled", "web-2:77:cd", token=lease.token)
    objects.try_claim("polled", "web-3:78:ef", ttl=60)
    state = objects.get_state("polled")
    assert state is not None and state.started_at is not None
    started = page.locator('[data-bgtasks-task="polled"][data-bgtasks-field="started"] time')
    page.wait_for_function(
        "([el, iso]) => Date.parse(el.dateTime) === Date.parse(iso)",
        arg=[started.element_handle(), state.started_at.isoformat()],
    )
    written = started.inner_text()
    assert written == date_format(localtime(state.started_at), "DATETIME_FORMAT")
    assert re.search(r"\.\d{6} CES?T, week \d+$", written)  # tests/testapp/formats
    page.reload()
    assert started.inner_text() == written

    # dates.js writes every format character as Django does.
    cases = django_dates()
    mismatches = page.evaluate(
        """cases => cases
            .map(c => [c.iso, c.settings.format, c.django, bgtasksDates.format(c.iso, c.settings)])
            .filter(([, , django, js]) => django !== js)""",
        cases,
    )
    assert len(cases) == 6 * 6 * 7 and mismatches == [], f"{len(mismatches)} of {len(cases)}"
    assert not [url for url in requested if "/events/" in url]
    assert errors == []
