"""``bgtasks list`` with a filter, and ``bgtasks retry``, ``cancel`` and
``delete`` by filter (management/bulk.py): what each prints, ``--dry-run``'s
count with nothing done, and bad input refused with nothing written."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks.models import QueuedTask
from tests import djtasks


def bgtasks(*args: str) -> str:
    out = io.StringIO()
    call_command("bgtasks", *args, stdout=out)
    return out.getvalue()


def _tenants(alias: str) -> list[str]:
    batch = djtasks.echo.get_backend().enqueue_many(
        djtasks.echo, [((n,), {"tenant": "a" if n < 3 else "b"}) for n in range(5)]
    )
    return [str(result.id) for result in batch]


def test_list_shows_the_django_tasks_a_filter_matches(tasks_alias: str) -> None:
    ids = _tenants(tasks_alias)
    text = bgtasks("list", "--args", '{"tenant": "a"}', "--limit", "2")
    assert "Django Tasks the filter matches, newest first:" in text
    assert ids[2] in text and ids[1] in text and ids[0] not in text and ids[3] not in text
    listed = json.loads(bgtasks("list", "--args", '{"tenant": "b"}', "--json"))
    assert [item["id"] for item in listed["django_tasks"]] == ids[:2:-1]
    assert listed["more"] is False
    assert "No Django Task matches." in bgtasks("list", "--status", "FAILED")


def test_retry_cancel_and_delete_by_filter_each_say_what_they_did(tasks_alias: str) -> None:
    table = QueuedTask.objects.using(tasks_alias)
    ids = _tenants(tasks_alias)
    said = bgtasks("cancel", "--args", '{"tenant": "a"}')
    assert "Cancelled 3 of the 3 Django Tasks the filter matched." in said
    assert table.filter(status="FAILED").count() == 3

    before = list(table.order_by("seq").values())
    counted = bgtasks("retry", "--status", "failed", "--since", "1h", "--dry-run")
    assert counted.strip() == "3 Django Tasks match; nothing was done (--dry-run)."
    assert list(table.order_by("seq").values()) == before

    retried = bgtasks(
        "retry", "--status", "FAILED", "--task", "tests.djtasks.echo", "--since", "1h"
    )
    assert "Retried 3 of the 3 Django Tasks the filter matched." in retried
    table.filter(uuid=ids[4]).update(status="RUNNING", owner="w", token=1)
    deleted = bgtasks("delete", "--task", "tests.djtasks.echo")
    assert deleted.strip() == (
        "Deleted 4 of the 5 Django Tasks the filter matched; 1 skipped (running: cancel "
        "them first)."
    )
    assert list(table.values_list("status", flat=True)) == ["RUNNING"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("delete",), "Name at least one filter: status, queue"),
        (("retry",), "Give a failed Django Task's id, or filter options."),
        (("retry", "00000000-0000-4000-8000-000000000000", "--status", "FAILED"), "Give a"),
        (("cancel",), "Name a task (or a Django Task's id), or give filter options."),
        (("cancel", "--since", "2h", "--until", "3h"), "The time range is backwards"),
        (("delete", "--args", "{tenant"), "args must be JSON"),
        (("delete", "--dry-run"), "Name at least one filter: status, queue"),
        (("list", "--status", "DONE"), "status must be one of READY, RUNNING"),
        (("list", "--limit", "5"), "--limit goes with a filter option"),
    ],
)
def test_bad_input_is_a_command_error_with_nothing_written(
    tasks_alias: str, args: tuple[str, ...], message: str
) -> None:
    _tenants(tasks_alias)
    table = QueuedTask.objects.using(tasks_alias)
    before = list(table.order_by("seq").values())
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bgtasks(*args)
    assert list(table.order_by("seq").values()) == before
