"""The admin for background tasks: what superusers, view-only staff and
anonymous users see and can do, each action's LogEntry, escaping, CSRF and
ATOMIC_REQUESTS, on each database (users live in "default")."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client
from django.utils import translation
from django.utils.formats import date_format, get_format
from django.utils.html import escape
from django.utils.timezone import localtime

from django_bgtasks import background_task
from django_bgtasks.admin.formats import admin_time
from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.choices import Outcome, Status
from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate, rows, runs

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
EVIL = '<script>alert("owned")<\\script> & <img onerror=x>'  # no '/': names can't have one


@background_task(name=EVIL, ttl=30)
def evil(lease: Any) -> None:
    """Has a name that is markup."""


def url(name: str, operation: str) -> str:
    from django.urls import reverse

    return reverse(f"admin:django_bgtasks_backgroundtask_{operation}", args=[name])


def change_url(name: str) -> str:
    from django.contrib.admin.utils import quote

    return f"{CHANGELIST}{quote(name)}/change/"


@pytest.fixture
def superuser(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("root", superuser=True))
    return client


@pytest.fixture
def viewer(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("viewer", "view_backgroundtask"))
    return client


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def logged() -> list[tuple[str, str]]:
    return [
        (entry.object_id, entry.change_message)
        for entry in LogEntry.objects.order_by("pk")
        if entry.action_flag == CHANGE
    ]


# --- anonymous -----------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_login_page_and_change_nothing(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"secret": "s3cr3t"}, ttl=30)
    before = rows(site_alias)
    client = Client()

    for path, method in [
        (CHANGELIST, "get"),
        (change_url("cleanup"), "get"),
        (CHANGELIST + "status/", "get"),
        (url("surface-quick", "run"), "post"),
        (url("cleanup", "cancel"), "post"),
        (url("cleanup", "release"), "post"),
    ]:
        response = getattr(client, method)(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/admin/login/"), path
        assert b"s3cr3t" not in response.content
    assert rows(site_alias) == before


# --- view-only staff ------------------------------------------------------------------------


def test_view_only_staff_see_the_state_but_no_buttons(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 9, "total": 20, "phase": "deleting"}, ttl=30)

    page = viewer.get(CHANGELIST)
    html = page.content.decode()

    assert page.status_code == 200
    assert 'data-bgtasks-field="status">running</span>' in html
    assert '<progress max="1" value="0.45"></progress>' in html
    assert "45% (9/20)" in html
    assert "worker-1" in html
    assert f'data-bgtasks-poll="{CHANGELIST}status/"' in html
    assert "django_bgtasks/live.js" in html
    # No operations: no buttons, no action menu, no hidden form to submit.
    for absent in (
        "Run now",
        "Request cancel",
        "Force release",
        "bgtasks-row-actions",
        'name="action"',
    ):
        assert absent not in html, absent


def test_view_only_staff_get_403_for_every_operation(site_alias: str, viewer: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)

    assert viewer.post(url("surface-quick", "run")).status_code == 403
    assert viewer.post(url("cleanup", "cancel")).status_code == 403
    assert viewer.get(url("cleanup", "release")).status_code == 403
    assert viewer.post(url("cleanup", "release"), {"token": "1"}).status_code == 403
    # The changelist's actions are not offered to them, so a forged one does nothing.
    forged = viewer.post(
        CHANGELIST,
        {
            "action": "force_release",
            "_selected_action": ["cleanup"],
            "post": "yes",
            "confirmed": json.dumps({"cleanup": 1}),
            "index": "0",
        },
        follow=True,
    )
    assert forged.status_code == 200
    assert rows(site_alias) == before
    assert logged() == []


def test_the_status_url_needs_the_view_permission(site_alias: str, make_staff: Any) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    client = Client()
    client.force_login(make_staff("staff"))
    assert client.get(CHANGELIST + "status/").status_code == 403

    client.force_login(make_staff("viewer", "view_backgroundtask"))
    response = client.get(CHANGELIST + "status/")
    assert response.status_code == 200
    assert [task["name"] for task in response.json()["tasks"]] == ["cleanup"]
    tag = response["ETag"]
    assert client.get(CHANGELIST + "status/", headers={"if-none-match": tag}).status_code == 304


# --- the data is read-only for everyone -------------------------------------------------------


def test_nobody_can_add_edit_or_delete_rows(site_alias: str, superuser: Client) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 1}, ttl=30)
    before = rows(site_alias)

    assert superuser.get(CHANGELIST + "add/").status_code == 403
    detail = superuser.get(change_url("cleanup"))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    edit = superuser.post(change_url("cleanup"), {"owner": "me", "running": "", "token": 99})
    assert edit.status_code == 403
    assert superuser.post(CHANGELIST + "cleanup/delete/", {"post": "yes"}).status_code == 403
    assert rows(site_alias) == before


def test_the_detail_page_shows_the_value_and_the_run_history(
    site_alias: str, viewer: Client
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
    site_alias: str, superuser: Client, settle: Any
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


def test_the_run_history_is_paged_newest_first(site_alias: str, viewer: Client) -> None:
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


# --- operations by a superuser ----------------------------------------------------------------


def test_run_now_from_a_row_starts_the_task_and_is_logged(
    site_alias: str, superuser: Client, settle: Any
) -> None:
    lease = objects.try_claim("surface-quick", "worker-1", ttl=30)
    objects.release("surface-quick", "worker-1", token=lease.token)

    page = superuser.get(CHANGELIST).content.decode()
    assert f'formaction="{url("surface-quick", "run")}"' in page
    response = superuser.post(url("surface-quick", "run"), {"next": CHANGELIST}, follow=True)

    assert response.redirect_chain == [(CHANGELIST, 302)]
    [message] = messages_of(response)
    assert message.startswith("Started “surface-quick” (token 2) on ")
    assert settle("surface-quick").outcome == "succeeded"
    [(object_id, change)] = logged()
    assert object_id == "surface-quick" and change.startswith("Ran now (token 2, owner ")


def test_run_now_says_who_holds_a_running_task(site_alias: str, superuser: Client) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    before = rows(site_alias)

    response = superuser.post(url("surface-quick", "run"), follow=True)

    assert messages_of(response) == ["“surface-quick” is already running on worker-1."]
    assert rows(site_alias) == before and logged() == []


def row_of(html: str, name: str) -> str:
    """The changelist's row (``<tr>…</tr>``) whose checkbox selects ``name``."""
    table = html[html.index('<table id="result_list">') :]
    for row in re.findall(r"<tr>(.*?)</tr>", table[: table.index("</table>")], re.S):
        if f'name="_selected_action" value="{name}"' in row:
            return str(row)
    raise AssertionError(f"no row for {name!r}")


def test_registered_tasks_that_never_ran_are_rows_of_the_list(
    site_alias: str, superuser: Client, settle: Any, settings: Any
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


def test_a_never_run_task_has_a_detail_page_and_can_be_selected(
    site_alias: str, superuser: Client, viewer: Client, settle: Any
) -> None:
    detail = viewer.get(change_url("surface-slow"))
    html = detail.content.decode()
    assert detail.status_code == 200
    assert "never run" in html and "Counts slowly (a minute)" in html
    assert "No finished runs yet." in html and "Run now" not in html
    assert "Run now" in superuser.get(change_url("surface-slow")).content.decode()
    assert superuser.get(CHANGELIST + "surface-slow/history/").status_code == 200
    missing = superuser.get(change_url("not-registered"), follow=True)  # as for any id
    assert "“not-registered” doesn\u2019t exist" in messages_of(missing)[0]
    assert rows(site_alias) == []

    # The changelist's actions reach them too, though no queryset holds them.
    response = action(superuser, "request_cancel", "surface-quick")
    assert messages_of(response) == ["“surface-quick” is not running; there is nothing to cancel."]
    response = action(superuser, "run_now", "surface-quick")
    assert messages_of(response)[0].startswith("Started “surface-quick” (token 1) on ")
    assert settle("surface-quick").outcome == "succeeded"


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


def test_run_now_refuses_a_task_that_is_not_registered(site_alias: str, superuser: Client) -> None:
    lease = objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.release("adhoc", "worker-1", token=lease.token)
    before = rows(site_alias)

    response = superuser.post(url("adhoc", "run"), follow=True)

    assert messages_of(response) == [
        "“adhoc” is not a registered task, so it can't be started here."
    ]
    assert rows(site_alias) == before
    assert (
        "formaction" not in superuser.get(CHANGELIST).content.decode().split("adhoc", 1)[1][:400]
    )


@pytest.mark.parametrize("executor", ["thread", "worker"])
def test_run_now_refuses_a_task_that_needs_arguments_with_the_reason(
    site_alias: str, superuser: Client, settings: Any, executor: str
) -> None:
    settings.BGTASKS_EXECUTOR = executor
    before = (rows(site_alias), runs(site_alias))

    response = superuser.post(url("surface-sum", "run"), follow=True)  # (lease, numbers)

    assert messages_of(response) == [
        "“surface-sum” can't be started here: task 'surface-sum' can't take these "
        "arguments: missing a required argument: 'numbers'"
    ]
    assert (rows(site_alias), runs(site_alias)) == before


def test_run_now_with_arguments_runs_the_task_with_them_and_logs_them(
    site_alias: str, superuser: Client, settle: Any
) -> None:
    detail = change_url("surface-sum")
    page = superuser.get(detail).content.decode()
    # The detail page's JSON field: open, since surface-sum(lease, numbers) needs one.
    assert '<details class="bgtasks-arguments" open>' in page
    assert f'action="{url("surface-sum", "run")}"' in page and 'name="arguments"' in page
    assert "The arguments of surface-sum(numbers), as one JSON object:" in page

    arguments = '{"args": [[1, 2, 3]]}'
    response = superuser.post(
        url("surface-sum", "run"), {"arguments": arguments, "next": detail}, follow=True
    )

    assert response.redirect_chain == [(detail, 302)]
    [message] = messages_of(response)
    assert message.startswith("Started “surface-sum” (token 1) on ")
    assert settle("surface-sum").outcome == "succeeded"
    assert [run["result"] for run in runs(site_alias, "surface-sum")] == [6]
    [(object_id, change)] = logged()
    assert object_id == "surface-sum"
    assert change.startswith('Ran now with {"args": [[1, 2, 3]], "kwargs": {}} (token 1, owner ')


def test_run_now_with_arguments_for_a_worker_files_them(
    site_alias: str, superuser: Client, settings: Any
) -> None:
    settings.BGTASKS_EXECUTOR = "worker"
    arguments = '{"kwargs": {"numbers": [4, 5]}}'

    response = superuser.post(url("surface-sum", "run"), {"arguments": arguments}, follow=True)

    assert messages_of(response) == ["Requested “surface-sum”; a worker will run it."]
    row = objects.get(name="surface-sum")
    assert (row.request, row.requested_by) == (
        {"args": [], "kwargs": {"numbers": [4, 5]}},
        "admin: root",
    )
    [(object_id, change)] = logged()
    assert object_id == "surface-sum"
    assert change == (
        'Requested a run for a worker with {"args": [], "kwargs": {"numbers": [4, 5]}}.'
    )


@pytest.mark.parametrize("executor", ["thread", "worker"])
@pytest.mark.parametrize(
    ("name", "arguments", "reason"),
    [
        # surface-quick(lease, total=3), surface-sum(lease, numbers): tests/testapp
        (
            "surface-sum",
            '{"args": [1,',
            "the arguments field is not valid JSON: Expecting value: line 1 column 13 (char 12)",
        ),
        (
            "surface-sum",
            "[[1, 2]]",
            'the arguments must be a JSON object such as {"args": [1, 2], "kwargs": '
            '{"days": 7}}, not an array (a list)',
        ),
        (
            "surface-sum",
            '{"arg": [[1]]}',
            "the arguments may have only the keys 'args' and 'kwargs', not 'arg'",
        ),
        (
            "surface-sum",
            '{"args": {"numbers": [1]}}',
            "args must be a list or tuple (a JSON array), not an object (a dict)",
        ),
        (
            "surface-sum",
            '{"kwargs": [[1]]}',
            "kwargs must be a dict (a JSON object), not an array (a list)",
        ),
        (
            "surface-quick",
            '{"kwargs": {"bogus": 1}}',
            "task 'surface-quick' can't take these arguments: "
            "got an unexpected keyword argument 'bogus'",
        ),
        (
            "surface-sum",
            '{"kwargs": {}}',
            "task 'surface-sum' can't take these arguments: "
            "missing a required argument: 'numbers'",
        ),
    ],
)
def test_run_now_refuses_bad_arguments_with_the_reason_and_writes_nothing(
    site_alias: str,
    superuser: Client,
    settings: Any,
    executor: str,
    name: str,
    arguments: str,
    reason: str,
) -> None:
    settings.BGTASKS_EXECUTOR = executor
    before = (rows(site_alias), runs(site_alias))

    response = superuser.post(url(name, "run"), {"arguments": arguments}, follow=True)

    assert messages_of(response) == [f"“{name}” can't be started here: {reason}"]
    assert (rows(site_alias), runs(site_alias)) == before and logged() == []


def test_the_arguments_field_is_only_for_operators_of_registered_tasks(
    site_alias: str, superuser: Client, viewer: Client
) -> None:
    lease = objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.release("adhoc", "worker-1", token=lease.token)
    quick = superuser.get(change_url("surface-quick")).content.decode()
    # surface-quick(lease, total=3) needs none: the field is there, closed.
    assert '<details class="bgtasks-arguments">' in quick
    assert "The arguments of surface-quick(total=3), as one JSON object:" in quick
    assert 'name="arguments"' not in viewer.get(change_url("surface-quick")).content.decode()
    assert 'name="arguments"' not in superuser.get(change_url("adhoc")).content.decode()


def test_run_now_for_a_worker_refuses_a_task_no_worker_runs(
    site_alias: str, superuser: Client, settings: Any
) -> None:
    settings.BGTASKS_EXECUTOR = "worker"
    lease = objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.release("adhoc", "worker-1", token=lease.token)  # a lease() row
    before = rows(site_alias)

    response = superuser.post(url("adhoc", "run"), follow=True)

    assert messages_of(response) == [
        "“adhoc” is not a registered task, so it can't be started here."
    ]
    assert rows(site_alias) == before


def test_request_cancel_from_a_row(site_alias: str, superuser: Client) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)

    response = superuser.post(url("cleanup", "cancel"), follow=True)

    assert messages_of(response) == [
        "Asked worker-1 to stop “cleanup” (token 1); it stops at its next heartbeat or update."
    ]
    renewal = objects.renew("cleanup", "worker-1", token=lease.token)
    assert renewal is not None and renewal.cancel_requested
    assert logged() == [("cleanup", "Requested cancel (token 1, owner worker-1).")]

    lease2 = objects.try_claim("idle", "worker-1", ttl=30)
    objects.release("idle", "worker-1", token=lease2.token)
    response = superuser.post(url("idle", "cancel"), follow=True)
    assert messages_of(response) == ["“idle” is not running; there is nothing to cancel."]
    assert len(logged()) == 1


def test_a_row_cancels_only_the_run_it_shows(site_alias: str, superuser: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    assert 'name="token" value="1"' in superuser.get(CHANGELIST).content.decode()
    objects.force_release("cleanup")
    objects.try_claim("cleanup", "worker-2", ttl=30)  # took over after the page loaded
    before = rows(site_alias)

    response = superuser.post(url("cleanup", "cancel"), {"token": "1"}, follow=True)
    assert messages_of(response) == [
        "“cleanup” was not cancelled: token 1 no longer holds it "
        "(another run, token 2, took over)."
    ]
    response = superuser.post(url("cleanup", "cancel"), {"token": "x"}, follow=True)
    assert messages_of(response) == ["That is not a valid token."]
    assert rows(site_alias) == before
    assert logged() == []

    superuser.post(url("cleanup", "cancel"), {"token": "2"})
    assert objects.get_state("cleanup").cancel_requested
    assert logged() == [("cleanup", "Requested cancel (token 2, owner worker-2).")]


def test_force_release_asks_for_confirmation_then_releases_that_claim(
    site_alias: str, superuser: Client
) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    backdate(site_alias, "cleanup", 40)  # a holder that died

    confirm = superuser.get(url("cleanup", "release"))
    html = confirm.content.decode()
    assert confirm.status_code == 200
    assert "worker-1" in html and "stale: holder silent for" in html
    assert 'name="token" value="1"' in html
    assert objects.get_state("cleanup").stale  # nothing released by looking

    response = superuser.post(url("cleanup", "release"), {"token": "1"}, follow=True)

    state = objects.get_state("cleanup")
    assert (state.running, state.stale, state.outcome) == (False, False, "released-by-operator")
    assert messages_of(response)[0].startswith("Released “cleanup” (token 1).")
    assert logged() == [("cleanup", "Force-released (token 1, owner worker-1).")]


def test_force_release_does_not_end_a_claim_made_after_the_confirmation(
    site_alias: str, superuser: Client
) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    superuser.get(url("cleanup", "release"))  # the operator sees token 1
    objects.force_release("cleanup")
    objects.try_claim("cleanup", "worker-2", ttl=30)  # token 2 takes over meanwhile

    response = superuser.post(url("cleanup", "release"), {"token": "1"}, follow=True)

    assert objects.get_state("cleanup").running
    assert "was not released: token 1 no longer holds it" in messages_of(response)[0]
    assert logged() == []
    bad = superuser.post(url("cleanup", "release"), {"token": "one"}, follow=True)
    assert messages_of(bad) == ["The confirmation had no valid token."]
    assert objects.get_state("cleanup").running


def test_operations_need_post(site_alias: str, superuser: Client) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)
    assert superuser.get(url("surface-quick", "run")).status_code == 405
    assert superuser.get(url("cleanup", "cancel")).status_code == 405
    assert superuser.put(url("cleanup", "release")).status_code == 405
    assert rows(site_alias) == before


# --- the changelist's bulk actions ---------------------------------------------------------------


def action(client: Client, name: str, *selected: str, **extra: str) -> Any:
    data = {"action": name, "_selected_action": list(selected), "index": "0", **extra}
    return client.post(CHANGELIST, data, follow=True)


def test_bulk_request_cancel_and_run_now(site_alias: str, superuser: Client, settle: Any) -> None:
    objects.try_claim("a", "worker-1", ttl=30)
    objects.try_claim("b", "worker-2", ttl=30)
    lease = objects.try_claim("surface-quick", "worker-3", ttl=30)
    objects.release("surface-quick", "worker-3", token=lease.token)

    action(superuser, "request_cancel", "a", "b")
    assert objects.get_state("a").cancel_requested and objects.get_state("b").cancel_requested

    response = action(superuser, "run_now", "surface-quick", "a")
    assert settle("surface-quick").token == 2
    assert "“a” is not a registered task, so it can't be started here." in messages_of(response)
    assert [object_id for object_id, _ in logged()] == ["a", "b", "surface-quick"]


def test_bulk_force_release_confirms_first(site_alias: str, superuser: Client) -> None:
    objects.try_claim("a", "worker-1", ttl=30)
    objects.try_claim("b", "worker-2", ttl=30)
    lease = objects.try_claim("idle", "worker-3", ttl=30)
    objects.release("idle", "worker-3", token=lease.token)

    confirm = action(superuser, "force_release", "a", "b", "idle")
    html = confirm.content.decode()
    assert "Yes, force release" in html and "worker-1" in html and "worker-2" in html
    assert objects.get_state("a").running and objects.get_state("b").running
    confirmed = re.search(r'name="confirmed" value="([^"]*)"', html)
    assert confirmed is not None
    tokens = json.loads(confirmed.group(1).replace("&quot;", '"'))
    assert tokens == {"a": 1, "b": 1}  # the idle task is not offered

    # Meanwhile b changes hands: only the claims shown are released.
    objects.force_release("b")
    objects.try_claim("b", "worker-4", ttl=30)
    selected = {"_selected_action": ["a", "b"], "action": "force_release", "post": "yes"}
    superuser.post(CHANGELIST, {**selected, "confirmed": json.dumps(tokens)})

    assert objects.get_state("a").outcome == "released-by-operator"
    assert objects.get_state("b").running and objects.get_state("b").owner == "worker-4"
    assert logged() == [("a", "Force-released (token 1, owner worker-1).")]


def test_every_action_says_what_it_did_when_nothing_matched(
    site_alias: str, superuser: Client
) -> None:
    """A name with no row (deleted since the page was made, or made up) and
    no registered task: each action says so, and does nothing."""
    ghost = "There is no task “ghost” (any more); nothing was done to it."
    for name in ("run_now", "request_cancel", "force_release"):
        assert messages_of(action(superuser, name, "ghost"))[0] == ghost, name
    objects.try_claim("a", "worker-1", ttl=30)
    response = action(superuser, "request_cancel", "a", "ghost", "phantom")
    assert messages_of(response) == [
        "There is no task “ghost”, “phantom” (any more); nothing was done to it.",
        "Asked worker-1 to stop “a” (token 1); it stops at its next heartbeat or update.",
    ]
    # A confirmation of claims that are gone, or of none at all.
    confirmed = {"action": "force_release", "post": "yes", "_selected_action": ["ghost"]}
    gone = superuser.post(CHANGELIST, {**confirmed, "confirmed": '{"ghost": 1}'}, follow=True)
    assert messages_of(gone) == [ghost]
    bad = superuser.post(CHANGELIST, {**confirmed, "confirmed": "[]"}, follow=True)
    assert messages_of(bad) == ["The confirmation had no valid token."]
    assert rows(site_alias)[0]["name"] == "a" and len(rows(site_alias)) == 1
    assert logged() == [("a", "Requested cancel (token 1, owner worker-1).")]


# --- escaping, CSRF, ATOMIC_REQUESTS ----------------------------------------------------


def test_task_names_are_escaped_everywhere(site_alias: str, superuser: Client) -> None:
    objects.try_claim(EVIL, f"{EVIL}-owner", {"note": EVIL}, ttl=30)
    objects.release(EVIL, f"{EVIL}-owner", token=1, outcome="failed", error=EVIL)
    objects.try_claim(EVIL, f"{EVIL}-owner", {"note": EVIL}, ttl=30)

    pages = [
        superuser.get(CHANGELIST),
        superuser.get(change_url(EVIL)),
        superuser.get(url(EVIL, "release")),
        superuser.post(url(EVIL, "cancel"), follow=True),
        superuser.post(url(EVIL, "run"), follow=True),
        action(superuser, "force_release", EVIL),
    ]
    for page in pages:
        html = page.content.decode()
        assert page.status_code == 200
        assert "<script>alert(" not in html
        assert "&lt;script&gt;alert(" in html


def test_admin_posts_without_a_csrf_token_are_refused(site_alias: str, make_staff: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("root", superuser=True))
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)

    assert client.post(url("surface-quick", "run")).status_code == 403
    assert client.post(url("cleanup", "cancel")).status_code == 403
    assert client.post(url("cleanup", "release"), {"token": "1"}).status_code == 403
    bulk = {"action": "request_cancel", "_selected_action": "cleanup", "index": "0"}
    assert client.post(CHANGELIST, bulk).status_code == 403
    assert rows(site_alias) == before and logged() == []


def test_operations_work_with_atomic_requests(
    site_alias: str, superuser: Client, atomic_requests: None, settle: Any
) -> None:
    superuser.post(url("surface-quick", "run"))
    assert settle("surface-quick").outcome == "succeeded"
    objects.try_claim("cleanup", "worker-1", ttl=30)
    superuser.post(url("cleanup", "cancel"))
    assert objects.get_state("cleanup").cancel_requested
    action(superuser, "request_cancel", "cleanup")
    superuser.post(url("cleanup", "release"), {"token": "1"})
    assert objects.get_state("cleanup").outcome == "released-by-operator"
    assert len(logged()) == 4


# --- what live.js is given ---------------------------------------------------------------


def test_the_page_names_the_event_stream_only_where_it_is_served(
    site_alias: str, viewer: Client, settings: Any
) -> None:
    """Django's test client is WSGI, where the stream answers 501: the pages
    name none, so live.js polls from the start and asks for no 501.
    ``BGTASKS_ADMIN_EVENTS = True`` names it (the events/ URLs routed to an
    ASGI server); under ASGI the page names it by itself (tests/browser)."""
    from django.urls import reverse

    objects.try_claim("cleanup", "worker-1", ttl=30)
    events = reverse("admin:django_bgtasks_backgroundtask_events")
    for page in (CHANGELIST, change_url("cleanup")):
        assert 'data-bgtasks-events=""' in viewer.get(page).content.decode(), page
    settings.BGTASKS_ADMIN_EVENTS = True
    for page in (CHANGELIST, change_url("cleanup")):
        assert f'data-bgtasks-events="{events}"' in viewer.get(page).content.decode(), page


@pytest.mark.usefixtures("site_formats")
def test_every_time_is_written_in_djangos_format_as_the_site_sets_it(
    site_alias: str, viewer: Client
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


def test_live_js_gets_the_state_names_from_the_page(site_alias: str, viewer: Client) -> None:
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


def test_the_admin_shows_requests_schedules_attempts_and_workers(
    site_alias: str, make_staff: Any, client: Any
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
    site_alias: str, make_staff: Any, client: Any
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


# --- Django Tasks (LeaseBackend) ----------------------------------------------------------

QUEUED = "/admin/django_bgtasks/queuedtask/"


def test_django_tasks_are_listed_with_their_columns(
    tasks_site_alias: str, superuser: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    done = djtasks.add.using(priority=7).enqueue(1, 2)
    failed = djtasks.fails.enqueue("<b>broken</b>")
    while (claim := QueuedTask.objects.claim("admin-test-worker", queues=None)) is not None:
        execute(claim)
    waiting = djtasks.add.using(queue_name="other").enqueue(3, 4)
    html = superuser.get(QUEUED).content.decode()
    for result in (done, failed, waiting):
        assert result.id in html
    assert "successful" in html and "failed" in html and "ready" in html
    # Five columns, a value a line: the path may wrap after each dot.
    text = re.sub(r"<[^>]+>", "", html)
    assert "tests.djtasks.add" in text and "queue other" in text and "priority 7" in text
    row = QueuedTask.objects.using(tasks_site_alias).get(uuid=done.id)
    assert admin_time(row.enqueued_at) in text
    detail = superuser.get(f"{QUEUED}{failed.id}/change/")
    page = detail.content.decode()
    assert escape("<b>broken</b>") in page and "<b>broken</b>" not in page
    assert "builtins.ValueError" in page
    # Its times to the second, as the list writes them.
    ended = QueuedTask.objects.using(tasks_site_alias).get(uuid=failed.id)
    assert ended.finished_at is not None and admin_time(ended.finished_at) in page
    assert admin_time(ended.enqueued_at) in page and admin_time(ended.started_at) in page


def test_a_django_task_is_found_by_its_id_and_old_links_follow_it(
    tasks_site_alias: str, superuser: Client, make_staff: Any
) -> None:
    """get_result()'s id, the API's and the admin's URL are one: the
    result's UUID. A link by the row's sequence number (the primary key,
    which these URLs carried before) is sent on to it."""
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    seq = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id).seq
    page = f"{QUEUED}{result.id}/change/"
    assert superuser.get(f"/bgtasks/django-tasks/{result.id}/").json()["id"] == result.id
    assert f'<a href="{page}">{result.id}</a>' in superuser.get(QUEUED).content.decode()
    detail = superuser.get(page)
    assert detail.status_code == 200 and result.id in detail.content.decode()
    assert superuser.get(f"{QUEUED}{result.id}/history/").status_code == 200

    for old, new in [
        (f"{QUEUED}{seq}/change/", page),
        (f"{QUEUED}{seq}/history/", f"{QUEUED}{result.id}/history/"),
    ]:
        response = superuser.get(old)
        assert (response.status_code, response["Location"]) == (302, new)
    assert superuser.get(f"{QUEUED}{seq}/", follow=True).redirect_chain[-1] == (page, 302)

    gone = "No Django task has the id “{}”: it never existed, or it finished more than " + (
        "BGTASKS_HISTORY_DAYS ago and bgtasks prune deleted it."
    )
    for missing in ("00000000-0000-4000-8000-000000000000", str(seq + 1000)):
        response = superuser.get(f"{QUEUED}{missing}/change/", follow=True)
        assert response.redirect_chain == [(QUEUED, 302)]
        assert messages_of(response) == [gone.format(missing)]
    response = superuser.get(f"{QUEUED}add/change/", follow=True)
    assert messages_of(response) == [
        "“add” is not a Django task's id: that is the UUID of its result "
        "(get_result().id, the JSON API's “id”, bgtasks show)."
    ]

    # Who may not see Django tasks learns nothing, not even where one went.
    stranger = Client()
    stranger.force_login(make_staff("stranger"))
    for old in (page, f"{QUEUED}{seq}/change/", f"{QUEUED}{seq}/history/"):
        assert stranger.get(old).status_code == 403


def test_the_cancel_action_needs_the_change_permission(
    tasks_site_alias: str, superuser: Client, viewer: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 1)
    pk = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id).pk
    form = {"action": "cancel", "_selected_action": [str(pk)]}
    assert viewer.get(QUEUED).status_code == 200
    viewer.post(QUEUED, form)
    assert djtasks.add.get_result(result.id).status == "READY"
    response = superuser.post(QUEUED, form, follow=True)
    assert f"Cancelled {result.id}; it will not run." in messages_of(response)
    assert djtasks.add.get_result(result.id).status == "FAILED"
    assert Client().get(QUEUED).status_code == 302  # anonymous: to the login


def _queued_values(alias: str) -> list[dict[str, Any]]:
    from django_bgtasks.models import QueuedTask

    return list(QueuedTask.objects.using(alias).order_by("seq").values())


def test_the_retry_action_says_what_became_of_each_task_and_needs_the_change_permission(
    tasks_site_alias: str, superuser: Client, viewer: Client, tmp_path: Any
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    failed = djtasks.add.enqueue(1, 1)
    QueuedTask.objects.cancel(failed.id)
    ready = djtasks.add.enqueue(2, 2)
    unique = djtasks.unique_record.enqueue(str(tmp_path / "record"), "a")
    QueuedTask.objects.cancel(unique.id)
    holder = djtasks.unique_record.enqueue(str(tmp_path / "record"), "b")
    table = QueuedTask.objects.using(tasks_site_alias)
    pks = [str(table.get(uuid=result.id).pk) for result in (failed, ready, unique)]
    form = {"action": "retry", "_selected_action": pks}

    before = _queued_values(tasks_site_alias)
    viewer.post(QUEUED, form)
    assert _queued_values(tasks_site_alias) == before
    said = messages_of(superuser.post(QUEUED, form, follow=True))
    assert said == [
        f"Retried 1 Django task; it is ready to run again: {failed.id}.",
        f"Not retried, as only a failed task can be: {ready.id} (ready).",
        "Not retried, as another run of the same unique task is ready or running: "
        f"{unique.id} (key “tests.djtasks.unique_record”, held by {holder.id}).",
    ]
    statuses = dict(table.values_list("uuid", "status"))
    assert [statuses[uuid.UUID(r.id)] for r in (failed, ready, unique)] == [
        "READY",
        "READY",
        "FAILED",
    ]
    # Nothing matched (the selected task was pruned since): it says so.
    gone = {"action": "retry", "_selected_action": [str(int(pks[-1]) + 1000)]}
    before = _queued_values(tasks_site_alias)
    assert messages_of(superuser.post(QUEUED, gone, follow=True)) == [
        "None of the selected Django tasks exists any more; nothing was retried."
    ]
    assert _queued_values(tasks_site_alias) == before


def test_a_batch_retry_names_the_first_few_and_counts_the_rest(
    tasks_site_alias: str, superuser: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    results = [djtasks.add.enqueue(n, n) for n in range(7)]
    for result in results:
        QueuedTask.objects.cancel(result.id)
    form = {"action": "retry", "select_across": "1", "index": "0", "_selected_action": ["1"]}
    [said] = messages_of(superuser.post(QUEUED, form, follow=True))
    newest = ", ".join(result.id for result in reversed(results[2:]))  # the list's order
    assert said == f"Retried 7 Django tasks; they are ready to run again: {newest} and 2 more."
    assert set(QueuedTask.objects.using(tasks_site_alias).values_list("status", flat=True)) == {
        "READY"
    }


def test_a_failed_tasks_page_has_a_retry_button_for_operators_only(
    tasks_site_alias: str, superuser: Client, viewer: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    failed = djtasks.add.enqueue(1, 1)
    QueuedTask.objects.cancel(failed.id)
    ready = djtasks.add.enqueue(2, 2)
    page, retry = f"{QUEUED}{failed.id}/change/", f"{QUEUED}{failed.id}/retry/"
    button = f'<form method="post" action="{retry}">'
    assert button in superuser.get(page).content.decode()
    assert ">Retry</button>" in superuser.get(page).content.decode()
    assert button not in viewer.get(page).content.decode()
    assert "/retry/" not in superuser.get(f"{QUEUED}{ready.id}/change/").content.decode()

    before = _queued_values(tasks_site_alias)
    assert viewer.post(retry).status_code == 403
    assert superuser.get(retry).status_code == 405
    assert Client().post(retry).status_code == 302  # anonymous: to the login
    assert _queued_values(tasks_site_alias) == before

    response = superuser.post(retry, follow=True)
    assert response.redirect_chain == [(page, 302)]
    assert messages_of(response) == [
        f"Retried 1 Django task; it is ready to run again: {failed.id}."
    ]
    assert djtasks.add.get_result(failed.id).status == "READY"
    assert button not in response.content.decode()  # ready now: no button
    response = superuser.post(retry, follow=True)
    assert messages_of(response) == [
        f"Not retried, as only a failed task can be: {failed.id} (ready)."
    ]

    before = _queued_values(tasks_site_alias)
    for bad in ("00000000-0000-4000-8000-000000000000", "not-a-uuid", "1"):
        response = superuser.post(f"{QUEUED}{bad}/retry/", follow=True)
        assert response.redirect_chain == [(QUEUED, 302)]
        assert messages_of(response) == [
            f"No Django task has the id “{bad}” (an id is the UUID of its result)."
        ]
    assert _queued_values(tasks_site_alias) == before


def test_the_django_tasks_filters_count_the_tasks_of_each_state(
    tasks_site_alias: str, superuser: Client
) -> None:
    """show_facets: each status of the filter with how many tasks have it."""
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    for n in range(2):
        QueuedTask.objects.cancel(djtasks.add.enqueue(n, n).id)
    djtasks.add.using(queue_name="other").enqueue(3, 3)
    changelist = superuser.get(QUEUED).context["cl"]
    assert changelist.add_facets
    [status] = [spec for spec in changelist.filter_specs if str(spec.title) == "status"]
    shown = [str(choice["display"]).lower() for choice in status.choices(changelist)]
    assert "failed (2)" in shown and "ready (1)" in shown, shown


def test_the_django_tasks_list_is_a_read_only_list_with_a_message_for_every_cancel(
    tasks_site_alias: str, superuser: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    html = superuser.get(QUEUED).content.decode()
    assert "<h1>Select Django task to view</h1>" in html
    # Its status filter says what its column says.
    # (With its count: the filters show how many tasks each choice has.)
    assert '<a href="?status__exact=FAILED">failed (0)</a>' in html
    result = djtasks.add.enqueue(1, 1)
    pk = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id).pk
    form = {"action": "cancel", "_selected_action": [str(pk), "999999"]}
    response = superuser.post(QUEUED, form, follow=True)
    assert messages_of(response) == [
        "1 selected Django task no longer exists; nothing was done to it.",
        f"Cancelled {result.id}; it will not run.",
    ]
    gone = superuser.post(QUEUED, {**form, "_selected_action": ["999998", "999999"]}, follow=True)
    assert messages_of(gone) == [
        "2 selected Django tasks no longer exist; nothing was done to them."
    ]


def test_django_tasks_are_shown_only_where_a_lease_backend_is_configured(
    tasks_site_alias: str, superuser: Client, settings: Any
) -> None:
    """A site whose TASKS has no LeaseBackend (or no TASKS at all, on
    Django 5.2 without the backport) has no Django tasks here to show."""
    assert "Django tasks" in superuser.get("/admin/").content.decode()
    settings.TASKS = {"default": {"BACKEND": settings.IMMEDIATE_BACKEND}}
    for page in ("/admin/", "/admin/django_bgtasks/", CHANGELIST):
        html = superuser.get(page).content.decode()
        assert "Django tasks" not in html and QUEUED not in html, page
    del settings.TASKS
    assert "Django tasks" not in superuser.get("/admin/").content.decode()


def test_nobody_can_save_a_django_task(tasks_site_alias: str, superuser: Client) -> None:
    """A Save rewrites the whole row with the values it read, outside every
    fence (raced against a finishing task, it set it back to RUNNING): the
    change page of a Django task is a view, for superusers too."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("admin-test-worker", queues=None)
    assert claim is not None and execute(claim) == "SUCCESSFUL"
    table = QueuedTask.objects.using(tasks_site_alias)
    before = table.filter(uuid=result.id).values().get()
    page = f"{QUEUED}{result.id}/change/"

    detail = superuser.get(page)
    assert detail.status_code == 200
    html = detail.content.decode()
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    altered = {
        **{name: str(value) for name, value in before.items() if value is not None},
        "status": "RUNNING",
        "return_value": "99",
        "finished_at": "",
        "_save": "Save",
    }
    with CaptureQueriesContext(connections[tasks_site_alias]) as queries:
        response = superuser.post(page, altered)
    assert response.status_code == 403
    assert table.filter(uuid=result.id).values().get() == before
    table_name = QueuedTask._meta.db_table
    writes = [
        query["sql"]
        for query in queries.captured_queries
        if table_name in query["sql"] and not query["sql"].lstrip().upper().startswith("SELECT")
    ]
    assert writes == []


def test_neither_admin_saves_a_row_by_any_way(tasks_site_alias: str, superuser: Client) -> None:
    """Whatever calls the admins' save_model() (a ``list_editable`` added
    later, a subclass's view), it refuses: only the fenced operations write."""
    from django.contrib import admin
    from django.core.exceptions import PermissionDenied
    from django.test import RequestFactory

    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    objects.try_claim("cleanup", "worker-1", ttl=30)
    result = djtasks.add.enqueue(1, 2)
    request = RequestFactory().post("/")
    for model, row in (
        (BackgroundTask, BackgroundTask.objects.using(tasks_site_alias).get(name="cleanup")),
        (QueuedTask, QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id)),
    ):
        before = model._default_manager.using(tasks_site_alias).values().get(pk=row.pk)
        row.owner = "me"
        with pytest.raises(PermissionDenied):
            admin.site._registry[model].save_model(request, row, None, True)
        assert model._default_manager.using(tasks_site_alias).values().get(pk=row.pk) == before


def test_the_pause_actions_pause_and_unpause_tasks_and_need_the_change_permission(
    site_alias: str, superuser: Client, viewer: Client
) -> None:
    viewer.post(CHANGELIST, {"action": "pause_tasks", "_selected_action": ["surface-quick"]})
    assert rows(site_alias) == []
    response = action(superuser, "pause_tasks", "surface-quick")
    assert messages_of(response) == [
        "Paused “surface-quick”: workers start nothing of it until its unpause."
    ]
    assert objects.get_state("surface-quick").status == "paused"
    response = action(superuser, "pause_tasks", "surface-quick")
    assert messages_of(response) == ["“surface-quick” was already paused."]
    response = action(superuser, "unpause_tasks", "surface-quick")
    assert messages_of(response) == ["Unpaused “surface-quick”."]
    assert objects.get_state("surface-quick").paused_at is None


def test_the_queue_pause_actions_pause_the_selected_tasks_queues(
    tasks_site_alias: str, superuser: Client, viewer: Client
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 1)
    pk = QueuedTask.objects.using(tasks_site_alias).get(uuid=result.id).pk
    form = {"action": "pause_queues", "_selected_action": [str(pk)]}
    viewer.post(QUEUED, form)
    assert QueuedTask.objects.paused_queues() == {}
    response = superuser.post(QUEUED, form, follow=True)
    assert "Paused the queue “default”" in messages_of(response)[0]
    assert list(QueuedTask.objects.paused_queues()) == ["default"]
    response = superuser.post(QUEUED, {**form, "action": "unpause_queues"}, follow=True)
    assert messages_of(response) == ["Unpaused the queue “default”."]
    assert QueuedTask.objects.paused_queues() == {}


def test_a_timed_out_run_shows_its_outcome_in_red_and_can_be_filtered(
    site_alias: str, viewer: Client
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


def test_a_cancelled_task_reads_failed_cancelled_not_cancel_requested(
    tasks_site_alias: str, superuser: Client
) -> None:
    """Issue 51: a cancelled Django Task read "failed (cancel requested)" in
    the admin, as if the cancel were still to come. The admin's list and
    page and ``bgtasks list``/``show`` say one rule (operations/queued.py's
    ``status_label``): a task cancelled while ready, or stopped at a check,
    is "failed (cancelled)"; one asked while it runs is "running (cancel
    requested)"; a run that succeeded anyway is "successful"; one that
    failed of its own error is "failed"."""
    from io import StringIO

    from django.core.management import call_command

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    def said(result_id: str) -> tuple[str, str, str]:
        page = superuser.get(f"{QUEUED}{result_id}/change/").content.decode()
        listing = superuser.get(QUEUED).content.decode()
        out = StringIO()
        call_command("bgtasks", "show", result_id, "--no-color", stdout=out)
        [status] = [line for line in out.getvalue().splitlines() if line.startswith("status")]
        row = listing[listing.index(result_id) :][:2000]
        return page, row, status.split(None, 1)[1]

    cancelled = djtasks.add.enqueue(1, 1)
    QueuedTask.objects.cancel(cancelled.id)
    page, row, shown = said(cancelled.id)
    assert shown == "failed (cancelled)"
    assert "failed (cancelled)" in page and "failed (cancelled)" in row
    assert "cancel requested" not in page and "cancel requested" not in row

    asked = djtasks.add.enqueue(2, 2)
    claim = QueuedTask.objects.claim("admin-test-worker", queues=None)
    assert claim is not None
    QueuedTask.objects.cancel(asked.id)
    assert said(asked.id)[2] == "running (cancel requested)"
    execute(claim)  # it did not look, and succeeded
    assert said(asked.id)[2] == "successful"

    failing = djtasks.fails.enqueue("its own error")
    claim = QueuedTask.objects.claim("admin-test-worker", queues=None)
    assert claim is not None
    QueuedTask.objects.cancel(failing.id)
    execute(claim)  # it failed before any check
    assert said(failing.id)[2] == "failed"
