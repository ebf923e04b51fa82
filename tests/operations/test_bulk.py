"""operations/bulk.py on every engine: retry, cancel and delete of every
Django Task a filter matches, a batch a statement, each task matched as its
single action is; the counts a confirmation shows; and bad input refused
with nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import bulk, search
from django_bgtasks.operations.queued import QueuedFilter
from tests import djtasks


def _enqueue(count: int, task: Any = None, **kwargs: Any) -> list[str]:
    chosen = task or djtasks.echo
    results = chosen.get_backend().enqueue_many(chosen, [((n,), kwargs) for n in range(count)])
    return [str(result.id) for result in results]


def _statuses(alias: str, ids: list[str]) -> list[str]:
    table = QueuedTask.objects.using(alias)
    by_id = dict(table.filter(uuid__in=ids).values_list("uuid", "status"))
    return [by_id[key] if (key := _key(one)) in by_id else "GONE" for one in ids]


def _act(action: str, **terms: str) -> bulk.BulkResult:
    return bulk.act(action, bulk.Selection.of(QueuedFilter.parse(**terms)))


def _count(**terms: str) -> str:
    return str(bulk.matching(bulk.Selection.of(QueuedFilter.parse(**terms))))


def _key(result_id: str) -> Any:
    import uuid

    return uuid.UUID(result_id)


def test_a_bulk_cancel_retry_and_delete_act_on_the_filter_only(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "SCAN_CHUNK", 7)  # several batches, one short
    table = QueuedTask.objects.using(tasks_alias)
    tenant = _enqueue(17, tenant="a")
    other = _enqueue(5, tenant="b")
    running = tenant[0]
    table.filter(uuid=_key(running)).update(status="RUNNING", owner="w", token=1)
    tenant_a = '{"tenant": "a"}'
    assert _count(args=tenant_a) == _count(args='{"tenant":"a"}') == "17"

    cancelled = _act("cancel", args=tenant_a)
    assert (cancelled.matched, cancelled.done, cancelled.stopping, cancelled.skipped) == (
        17,
        16,
        1,
        0,
    )
    assert _statuses(tasks_alias, tenant) == ["RUNNING"] + ["FAILED"] * 16
    assert table.get(uuid=_key(running)).cancel_requested
    assert _statuses(tasks_alias, other) == ["READY"] * 5
    errors = table.get(uuid=_key(tenant[1])).errors
    assert errors[-1]["exception_class_path"] == "django_bgtasks.exceptions.TaskCancelled"

    again = _act("cancel", args=tenant_a)  # the failed ones are finished: skipped
    assert (again.matched, again.done, again.stopping, again.skipped) == (17, 0, 1, 16)

    retried = _act("retry", status="FAILED", args=tenant_a)
    assert (retried.matched, retried.done) == (16, 16)
    assert _statuses(tasks_alias, tenant) == ["RUNNING"] + ["READY"] * 16
    back = table.get(uuid=_key(tenant[1]))  # as a single retry leaves it
    assert (back.finished_at, back.attempts, back.max_attempts) == (None, 0, 1)
    assert len(back.errors) == 1
    assert _act("retry", status="FAILED", args=tenant_a).as_json() == {
        "action": "retry",
        "count": 0,
        "matched": 0,
        "retried": 0,
        "stopping": 0,
        "skipped": 0,
    }

    deleted = _act("delete", task="tests.djtasks.echo")
    assert (deleted.matched, deleted.done, deleted.skipped) == (22, 21, 1)
    assert _statuses(tasks_alias, tenant + other) == ["RUNNING"] + ["GONE"] * 21


def test_a_bulk_retry_takes_one_run_of_a_unique_key(tasks_alias: str, tmp_path: Any) -> None:
    """Two failed runs of one unique key in one batch: the first is retried,
    the second stays failed (one run of a key ready or running at a time)."""
    record = str(tmp_path / "record")
    first = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(first.id)
    second = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(second.id)
    result = _act("retry", task="tests.djtasks.unique_record")
    assert (result.matched, result.done, result.skipped) == (2, 1, 1)
    statuses = sorted(_statuses(tasks_alias, [str(first.id), str(second.id)]))
    assert statuses == ["FAILED", "READY"]


@pytest.mark.parametrize(
    ("action", "terms", "message"),
    [
        ("retry", {}, "Name at least one filter: status, queue"),
        ("purge", {"status": "FAILED"}, "The action must be one of retry, cancel, delete"),
    ],
)
def test_a_bad_bulk_action_writes_nothing(
    tasks_alias: str, action: str, terms: dict[str, str], message: str
) -> None:
    ids = _enqueue(3)
    QueuedTask.objects.cancel(ids[0])
    table = QueuedTask.objects.using(tasks_alias)
    before = list(table.order_by("seq").values())
    with pytest.raises(ValueError, match=message):
        _act(action, **terms)
    assert list(table.order_by("seq").values()) == before


def test_the_count_stops_at_its_cap_or_its_budget(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "COUNT_CAP", 5)
    monkeypatch.setattr(search, "SCAN_CHUNK", 4)
    monkeypatch.setattr(search, "SCAN_BUDGET", 8)
    _enqueue(3, tenant="a")
    _enqueue(10, tenant="b")
    assert _count(args='{"tenant": "b"}') == "5+"  # its cap
    # The newest 8 rows hold none of tenant a's: at least 0, said so.
    assert _count(args='{"tenant": "a"}') == "0+"
    assert _count(args='{"tenant": "c"}', status="FAILED") == "0"
    assert _count(status="FAILED") == "0"
