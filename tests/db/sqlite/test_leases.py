"""SQLite's lease statements (db/sqlite/leases.py): times written by the
database's clock as the UTC text Django stores, to the millisecond; the
seconds since a time and the time some seconds on, by that clock; and a
schedule's slot matched by the instant it is, whatever text it was written
in. What every engine's statements do: tests/core/test_leases.py."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connections

from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db.sqlite import leases
from django_bgtasks.models import BackgroundTask

objects = BackgroundTask.objects


def test_a_claims_times_are_djangos_utc_text_by_the_databases_clock(sqlite_alias: str) -> None:
    before = dt.datetime.now(dt.UTC)
    lease = objects.try_claim("timed", "a", ttl=30)
    assert lease is not None
    table = connections[sqlite_alias].ops.quote_name(BackgroundTask._meta.db_table)
    with connections[sqlite_alias].cursor() as cursor:
        cursor.execute(
            f"SELECT started_at || '', updated_at || '' FROM {table} WHERE name = 'timed'"
        )
        [(started, updated)] = cursor.fetchall()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", started), started
    assert started == updated
    row = BackgroundTask.objects.using(sqlite_alias).get(name="timed")
    assert row.started_at is not None and row.started_at.utcoffset() == dt.timedelta(0)
    assert before - dt.timedelta(seconds=1) <= row.started_at <= dt.datetime.now(dt.UTC)


def test_ages_and_times_to_come_are_by_the_databases_clock(sqlite_alias: str) -> None:
    with connections[sqlite_alias].cursor() as cursor:
        cursor.execute(f"SELECT {leases.NOW}, {leases.after('%s')}", [90])
        [(now, later)] = cursor.fetchall()
        cursor.execute(f"SELECT {leases.age('%s')}, {leases.age('%s')}", [now, later])
        [(since_now, since_later)] = cursor.fetchall()
    gap = dt.datetime.fromisoformat(later) - dt.datetime.fromisoformat(now)
    assert gap.total_seconds() == pytest.approx(90, abs=0.002)
    assert 0 <= since_now < 5
    assert since_later == pytest.approx(since_now - 90, abs=0.002)


def test_a_slot_is_matched_by_its_instant_whatever_its_text(sqlite_alias: str) -> None:
    """A slot written without its milliseconds (a site's own row, an older
    worker's) is the slot a worker names with them."""
    connection = connections[sqlite_alias]
    statements = store.statements(connection)
    slot = {"name": "nightly", "schedule": "0 3 * * *", "ttl": 30.0}
    due, later = "2026-01-02 03:00:00", "2999-01-01 03:00:00.000"
    ensured = {**slot, "next": due}
    assert engines.run(connection, "ensure_schedule", statements.ensure_schedule, ensured)
    take = {**slot, "due": "2026-01-02 03:00:00.000", "next": later}
    assert len(engines.run(connection, "take_slot", statements.take_slot, take)) == 1
    row = BackgroundTask.objects.using(sqlite_alias).get(name="nightly")
    assert row.scheduled_for == dt.datetime(2026, 1, 2, 3, tzinfo=dt.UTC)
    assert row.next_run_at == dt.datetime(2999, 1, 1, 3, tzinfo=dt.UTC)
