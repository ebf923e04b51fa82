"""queue/rollup.py on every engine: the finished tasks of each minute
counted once, by scope, with their run times' buckets; the hours summed
from the minutes; a second roll writing the same numbers; the catch-up
bounded; and the lag of the minute just passed."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from django_bgtasks.models import QueuedTask, QueueRollup
from django_bgtasks.queue import rollup
from tests import djtasks

UTC = dt.UTC
# A whole minute well in the past of the database's clock, which the tests
# hand to roll() as "now": the rows' times are set to match.
NOW = dt.datetime(2026, 3, 4, 12, 30, 25, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)


def _finished(
    alias: str, count: int, *, status: str, at: dt.datetime, ran: float, **kw: Any
) -> None:
    """``count`` echo tasks (of ``queue``/``task`` as given) ended ``status``
    at ``at``, after running ``ran`` seconds."""
    task = kw.pop("task", djtasks.echo)
    results = task.get_backend().enqueue_many(task, [((n,), {}) for n in range(count)])
    QueuedTask.objects.using(alias).filter(uuid__in=[r.id for r in results]).update(
        status=status,
        started_at=at - dt.timedelta(seconds=ran),
        finished_at=at,
        **kw,
    )


def _rows(alias: str, span: int = 60) -> dict[tuple[str, str, dt.datetime], tuple[Any, ...]]:
    rows = QueueRollup.objects.using(alias).filter(span=span)
    return {
        (row.queue_name, row.task_path, row.start): (
            row.succeeded,
            row.failed,
            rollup.percentile(row.run_times, 0.5),
            row.lag,
        )
        for row in rows
    }


def _catch_up(now: dt.datetime) -> rollup.Rolled:
    """Roll until nothing is due (the first time, a day back, ten minutes a call)."""
    while (done := rollup.roll(now)).behind:
        pass
    return done


def test_a_minute_is_counted_by_scope_with_its_run_times(tasks_alias: str) -> None:
    alias = tasks_alias
    minute = dt.datetime(2026, 3, 4, 12, 29, tzinfo=UTC)
    _finished(alias, 3, status="SUCCESSFUL", at=minute + dt.timedelta(seconds=5), ran=0.003)
    _finished(
        alias, 1, status="FAILED", at=minute + dt.timedelta(seconds=59), ran=30, queue_name="other"
    )
    # The minute before: caught up in the same call; the minute after NOW's
    # settling time is not due yet.
    _finished(alias, 2, status="SUCCESSFUL", at=minute - dt.timedelta(seconds=1), ran=1.5)
    _finished(alias, 5, status="SUCCESSFUL", at=minute + MINUTE + dt.timedelta(seconds=20), ran=1)
    # Not ended: a ready task (a retry's) is no end.
    djtasks.echo.enqueue(1)

    done = _catch_up(NOW)
    assert done.until == minute + MINUTE and not done.behind
    echo = "tests.djtasks.echo"
    rows = _rows(alias)
    assert rows[("", "", minute)][:2] == (3, 1)
    assert rows[("default", "", minute)][:2] == (3, 0)
    assert rows[("other", "", minute)][:2] == (0, 1)
    assert rows[("", echo, minute)][:2] == (3, 1)
    assert rows[("", "", minute - MINUTE)][:2] == (2, 0)
    # Run times: 3 ms is in the (2 ms, 5 ms] bucket, read linearly in it.
    assert 0.002 < rows[("default", "", minute)][2] <= 0.005
    assert 20 < rows[("other", "", minute)][2] <= 50
    # The day before the first end was skipped (nothing ended in it), and
    # nothing past the due minute is there.
    assert min(start for _q, _p, start in rows) == minute - MINUTE
    assert max(start for _q, _p, start in rows) == minute
    assert rollup.rolled_until() == minute + MINUTE
    # The lag goes on the minute just passed only: the ready task's, by NOW.
    assert rows[("", "", minute)][3] is not None
    assert rows[("", "", minute - MINUTE)][3] is None

    hours = _rows(alias, span=3600)
    assert hours[("", "", dt.datetime(2026, 3, 4, 12, tzinfo=UTC))][:2] == (5, 1)
    assert hours[("", echo, dt.datetime(2026, 3, 4, 12, tzinfo=UTC))][:2] == (5, 1)

    # A second call has nothing due; one a minute later rolls that minute,
    # and rolling it again (two workers at once) writes the same numbers.
    assert rollup.roll(NOW).minutes == 0
    later = rollup.roll(NOW + MINUTE)
    assert later.minutes == 1
    first = _rows(alias)
    QueueRollup.objects.using(alias).filter(start=minute + MINUTE).delete()
    rollup.roll(NOW + MINUTE)
    again = _rows(alias)
    assert {k: v[:3] for k, v in again.items()} == {k: v[:3] for k, v in first.items()}
    assert again[("", "", minute + MINUTE)][:2] == (5, 0)
    assert _rows(alias, span=3600)[("", "", dt.datetime(2026, 3, 4, 12, tzinfo=UTC))][:2] == (
        10,
        1,
    )


def test_a_long_catch_up_is_bounded_a_call_and_old_rows_are_deleted(tasks_alias: str) -> None:
    alias = tasks_alias
    table = QueueRollup.objects.using(alias)
    table.create(span=60, start=NOW - dt.timedelta(days=3), succeeded=1)
    # Nothing ended: one call catches up, to the minute just passed.
    quiet = rollup.roll(NOW)
    assert not quiet.behind and quiet.minutes == 1
    assert not table.filter(start__lt=NOW - rollup.KEEP).exists()
    # Tasks ended a day ago, 25 minutes later, and now: from the first, ten
    # minutes a call at most, skipping the minutes before the next end.
    table.all().delete()
    day_ago = rollup.floor(NOW - rollup.SETTLE, 60) - dt.timedelta(days=1)
    for at in (day_ago + dt.timedelta(seconds=30), day_ago + dt.timedelta(minutes=25)):
        _finished(alias, 1, status="SUCCESSFUL", at=at, ran=1)
    _finished(alias, 1, status="FAILED", at=NOW - dt.timedelta(seconds=50), ran=1)
    calls = []
    while True:
        calls.append(done := rollup.roll(NOW))
        if not done.behind:
            break
    assert [(call.first, call.minutes) for call in calls] == [
        (day_ago, rollup.MINUTES_A_CALL),
        (day_ago + dt.timedelta(minutes=25), rollup.MINUTES_A_CALL),
        (rollup.floor(NOW - rollup.SETTLE, 60) - MINUTE, 1),
    ]
    assert table.filter(span=60, queue_name="", task_path="").count() == 21
    ended = table.filter(span=3600, queue_name="", task_path="")
    assert sum(row.succeeded for row in ended) == 2
    assert sum(row.failed for row in ended) == 1


def test_percentiles_read_off_the_buckets() -> None:
    buckets = [0] * rollup.BUCKETS
    assert rollup.percentile(buckets, 0.5) is None
    buckets[0] = 10  # ten runs under 1 ms
    assert rollup.percentile(buckets, 0.5) == pytest.approx(0.0005)
    buckets[-1] = 90  # ninety of 5,000 s and over: the open bucket's edge
    assert rollup.percentile(buckets, 0.95) == rollup.RUN_TIME_EDGES[-1]
    assert rollup.percentile(buckets, 0.05) == pytest.approx(0.0005)
