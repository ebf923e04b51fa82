"""The buttons of a Django task's page in the admin (admin/queued_buttons.py),
on the surfaces' engines, by the Retry button of a failed task: shown to
operators only and while the task has it, a POST by an operator only
(refused to a viewer, to a GET, to an anonymous user), back to the task's
page with what its operation answered, or to the list for an id no task
has. (Cancel's button: tests/admin/test_queued_page.py.)"""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.admin.test_queued_retry import QUEUED, _queued_values


def test_a_failed_tasks_page_has_a_retry_button_for_operators_only(
    tasks_site_alias: str, superuser: Client, viewer: Client, messages_of: Any
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
