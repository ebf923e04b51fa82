"""The admin's pause and unpause (admin/pauses.py), on the surfaces'
engines: the selected background tasks, and the queues of the selected
Django tasks, each behind the change permission."""

from __future__ import annotations

from typing import Any

from django.test import Client

from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows

objects = BackgroundTask.objects
CHANGELIST = "/admin/django_bgtasks/backgroundtask/"
QUEUED = "/admin/django_bgtasks/queuedtask/"


def test_the_pause_actions_pause_and_unpause_tasks_and_need_the_change_permission(
    site_alias: str, superuser: Client, viewer: Client, action: Any, messages_of: Any
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
    tasks_site_alias: str, superuser: Client, viewer: Client, messages_of: Any
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
