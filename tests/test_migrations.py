"""What the migrations set up per vendor, and the cost of a heartbeat."""

from __future__ import annotations

import time

from django.db import connections

from django_bgtasks.models import BackgroundTask

objects = BackgroundTask.objects


def test_sqlite_has_the_history_trigger(sqlite_alias: str) -> None:
    connection = connections[sqlite_alias]
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert ("bgtasks_record_run",) in cursor.fetchall()


def test_postgresql_has_the_takeover_trigger(pg_alias: str) -> None:
    with connections[pg_alias].cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
            [BackgroundTask._meta.db_table],
        )
        assert cursor.fetchall() == [("bgtasks_record_takeover",)]


def test_heartbeats_are_hot_updates_on_postgresql(pg_alias: str) -> None:
    """A heartbeat touches no indexed column, so PostgreSQL rewrites the row
    in place (HOT) without writing any index entry."""
    connection = connections[pg_alias]
    lease = objects.try_claim("beat", "a", ttl=120)
    table = BackgroundTask._meta.db_table

    def counts() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.2)  # a session flushes its counters when it goes idle
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
                [table],
            )
            updated, hot = cursor.fetchone()
        return updated, hot

    before = counts()
    for _ in range(300):
        assert objects.heartbeat("beat", "a", token=lease.token)
    after = counts()
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated >= 300
    assert hot == updated


def test_the_fillfactor_leaves_room_for_hot_updates(pg_alias: str) -> None:
    connection = connections[pg_alias]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s",
            [BackgroundTask._meta.db_table],
        )
        assert cursor.fetchone()[0] == ["fillfactor=50"]
