"""admin/queued_list.py: the Django tasks' list at any size of their table,
on the surfaces' engines. Its caps are lowered here (a few tasks stand for
a big table); what the list reads at 10,000,000 rows is benchmarks/scale.py's."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client

from django_bgtasks.admin import queued_list
from django_bgtasks.models import QueuedTask
from tests import djtasks

QUEUED = "/admin/django_bgtasks/queuedtask/"


def _enqueue(count: int, *, queue: str = "default", task: Any = None) -> list[str]:
    chosen = (task or djtasks.add).using(queue_name=queue)
    results = chosen.get_backend().enqueue_many(chosen, [((n, 1), {}) for n in range(count)])
    return [str(result.id) for result in results]


def _choices(response: Any, title: str) -> dict[str, str]:
    """A filter's choices, as the sidebar shows them: {display: selected}."""
    [found] = [spec for spec in response.context["cl"].filter_specs if spec.title == title]
    return {
        str(choice["display"]): choice["selected"]
        for choice in found.choices(response.context["cl"])
    }


def test_counts_stop_at_their_cap_and_the_page_says_so(
    tasks_site_alias: str, superuser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queued_list, "COUNT_CAP", 5)
    _enqueue(4)
    _enqueue(3, queue="other")
    page = superuser.get(QUEUED)
    assert page.status_code == 200
    text = page.content.decode()
    assert "5+ Django tasks" in text and "More than 5 Django tasks match" in text
    # The newest five: three of "other", two of "default", each at least that.
    assert _choices(page, "queue") == {"All": True, "default (2+)": False, "other (3+)": False}
    assert "ready (5+)" in _choices(page, "status")
    narrowed = superuser.get(f"{QUEUED}?queue_name=other")
    assert "3 Django tasks" in narrowed.content.decode()
    assert "More than" not in narrowed.content.decode()
    # With a queue chosen, the statuses are counted among its tasks: exactly.
    assert _choices(narrowed, "status") == {
        "All": True, "ready (3)": False, "running (0)": False,
        "successful (0)": False, "failed (0)": False, "will retry (0)": False,
    }  # fmt: skip
    assert _choices(narrowed, "queue")["other (3+)"] is True  # (its own counts: all tasks)


def test_the_queue_filter_lists_the_queues_there_are_and_the_backends_tasks_names(
    tasks_site_alias: str, superuser: Client
) -> None:
    _enqueue(1, queue="other")
    page = superuser.get(QUEUED)
    assert [name for name in _choices(page, "queue") if name != "All"] == ["other (1)"]
    backends = [name.split(" (")[0] for name in _choices(page, "backend") if name != "All"]
    assert backends == ["backoff", "default", "retrying", "short"]  # TASKS' LeaseBackends


def test_the_search_finds_a_task_by_its_id_or_a_part_of_its_path(
    tasks_site_alias: str, superuser: Client
) -> None:
    added = _enqueue(2)
    echoed = _enqueue(1, task=djtasks.echo)

    def found(term: str) -> list[str]:
        response = superuser.get(QUEUED, {"q": term})
        return [str(row.uuid) for row in response.context["cl"].result_list]

    assert found(added[0]) == [added[0]]
    assert found(added[0].upper()) == [added[0]]  # a UUID in any case
    assert found("DJTASKS.ECHO") == echoed
    assert found("djtasks.") == [echoed[0], added[1], added[0]]
    assert found("no-such-task") == []
    assert found(added[0][:8]) == []  # an id is found whole, not by a part


def test_an_action_on_the_whole_selection_takes_the_newest_at_its_cap(
    tasks_site_alias: str, superuser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queued_list, "ACTION_CAP", 3)
    ids = _enqueue(5)
    response = superuser.post(
        QUEUED,
        {"action": "cancel", "select_across": "1", "_selected_action": [ids[0]], "index": "0"},
        follow=True,
    )
    messages = [str(message) for message in response.context["messages"]]
    assert "An action takes at most 3 tasks at a time" in messages[0]
    assert messages[1].startswith("Cancelled 3 Django tasks; they will not run:")
    statuses = dict(QueuedTask.objects.using(tasks_site_alias).values_list("uuid", "status"))
    assert [statuses[uuid.UUID(one)] for one in ids] == [
        "READY", "READY", "FAILED", "FAILED", "FAILED",
    ]  # fmt: skip


def test_pausing_the_queues_of_the_whole_selection_reads_no_row_of_it(
    tasks_site_alias: str, superuser: Client
) -> None:
    ids = _enqueue(3, queue="other")
    _enqueue(2)
    response = superuser.post(
        f"{QUEUED}?queue_name=other",
        {"action": "pause_queues", "select_across": "1", "_selected_action": [ids[0]]},
        follow=True,
    )
    said = [str(m) for m in response.context["messages"]]
    assert said[0] == (
        "Paused the queue “other”: no worker claims its tasks until its unpause; running ones"
        " finish."
    )
    # The list it comes back to says so above its rows.
    assert said[1].startswith("Queue other is paused (since ") and len(said) == 2
    assert set(QueuedTask.objects.paused_queues()) == {"other"}


def test_a_paused_queue_is_said_above_the_list_and_on_its_tasks_pages(
    tasks_site_alias: str, superuser: Client
) -> None:
    [waiting] = _enqueue(1, queue="other")
    [other] = _enqueue(1)
    assert QueuedTask.objects.pause_queue("other")
    page = superuser.get(QUEUED).content.decode()
    assert "Queue other is paused (since " in page
    assert "no worker claims its tasks until it is unpaused" in page
    paused = superuser.get(f"{QUEUED}{waiting}/change/").content.decode()
    assert "ready (waiting for its queue to be unpaused)" in paused
    ready = superuser.get(f"{QUEUED}{other}/change/").content.decode()
    assert "waiting for" not in ready
    assert QueuedTask.objects.unpause_queue("other")
    assert "is paused" not in superuser.get(QUEUED).content.decode()


def test_a_failed_task_says_why_in_the_list_in_red(
    tasks_site_alias: str, superuser: Client
) -> None:
    """The last line of the last error, under the status, for a failed task
    and for a ready one that will run again; none for the others."""
    failed, retrying, fine = _enqueue(3)
    table = QueuedTask.objects.using(tasks_site_alias)
    traceback = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad row 7\n'
    error = {"exception_class_path": "builtins.ValueError", "traceback": traceback}
    table.filter(uuid=uuid.UUID(failed)).update(status="FAILED", errors=[error])
    table.filter(uuid=uuid.UUID(retrying)).update(attempts=1, errors=[error])
    html = superuser.get(QUEUED).content.decode()
    rows = {one: html.split(one, 2)[2].split("</tr>", 1)[0] for one in (failed, retrying, fine)}
    line = '<div class="bgtasks-error-line"><span class="bgtasks-id">ValueError:<wbr> bad row 7'
    assert (
        line in rows[failed]
        and '<span class="bgtasks-queued-failed">failed</span>' in rows[failed]
    )
    assert line in rows[retrying] and "bgtasks-error-line" not in rows[fine]


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
