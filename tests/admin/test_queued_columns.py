"""The columns of the Django tasks' list and the fields of a task's page
(admin/queued_columns.py), on the surfaces' engines: a value a line, times
to the second, an error escaped, and a status said by one rule with
``bgtasks show`` (a cancelled task reads "failed (cancelled)")."""

from __future__ import annotations

import re

from django.test import Client
from django.utils.html import escape

from django_bgtasks.admin.formats import admin_time

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
