"""The columns of the background tasks' changelist and the fields of a
task's page (admin/columns.py), on the surfaces' engines: the columns that
share a cell, the value, the result and the run history (a page at a
time, newest first), a stale holder and the buttons of its row, a
timed-out outcome, requests, schedules, attempts and workers, and the state
names live.js is handed."""

from __future__ import annotations

import json
import re
from typing import Any

from django.test import Client

from django_bgtasks.admin.formats import admin_time
from django_bgtasks.choices import Outcome, Status
from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"


def test_the_detail_page_shows_the_value_and_the_run_history(
    site_alias: str, viewer: Client, change_url: Any
) -> None:
    for i in range(3):
        lease = objects.try_claim("cleanup", "worker-1", {"done": i}, ttl=30)
        objects.release("cleanup", "worker-1", {"done": i, "note": "ok"}, token=lease.token)
    objects.try_claim("cleanup", "worker-2", {"done": 7, "total": 10, "nested": {"b": 2, "a": 1}})

    html = viewer.get(change_url("cleanup")).content.decode()

    value = re.search(r'<pre class="bgtasks-value"[^>]*>(.*?)</pre>', html, re.S)
    assert value is not None
    assert json.loads(value.group(1).replace("&quot;", '"')) == {
        "done": 7,
        "total": 10,
        "nested": {"a": 1, "b": 2},
    }
    assert '\n  "done": 7,' in value.group(1).replace("&quot;", '"')  # pretty, indented
    history = re.search(r'<table class="bgtasks-history">(.*?)</table>', html, re.S)
    assert history is not None
    tokens = re.findall(r"<tr><td>(\d+)</td>", history.group(1))
    assert tokens == ["3", "2", "1"]  # newest first
    assert "70% (7/10)" in html


def test_a_stale_holder_is_shown_as_silent(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    backdate(site_alias, "cleanup", 95)

    html = viewer.get(CHANGELIST).content.decode()

    assert re.search(r"stale: holder silent for 1 min 3\d s", html)
    assert "bgtasks-status-stale" in html


def test_a_stale_row_offers_a_takeover_and_a_release(
    site_alias: str,
    superuser: Client,
    settle: Any,
    url: Any,
    change_url: Any,
    row_of: Any,
    messages_of: Any,
) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    backdate(site_alias, "surface-quick", 95)  # its holder went silent

    row = row_of(superuser.get(CHANGELIST).content.decode(), "surface-quick")

    buttons = re.findall(r'<(button|a) ([^>]*class="button bgtasks-button[^>]*)>(.*?)</\1>', row)
    shown = [re.sub(r"<[^>]*>", "", text) for _, attrs, text in buttons if " hidden" not in attrs]
    assert shown == ["Run now (take over)", "Force release…"]
    assert 'title="Run now (take over: the silent run is recorded as lost' in row
    assert 'title="Force release… (end the current claim, a silent one too' in row
    assert "nothing is started" in row

    response = superuser.post(url("surface-quick", "run"), {"next": CHANGELIST}, follow=True)

    assert messages_of(response)[0].startswith("Started “surface-quick” (token 2) on ")
    assert settle("surface-quick").outcome == "succeeded"
    history = superuser.get(change_url("surface-quick")).content.decode()
    tokens = re.findall(r"<tr><td>(\d+)</td><td class=\"bgtasks-outcome-(\w+)\"", history)
    assert tokens == [("2", "succeeded"), ("1", "lost")]  # the silent run, recorded as lost


def test_the_run_history_is_paged_newest_first(
    site_alias: str, viewer: Client, change_url: Any
) -> None:
    for _ in range(45):
        lease = objects.try_claim("cleanup", "worker-1", ttl=30)
        objects.release("cleanup", "worker-1", token=lease.token)

    def page(query: str) -> tuple[list[int], str]:
        html = viewer.get(change_url("cleanup") + query).content.decode()
        history = html[html.index('<table class="bgtasks-history">') :]
        return [int(t) for t in re.findall(r"<tr><td>(\d+)</td>", history)], history

    first, html = page("")
    assert first == list(range(45, 25, -1))
    assert "Runs 1\u201320 of 45" in html and "\u2039 newer" not in html
    assert 'href="?runs=2"' in html
    second, html = page("?runs=2&_changelist_filters=q%3Dclean")
    assert second == list(range(25, 5, -1))
    # The other pages keep the page's query (the changelist's filters).
    assert 'href="?runs=1&amp;_changelist_filters=q%3Dclean"' in html
    assert 'href="?runs=3&amp;_changelist_filters=q%3Dclean"' in html
    assert page("?runs=3")[0] == [5, 4, 3, 2, 1]
    assert page("?runs=99")[0] == [5, 4, 3, 2, 1]  # past the end: the last page
    assert page("?runs=x")[0] == first


def test_the_changelist_fits_into_fewer_columns(site_alias: str, viewer: Client) -> None:
    """Owner, token and heartbeat share a column, and so do the start and
    the duration (the finish on hover): each is still a live cell."""
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.release("cleanup", "worker-1", token=lease.token)

    html = viewer.get(CHANGELIST).content.decode()
    headers = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', html)
    assert headers == [
        "name",
        "status_badge",
        "progress_bar",
        "holder",
        "outcome_cell",
        "when",
        "about",
    ]
    cells = re.findall(r'data-bgtasks-task="cleanup" data-bgtasks-field="(\w+)"', html)
    assert cells == [
        "status",
        "progress",
        "owner",
        "token",
        "heartbeat",
        "outcome",
        "started",
        "duration",
    ]
    state = objects.get_state("cleanup")
    assert state is not None and state.finished_at is not None
    finished = admin_time(state.finished_at)
    assert f'data-bgtasks-field="duration" title="finished {finished}"' in html


def test_the_admin_shows_requests_schedules_attempts_and_workers(
    site_alias: str, make_staff: Any, client: Any, change_url: Any
) -> None:
    """The workers' state on the pages: a pending request, the next slot, the
    run's trigger and attempt (also in history), and each live worker."""
    import datetime as dt

    from django_bgtasks.models import BackgroundTask as Task

    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    assert lease is not None
    assert objects.release("cleanup", "worker-1", token=lease.token)
    objects.work.beat(
        worker="host-a:41:ab",
        host="host-a",
        pid=41,
        tasks=["cleanup", "sync"],
        concurrency=4,
        running=["sync"],
    )
    assert objects.request_run("cleanup")  # a task that worker runs
    Task.objects.filter(name="cleanup").update(
        next_run_at=dt.datetime(2031, 5, 6, 7, 8, tzinfo=dt.UTC)
    )
    make_staff("viewer", "view_backgroundtask")
    client.login(username="viewer", password="pw")  # noqa: S106
    listing = client.get(CHANGELIST).content.decode()
    assert "bgtasks-status-requested" in listing
    assert "2031-05-06" in listing  # the next run
    assert "host-a" in listing and "cleanup, sync" in listing and ">sync<" in listing
    detail = client.get(change_url("cleanup")).content.decode()
    assert "manual, 1" in detail  # the last run's trigger and attempt
    assert "<td>manual</td><td>1</td>" in detail  # and in history


def test_the_detail_page_shows_the_result_of_the_last_run_and_of_each_run(
    site_alias: str, make_staff: Any, client: Any, change_url: Any
) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    assert lease is not None
    assert objects.release("cleanup", "worker-1", token=lease.token, result={"deleted": 41})
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    assert lease is not None
    assert objects.release("cleanup", "worker-1", token=lease.token, result={1, 2})
    make_staff("viewer", "view_backgroundtask")
    client.login(username="viewer", password="pw")  # noqa: S106
    detail = client.get(change_url("cleanup")).content.decode()
    assert "not stored: TypeError" in detail  # the last run's set didn't encode
    assert "<code>{&quot;deleted&quot;:41}</code>" in detail  # the first run's, in history


def test_a_timed_out_run_shows_its_outcome_in_red_and_can_be_filtered(
    site_alias: str, viewer: Client, change_url: Any
) -> None:
    lease = objects.try_claim("surface-slow", "worker-1", ttl=30)
    error = "task 'surface-slow' timed out: it ran past its 2 s"
    assert objects.release(
        "surface-slow", "worker-1", token=lease.token, outcome=Outcome.TIMED_OUT, error=error
    )
    history = viewer.get(change_url("surface-slow")).content.decode()
    assert re.findall(r"<tr><td>(\d+)</td><td class=\"bgtasks-outcome-([\w-]+)\"", history) == [
        (str(lease.token), "timed-out")
    ]
    objects.try_claim("surface-quick", "worker-1", ttl=30)  # another row, not timed out
    filtered = viewer.get(CHANGELIST, {"outcome__exact": "timed-out"}).content.decode()
    assert change_url("surface-slow") in filtered and change_url("surface-quick") not in filtered
    page = viewer.get(CHANGELIST).content.decode()
    assert '<a href="?outcome__exact=timed-out">timed out</a>' in page  # offered as a filter


# --- what live.js is given ---------------------------------------------------------------


def test_live_js_gets_the_state_names_from_the_page(
    site_alias: str, viewer: Client, change_url: Any
) -> None:
    from django.contrib.staticfiles import finders

    objects.try_claim("cleanup", "worker-1", ttl=30)
    for page in (CHANGELIST, change_url("cleanup")):
        html = viewer.get(page).content.decode()
        found = re.search(r'<script id="bgtasks-states"[^>]*>(.*?)</script>', html)
        assert found is not None, page
        assert json.loads(found.group(1)) == {
            "statuses": {
                "RUNNING": "running",
                "REQUESTED": "requested",
                "CANCEL_REQUESTED": "cancel requested",
                "STALE": "stale",
                "PAUSED": "paused",
                "IDLE": "idle",
                "NEVER_RUN": "never run",
            },
            "slugs": {
                "running": "running",
                "requested": "requested",
                "cancel requested": "cancel-requested",
                "stale": "stale",
                "paused": "paused",
                "idle": "idle",
                "never run": "never-run",
            },
        }
    # So the script spells no state itself: each name is written once, in choices.py.
    path = finders.find("django_bgtasks/live.js")
    assert isinstance(path, str)
    with open(path, encoding="utf-8") as script:
        text = script.read()
    for value in [*Status.values, *Outcome.values]:
        assert f'"{value}' not in text, value
