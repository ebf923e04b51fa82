"""The ``replica`` fixture (tests/replica.py, tests/conftest.py): a real
streaming replica of the embedded PostgreSQL behind the ``replica`` alias,
which sees the primary's commits once it has replayed them, not while its
replay is paused, and refuses connections while stopped.

Each test leaves the standby as it found it, running and replaying: the
fixture lasts the whole run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import DatabaseError, OperationalError, connections

from tests.replica import Standby
from tests.testapp.models import Counter

PRIMARY, REPLICA = "postgres", "replica"
BOTH = pytest.mark.django_db(databases=[PRIMARY, REPLICA], transaction=True)


def on_replica(name: str) -> int | None:
    """The counter ``name`` as the replica has it (None: not there)."""
    row = Counter.objects.using(REPLICA).filter(name=name).values_list("value", flat=True)
    return row.first()


@pytest.fixture
def standby(replica: Standby) -> Iterator[Standby]:
    """The run's standby, running and replaying again after the test, and
    Django's connection to it fresh (a stop leaves it broken)."""
    try:
        yield replica
    finally:
        connections[REPLICA].close()
        if not replica.running:
            replica.start()
        replica.resume_replay()  # a no-op unless paused
        replica.wait_caught_up()


@BOTH
def test_the_replica_alias_reaches_a_standby(standby: Standby) -> None:
    settings = connections[REPLICA].settings_dict
    assert (settings["HOST"], settings["PORT"]) == (standby.socket_dir, str(standby.port))
    # The mirror's NAME is the primary's test database (copied by pg_basebackup).
    assert settings["NAME"] == connections[PRIMARY].settings_dict["NAME"]
    with connections[REPLICA].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery(), current_database()")
        assert cursor.fetchone() == (True, settings["NAME"])
    with pytest.raises(DatabaseError, match="read-only transaction"):
        Counter.objects.using(REPLICA).create(name="refused")


@BOTH
def test_a_write_is_read_on_the_replica_once_caught_up(standby: Standby) -> None:
    Counter.objects.using(PRIMARY).create(name="first", value=1)
    standby.wait_caught_up()
    assert on_replica("first") == 1


@BOTH
def test_a_paused_replica_sees_no_new_write_until_resumed(standby: Standby) -> None:
    Counter.objects.using(PRIMARY).create(name="before", value=1)
    standby.wait_caught_up()
    standby.pause_replay()
    Counter.objects.using(PRIMARY).create(name="during", value=2)
    with pytest.raises(RuntimeError, match=r"replay: paused"):
        standby.wait_caught_up(timeout=0.5)
    assert on_replica("before") == 1
    assert on_replica("during") is None
    standby.resume_replay()
    standby.wait_caught_up()
    assert on_replica("during") == 2


@BOTH
def test_a_stopped_replica_refuses_connections_until_started(standby: Standby) -> None:
    Counter.objects.using(PRIMARY).create(name="kept", value=1)
    standby.wait_caught_up()
    standby.stop()
    connections[REPLICA].close()  # the connection the stop broke
    with pytest.raises(OperationalError):
        connections[REPLICA].ensure_connection()
    # The primary goes on without it; the standby catches up when back.
    Counter.objects.using(PRIMARY).create(name="meanwhile", value=2)
    standby.start()
    connections[REPLICA].close()
    standby.wait_caught_up()
    assert (on_replica("kept"), on_replica("meanwhile")) == (1, 2)


@pytest.mark.django_db(databases="__all__")
def test_a_test_of_every_alias_runs_with_the_standby_up(replica: Standby) -> None:
    # Django's TestCase opens (and at the end rolls back, after checking the
    # deferred constraints) a transaction on every alias, mirrors included:
    # on the standby that must work too, as the tests of every alias run
    # with it up once a test has started it.
    assert Counter.objects.using(REPLICA).filter(name="absent").first() is None
