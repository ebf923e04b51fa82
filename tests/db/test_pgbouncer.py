"""PgBouncer in front of PostgreSQL: what each pool mode means for the lease
statements' prepared statements and for ``fence()`` (docs/operations.md).

Every ``db_alias`` test also runs through the transaction-pooling PgBouncer
(the ``pgbouncer`` alias); these are the cases that depend on the pool mode.
To make "the next transaction gets another server connection" happen for
sure, a second client takes the server connection the first one just used
(PgBouncer hands out the most recently used one first) and holds it in an
open transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connections, transaction

from django_bgtasks.checks.database import check_prepared_statements
from django_bgtasks.db import cursor as db_cursor
from django_bgtasks.models import BackgroundTask, TaskRun
from tests import pgbouncer
from tests.testapp.models import Counter
from tests.tools import needs_pgbouncer

objects = BackgroundTask.objects
TRANSACTION, SESSION = "pgbouncer", "pgbouncer-session"
pytestmark = needs_pgbouncer
BOTH = pytest.mark.django_db(transaction=True, databases=[TRANSACTION, SESSION, "postgres"])


@contextlib.contextmanager
def another_client_holds_a_server_connection(alias: str) -> Iterator[None]:
    """A second client of ``alias``'s PgBouncer in an open transaction: it
    holds the server connection this thread's client used last."""
    db = connections[alias].settings_dict
    dsn = f"host={db['HOST']} port={db['PORT']} dbname={db['NAME']} user=postgres"
    with psycopg.connect(dsn, autocommit=False) as other:
        other.execute("SELECT pg_backend_pid()")  # a transaction is open now
        yield
        other.rollback()


def server_pid(alias: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.fixture
def on(settings: Any) -> Any:
    def point(alias: str, prepared: bool | None = None) -> None:
        settings.BGTASKS_DATABASE = alias
        settings.BGTASKS_PREPARED_STATEMENTS = prepared

    return point


@BOTH
def test_transaction_pooling_really_moves_a_client_between_server_connections() -> None:
    # What the other tests rely on: without it they would prove nothing.
    first = server_pid(TRANSACTION)
    with another_client_holds_a_server_connection(TRANSACTION):
        assert server_pid(TRANSACTION) != first
    assert pgbouncer.version() < (1, 21), "PgBouncer 1.21+ can keep prepared statements"


@BOTH
def test_defaults_behind_transaction_pooling_prepare_nothing_and_work(on: Any) -> None:
    """Django's default settings, not even DISABLE_SERVER_SIDE_CURSORS: the
    connection proves it is not direct, and nothing is prepared."""
    on(TRANSACTION)
    connections[TRANSACTION].close()
    assert not db_cursor.prepares(connections[TRANSACTION])
    lease = objects.try_claim("pooled", "a", ttl=30)
    assert lease is not None
    for n in range(1, 6):
        with another_client_holds_a_server_connection(TRANSACTION):
            assert objects.update_state("pooled", "a", {"n": n}, token=lease.token)
            assert not db_cursor.prepares(connections[TRANSACTION])
    with another_client_holds_a_server_connection(TRANSACTION):
        assert objects.release("pooled", "a", {"n": 2}, token=lease.token)
    assert check_prepared_statements() == []
    [run] = TaskRun.objects.for_task("pooled")
    assert (run.token, run.value, run.outcome) == (lease.token, {"n": 2}, "succeeded")


@BOTH
def test_prepared_statements_forced_on_fail_behind_pgbouncer_before_1_21(
    on: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What bgtasks.W005 warns of, where the site says it is behind a pooler:
    a statement prepared on one server connection does not exist on the next."""
    on(TRANSACTION, prepared=True)
    with monkeypatch.context() as patch:
        patch.setitem(connections[TRANSACTION].settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
        [warning] = check_prepared_statements()
    assert warning.id == "bgtasks.W005"
    try:
        assert objects.try_claim("forced-1", "a", ttl=30)  # the claim is prepared here
        with (
            another_client_holds_a_server_connection(TRANSACTION),
            pytest.raises(DatabaseError, match=r"prepared statement \S+ does not exist"),
        ):
            objects.try_claim("forced-2", "a", ttl=30)
        # The failed claim wrote nothing (read with Django's own, unprepared, cursor).
        assert not BackgroundTask.objects.filter(name="forced-2").exists()
    finally:
        connections[TRANSACTION].close()  # its prepared-statement cache is wrong now


@BOTH
def test_session_pooling_proves_no_direct_session_so_prepares_only_when_told(on: Any) -> None:
    """A session-pooling PgBouncer would keep prepared statements, but from
    the client it can't be told from a transaction-pooling one: by default
    nothing is prepared there either (True turns them on, as below)."""
    on(SESSION)
    connections[SESSION].close()
    for name in ("one", "two"):
        lease = objects.try_claim(name, "a", ttl=30)
        assert lease is not None and objects.release(name, "a", token=lease.token)
    assert not db_cursor.prepares(connections[SESSION])
    assert not db_cursor.direct_session(connections[SESSION].connection)


@BOTH
def test_session_pooling_keeps_prepared_statements_and_the_client_on_one_connection(
    on: Any,
) -> None:
    on(SESSION, prepared=True)
    assert check_prepared_statements() == []  # no DISABLE_SERVER_SIDE_CURSORS
    assert db_cursor.prepares(connections[SESSION])
    first = server_pid(SESSION)
    with another_client_holds_a_server_connection(SESSION):
        lease = objects.try_claim("session", "a", ttl=30)
        assert lease is not None
        assert objects.update_state("session", "a", {"n": 1}, token=lease.token)
        assert server_pid(SESSION) == first
        assert objects.release("session", "a", {"n": 2}, token=lease.token)
    with connections[SESSION].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone()[0] >= 3


@pytest.mark.parametrize("alias", [TRANSACTION, SESSION])
@BOTH
def test_fence_pins_the_transaction_to_one_server_connection(on: Any, alias: str) -> None:
    """fence() needs its lock and the caller's writes in one transaction;
    both modes keep a transaction on one server connection, so a takeover
    by another client waits for the commit."""
    on(alias)
    Counter.objects.using(alias).create(name="fenced", value=0)
    lease = objects.try_claim("fenced", "a", ttl=0.5)
    assert lease is not None
    taken: list[Any] = []

    def rival() -> None:
        try:
            taken.append(objects.try_claim("fenced", "rival", ttl=30))
        finally:
            connections[alias].close()

    with transaction.atomic(using=alias):
        assert objects.fence("fenced", "a", lease.token)
        pid = server_pid(alias)
        with another_client_holds_a_server_connection(alias):
            assert server_pid(alias) == pid  # the open transaction stays put
        thread = threading.Thread(target=rival)
        thread.start()
        thread.join(1.5)  # three ttls: the lease is stale, yet the rival waits
        assert thread.is_alive() and taken == []
        Counter.objects.using(alias).filter(name="fenced").update(value=1)
    thread.join(10)
    [rival_lease] = taken
    assert rival_lease is not None and rival_lease.token == lease.token + 1
    [lost] = TaskRun.objects.for_task("fenced")
    assert lost.outcome == "lost" and lost.token == lease.token
    assert Counter.objects.using("postgres").get(name="fenced").value == 1
