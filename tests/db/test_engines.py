"""The statement sets of django_bgtasks/db/: one per vendor, rendered for a
set of tables and kept, a clear error for any other vendor, and result
columns named alike on every vendor, as their readers read them. (That the
statements take values only as parameters is tested in
tests/security/test_security.py; what they do, in tests/core/test_leases.py.)"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import NotSupportedError, connections
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper

from django_bgtasks.db import engines
from django_bgtasks.db.rows import MATCHED


def test_statements_are_rendered_once_per_vendor_and_set_of_tables() -> None:
    sqlite, postgres = connections["default"], connections["postgres"]
    tables = {"task": "t_render", "run": "r_render", "worker": "w_render", "queued": "q_render"}
    first = engines.statements(sqlite, **tables)
    assert engines.statements(sqlite, **tables) is first
    assert engines.statements(postgres, **tables) is not first
    assert engines.statements(sqlite, **{**tables, "run": "other"}) is not first
    # The table names are quoted by the connection, and nothing is left to fill in.
    assert 'INSERT INTO "t_render" AS t' in first.claim
    assert 'FROM "r_render"' in first.claim
    assert 'INSERT INTO "w_render" AS w' in first.worker_beat
    assert "{" not in first.claim and "}" not in first.claim


def test_a_database_without_lease_sql_is_a_clear_error() -> None:
    """System check E001 reports it at start-up; a caller that runs anyway gets
    NotSupportedError naming the database, before any SQL is sent."""
    other = DummyDatabaseWrapper({**connections["default"].settings_dict}, alias="legacy")
    with pytest.raises(
        NotSupportedError, match=r"postgresql, sqlite and mysql, not 'unknown'.*'legacy'"
    ):
        engines.statements(other, task="t", run="r", worker="w", queued="q")


def test_the_queue_statements_are_rendered_once_and_only_where_the_queue_runs() -> None:
    """The queue's statements share the one render cache with the lease
    statements; a vendor without them is refused (bgtasks.E015 says so at start-up)."""
    sqlite = connections["default"]
    first = engines.queue_statements(sqlite, table="q_render", paused="p")
    assert engines.queue_statements(sqlite, table="q_render", paused="p") is first
    assert 'UPDATE "q_render" SET' in first.claim and "'RUNNING'" in first.claim
    assert "{" not in first.claim and "}" not in first.claim
    assert engines.QUEUE_VENDORS == ("postgresql", "sqlite", "mysql")
    other = DummyDatabaseWrapper({**connections["default"].settings_dict}, alias="legacy")
    other.vendor = "oracle"
    with pytest.raises(
        NotSupportedError, match=r"postgresql, sqlite, mysql, not 'oracle'.*'legacy'"
    ):
        engines.queue_statements(other, table="q", paused="p")


# --- Rows are read by name -------------------------------------------------------------
# Every statement that hands back rows names each of its result columns, and
# on every vendor the same names: what their readers read (db/rows.py). Checked
# from the statements' text, without a database; that the rows read right, by
# the behaviour tests (tests/core/test_leases.py, tests/worker/, ...) on each vendor.


def _top_level(sql: str) -> str:
    """``sql`` with its string literals emptied and whatever is in parentheses
    collapsed to ``(...)``: what is left is the statement's own clauses."""
    sql = re.sub(r"'[^']*'", "''", sql)
    top, depth = [], 0
    for char in sql:
        if char == "(":
            if depth == 0:
                top.append("(...)")
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0:
            top.append(char)
    return "".join(top)


def result_columns(sql: str) -> list[str] | None:
    """The names of the columns ``sql`` hands back (its RETURNING list, else its
    top-level SELECT's), each an alias or the column it names; ``None`` for a
    statement that hands back none. An expression without a name fails."""
    top = _top_level(sql)
    returning = re.split(r"\bRETURNING\b", top, flags=re.IGNORECASE)
    if len(returning) > 1:
        columns = returning[-1]
    elif selects := re.split(r"\bSELECT\b", top, flags=re.IGNORECASE)[1:]:
        columns = re.split(r"\bFROM\b", selects[-1], flags=re.IGNORECASE)[0]
    else:
        return None
    names = []
    for item in (item.strip() for item in columns.split(",")):
        named = re.fullmatch(r"(?s).*\bAS\s+`?(\w+)`?", item, flags=re.IGNORECASE)
        bare = re.fullmatch(r"(?:\w+\.)?`?(\w+)`?", item)
        assert named or bare, f"a result column without a name: {item!r} in {sql}"
        names.append((named or bare).group(1))  # type: ignore[union-attr]
    return names


class _DescribingCursor:
    """A MySQL cursor with no server behind it: every write matches one row,
    and a read hands back one row of the columns its text names."""

    rowcount = 1
    lastrowid = 7

    def __init__(self) -> None:
        self.description: list[tuple[str]] | None = None

    def __enter__(self) -> _DescribingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: object = None) -> None:
        # An INSERT ... SELECT (the queue's enqueue) hands back no rows, unless
        # it ends in RETURNING (MariaDB's).
        is_insert = sql.lstrip().upper().startswith("INSERT")
        names = None if is_insert and "RETURNING" not in sql else result_columns(sql)
        self.description = None if names is None else [(name,) for name in names]

    def fetchall(self) -> list[tuple[int, ...]]:
        return [] if self.description is None else [(0,) * len(self.description)]


def _mysql_columns(
    statement: str,
    query: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    queue: bool = False,
    mariadb: bool = False,
) -> set[str]:
    """The names of the rows db/mysql/leases.py's reader of ``statement`` builds
    (db/mysql/queue.py's, of the queue's with ``queue``), on MySQL or MariaDB."""
    from django_bgtasks.db.mysql import leases as mysql

    monkeypatch.setattr(mysql.transaction, "atomic", lambda using: contextlib.nullcontext())
    connection = SimpleNamespace(
        cursor=_DescribingCursor,
        connection=SimpleNamespace(client_flag=0),
        alias="fake",
        vendor="mysql",
        mysql_is_mariadb=mariadb,
    )
    # What an enqueue's reader reads of its parameters: on MariaDB, the INSERT
    # of one task is another statement than that of several.
    tasks = ['[{"args_kwargs": {}}]', "[{}, {}]"] if statement == "enqueue" else ["[]"]
    found = []
    for rows_param in tasks:
        params = {"active_key": None, "rows": rows_param, "all": True, "queues": "[]"}
        rows = engines.run(connection, statement, query, params, queue=queue)  # type: ignore[arg-type]
        assert len(rows) == 1, (statement, rows)
        found.append(set(rows[0]))
    assert all(names == found[0] for names in found), statement
    return found[0]


def _rendered(vendor: str, queue: bool = False, mariadb: bool = False) -> dict[str, str]:
    connection: Any = SimpleNamespace(
        vendor=vendor,
        alias="fake",
        ops=SimpleNamespace(quote_name=lambda name: f'"{name}"'),
        mysql_is_mariadb=mariadb,
    )
    if queue:
        rendered: Any = engines.queue_statements(connection, table="q_names", paused="p")
    else:
        rendered = engines.statements(
            connection, task="t_names", run="r_names", worker="w_names", queued="q_names"
        )
    return {field.name: getattr(rendered, field.name) for field in dataclasses.fields(rendered)}


class _Reading(dict[str, Any]):
    """A row that records which of its columns a reader reads."""

    def __init__(self, names: set[str]) -> None:
        samples = {
            "uuid": "12345678-1234-5678-1234-567812345678",
            "args_kwargs": '{"args": [], "kwargs": {}}',
            "db_now": "2026-01-01 00:00:00",
        }
        json_lists = {"tasks", "running", "worker_ids"}
        super().__init__(
            {name: "[]" if name in json_lists else samples.get(name, 0) for name in names}
        )
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return super().__getitem__(name)


def _whole_rows() -> dict[str, Callable[[Mapping[str, Any]], object]]:
    """The statements whose rows a ``from_row`` reads whole, and that reader."""
    from django_bgtasks.core.states import DueRow, Lease, TaskState, WorkClaim, WorkerState

    def work_claim(row: Mapping[str, Any]) -> object:
        return WorkClaim.from_row(lambda token: Lease("job", "a", token, 30.0), row)

    return {
        "get_state": TaskState.from_row,
        "list_states": TaskState.from_row,
        "due_work": DueRow.from_row,
        "list_workers": WorkerState.from_row,
        **dict.fromkeys(
            ("claim_request", "claim_scheduled", "claim_resume", "claim_retry"), work_claim
        ),
    }


# The names the other readers take from a row (core/leases.py, core/claims.py,
# queue/manager.py); a statement in neither table hands back rows that are only
# counted (``matched``).
READ_BY_NAME = {
    "claim": {"token"},
    "renew": {"cancel_requested"},
    "renew_with_value": {"cancel_requested"},
    "clock": {"db_now"},
    "renew_many": {"kind", "key", "token", "cancel_requested", "age"},
}
QUEUE_READ_BY_NAME = {
    "renew": {"cancel_requested"},
    "finish": {"finished_at"},
    "finish_many": {"seq", "finished_at"},
    "ended": {"finished_at"},
    "recover": {"uuid", "status", "task_path", "owner"},
    "cancel": {"status"},
    "cancel_many": {"seq", "status"},
    "give_back": {"seq", "uuid", "task_path"},
    "retry": set(),  # counted
    "retry_many": set(),  # counted
    "enqueue": {"uuid", "enqueued_at"},
    "pause_queue": set(),  # counted
    "unpause_queue": set(),  # counted
    "paused_queues": {"queue_name", "paused_at"},
    "any_ready": {"ready"},
    "queue_names": {"value"},
    "task_paths": {"value"},
    "index_reads": set(),  # run for its effect
}


def test_every_vendor_names_the_result_columns_its_readers_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lease and worker statements: the same names on PostgreSQL, SQLite and
    MySQL (where db/mysql/leases.py builds some rows itself), every one named, and
    exactly what each reader reads."""
    whole = _whole_rows()
    by_vendor = {vendor: _rendered(vendor) for vendor in engines.SUPPORTED_VENDORS}
    for statement, query in by_vendor["postgresql"].items():
        names = result_columns(query)
        assert names is not None and len(set(names)) == len(names), (statement, names)
        assert set(names) == set(result_columns(by_vendor["sqlite"][statement]) or ()), statement
        mysql = by_vendor["mysql"][statement]
        assert _mysql_columns(statement, mysql, monkeypatch) == set(names), statement
        if statement in whole:
            row = _Reading(set(names))
            whole[statement](row)
            assert row.read == set(names), statement
        else:
            assert set(names) >= READ_BY_NAME.get(statement, set()), statement
            if statement not in READ_BY_NAME:
                assert names == [MATCHED], statement


def test_every_queue_vendor_names_the_result_columns_its_readers_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Django Tasks queue's statements, on each vendor it runs on (on
    MySQL and MariaDB, the rows db/mysql/queue.py's readers build)."""
    from django_bgtasks.queue.manager import Claim

    for vendor in engines.QUEUE_VENDORS:
        for statement, query in _rendered(vendor, queue=True).items():
            if not query:  # a statement this vendor does not have
                assert vendor != "postgresql", statement
                continue
            if vendor == "mysql":
                names = sorted(_mysql_columns(statement, query, monkeypatch, queue=True))
                # MariaDB's readers build the same rows (its enqueue, by RETURNING),
                # from its own statements (db/mysql/mariadb.py).
                own = _rendered(vendor, queue=True, mariadb=True)[statement]
                mariadb = _mysql_columns(statement, own, monkeypatch, queue=True, mariadb=True)
                assert sorted(mariadb) == names, statement
            else:
                names = result_columns(query)
            assert names is not None and len(set(names)) == len(names), (vendor, statement)
            if statement.endswith("claim"):
                # finish_claim's rows: the ends' arrays beside a claim's columns;
                # PostgreSQL's claims name the claim to send next (read by
                # QueuedTask.objects._claim_rows).
                besides = {"ended_seq", "ended_at"} if "finish" in statement else set()
                if vendor == "postgresql":
                    besides.add("next_claim")
                assert set(names) >= besides, vendor
                row = _Reading(set(names) - besides)
                Claim.from_row(row, "a", 0.0)
                assert row.read == set(names) - besides, vendor
            else:
                assert set(names) >= QUEUE_READ_BY_NAME[statement], (vendor, statement)


def test_the_result_columns_parser_sees_what_a_statement_hands_back() -> None:
    """What the tests above rely on: an unnamed expression fails, a write
    without RETURNING hands back nothing, parentheses and strings hide theirs."""
    assert result_columns("UPDATE t SET a = (SELECT b FROM c) WHERE d") is None
    assert result_columns("WITH e AS (UPDATE t RETURNING x) SELECT 1 AS m FROM e") == ["m"]
    assert result_columns("SELECT s.a, `b`, f(a, ',') AS c FROM (SELECT 1) s") == ["a", "b", "c"]
    with pytest.raises(AssertionError, match="without a name"):
        result_columns("UPDATE t SET a = 1 RETURNING a > 1")
