"""operations/prune.py's batches, on every engine: the old finished rows
deleted a few primary keys a statement, and nothing else. (The command's
wording and the runs' rule: tests/management/test_bgtasks.py; prune beside
a draining worker at 10,000,000 rows: benchmarks/scale.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_bgtasks.models import QueuedTask
from django_bgtasks.operations import prune as pruning
from tests import djtasks


def _age(alias: str, ids: list[str], *, enqueued: float, finished: float | None) -> None:
    """Make tasks ``ids`` enqueued ``enqueued`` days ago and finished (succeeded)
    ``finished`` days ago, or leave them ready (``None``)."""
    now = timezone.now()
    rows = QueuedTask.objects.using(alias).filter(uuid__in=ids)
    if finished is None:
        rows.update(enqueued_at=now - dt.timedelta(days=enqueued))
        return
    rows.update(
        enqueued_at=now - dt.timedelta(days=enqueued),
        status="SUCCESSFUL",
        finished_at=now - dt.timedelta(days=finished),
    )


def test_old_results_are_deleted_a_batch_of_keys_at_a_time_and_no_other(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pruning, "BATCH", 4)
    add = djtasks.add
    results = add.get_backend().enqueue_many(add, [((n, 1), {}) for n in range(30)])
    ids = [str(result.id) for result in results]
    _age(tasks_alias, ids[:17], enqueued=40, finished=39)  # old: deleted
    _age(tasks_alias, ids[17:19], enqueued=40, finished=1)  # finished lately: kept
    _age(tasks_alias, ids[19:21], enqueued=40, finished=None)  # still ready: kept
    _age(tasks_alias, ids[21:], enqueued=1, finished=0.5)  # recent: kept
    would = pruning.prune(30, dry_run=True)
    assert isinstance(would, pruning.WouldPrune) and str(would.queued) == "17"
    with CaptureQueriesContext(connections[tasks_alias]) as queries:
        done = pruning.prune(30)
    assert isinstance(done, pruning.Pruned) and done.queued == 17
    left = set(QueuedTask.objects.using(tasks_alias).values_list("uuid", flat=True))
    assert {str(key) for key in left} == set(ids[17:])
    # The old rows' keys, 4 a statement: the first 21 keys are old (and 4
    # kept among them), the walk stops within a batch of the last of them.
    deletes = [query for query in queries if query["sql"].startswith("DELETE")]
    queued_deletes = [query for query in deletes if QueuedTask._meta.db_table in query["sql"]]
    assert 6 <= len(queued_deletes) <= 7, [query["sql"] for query in queued_deletes]


def test_a_batch_that_takes_long_is_halved_and_a_quick_one_doubled() -> None:
    """A DELETE that held the write lock (SQLite's, the whole database's)
    longer than STATEMENT_SECONDS makes the next one half as big, down to
    MIN_BATCH keys; a quick one doubles it, up to BATCH."""
    slow, quick, fair = pruning.STATEMENT_SECONDS * 4, 0.0, pruning.STATEMENT_SECONDS / 2
    sizes = [pruning.BATCH]
    for took in (slow,) * 8 + (fair,) + (quick,) * 8:
        sizes.append(pruning.resized(sizes[-1], took))
    assert sizes[:8] == [5_000, 2_500, 1_250, 625, 312, 156, 100, 100]
    assert sizes[8:11] == [100, 100, 200]
    assert sizes[-1] == pruning.BATCH
