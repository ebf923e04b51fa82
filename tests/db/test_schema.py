"""The schema SQL the migrations install, run by engine (db/schema.py):
``SchemaSQL`` runs a migration's entry of the migrated connection's engine,
forwards or backwards, and nothing where the engine has none, and can be
written out again as a migration; and what the entries do alike on every
engine, the takeover triggers (0002 on SQLite, 0003 on PostgreSQL, 0006 on
MySQL/MariaDB) and their result columns (0005). Each engine's own entries
are tested in tests/db/<engine>/test_schema.py; that a released entry is
never edited, in tests/test_migrations.py."""

from __future__ import annotations

import time
from typing import Any

from django.apps import apps
from django.core.management import call_command
from django.db import connections
from django.db.migrations.writer import MigrationWriter

from django_bgtasks.core import store
from django_bgtasks.db import engines, schema
from django_bgtasks.db.mysql.schema import SCHEMA as MYSQL_SCHEMA
from django_bgtasks.db.postgresql.schema import SCHEMA as POSTGRESQL_SCHEMA
from django_bgtasks.db.shared import Statements
from django_bgtasks.db.sqlite.schema import SCHEMA as SQLITE_SCHEMA
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from tests.dbtools import backdate

objects = BackgroundTask.objects


def statements(alias: str) -> tuple[Statements, str]:
    """The lease statements for ``alias``, and how they write a history row."""
    connection = connections[alias]
    rendered = store.statements(connection)
    return rendered, f"INSERT INTO {connection.ops.quote_name(TaskRun._meta.db_table)}"


def history(name: str) -> list[dict[str, Any]]:
    return list(TaskRun.objects.for_task(name).order_by("token").values())


# --- the takeover trigger (both vendors) ---------------------------------------------


def test_a_takeover_of_a_stale_lease_records_the_replaced_run_as_lost(db_alias: str) -> None:
    claim, writes_history = statements(db_alias)
    # The claim is a plain upsert: only the trigger can record what it replaced.
    assert writes_history not in claim.claim

    old = objects.try_claim("job", "old-holder", {"done": 1}, ttl=0.5)
    assert old is not None
    time.sleep(0.05)
    assert objects.update_state("job", "old-holder", {"done": 4}, token=old.token)
    time.sleep(0.7)  # past the ttl, with no heartbeat since
    silent = objects.get_state("job")
    assert silent.stale and history("job") == []

    new = objects.try_claim("job", "new-holder", ttl=30)
    assert new is not None and new.token == old.token + 1
    [lost] = history("job")
    assert (lost["token"], lost["owner"], lost["outcome"], lost["value"]) == (
        old.token,
        "old-holder",
        "lost",
        {"done": 4},
    )
    assert lost["error"] == "lease expired; taken over by new-holder"
    assert lost["started_at"] == silent.started_at < silent.updated_at
    assert lost["finished_at"] == silent.updated_at  # as of its last heartbeat
    # The new holder's run is not history yet, and the old holder is fenced off.
    assert objects.get_state("job").token == new.token
    assert not objects.heartbeat("job", "old-holder", token=old.token)


def test_a_claim_that_replaces_no_running_lease_records_nothing(db_alias: str) -> None:
    first = objects.try_claim("job", "a", ttl=30)
    assert objects.try_claim("job", "b", ttl=30) is None  # refused: nothing replaced
    assert history("job") == []
    assert objects.release("job", "a", token=first.token)
    assert objects.try_claim("job", "b", ttl=30) is not None  # an idle row
    assert [(run["token"], run["outcome"]) for run in history("job")] == [
        (first.token, "succeeded")
    ]


# --- the run-history trigger (SQLite, MySQL: tests/db/<engine>/test_schema.py) --------

ENDINGS = ["release", "force_release", "expire_stale"]


def _the_trigger_records_the_run(alias: str, ending: str) -> None:
    rendered, writes_history = statements(alias)
    # SQLite and MySQL have no data-modifying CTEs: the statement that ends a
    # run writes no history row itself, the trigger (0002-0005; 0006) does.
    assert writes_history not in getattr(rendered, ending)

    claim = objects.try_claim("job", "a", {"done": 1}, ttl=30)
    assert objects.update_state("job", "a", {"done": 3}, token=claim.token)
    value, result = {"done": 3}, None
    if ending == "release":
        assert objects.release(
            "job", "a", {"done": 9}, token=claim.token, outcome="failed", error="boom", result=[7]
        )
        outcome, error, value, result = "failed", "boom", {"done": 9}, [7]
    elif ending == "force_release":
        assert objects.force_release("job", token=claim.token)
        outcome, error = "released-by-operator", "released by an operator"
    else:
        backdate(alias, "job", 31)  # its holder went silent
        assert objects.expire_stale() == 1
        outcome, error = "lost", "lease expired: no heartbeat within the ttl"

    state = objects.get_state("job")
    [run] = history("job")
    assert (run["token"], run["owner"], run["outcome"], run["error"], run["value"]) == (
        claim.token,
        "a",
        outcome,
        error,
        value,
    )
    assert (run["started_at"], run["finished_at"]) == (state.started_at, state.finished_at)
    assert (run["result"], run["result_note"]) == (result, "")  # the columns of 0005
    if ending == "expire_stale":
        assert run["finished_at"] == state.updated_at  # as of its last heartbeat


# --- migration 0005: the results -------------------------------------------------------


def test_a_takeover_copies_the_replaced_runs_result_columns(db_alias: str) -> None:
    """The takeover triggers (0005's) copy every history column, the result's
    too. A running row has none (a claim clears it), so set one by hand."""
    old = objects.try_claim("job", "old-holder", ttl=30)
    connection = connections[db_alias]
    table = connection.ops.quote_name(BackgroundTask._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET result = %s, result_note = %s WHERE name = %s",
            ['{"partial": 1}', "a note", "job"],
        )
    backdate(db_alias, "job", 31)
    assert objects.try_claim("job", "new-holder", ttl=30) is not None
    [lost] = history("job")
    assert (lost["token"], lost["outcome"]) == (old.token, "lost")
    assert (lost["result"], lost["result_note"]) == ({"partial": 1}, "a note")
    state = objects.get_state("job")
    assert (state.result, state.result_note) == (None, "")  # the new run starts without


def _history_sql(alias: str) -> str:
    """The SQL of what writes history from a trigger: SQLite's trigger, or
    PostgreSQL's takeover function."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = %s",
                ["bgtasks_record_run"],
            )
        elif connection.vendor == "mysql":
            cursor.execute(
                "SELECT action_statement FROM information_schema.triggers"
                " WHERE trigger_schema = DATABASE() AND trigger_name = %s",
                ["bgtasks_record_run"],
            )
            found = cursor.fetchall()
            if not found:
                return ""
        else:
            cursor.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = %s", ["bgtasks_record_takeover"]
            )
        if connection.vendor != "mysql":
            found = cursor.fetchall()
    assert len(found) == 1, found
    return str(found[0][0])


def test_unapplying_0005_leaves_0004s_history_trigger_and_reapplying_restores_0005s(
    db_alias: str,
) -> None:
    assert "result_note" in _history_sql(db_alias)
    call_command("migrate", "django_bgtasks", "0004_workers", database=db_alias, verbosity=0)
    try:
        at_0004 = _history_sql(db_alias)
        if connections[db_alias].vendor == "mysql":
            # MySQL's trigger came with 0006 (after 0005's columns): gone with it.
            assert at_0004 == ""
        else:  # still there, so runs are still recorded
            assert "scheduled_for" in at_0004 and "result" not in at_0004
    finally:
        call_command("migrate", "django_bgtasks", database=db_alias, verbosity=0)
    assert "result_note" in _history_sql(db_alias)
    # And it works: a release records the run with its result.
    lease = objects.try_claim("job", "a", ttl=30)
    assert objects.release("job", "a", token=lease.token, result={"ok": True})
    assert [run["result"] for run in history("job")] == [{"ok": True}]


# --- SchemaSQL: what a migration's RunPython runs --------------------------------------

EVERY_STEP = sorted({*POSTGRESQL_SCHEMA, *MYSQL_SCHEMA, *SQLITE_SCHEMA, "9999_no_such_step"})


class _Recorder:
    """A schema editor of a real connection that records the statements it
    is given instead of running them (Django's ``collect_sql`` formats each
    with ``%``, which some of the entries' SQL holds)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.ran: list[str] = []

    def execute(self, sql: str, params: Any = ()) -> None:
        self.ran.append(sql)


def _ran(alias: str, code: schema.SchemaSQL) -> list[str]:
    """The statements ``code`` runs on ``alias``, in order."""
    editor = _Recorder(connections[alias])
    code(apps, editor)  # type: ignore[arg-type]
    return editor.ran


def test_each_step_runs_the_migrated_engines_entry_and_nothing_on_another(db_alias: str) -> None:
    """A step runs its entry of the engine of the connection migrated, in
    order, forwards or backwards; a step of another engine's only (as
    0006_mysql_storage is MySQL's), or of none, runs nothing there."""
    entries = engines.driver(connections[db_alias]).schema
    ran_somewhere = 0
    for step in EVERY_STEP:
        entry = entries.get(step)
        forwards = list(entry.forwards) if entry else []
        backwards = list(entry.backwards) if entry else []
        assert _ran(db_alias, schema.forwards(step)) == forwards, step
        assert _ran(db_alias, schema.backwards(step)) == backwards, step
        ran_somewhere += bool(forwards)
    assert 0 < ran_somewhere < len(EVERY_STEP)  # some steps are this engine's, some not


def test_a_step_run_backwards_then_forwards_drops_and_restores_its_index(db_alias: str) -> None:
    """0027's entry, run for real on the engine migrated, as its migration
    runs it (not atomic, refusing an engine it has no SQL for)."""
    connection = connections[db_alias]
    table = QueuedTask._meta.db_table

    def indexes() -> set[str]:
        with connection.cursor() as cursor:
            return set(connection.introspection.get_constraints(cursor, table))

    def run(code: schema.SchemaSQL) -> None:
        with connection.schema_editor(atomic=False) as editor:
            code(apps, editor)

    step = "0027_finished_by_time"
    assert "bgtasks_queued_finished" in indexes()
    try:
        run(schema.backwards(step, every_engine=True))
        assert "bgtasks_queued_finished" not in indexes()
    finally:
        run(schema.forwards(step, every_engine=True))
    assert "bgtasks_queued_finished" in indexes()


def test_schema_sql_is_written_out_as_its_arguments() -> None:
    """squashmigrations writes a migration's RunPython code out again: a
    SchemaSQL as the call that makes it, which makes the same one."""
    for code in (
        schema.forwards("0027_finished_by_time", every_engine=True),
        schema.backwards("0006_mysql_storage"),
    ):
        written, imports = MigrationWriter.serialize(code)
        assert imports == {"import django_bgtasks.db.schema"}
        namespace: dict[str, Any] = {}
        exec("import django_bgtasks.db.schema", namespace)  # noqa: S102
        again = eval(written, namespace)  # noqa: S307
        assert isinstance(again, schema.SchemaSQL)
        assert (again.step, again.backwards, again.every_engine) == (
            code.step,
            code.backwards,
            code.every_engine,
        )
