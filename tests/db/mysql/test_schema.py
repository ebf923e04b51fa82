"""What MySQL's and MariaDB's schema entries set up (db/mysql/schema.py,
``django_bgtasks.db.mysql.schema``), tested by what they do: the binary
collation of names (0006) and of the queue's unique keys (0012), the
run-history trigger (0006), the claim's index (0012), the operator's
reads' indexes (0021) and the fair shares' index and trigger (0028); and
that unapplying a migration removes what it added."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connections

from django_bgtasks.models import BackgroundTask, TaskRun
from tests.db.test_schema import ENDINGS, _history_sql, _the_trigger_records_the_run, history

objects = BackgroundTask.objects

# --- the run-history trigger (0006) ----------------------------------------------------


@pytest.mark.parametrize("ending", ENDINGS)
def test_on_mysql_the_trigger_records_every_run_that_ends(mysql_alias: str, ending: str) -> None:
    _the_trigger_records_the_run(mysql_alias, ending)


# --- names compare byte for byte (0006) ------------------------------------------------


def test_on_mysql_names_that_differ_in_case_or_accents_are_different_tasks(
    mysql_alias: str,
) -> None:
    """MySQL's default collations would make these one primary key; 0006
    gives the name columns utf8mb4_bin, so they compare as on PostgreSQL."""
    names = ["log-cleanup", "Log-Cleanup", "log-cleanüp", "log-cleanup.", "LOG-CLEANUP"]
    leases = [objects.try_claim(name, "a", ttl=30) for name in names]
    assert all(lease is not None and lease.token == 1 for lease in leases)
    assert [state.name for state in objects.list_states()] == sorted(names)
    for name, lease in zip(names, leases, strict=True):
        assert objects.release(name, "a", token=lease.token)
    assert sorted(run["name"] for run in TaskRun.objects.using(mysql_alias).values()) == sorted(
        names
    )
    with connections[mysql_alias].cursor() as cursor:
        cursor.execute(
            "SELECT table_name, collation_name FROM information_schema.columns"
            " WHERE table_schema = DATABASE() AND column_name = 'name'"
            " AND table_name IN (%s, %s) ORDER BY table_name",
            [BackgroundTask._meta.db_table, TaskRun._meta.db_table],
        )
        assert [collation for _, collation in cursor.fetchall()] == ["utf8mb4_bin"] * 2


def test_on_mysql_a_name_of_200_four_byte_characters_fits(mysql_alias: str) -> None:
    name = "\N{SNAKE}" * 200  # 800 bytes of utf8mb4: inside InnoDB's key limit
    lease = objects.try_claim(name, "a", ttl=30)
    assert lease is not None
    assert objects.get_state(name).name == name
    assert objects.release(name, "a", token=lease.token)
    assert [run["name"] for run in history(name)] == [name]


def test_unapplying_0006_on_mysql_removes_its_trigger_and_reapplying_restores_it(
    mysql_alias: str,
) -> None:
    call_command("migrate", "django_bgtasks", "0005_results", database=mysql_alias, verbosity=0)
    try:
        assert _history_sql(mysql_alias) == ""
    finally:
        call_command("migrate", "django_bgtasks", database=mysql_alias, verbosity=0)
    assert "result_note" in _history_sql(mysql_alias)
    lease = objects.try_claim("job", "a", ttl=30)
    assert objects.release("job", "a", token=lease.token)
    assert [run["outcome"] for run in history("job")] == ["succeeded"]


# --- the queue's unique keys and the claim's index (0012), its reads' indexes (0021) ----


def _queue_indexes(alias: str) -> dict[str, list[tuple[str, str]]]:
    """Each index of the queue table: its columns, in order, with their direction."""
    from django_bgtasks.models import QueuedTask

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT index_name, column_name, collation FROM information_schema.statistics"
            " WHERE table_schema = DATABASE() AND table_name = %s"
            " ORDER BY index_name, seq_in_index",
            [QueuedTask._meta.db_table],
        )
        indexes: dict[str, list[tuple[str, str]]] = {}
        for index, column, direction in cursor.fetchall():
            indexes.setdefault(index, []).append((column, direction))
        return indexes


def test_on_mysql_unique_keys_that_differ_in_case_are_different_keys(mysql_alias: str) -> None:
    """MySQL's default collations would make these one key of the unique index
    on active_key; 0012 compares them byte for byte, as on PostgreSQL."""
    import dataclasses

    from tests import djtasks

    # (Not "report ": utf8mb4_bin ignores trailing spaces, docs/install.md.)
    keys = ["report", "Report", "répórt", "REPORT"]
    results = [dataclasses.replace(djtasks.nightly_report, lease_name=k).enqueue() for k in keys]
    assert len({result.id for result in results}) == len(keys)
    again = dataclasses.replace(djtasks.nightly_report, lease_name="Report").enqueue()
    assert again.id == results[1].id


def test_unapplying_0012_on_mysql_removes_the_claims_index_and_reapplying_restores_it(
    mysql_alias: str,
) -> None:
    claim_order = [("status", "A"), ("priority", "D"), ("seq", "A")]
    assert _queue_indexes(mysql_alias)["bgtasks_queued_claim"] == claim_order
    call_command("migrate", "django_bgtasks", "0011_worker_ttl", database=mysql_alias, verbosity=0)
    try:
        assert "bgtasks_queued_claim" not in _queue_indexes(mysql_alias)
    finally:
        call_command("migrate", "django_bgtasks", database=mysql_alias, verbosity=0)
    assert _queue_indexes(mysql_alias)["bgtasks_queued_claim"] == claim_order


def test_0021_indexes_the_operators_reads_on_mysql(
    mysql_alias: str,
) -> None:
    indexes = _queue_indexes(mysql_alias)
    assert [column for column, _order in indexes["bgtasks_queued_queue"]] == ["queue_name", "seq"]
    assert [column for column, _order in indexes["bgtasks_queued_task"]] == ["task_path", "seq"]
    assert [column for column, _order in indexes["bgtasks_queued_status"]] == ["status", "seq"]


# --- fair shares (0028) ------------------------------------------------------------------


def test_0028_on_mysql_indexes_the_ready_tasks_by_queue_and_key_and_makes_each_keys_turns(
    mysql_alias: str,
) -> None:
    """The index a claim reads a queue's unkeyed tasks and each key's by;
    and a key's row of turns, made once by the trigger at its first enqueue
    in a queue (none for a task without a key); unapplied, both are gone."""
    from django_bgtasks.models import FairShare
    from tests import djtasks

    fair_order = [("status", "A"), ("queue_name", "A"), ("fairness_key", "A"),
                  ("priority", "D"), ("seq", "A")]  # fmt: skip
    assert _queue_indexes(mysql_alias)["bgtasks_queued_fair"] == fair_order
    backend = djtasks.fair_add.get_backend()
    backend.enqueue_many(djtasks.fair_add, [((n, n % 2), {}) for n in range(6)])
    djtasks.fair_add.using(queue_name="other").enqueue(1, 0)
    djtasks.add.enqueue(1, 2)
    shares = FairShare.objects.using(mysql_alias).values_list("queue_name", "fairness_key")
    made = [("default", "tenant:0"), ("default", "tenant:1"), ("other", "tenant:0")]
    assert sorted(shares) == made
    call_command("migrate", "django_bgtasks", "0027", database=mysql_alias, verbosity=0)
    try:
        assert "bgtasks_queued_fair" not in _queue_indexes(mysql_alias)
        with connections[mysql_alias].cursor() as cursor:
            cursor.execute(
                "SELECT trigger_name FROM information_schema.triggers"
                " WHERE trigger_schema = DATABASE() AND trigger_name = 'bgtasks_fair_share_made'"
            )
            assert cursor.fetchall() == ()
    finally:
        call_command("migrate", "django_bgtasks", database=mysql_alias, verbosity=0)
    assert _queue_indexes(mysql_alias)["bgtasks_queued_fair"] == fair_order
