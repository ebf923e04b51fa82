"""db/mysql/routines.py on the machine's MariaDB: the queue's claims and
ends run as stored procedures, created once, with the caller's privileges;
created again when dropped; and run as text, with the same result, where a
procedure can't be had (a user without CREATE ROUTINE, or without EXECUTE on
one another user created). tests/db/mysql/test_queue.py runs every rule of
the claims and ends both ways, and rolls back a round whose procedure
fails. ``manage.py bgtasks procedures`` lists them, and drops them under a
running worker, which creates them again and runs each task once."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import ProgrammingError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test.utils import CaptureQueriesContext

from django_bgtasks.db.mysql import routines as mariadb_routines
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import Ending
from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import wait_until


@pytest.fixture
def mariadb(mysql_alias: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[BaseDatabaseWrapper]:
    """The MariaDB connection, with no procedure of ours in its database, and
    this process knowing of none (each test starts as a new deploy would)."""
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:  # type: ignore[attr-defined]
        pytest.skip("BGTASKS_MYSQL_URL is MySQL, which runs the text")
    _drop_ours(connection)
    monkeypatch.setattr(mariadb_routines, "_CREATED", {})
    monkeypatch.setattr(mariadb_routines, "_REFUSED", set())
    yield connection
    _drop_ours(connection)


def _ours(connection: BaseDatabaseWrapper) -> dict[str, str]:
    """Our procedures in the connection's database: each one's SECURITY_TYPE."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ROUTINE_NAME, SECURITY_TYPE FROM information_schema.ROUTINES"
            " WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE 'bgtasks\\_%%'"
        )
        return dict(cursor.fetchall())


def _drop_ours(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for name in _ours(connection):
            cursor.execute(f"DROP PROCEDURE IF EXISTS {name}")


def _round(owner: str, ends: list[Ending], limit: int) -> tuple[dict[int, Any], list[Any]]:
    return QueuedTask.objects.finish_and_claim(ends, owner, queues=None, limit=limit)


def _ended(claims: list[Any], owner: str) -> list[Ending]:
    return [Ending(c.seq, owner, c.token, "SUCCESSFUL", return_value="7") for c in claims]


def _statuses(connection: BaseDatabaseWrapper) -> list[tuple[str, str | None, int]]:
    rows = QueuedTask.objects.using(connection.alias).order_by("seq")
    return list(rows.values_list("status", "owner", "token"))


def test_a_claim_and_its_ends_are_procedures_created_once_with_the_callers_rights(
    mariadb: BaseDatabaseWrapper,
) -> None:
    """The first claim creates its procedure, the first round with ends the
    other, once each; every round sends their CALLs, not their steps; each
    ending is fenced as the text fences it (a stale token is refused)."""
    for n in range(4):
        djtasks.add.enqueue(n, 1)
    with CaptureQueriesContext(mariadb) as queries:
        _, first = _round("w1", [], 2)
        ended, second = _round("w1", _ended(first, "w1"), 2)
        stale = Ending(second[0].seq, "w1", second[0].token - 1, "SUCCESSFUL")
        refused, third = _round("w1", [stale, *_ended(second[1:], "w1")], 1)
    sent = [query["sql"] for query in queries.captured_queries]
    created = [sql for sql in sent if sql.startswith("CREATE PROCEDURE")]
    ours = _ours(mariadb)
    kinds = sorted(name.rsplit("_", 1)[0] for name in ours)
    assert kinds == ["bgtasks_claim", "bgtasks_finish_many"]
    assert sorted(sql.split("(")[0].split()[-1] for sql in created) == sorted(ours)
    assert set(ours.values()) == {"INVOKER"}
    calls = [sql for sql in sent if not sql.startswith("CREATE")]
    assert not [sql for sql in calls if "@bgtasks_picked" in sql]
    assert [sql.count("CALL bgtasks_claim_") for sql in calls] == [1, 1, 1]
    assert [sql.count("CALL bgtasks_finish_many_") for sql in calls] == [0, 1, 1]
    seqs = [claim.seq for claim in (*first, *second)]
    assert len(seqs) == 4 and third == []
    assert sorted(ended) == seqs[:2] and sorted(refused) == [seqs[3]]
    assert _statuses(mariadb) == [
        ("SUCCESSFUL", "w1", 1),
        ("SUCCESSFUL", "w1", 1),
        ("RUNNING", "w1", 1),
        ("SUCCESSFUL", "w1", 1),
    ]


def test_a_dropped_procedure_is_created_again_and_the_round_goes_through(
    mariadb: BaseDatabaseWrapper,
) -> None:
    """A procedure dropped under a process that knew it (a database
    restored): the round that finds it missing is rolled back, and sent
    again once it is created; nothing is written twice."""
    for n in range(3):
        djtasks.add.enqueue(n, 1)
    _, first = _round("w1", [], 1)
    _drop_ours(mariadb)
    ended, second = _round("w1", _ended(first, "w1"), 2)
    assert list(ended) == [first[0].seq] and len(second) == 2
    assert len(_ours(mariadb)) == 2
    running = ("RUNNING", "w1", 1)
    assert _statuses(mariadb) == [("SUCCESSFUL", "w1", 1), running, running]


def _procedures(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", "procedures", *args, stdout=out)
    return out.getvalue()


def test_bgtasks_procedures_lists_the_queues_procedures_and_drops_them(
    mariadb: BaseDatabaseWrapper,
) -> None:
    """None at first; the two a round created, by name; ``--drop`` drops
    them, says which, and the next round creates them again."""
    where = f"database {mariadb.alias!r}"
    none = f"No stored procedure of the queue in {where} (none this database user may see).\n"
    assert _procedures() == none
    djtasks.add.enqueue(1, 2)
    _, claims = _round("w1", [], 1)
    _round("w1", _ended(claims, "w1"), 1)
    names = sorted(_ours(mariadb))
    assert [name.rsplit("_", 1)[0] for name in names] == [
        "bgtasks_claim",
        "bgtasks_finish_many",
    ]
    assert _procedures().splitlines() == names
    dropped = _procedures("--drop")
    assert dropped.startswith(f"Dropped 2 stored procedure(s) of the queue from {where}: ")
    assert all(name in dropped for name in names)
    assert _ours(mariadb) == {}
    assert _procedures("--drop") == none
    djtasks.add.enqueue(3, 4)
    _, claims = _round("w1", [], 1)
    assert len(claims) == 1 and len(_ours(mariadb)) == 1


def test_bgtasks_procedures_drop_refuses_inside_atomic_and_drops_nothing(
    mariadb: BaseDatabaseWrapper,
) -> None:
    djtasks.add.enqueue(1, 2)
    _round("w1", [], 1)
    with (
        transaction.atomic(using=mariadb.alias),
        pytest.raises(CommandError, match=r"inside atomic\(\): a DROP PROCEDURE commits"),
    ):
        _procedures("--drop")
    assert len(_ours(mariadb)) == 1


def test_procedures_dropped_under_a_running_worker_are_created_again_each_task_run_once(
    mariadb: BaseDatabaseWrapper, tmp_path: Path
) -> None:
    """A worker of 4 threads drains tasks while ``bgtasks procedures --drop``
    runs again and again from here: each of its rounds that finds one missing
    is rolled back and sent again. From the database: every task succeeded,
    ended by the one run it had (its token, attempt 1), and the worker made
    the procedures again between drops."""
    record = tmp_path / "record"
    ids = [djtasks.runs_checking.enqueue(str(record), f"k{n}", 0.1).id for n in range(80)]
    workers = Workers(mariadb.alias, tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    try:
        workers.start("--queue", "default", "--concurrency", "4")
        rows = QueuedTask.objects.using(mariadb.alias).filter(uuid__in=ids)
        drops = 0
        deadline = time.monotonic() + 60
        while rows.filter(status="SUCCESSFUL").count() < len(ids):
            assert time.monotonic() < deadline, workers.output()
            drops += _procedures("--drop").startswith("Dropped")
            time.sleep(0.1)
        # A worker's later round creates them again.
        djtasks.add.enqueue(5, 6)
        wait_until("procedures again", lambda: len(_ours(mariadb)) == 2)
    finally:
        workers.stop_all()
    assert drops >= 3, f"the worker made its procedures again only {drops} time(s)"
    keys = Counter(line.split()[0] for line in record.read_text().splitlines())
    assert len(keys) == len(ids) and set(keys.values()) == {1}, keys.most_common(3)
    for row in rows:
        assert (row.status, row.attempts, row.errors) == ("SUCCESSFUL", 1, [])
        assert row.return_value["token"] == row.token


@pytest.fixture
def limited(mariadb: BaseDatabaseWrapper) -> Iterator[tuple[str, str]]:
    """A user of the test database with its rows' privileges alone, no
    CREATE ROUTINE and no EXECUTE: ``(user, password)``."""
    user, password = f"bgtasks_rows_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    name = mariadb.settings_dict["NAME"]
    with mariadb.cursor() as cursor:
        cursor.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY '{password}'")
        cursor.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}'")
        for host in ("%%", "localhost"):
            cursor.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{name}`.* TO '{user}'@'{host}'"
            )
    try:
        yield user, password
    finally:
        with mariadb.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{user}'@'%%', '{user}'@'localhost'")


def _as(alias: str, user: str, password: str) -> BaseDatabaseWrapper:
    """A new connection of ``alias`` as ``user``, in its own wrapper."""
    connection = connections.create_connection(alias)
    connection.settings_dict = {**connection.settings_dict, "USER": user, "PASSWORD": password}
    return connection


@pytest.mark.parametrize("created_first", [False, True], ids=["cannot-create", "cannot-execute"])
def test_a_user_that_cannot_have_the_procedures_runs_the_text_with_the_same_result(
    mariadb: BaseDatabaseWrapper,
    mysql_alias: str,
    limited: tuple[str, str],
    created_first: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without CREATE ROUTINE the process can't create them; without EXECUTE
    it can't call those another user created (the round that finds out is
    rolled back and sent again as text). Either way the claims and ends are
    made, fenced alike, and the process says why once."""
    for n in range(3):
        djtasks.add.enqueue(n, 1)
    if created_first:
        _round("w0", [], 0)  # (nothing claimed: the procedures created, as root)
        _, [held] = _round("w0", [], 1)
        QueuedTask.objects.finish_many(_ended([held], "w0"))
        assert len(_ours(mariadb)) == 2
    other = _as(mysql_alias, *limited)
    monkeypatch.setitem(connections._connections.__dict__, mysql_alias, other)  # type: ignore[attr-defined]
    try:
        with caplog.at_level(logging.WARNING, logger="django_bgtasks.db"):
            _, first = _round("w1", [], 1)
            ended, second = _round("w1", _ended(first, "w1"), 5)
            _round("w1", _ended(second, "w1"), 1)
    finally:
        other.close()
    assert len(first) == 1 and list(ended) == [first[0].seq] and len(second) == 2 - created_first
    warned = [r.getMessage() for r in caplog.records if "no stored procedure" in r.getMessage()]
    assert len(warned) == 1
    assert ("denied" in warned[0]) and (str(1370 if created_first else 1044) in warned[0])
    assert len(_ours(mariadb)) == (2 if created_first else 0)
    assert [row[0] for row in _statuses(mariadb)] == ["SUCCESSFUL"] * 3


def test_a_create_that_fails_but_for_a_privilege_is_the_callers_error(
    mariadb: BaseDatabaseWrapper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a refused privilege makes a process send the text for good; any
    other error of the CREATE (here the server refuses its syntax) reaches
    the write's caller, as the write's own would, and nothing is written."""
    djtasks.add.enqueue(1, 1)
    query = "SELECT 1 FROM %(owner)s"
    monkeypatch.setattr(mariadb_routines, "_ROUTINES", {})
    monkeypatch.setattr(mariadb_routines.Routine, "__init__", _broken_create)
    with pytest.raises(ProgrammingError):
        mariadb_routines.routine(mariadb, "claim", query)
    with pytest.raises(ProgrammingError):
        _round("w1", [], 1)
    assert set() == mariadb_routines._REFUSED
    assert _statuses(mariadb) == [("READY", "", 0)]


def test_bgtasks_procedures_drop_refused_by_the_server_says_why_and_drops_nothing(
    mariadb: BaseDatabaseWrapper,
    mysql_alias: str,
    limited: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user that sees the procedures (EXECUTE) but may not drop them (no
    ALTER ROUTINE): a CommandError naming the privilege, both procedures
    still there; a user with no privilege on them sees none."""
    djtasks.add.enqueue(1, 2)
    _, claims = _round("w1", [], 1)
    _round("w1", _ended(claims, "w1"), 1)
    names = sorted(_ours(mariadb))
    user, _ = limited

    def as_limited() -> BaseDatabaseWrapper:
        other = _as(mysql_alias, *limited)
        monkeypatch.setitem(connections._connections.__dict__, mysql_alias, other)  # type: ignore[attr-defined]
        return other

    with contextlib.closing(as_limited()):
        assert "(none this database user may see)" in _procedures("--drop")
    # (A database's privileges reach a session when it connects.)
    name = mariadb.settings_dict["NAME"]
    with mariadb.cursor() as cursor:
        for host in ("%%", "localhost"):
            cursor.execute(f"GRANT EXECUTE ON `{name}`.* TO '{user}'@'{host}'")
    with contextlib.closing(as_limited()):
        assert _procedures().splitlines() == names
        with pytest.raises(
            CommandError,
            match=rf"refused to drop {names[0]} .*1370.*dropping needs the ALTER ROUTINE "
            r"privilege; dropped before it: none\.",
        ):
            _procedures("--drop")
    assert sorted(_ours(mariadb)) == names


def _broken_create(self: mariadb_routines.Routine, statement: str, query: str) -> None:
    self.name, self.call = f"bgtasks_{statement}_broken", "CALL nothing()"
    self.create = f"CREATE PROCEDURE IF NOT EXISTS {self.name}() BEGIN SELEC 1; END"
