"""PostgreSQL's notifications (db/postgresql/notify.py): one connection that
runs both LISTENs hears a lease row's change on the changes channel (its
name and token) and a Django Task made ready on the queue channel (its
queue), each told apart by its channel; and the name it gives itself is
what an operator finds in ``pg_stat_activity``. (Which writes notify, by
migrations 0008 and 0010's triggers: tests/test_migrations.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections

from django_bgtasks.db.postgresql import notify
from django_bgtasks.models import BackgroundTask
from tests import djtasks


@pytest.fixture
def listener(pg_direct_alias: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own to ``pg_direct_alias``'s database, in autocommit."""
    params = connections[pg_direct_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as connection:
        yield connection


def test_one_connection_hears_both_channels_each_by_its_name(
    listener: psycopg.Connection[Any],
) -> None:
    listener.execute(notify.LISTEN_CHANGES)
    listener.execute(notify.LISTEN_QUEUE)
    lease = BackgroundTask.objects.try_claim("heard", "a", ttl=30)
    assert lease is not None
    djtasks.add.using(queue_name="other").enqueue(1, 2)
    heard = {
        notification.channel: json.loads(notification.payload)
        for notification in listener.notifies(timeout=2, stop_after=2)
    }
    assert heard == {
        notify.CHANGES_CHANNEL: {"name": "heard", "token": lease.token},
        notify.QUEUE_CHANNEL: {"queue": "other"},
    }


def test_the_listening_connection_is_found_by_its_name(
    listener: psycopg.Connection[Any], pg_direct_alias: str
) -> None:
    """Named for the session (not the transaction: the feed's connection is
    in autocommit), as another connection sees it."""
    listener.execute(notify.NAME_APPLICATION, [notify.CHANGES_APPLICATION])
    listener.execute(notify.LISTEN_CHANGES)
    with connections[pg_direct_alias].cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
            [listener.info.backend_pid],
        )
        assert cursor.fetchall() == [(notify.CHANGES_APPLICATION,)]
