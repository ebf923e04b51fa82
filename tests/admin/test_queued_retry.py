"""The retry of failed Django tasks (admin/queued_retry.py), on the
surfaces' engines: the list's Retry action, for operators only, saying
what became of each task (a batch names the first few and counts the
rest). (The Retry button of a failed task's page, as the page's buttons
work: tests/admin/test_queued_buttons.py.)"""

from __future__ import annotations

import uuid
from typing import Any

from django.test import Client

QUEUED = "/admin/django_bgtasks/queuedtask/"


def _queued_values(alias: str) -> list[dict[str, Any]]:
    from django_bgtasks.models import QueuedTask

    return list(QueuedTask.objects.using(alias).order_by("seq").values())


def test_the_retry_action_says_what_became_of_each_task_and_needs_the_change_permission(
    tasks_site_alias: str, superuser: Client, viewer: Client, tmp_path: Any, messages_of: Any
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
    tasks_site_alias: str, superuser: Client, messages_of: Any
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
