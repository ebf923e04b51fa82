"""Pause and unpause with real ``bgtasks worker`` processes, on every queue
engine: a paused queue claims nothing (and claims after the unpause), a
paused background task starts nothing (a request made meanwhile is kept and
run after the unpause, its schedule's slots are skipped and counted in the
next run's history), and in both cases the work running when the pause came
finishes as usual. Every invariant is read back from the database."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from django_bgtasks.conf import conf
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import wait_until

SLOW = "slow-every-second"  # tests/workerapp/tasks.py: 2.5 s a run, a slot a second


@pytest.fixture
def workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(tasks_alias, tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    yield group
    group.stop_all()


def bgtasks(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", *args, stdout=out)
    return out.getvalue()


def status(result_id: str) -> str:
    return str(QueuedTask.objects.using(conf.DATABASE).get(uuid=result_id).status)


def runs(name: str, token: int) -> list[TaskRun]:
    return list(TaskRun.objects.for_task(name).filter(token=token))


def test_a_paused_queue_claims_nothing_and_its_running_task_finishes(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    path = str(tmp_path / "record")
    workers.start("--queue", "default", "--concurrency", "2")
    slow = djtasks.record_slowly.enqueue(path, "slow", 1.5)
    wait_until("the slow task to start", lambda: status(slow.id) == "RUNNING", timeout=60)

    assert "Paused queue 'default'" in bgtasks("pause", "--queue", "default")
    waiting = [djtasks.record.enqueue(path, f"k{i}") for i in range(2)]
    # The one running when the pause came finishes as usual.
    wait_until("the slow task to end", lambda: status(slow.id) == "SUCCESSFUL", timeout=30)
    time.sleep(0.5)  # several polls of a paused queue
    assert [status(r.id) for r in waiting] == ["READY", "READY"]
    assert (tmp_path / "record").read_text().split()[0::2] == ["slow"]
    # Seen: the queue paused, since when, its tasks by status; each waiting
    # task as waiting for its queue, not merely ready.
    [default] = [
        q for q in json.loads(bgtasks("queues", "--json"))["queues"] if q["name"] == "default"
    ]
    assert default["paused"] is True and default["paused_at"] is not None
    assert default["counts"] == {"READY": 2, "RUNNING": 0, "SUCCESSFUL": 1, "FAILED": 0}
    table = bgtasks("queues").splitlines()
    assert table[0].split() == ["QUEUE", "PAUSED", "READY", "RUNNING", "SUCCESSFUL", "FAILED"]
    [row] = [line for line in table if line.startswith("default ")]
    assert "since " in row and row.split()[-4:] == ["2", "0", "1", "0"]
    assert "ready (waiting for its queue to be unpaused)" in bgtasks("show", waiting[0].id)
    listed = json.loads(bgtasks("list", "--json"))["django_tasks"]
    assert {t["id"]: t["waiting"] for t in listed if t["status"] == "READY"} == {
        r.id: "waiting for its queue to be unpaused" for r in waiting
    }

    assert "Unpaused queue 'default'" in bgtasks("unpause", "--queue", "default")
    for result in waiting:
        wait_until(f"{result.id} to run", lambda r=result: status(r.id) == "SUCCESSFUL", 30)
    keys = sorted((tmp_path / "record").read_text().split()[0::2])
    assert keys == ["k0", "k1", "slow"]  # each once
    [default] = [
        q for q in json.loads(bgtasks("queues", "--json"))["queues"] if q["name"] == "default"
    ]
    assert (default["paused"], default["counts"]["SUCCESSFUL"]) == (False, 3)


def test_a_paused_task_keeps_its_request_and_skips_its_slots(
    tasks_alias: str, workers: Workers
) -> None:
    workers.start("--task", SLOW)
    state = wait_until(
        "a run", lambda: (s := BackgroundTask.objects.get_state(SLOW)) and s.running and s, 60
    )
    first = state.token

    # Known from the worker's report alone: this process doesn't import it.
    assert f"Paused task {SLOW!r}" in bgtasks("pause", SLOW)
    assert BackgroundTask.objects.get_state(SLOW).status == "running"  # the run goes on
    assert BackgroundTask.objects.request_run(SLOW)  # kept while paused
    [ended] = wait_until("the run to end", lambda: runs(SLOW, first), 30)
    assert ended.outcome == "succeeded"
    time.sleep(2.2)  # two slots, at least, come while paused
    paused = BackgroundTask.objects.get_state(SLOW)
    assert paused.status == "paused" and paused.token == first  # nothing started
    assert paused.requested_at is not None and paused.paused_skipped >= 1

    assert f"Unpaused task {SLOW!r}" in bgtasks("unpause", SLOW)
    after = wait_until(
        "the kept request to run",
        lambda: (s := BackgroundTask.objects.get_state(SLOW)) and s.token > first and s,
        30,
    )
    assert after.trigger == "request" and after.requested_at is None
    assert after.paused_at is None and after.paused_skipped == 0
    row = BackgroundTask.objects.using(conf.DATABASE).get(name=SLOW)
    # The slots skipped while paused are the first run's after the unpause.
    assert row.token == first + 1 and row.skipped >= paused.paused_skipped
    workers.stop_all()
    # Stopped mid-run or not, its history row keeps the count.
    [run] = runs(SLOW, first + 1)
    assert run.skipped >= paused.paused_skipped
