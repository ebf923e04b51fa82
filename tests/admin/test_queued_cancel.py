"""The Django tasks' Cancel action (admin/queued_cancel.py), on the
surfaces' engines: behind the change permission, on a read-only list, with
a message for every cancel and for the selected tasks that no longer
exist. (The Cancel button of a task's page: test_queued_page.py.)"""

from __future__ import annotations

from typing import Any

from django.test import Client

QUEUED = "/admin/django_bgtasks/queuedtask/"


def test_the_cancel_action_needs_the_change_permission(
    tasks_site_alias: str, superuser: Client, viewer: Client, messages_of: Any
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


def test_the_django_tasks_list_is_a_read_only_list_with_a_message_for_every_cancel(
    tasks_site_alias: str, superuser: Client, messages_of: Any
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
