"""The background tasks' ModelAdmin (admin/options.py), on the surfaces'
engines (users live in "default"): anonymous users sent to the login, what
view-only staff see (no buttons, no actions), rows nobody adds, edits or
deletes, the page of a task that never ran, the arguments field for
operators only, the changelist's actions (run now, request cancel, force
release after a confirmation) with what each says and logs, and the event
stream named to live.js only where it is served."""

from __future__ import annotations

import json
import re
from typing import Any

from django.test import Client

from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"


# --- anonymous -----------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_login_page_and_change_nothing(
    site_alias: str, url: Any, change_url: Any
) -> None:
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


# --- the data is read-only for everyone -------------------------------------------------------


def test_nobody_can_add_edit_or_delete_rows(
    site_alias: str, superuser: Client, change_url: Any
) -> None:
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


# --- operations by a superuser ----------------------------------------------------------------


def test_a_never_run_task_has_a_detail_page_and_can_be_selected(
    site_alias: str,
    superuser: Client,
    viewer: Client,
    settle: Any,
    change_url: Any,
    action: Any,
    messages_of: Any,
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


def test_the_arguments_field_is_only_for_operators_of_registered_tasks(
    site_alias: str, superuser: Client, viewer: Client, change_url: Any
) -> None:
    lease = objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.release("adhoc", "worker-1", token=lease.token)
    quick = superuser.get(change_url("surface-quick")).content.decode()
    # surface-quick(lease, total=3) needs none: the field is there, closed.
    assert '<details class="bgtasks-arguments">' in quick
    assert "The arguments of surface-quick(total=3), as one JSON object:" in quick
    assert 'name="arguments"' not in viewer.get(change_url("surface-quick")).content.decode()
    assert 'name="arguments"' not in superuser.get(change_url("adhoc")).content.decode()


# --- the changelist's bulk actions ---------------------------------------------------------------


def test_bulk_request_cancel_and_run_now(
    site_alias: str, superuser: Client, settle: Any, action: Any, messages_of: Any, logged: Any
) -> None:
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


def test_bulk_force_release_confirms_first(
    site_alias: str, superuser: Client, action: Any, logged: Any
) -> None:
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
    site_alias: str, superuser: Client, action: Any, messages_of: Any, logged: Any
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


# --- what live.js is given ---------------------------------------------------------------


def test_the_page_names_the_event_stream_only_where_it_is_served(
    site_alias: str, viewer: Client, settings: Any, change_url: Any
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
