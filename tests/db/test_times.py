"""Time arithmetic in each engine's own SQL (db/times.py), on every engine:
the seconds between two of a row's times (``Seconds``), NULL where either
is, to well under a millisecond; and a time's UTC minute (``MinuteUTC``),
aware whatever the current time zone, a time at the minute's last
millisecond still in it. (The rollup's numbers, made of them:
tests/queue/test_rollup.py.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Count
from django.utils import timezone

from django_bgtasks.db.times import MinuteUTC, Seconds
from django_bgtasks.models import QueuedTask
from tests import djtasks

START = dt.datetime(2026, 3, 4, 12, 29, 5, tzinfo=dt.UTC)


def _tasks(alias: str, *times: tuple[dt.datetime | None, dt.datetime | None]) -> list[int]:
    """A task for each (started_at, finished_at): their seqs, in that order."""
    results = djtasks.add.get_backend().enqueue_many(djtasks.add, [((1, 2), {})] * len(times))
    rows = QueuedTask.objects.using(alias)
    seqs = []
    for result, (started, finished) in zip(results, times, strict=True):
        row = rows.get(uuid=result.id)
        rows.filter(seq=row.seq).update(started_at=started, finished_at=finished)
        seqs.append(row.seq)
    return seqs


def test_the_seconds_between_two_times(db_alias: str) -> None:
    ran = [3.5, 0.003, 86_400 + 0.25]
    seqs = _tasks(
        db_alias,
        *((START, START + dt.timedelta(seconds=seconds)) for seconds in ran),
        (START, None),
        (None, START),
    )
    found = dict(
        QueuedTask.objects.using(db_alias)
        .annotate(run=Seconds("started_at", "finished_at"))
        .values_list("seq", "run")
    )
    assert [found[seq] for seq in seqs[3:]] == [None, None]
    # SQLite's julianday() keeps about 50 microseconds at today's dates.
    assert [found[seq] for seq in seqs[:3]] == [pytest.approx(s, abs=1e-4) for s in ran]
    assert all(isinstance(found[seq], float) for seq in seqs[:3])


def test_a_times_utc_minute(db_alias: str) -> None:
    minute = START.replace(second=0)
    _tasks(
        db_alias,
        (START, minute),
        (START, minute + dt.timedelta(seconds=59, milliseconds=999)),
        (START, minute + dt.timedelta(minutes=1)),
    )
    with timezone.override("Asia/Kolkata"):  # (not UTC: the minutes are UTC's all the same)
        counts = dict(
            QueuedTask.objects.using(db_alias)
            .annotate(minute=MinuteUTC("finished_at"))
            .values_list("minute")
            .annotate(n=Count("pk"))
            .order_by()
            .values_list("minute", "n")
        )
    assert counts == {minute: 2, minute + dt.timedelta(minutes=1): 1}
    assert all(at.utcoffset() == dt.timedelta(0) for at in counts)
