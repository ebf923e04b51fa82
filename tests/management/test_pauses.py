"""``bgtasks pause`` and ``bgtasks unpause`` (django_bgtasks/management/pauses.py):
what they say, and bad input refused with exit status 1 and nothing written.
(The rule: tests/operations/test_pause.py; with workers: tests/faults/test_pause.py.)"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks.models import BackgroundTask, QueuedTask
from tests.dbtools import rows

QUICK = "surface-quick"


def bgtasks(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", *args, stdout=out)
    return out.getvalue()


def test_pause_and_unpause_a_task_and_a_queue(tasks_site_alias: str) -> None:
    assert f"Paused task {QUICK!r}" in bgtasks("pause", QUICK)
    assert "Already paused:" in bgtasks("pause", QUICK)
    assert BackgroundTask.objects.get_state(QUICK).status == "paused"
    assert "paused" in bgtasks("show", QUICK)
    assert f"Unpaused task {QUICK!r}." in bgtasks("unpause", QUICK)
    assert "was not paused; nothing to do." in bgtasks("unpause", QUICK)

    assert "Paused queue 'other'" in bgtasks("pause", "--queue", "other")
    assert list(QueuedTask.objects.paused_queues()) == ["other"]
    assert "Unpaused queue 'other'." in bgtasks("unpause", "--queue", "other")
    assert QueuedTask.objects.paused_queues() == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause",), "not both or neither"),
        (("pause", QUICK, "--queue", "default"), "not both or neither"),
        (("unpause",), "not both or neither"),
        (("pause", "nobody-runs-this"), "No task named 'nobody-runs-this'"),
        (("pause", "--queue", "nowhere"), "No LeaseBackend in TASKS has the queue 'nowhere'"),
        (("pause", "--queue", ""), "queue name must not be blank"),
        (("unpause", "a/b"), "must not contain '/'"),
    ],
)
def test_bad_input_is_refused_with_nothing_written(
    refusal_alias: str, args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        bgtasks(*args)
    assert rows(refusal_alias) == [] and QueuedTask.objects.paused_queues() == {}
