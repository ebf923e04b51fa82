"""MariaDB's own statements of the queue (db/mysql/mariadb.py), where they
differ from MySQL's: the claim's flow steps run only for a picked row with a
flow limit; the writes of picked rows, row by row, keep no temporary table
on disk; its claim finds a rare fairness key, and the tasks without one,
behind another key's backlog by index descents, gives no turn to a key
whose row of turns another claim holds, and takes a lone key's tasks as
the plain pick; and its enqueue tells one task (an
INSERT of its VALUES) from several by reading the first. (Its enqueue's
rows, with MySQL's: tests/db/mysql/test_enqueue.py.)"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.db import connections, transaction

from django_bgtasks.models import FlowSlot, QueuedTask
from tests import djtasks
from tests.db.mysql.test_queue import _claim, _enqueue, _run
from tests.queue.test_claim_reads import _mysql_rows


def test_on_mariadb_a_claim_runs_its_flow_steps_only_for_a_row_with_a_limit(
    mysql_queue_alias: str,
) -> None:
    """MariaDB runs the claim's flow steps (the first keeps the free slots in
    @bgtasks_cslots) only when a picked row has a flow limit; MySQL, which
    has no compound statement outside stored programs, runs them always.
    Either way the rows are claimed, and the limited one takes its slot."""
    connection = connections[mysql_queue_alias]

    def slots_read() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @bgtasks_cslots = 'untouched'")
            [(untouched,)] = cursor.fetchall()
            cursor.execute("SET @bgtasks_cslots = 'untouched'")
        return not untouched

    _enqueue(0)
    slots_read()
    assert len(_claim(mysql_queue_alias, 1)) == 1
    assert slots_read() is (not connection.mysql_is_mariadb)
    djtasks.per_account.enqueue("a")
    assert [json.loads(row["args_kwargs"])["args"] for row in _claim(mysql_queue_alias, 1)] == [
        ["a"]
    ]
    assert slots_read() is True
    taken = FlowSlot.objects.using(mysql_queue_alias).filter(seq__isnull=False)
    assert list(taken.values_list("flow_key", flat=True)) == ["account:a"]


def test_on_mariadb_the_writes_of_picked_rows_keep_no_temporary_table_on_disk(
    mysql_alias: str,
) -> None:
    """MariaDB keeps an internal temporary table on disk when it holds a BLOB:
    the new values of a multi-table UPDATE whose first table is not the one
    it writes, the rows of a sorted read. Each claim and each end made and
    deleted such a file, a quarter of the server's CPU in a drain
    (docs/benchmarks.md, "MariaDB: no file a claim"). So a claim, an end, a
    give-back and a recovery, each writing rows with BLOBs, make none."""
    connection = connections[mysql_alias]
    connection.ensure_connection()
    if not connection.mysql_is_mariadb:
        pytest.skip("BGTASKS_MYSQL_URL is MySQL, whose temporary tables of BLOBs stay in memory")

    def on_disk() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
            [(_name, count)] = cursor.fetchall()
        return int(count)

    _enqueue(3, 2, 1)
    before = on_disk()
    claimed = _claim(mysql_alias, 3)
    ends = [
        {"seq": row["seq"], "owner": "w1", "token": row["token"], "status": "SUCCESSFUL",
         "return_value": json.dumps({"rows": "x" * 100}), "error": None, "refund": 0}
        for row in claimed[:2]
    ]  # fmt: skip
    assert len(_run(mysql_alias, "finish_many", ends=json.dumps(ends))) == 2
    assert len(_run(mysql_alias, "give_back", owner="w1", held="[]")) == 1
    [again] = _claim(mysql_alias, 1)
    rows = QueuedTask.objects.using(mysql_alias)
    rows.filter(seq=again["seq"]).update(updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert [row["status"] for row in _run(mysql_alias, "recover")] == ["FAILED"]  # 1 attempt
    assert on_disk() == before
    after = {row.priority: row for row in rows.all()}
    assert [after[p].return_value for p in (3, 2)] == [{"rows": "x" * 100}] * 2
    given_back_then_lost = (after[1].status, after[1].worker_ids, after[1].attempts)
    assert given_back_then_lost == ("FAILED", ["w1"], 1)
    assert after[1].errors[0]["exception_class_path"].endswith("LeaseLost")


@pytest.mark.parametrize(
    ("rows", "only"),
    [
        ('[{"uuid": "a"}]', {"uuid": "a"}),
        (' \n[ {"uuid": "a", "args": [1, "]"]} ]\n', {"uuid": "a", "args": [1, "]"]}),
        ('[{"uuid": "a"}, {"uuid": "b"}]', None),
        ('[{"uuid": "a"} ,{"uuid": "b"}]', None),
        ("[]", None),
    ],
    ids=["one", "one-spaced", "two", "two-spaced", "none"],
)
def test_mariadbs_enqueue_tells_one_task_from_several_by_reading_the_first(
    rows: str, only: dict[str, Any] | None
) -> None:
    """MariaDB stores one task by an INSERT of its VALUES: the reader tells
    one from several without parsing a bulk enqueue's every task."""
    from django_bgtasks.db.mysql.mariadb import _only_task

    assert _only_task(rows) == only
    with pytest.raises(ValueError, match="a JSON array"):
        _only_task('{"uuid": "a"}')


def test_on_mariadb_a_claim_finds_a_rare_key_and_the_unkeyed_behind_a_keys_backlog(
    mysql_alias: str,
) -> None:
    """MariaDB has no partial indexes: migration 0028's index of the ready
    rows by queue and key holds a queue's tasks without a key first and each
    key's apart, so a claim reads a few entries of each (one descent), not
    tenant 1's 20,000 to reach tenant 2's or the tasks without a key
    (tests/queue/test_claim_reads.py bounds the claim of keys in turn)."""
    backend = djtasks.fair_add.get_backend()
    with transaction.atomic(using=mysql_alias):
        backend.enqueue_many(djtasks.fair_add, [((n, 1), {}) for n in range(20_000)])
    backend.enqueue_many(djtasks.fair_add, [((n, 2), {}) for n in range(3)])
    backend.enqueue_many(djtasks.add, [((n, 0), {}) for n in range(2)])
    claimed: list[Any] = []
    reads = _mysql_rows(
        mysql_alias,
        lambda: claimed.extend(QueuedTask.objects.claim_many("w", queues=["default"], limit=8)),
    )
    rows = QueuedTask.objects.using(mysql_alias).filter(seq__in=[c.seq for c in claimed])
    keys = sorted(rows.values_list("fairness_key", flat=True), key=str)
    assert keys == [None, None, "tenant:1", "tenant:1", "tenant:1", "tenant:2", "tenant:2",
                    "tenant:2"]  # fmt: skip
    assert reads <= 600, reads


def _claimed_keys(alias: str, limit: int) -> list[str]:
    claimed = QueuedTask.objects.claim_many("w", queues=["default"], limit=limit)
    rows = QueuedTask.objects.using(alias).filter(seq__in=[c.seq for c in claimed])
    return list(rows.values_list("fairness_key", flat=True))


def test_on_mariadb_a_lone_keys_claim_is_the_plain_pick(mysql_alias: str) -> None:
    """Where a queue's ready tasks all have one key (a tenant alone), their
    order is the plain pick's (priority, then enqueue order), and MariaDB's
    claim takes them so, reading what it reads for tasks without a key: the
    fair steps, a statement a key and a turn, had doubled the claim's time
    (docs/benchmarks.md, "Fair shares"). Beside a second key, or tasks
    without one, the turns come back."""
    backend = djtasks.fair_add.get_backend()

    def reads_of_a_claim(declared: Any, keys: list[int]) -> int:
        QueuedTask.objects.using(mysql_alias).all().delete()
        backend.enqueue_many(declared, [((n, key), {}) for key in keys for n in range(50)])
        return _mysql_rows(
            mysql_alias, lambda: QueuedTask.objects.claim_many("w", queues=["default"], limit=8)
        )

    # (A first table apart: a table emptied reads a few entries more, the
    # deleted rows' until they are purged.)
    reads_of_a_claim(djtasks.add, [0])
    plain = reads_of_a_claim(djtasks.add, [0])
    # 186 rows, against 69-77 without a key, before the lone key's claim was
    # the plain pick; two keys read about 315.
    assert reads_of_a_claim(djtasks.fair_add, [1]) <= plain + 10
    assert reads_of_a_claim(djtasks.fair_add, [1, 2]) > plain + 100
