"""A Django task's page in the admin (admin/queued_cancel.py,
queued_columns.py): a running task's last heartbeat by the database's
clock, and the Cancel button of a ready or running task, for who may."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.test import Client

from django_bgtasks.models import QueuedTask
from tests import djtasks

QUEUED = "/admin/django_bgtasks/queuedtask/"
CANCEL_BUTTON = '<button type="submit" class="button bgtasks-button" title="A ready task will not'


def _client(make_staff: Any, name: str, *codenames: str) -> Client:
    client = Client()
    client.force_login(make_staff(name, *codenames))
    return client


def test_a_running_tasks_page_has_its_heartbeat_and_a_cancel_button(
    tasks_site_alias: str, make_staff: Any
) -> None:
    operator = _client(make_staff, "operator", "view_backgroundtask", "change_backgroundtask")
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    running = str(djtasks.echo.enqueue(1).id)
    ready = str(djtasks.echo.enqueue(2).id)
    table = QueuedTask.objects.using(tasks_site_alias)
    claim = QueuedTask.objects.claim("w-1", queues=None)  # the oldest: ``running``
    assert claim is not None and str(claim.uuid) == running
    page = operator.get(f"{QUEUED}{running}/change/").content.decode()
    assert "Last heartbeat:" in page and re.search(r"[0-9.]+ s ago \(ttl [^)]+\)<", page)
    assert CANCEL_BUTTON in page and f'action="{QUEUED}{running}/cancel/"' in page
    assert CANCEL_BUTTON not in viewer.get(f"{QUEUED}{running}/change/").content.decode()
    assert viewer.post(f"{QUEUED}{running}/cancel/").status_code == 403
    assert not table.get(uuid=uuid.UUID(running)).cancel_requested

    asked = operator.post(f"{QUEUED}{running}/cancel/", follow=True)
    assert asked.redirect_chain[-1][0] == f"{QUEUED}{running}/change/"
    assert table.get(uuid=uuid.UUID(running)).cancel_requested
    again = asked.content.decode()
    assert "Asked the worker to stop" in again and CANCEL_BUTTON not in again
    assert "running (cancel requested)" in again

    operator.post(f"{QUEUED}{ready}/cancel/")
    failed = operator.get(f"{QUEUED}{ready}/change/").content.decode()
    assert table.get(uuid=uuid.UUID(ready)).status == "FAILED"
    assert CANCEL_BUTTON not in failed and "Last heartbeat:" in failed  # (the field, empty)
    gone = operator.post(f"{QUEUED}00000000-0000-4000-8000-000000000000/cancel/", follow=True)
    assert gone.redirect_chain[-1][0] == QUEUED


def test_a_django_tasks_schedules_row_says_what_it_enqueues_and_when(
    tasks_site_alias: str, make_staff: Any, settings: Any
) -> None:
    """Its row in the background tasks' list is at work ("idle"), names the
    task it enqueues and the slot of the last one: not "never run"."""
    import datetime as dt

    from django_bgtasks.models import BackgroundTask
    from django_bgtasks.queue.task_schedules import task_schedules
    from django_bgtasks.worker import slots
    from tests.queue.test_task_schedules import make_due, schedule_settings

    adds = {"task": "tests.djtasks.add", "schedule": "* * * * *", "args": [1, 2]}
    schedule_settings(settings, {"adds": adds})
    [entry] = task_schedules()
    slot = BackgroundTask.objects.work.clock().replace(second=0, microsecond=0)
    make_due(tasks_site_alias, entry, slot - dt.timedelta(minutes=1))
    assert slots.enqueue_due([entry], BackgroundTask.objects.work.due()) == 1
    viewer = _client(make_staff, "viewer", "view_backgroundtask")
    page = viewer.get("/admin/django_bgtasks/backgroundtask/").content.decode()
    [row] = re.findall(r"<tr(?:(?!</tr>).)*tasks:default:adds(?:(?!</tr>).)*</tr>", page, re.S)
    assert "Enqueues the Django Task tests.djtasks.add." in row
    assert "last enqueued for <time" in row and "never run" not in row
