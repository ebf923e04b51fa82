"""The operator's pause and unpause (django_bgtasks/operations/pause.py): each
result exactly when it should be, read back from the database, on every
engine; bad input refused with nothing written. (With real workers:
tests/faults/test_pause.py.)"""

from __future__ import annotations

import uuid

import pytest

from django_bgtasks.models import BackgroundTask, QueuedTask
from django_bgtasks.operations import pause as pausing
from django_bgtasks.operations.writes import NotRegistered
from tests import djtasks
from tests.dbtools import rows

objects = BackgroundTask.objects
QUICK = "surface-quick"  # registered in tests/testapp/tasks.py


def test_a_task_is_paused_once_and_unpaused_once(db_alias: str) -> None:
    paused = pausing.pause(QUICK)
    assert isinstance(paused, pausing.TaskPaused) and paused.changed
    assert paused.state.status == "paused" and paused.state.paused_at is not None
    again = pausing.pause(QUICK)
    assert isinstance(again, pausing.TaskPaused) and not again.changed
    assert again.state.paused_at == paused.state.paused_at  # the first pause's time

    unpaused = pausing.unpause(QUICK)
    assert isinstance(unpaused, pausing.TaskUnpaused) and unpaused.changed
    assert unpaused.state is not None and unpaused.state.status == "never run"
    assert not pausing.unpause(QUICK).changed


def test_a_paused_tasks_request_is_kept_and_claimed_only_after_the_unpause(
    db_alias: str,
) -> None:
    pausing.pause(QUICK)
    assert objects.request_run(QUICK)
    assert objects.work.claim_request(QUICK, "worker-1", 30) is None
    state = objects.get_state(QUICK)
    assert state.status == "paused" and state.requested_at is not None
    pausing.unpause(QUICK)
    assert objects.get_state(QUICK).status == "requested"
    claim = objects.work.claim_request(QUICK, "worker-1", 30)
    assert claim is not None and claim.lease.token == state.token + 1


def test_a_running_task_paused_reads_running_until_its_run_ends(db_alias: str) -> None:
    lease = objects.try_claim(QUICK, "worker-1", ttl=30)
    pausing.pause(QUICK)
    assert objects.get_state(QUICK).status == "running"  # the run goes on
    assert objects.release(QUICK, "worker-1", token=lease.token)
    assert objects.get_state(QUICK).status == "paused"


def test_an_unknown_task_or_bad_input_is_refused_with_nothing_written(
    refusal_alias: str,
) -> None:
    result = pausing.pause("nobody-runs-this")
    assert isinstance(result, NotRegistered) and QUICK in result.registered
    for bad in ({}, {"name": QUICK, "queue": "default"}, {"name": ""}, {"queue": " x"}):
        with pytest.raises((ValueError, TypeError)):
            pausing.pause(**bad)
        with pytest.raises((ValueError, TypeError)):
            pausing.unpause(**bad)
    with pytest.raises(TypeError):
        pausing.pause(queue=3)  # type: ignore[arg-type]
    assert rows(refusal_alias) == [] and QueuedTask.objects.paused_queues() == {}


def test_a_paused_queue_claims_nothing_and_other_queues_go_on(tasks_alias: str) -> None:
    waiting = djtasks.add.enqueue(1, 2)
    other = djtasks.add.using(queue_name="other").enqueue(3, 4)
    paused = pausing.pause(queue="default")
    assert isinstance(paused, pausing.QueuePaused) and paused.changed
    assert not pausing.pause(queue="default").changed
    assert list(QueuedTask.objects.paused_queues()) == ["default"]

    claimed = QueuedTask.objects.claim_many("worker-1", queues=None, limit=10)
    assert [claim.uuid for claim in claimed] == [uuid.UUID(str(other.id))]
    assert QueuedTask.objects.claim("worker-1", queues=["default"]) is None

    unpaused = pausing.unpause(queue="default")
    assert isinstance(unpaused, pausing.QueueUnpaused) and unpaused.changed
    assert not pausing.unpause(queue="default").changed
    claim = QueuedTask.objects.claim("worker-1", queues=["default"])
    assert claim is not None and claim.uuid == uuid.UUID(str(waiting.id))


def test_a_queue_no_backend_has_is_refused_with_nothing_written(tasks_alias: str) -> None:
    result = pausing.pause(queue="nowhere")
    assert isinstance(result, pausing.UnknownQueue)
    assert result.queues == ("default", "other")
    assert QueuedTask.objects.paused_queues() == {}
    # An unpause takes any well-formed name (a backend removed since its pause).
    assert not pausing.unpause(queue="nowhere").changed
