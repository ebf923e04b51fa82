"""The admin's operator views (admin/views.py), on the surfaces' engines
(users live in "default"): ``status/`` behind the view permission; run now
(with arguments, in a thread or by a worker, or refused with the reason),
request cancel and force release (after its confirmation page) of the run
on screen and no other, each a POST, behind the change permission and
logged to the task's history (LogEntry); task names escaped on every page,
CSRF, and ATOMIC_REQUESTS."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_bgtasks import background_task
from django_bgtasks.models import BackgroundTask
from tests.dbtools import backdate, rows, runs

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
EVIL = '<script>alert("owned")<\\script> & <img onerror=x>'  # no '/': names can't have one


@background_task(name=EVIL, ttl=30)
def evil(lease: Any) -> None:
    """Has a name that is markup."""


# --- view-only staff ------------------------------------------------------------------------


def test_view_only_staff_get_403_for_every_operation(
    site_alias: str, viewer: Client, url: Any, logged: Any
) -> None:
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


# --- operations by a superuser ----------------------------------------------------------------


def test_run_now_from_a_row_starts_the_task_and_is_logged(
    site_alias: str, superuser: Client, settle: Any, url: Any, messages_of: Any, logged: Any
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


def test_run_now_says_who_holds_a_running_task(
    site_alias: str, superuser: Client, url: Any, messages_of: Any, logged: Any
) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    before = rows(site_alias)

    response = superuser.post(url("surface-quick", "run"), follow=True)

    assert messages_of(response) == ["“surface-quick” is already running on worker-1."]
    assert rows(site_alias) == before and logged() == []


def test_run_now_refuses_a_task_that_is_not_registered(
    site_alias: str, superuser: Client, url: Any, messages_of: Any
) -> None:
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
    site_alias: str, superuser: Client, settings: Any, executor: str, url: Any, messages_of: Any
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
    site_alias: str,
    superuser: Client,
    settle: Any,
    url: Any,
    change_url: Any,
    messages_of: Any,
    logged: Any,
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
    site_alias: str, superuser: Client, settings: Any, url: Any, messages_of: Any, logged: Any
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
    url: Any,
    messages_of: Any,
    logged: Any,
) -> None:
    settings.BGTASKS_EXECUTOR = executor
    before = (rows(site_alias), runs(site_alias))

    response = superuser.post(url(name, "run"), {"arguments": arguments}, follow=True)

    assert messages_of(response) == [f"“{name}” can't be started here: {reason}"]
    assert (rows(site_alias), runs(site_alias)) == before and logged() == []


def test_run_now_for_a_worker_refuses_a_task_no_worker_runs(
    site_alias: str, superuser: Client, settings: Any, url: Any, messages_of: Any
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


def test_request_cancel_from_a_row(
    site_alias: str, superuser: Client, url: Any, messages_of: Any, logged: Any
) -> None:
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


def test_a_row_cancels_only_the_run_it_shows(
    site_alias: str, superuser: Client, url: Any, messages_of: Any, logged: Any
) -> None:
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
    site_alias: str, superuser: Client, url: Any, messages_of: Any, logged: Any
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
    site_alias: str, superuser: Client, url: Any, messages_of: Any, logged: Any
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


def test_operations_need_post(site_alias: str, superuser: Client, url: Any) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)
    assert superuser.get(url("surface-quick", "run")).status_code == 405
    assert superuser.get(url("cleanup", "cancel")).status_code == 405
    assert superuser.put(url("cleanup", "release")).status_code == 405
    assert rows(site_alias) == before


# --- escaping, CSRF, ATOMIC_REQUESTS ----------------------------------------------------


def test_task_names_are_escaped_everywhere(
    site_alias: str, superuser: Client, url: Any, change_url: Any, action: Any
) -> None:
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


def test_admin_posts_without_a_csrf_token_are_refused(
    site_alias: str, make_staff: Any, url: Any, logged: Any
) -> None:
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
    site_alias: str,
    superuser: Client,
    atomic_requests: None,
    settle: Any,
    url: Any,
    action: Any,
    logged: Any,
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
