"""``QueuedTask.objects``' batched statements (issue 28): ``claim_many``, up to
``limit`` ready tasks in one statement, ``finish_many``, several runs' ends
in one, each row fenced by its own token, and ``finish_and_claim``, both in
one commit on PostgreSQL (one statement) and MySQL. The single ``claim`` and
``finish``, and everything else of the queue, are tests/queue/test_backend.py's
(and a run's end, tests/queue/test_execute.py's).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction

from django_bgtasks.db.mysql.leases import multi_statements
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.manager import Claim, Ending
from tests import djtasks
from tests.procs import wait_until
from tests.queue.test_backend import backdate


def enqueue(count: int, **options: Any) -> list[str]:
    return [djtasks.add.using(**options).enqueue(n, n).id for n in range(count)]


def rows(alias: str) -> dict[str, Any]:
    return {str(row.uuid): row for row in QueuedTask.objects.using(alias).all()}


def test_claim_many_takes_up_to_limit_in_priority_then_enqueue_order(tasks_alias: str) -> None:
    low = enqueue(2, priority=-1)
    plain = enqueue(2)
    high = enqueue(2, priority=5)
    tokens = {uuid: row.token for uuid, row in rows(tasks_alias).items()}
    first = QueuedTask.objects.claim_many("w", queues=None, limit=3)
    assert [str(claim.uuid) for claim in first] == [*high, plain[0]]
    second = QueuedTask.objects.claim_many("w", queues=None, limit=10)
    assert [str(claim.uuid) for claim in second] == [plain[1], *low]
    assert QueuedTask.objects.claim_many("w", queues=None, limit=10) == []
    # Each its own lease: its row's token + 1, its first attempt, one sent_at a statement.
    for claim in first + second:
        assert (claim.token, claim.attempts, claim.owner) == (tokens[str(claim.uuid)] + 1, 1, "w")
    assert len({claim.sent_at for claim in first}) == 1
    assert first[0].sent_at < second[0].sent_at
    written = rows(tasks_alias)
    assert {row.status for row in written.values()} == {"RUNNING"}
    assert all(row.worker_ids == ["w"] for row in written.values())


def test_claim_many_leaves_a_task_before_its_run_after_and_other_queues(tasks_alias: str) -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    deferred = enqueue(2, run_after=later)
    elsewhere = enqueue(2, queue_name="other")
    due = enqueue(2)
    claimed = QueuedTask.objects.claim_many("w", queues=["default"], limit=10)
    assert [str(claim.uuid) for claim in claimed] == due
    left = rows(tasks_alias)
    assert {left[uuid].status for uuid in deferred + elsewhere} == {"READY"}


@pytest.mark.parametrize("limit", [0, -1, 2**31, True, 1.5, "2", None])
def test_claim_many_refuses_a_bad_limit_and_writes_nothing(refusal_alias: str, limit: Any) -> None:
    enqueue(2)
    with pytest.raises((TypeError, ValueError), match="limit must be"):
        QueuedTask.objects.claim_many("w", queues=None, limit=limit)
    assert set(QueuedTask.objects.values_list("status", flat=True)) == {"READY"}


def test_claim_many_skips_the_rows_another_transaction_locked(pg_alias: str) -> None:
    """PostgreSQL: ``FOR UPDATE SKIP LOCKED``. Another session holds two ready
    rows locked; the claim takes the next ones at once instead of waiting."""
    import psycopg

    ids = enqueue(5)
    table = connections[pg_alias].ops.quote_name(QueuedTask._meta.db_table)
    params = connections[pg_alias].get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params) as other:  # a transaction, held open
        other.execute(
            f"SELECT seq FROM {table} WHERE uuid = ANY(%s::uuid[]) FOR UPDATE", [ids[:2]]
        )
        with connections[pg_alias].cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a wait would fail the claim
        try:
            claimed = QueuedTask.objects.claim_many("w", queues=None, limit=2)
        finally:
            with connections[pg_alias].cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        assert [str(claim.uuid) for claim in claimed] == ids[2:4]
        other.rollback()
    assert [str(c.uuid) for c in QueuedTask.objects.claim_many("w", queues=None, limit=9)] == [
        ids[0],
        ids[1],
        ids[4],
    ]


def test_any_ready_reads_what_a_claim_may_take_and_writes_nothing(tasks_alias: str) -> None:
    """An idle worker's poll (worker/queue_threads.py): a ready task of its
    queues, due and not paused, and nothing else, on every engine; the rows
    are left as they were (their tokens too)."""
    assert not QueuedTask.objects.any_ready(queues=None)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    enqueue(1, run_after=later)
    assert not QueuedTask.objects.any_ready(queues=None)
    enqueue(1, queue_name="other")
    assert QueuedTask.objects.any_ready(queues=None)
    assert QueuedTask.objects.any_ready(queues=["default", "other"])
    assert not QueuedTask.objects.any_ready(queues=["default"])
    QueuedTask.objects.pause_queue("other")
    assert not QueuedTask.objects.any_ready(queues=None)
    QueuedTask.objects.unpause_queue("other")
    before = {uuid: (row.status, row.token) for uuid, row in rows(tasks_alias).items()}
    assert QueuedTask.objects.any_ready(queues=["other"])
    assert {uuid: (row.status, row.token) for uuid, row in rows(tasks_alias).items()} == before
    assert QueuedTask.objects.claim_many("w", queues=["other"], limit=5)
    assert not QueuedTask.objects.any_ready(queues=None)  # running, or not yet due


@pytest.mark.parametrize("queues", ["default", ("default",), [""], [7], ["x" * 101]])
def test_any_ready_and_claims_refuse_bad_queues_before_any_sql(
    refusal_alias: str, queues: Any
) -> None:
    enqueue(1)
    with pytest.raises((TypeError, ValueError), match="queue"):
        QueuedTask.objects.any_ready(queues=queues)
    with pytest.raises((TypeError, ValueError), match="queue"):
        QueuedTask.objects.claim_many("w", queues=queues, limit=1)
    assert set(QueuedTask.objects.values_list("status", flat=True)) == {"READY"}


def test_any_ready_waits_for_no_lock_another_transaction_holds(tasks_alias: str) -> None:
    """A read that locks nothing does not wait for a claim in flight either:
    with another session holding the ready row locked (PostgreSQL, MariaDB)
    it answers at once; SQLite's readers never wait for its writer."""
    enqueue(1)
    connection = connections[tasks_alias]
    if connection.vendor == "sqlite":
        assert QueuedTask.objects.any_ready(queues=None)
        return
    table = connection.ops.quote_name(QueuedTask._meta.db_table)
    other = connection.get_new_connection(connection.get_connection_params())
    try:
        other.cursor().execute(f"SELECT seq FROM {table} FOR UPDATE")  # (no autocommit)
        # Held: a claim skips it ...
        assert QueuedTask.objects.claim_many("w", queues=None, limit=1) == []
        began = time.monotonic()
        assert QueuedTask.objects.any_ready(queues=None)  # ... and the read sees it at once.
        assert time.monotonic() - began < 1.0
    finally:
        other.rollback()
        other.close()


def ending(claim: Claim, status: str = "SUCCESSFUL", **changes: Any) -> Ending:
    """``claim``'s end, returning its seq, with ``changes`` (a wrong token, ...)."""
    end = Ending(claim.seq, claim.owner, claim.token, status, return_value=json.dumps(claim.seq))
    return dataclasses.replace(end, **changes)


def test_finish_many_writes_each_row_that_matches_its_own_fence(tasks_alias: str) -> None:
    enqueue(6)
    enqueue(1, backend="short")  # ttl 2 s
    ok, retried, failed, stale, stranger, recovered, expired = QueuedTask.objects.claim_many(
        "w", queues=None, limit=7
    )
    # ``recovered``: its lease was taken back and claimed again by another worker.
    with connections[tasks_alias].cursor() as cursor:
        table = connections[tasks_alias].ops.quote_name(QueuedTask._meta.db_table)
        cursor.execute(f"UPDATE {table} SET status = 'READY' WHERE seq = %s", [recovered.seq])
    [again] = QueuedTask.objects.claim_many("other", queues=None, limit=1)
    assert again.seq == recovered.seq and again.token == recovered.token + 1
    error = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: no"}
    ends = [
        ending(ok),
        ending(retried, "READY", return_value=None, error=error),
        ending(failed, "FAILED", return_value=None, error=error),
        ending(stale, token=stale.token - 1),  # an older token
        ending(stranger, owner="someone-else"),
        ending(recovered),  # its old token: the other worker's run is left alone
        ending(expired),
    ]
    # ``expired``: its heartbeat older than its ttl (2 s), by the database's
    # clock; the others' ttl is 120 s.
    backdate(tasks_alias, 3)
    before = rows(tasks_alias)
    written = QueuedTask.objects.finish_many(ends)
    assert set(written) == {ok.seq, retried.seq, failed.seq}
    assert isinstance(written[ok.seq], dt.datetime)
    assert isinstance(written[failed.seq], dt.datetime)
    assert written[retried.seq] is True  # READY: no finish time
    after = {row.seq: row for row in rows(tasks_alias).values()}
    assert (after[ok.seq].status, after[ok.seq].return_value) == ("SUCCESSFUL", ok.seq)
    assert after[ok.seq].finished_at == written[ok.seq] and after[ok.seq].errors == []
    assert (after[retried.seq].status, after[retried.seq].attempts) == ("READY", 1)
    assert after[retried.seq].finished_at is None and after[retried.seq].errors == [error]
    assert (after[failed.seq].status, after[failed.seq].errors) == ("FAILED", [error])
    # The rows whose fence did not match are exactly as they were.
    for claim in (stale, stranger, recovered, expired):
        old = before[str(claim.uuid)]
        new = after[claim.seq]
        assert (new.status, new.token, new.owner, new.return_value, new.updated_at) == (
            old.status,
            old.token,
            old.owner,
            old.return_value,
            old.updated_at,
        ), claim


def test_finish_many_refunds_the_attempt_and_keeps_a_unique_key(tasks_alias: str) -> None:
    djtasks.unique_record.enqueue("unused", "a")
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=5)
    written = QueuedTask.objects.finish_many([ending(claim, "READY", refund=True)])
    assert written == {claim.seq: True}
    row = QueuedTask.objects.using(tasks_alias).get(seq=claim.seq)
    assert (row.status, row.attempts, row.return_value) == ("READY", 0, claim.seq)
    assert row.active_key == row.unique_key != ""


def test_finish_many_of_a_stale_worker_writes_nothing(tasks_alias: str) -> None:
    """A worker paused past the ttl: every row of its batch was recovered,
    one claimed again by another worker; none of its ends is written."""
    enqueue(3, backend="retrying")
    claims = QueuedTask.objects.claim_many("paused", queues=None, limit=3)
    backdate(tasks_alias, 3)
    assert len(QueuedTask.objects.recover()) == 3
    [again] = QueuedTask.objects.claim_many("other", queues=None, limit=1)
    assert QueuedTask.objects.finish_many([ending(claim) for claim in claims]) == {}
    statuses = {row.seq: row.status for row in rows(tasks_alias).values()}
    assert statuses == {c.seq: "RUNNING" if c.seq == again.seq else "READY" for c in claims}
    [(seq, finished_at)] = QueuedTask.objects.finish_many([ending(again)]).items()
    assert seq == again.seq and isinstance(finished_at, dt.datetime)


def test_finish_many_refuses_bad_ends_and_writes_nothing(refusal_alias: str) -> None:
    enqueue(2)
    first, second = QueuedTask.objects.claim_many("w", queues=None, limit=2)
    with pytest.raises(ValueError, match="seq is repeated"):
        QueuedTask.objects.finish_many([ending(first), ending(second), ending(first)])
    with pytest.raises(ValueError, match="not 'RUNNING'"):
        QueuedTask.objects.finish_many([ending(first), ending(second, "RUNNING")])
    assert QueuedTask.objects.finish_many([]) == {}
    assert set(QueuedTask.objects.values_list("status", flat=True)) == {"RUNNING"}


# --- finish_and_claim: the ends and the next claims, in one round ------------------------


def test_finish_and_claim_writes_each_fenced_end_and_claims_in_order(tasks_alias: str) -> None:
    from django.test.utils import CaptureQueriesContext

    enqueue(3, backend="retrying")  # (attempts left: a READY end may be claimed again)
    ok, retried, stale = QueuedTask.objects.claim_many("w", queues=None, limit=3)
    later = enqueue(2, priority=-1)
    first = enqueue(1, priority=5)
    error = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: no"}
    ends = [
        ending(ok),
        ending(retried, "READY", return_value=None, error=error),
        ending(stale, token=stale.token - 1),
    ]
    connection = connections[tasks_alias]
    with CaptureQueriesContext(connection) as statements:
        written, claimed = QueuedTask.objects.finish_and_claim(ends, "w", queues=None, limit=2)
    assert set(written) == {ok.seq, retried.seq}
    assert isinstance(written[ok.seq], dt.datetime) and written[retried.seq] is True
    after = {row.seq: row for row in rows(tasks_alias).values()}
    assert after[ok.seq].status == "SUCCESSFUL" and after[ok.seq].finished_at == written[ok.seq]
    assert after[retried.seq].errors == [error]
    assert (after[stale.seq].status, after[stale.seq].token) == ("RUNNING", stale.token)
    if connection.vendor == "postgresql":
        # One statement, one commit: its claim read the table as it began, so
        # it did not take the task its own end made ready again.
        assert len(statements) == 1
        assert [str(claim.uuid) for claim in claimed] == [first[0], later[0]]
        assert after[retried.seq].status == "READY"
    else:  # the ends, then the claim: the retried task ranks first of the plain ones
        assert [str(claim.uuid) for claim in claimed] == [first[0], str(retried.uuid)]
        assert after[retried.seq].token == retried.token + 1
    if connection.vendor == "mysql" and multi_statements(connection):
        assert len(statements) == 1  # every step, and the commit, in one round trip
    for claim in claimed:
        assert (after[claim.seq].status, after[claim.seq].owner) == ("RUNNING", "w")
        assert claim.token == after[claim.seq].token
    # Neither ends nor claims: nothing to write, nothing taken.
    assert QueuedTask.objects.finish_and_claim([], "w", queues=["nowhere"], limit=3) == ({}, [])
    assert QueuedTask.objects.finish_and_claim([ending(stale)], "w", queues=None, limit=0)[1] == []


def test_a_failed_claim_takes_back_its_ends_on_postgresql_and_mysql(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL and MySQL the ends and the claim commit together: a claim
    that fails (here on a table that is not there, a real error from the
    server) takes its ends back with it, and the connection is left usable.
    PostgreSQL's one statement is set aside, so that MySQL's way is proven
    there too. SQLite writes the ends, then claims: they stay written."""
    from django_bgtasks.exceptions import InAtomicBlock
    from django_bgtasks.queue.manager import QueueManager

    def statuses() -> set[str]:
        return set(QueuedTask.objects.using(tasks_alias).values_list("status", flat=True))

    enqueue(2)
    held = QueuedTask.objects.claim_many("w", queues=None, limit=2)
    ends = [ending(claim) for claim in held]
    connection = connections[tasks_alias]
    statements = QueueManager._statements
    table = connection.ops.quote_name(QueuedTask._meta.db_table)

    def broken(self: QueueManager, connection: Any) -> Any:
        rendered = statements(self, connection)
        missing = connection.ops.quote_name("bgtasks_no_such_table")
        claim = rendered.claim.replace(table, missing)
        return dataclasses.replace(rendered, claim=claim, finish_claim="")

    with monkeypatch.context() as patch:
        patch.setattr(QueueManager, "_statements", broken)
        with transaction.atomic(using=tasks_alias), pytest.raises(InAtomicBlock):
            QueuedTask.objects.finish_and_claim(ends, "w", queues=None, limit=1)
        with pytest.raises(DatabaseError):
            QueuedTask.objects.finish_and_claim(ends, "w", queues=None, limit=1)
    if connection.vendor == "sqlite":
        assert statuses() == {"SUCCESSFUL"}
        return
    assert statuses() == {"RUNNING"}
    # The same ends with the real claim: written, the connection fine.
    written, claimed = QueuedTask.objects.finish_and_claim(ends, "w", queues=None, limit=1)
    assert set(written) == {claim.seq for claim in held} and claimed == []
    assert statuses() == {"SUCCESSFUL"}


def test_finish_and_claim_refuses_bad_input_and_writes_nothing(refusal_alias: str) -> None:
    enqueue(3)
    first, second = QueuedTask.objects.claim_many("w", queues=None, limit=2)
    bad: list[tuple[type[Exception], str, Any, Any]] = [
        (ValueError, "seq is repeated", [ending(first), ending(first)], 1),
        (ValueError, "not 'RUNNING'", [ending(second, "RUNNING")], 1),
        (ValueError, "limit must be between", [ending(first)], -1),
        (TypeError, "limit must be an int", [ending(first)], True),
        (TypeError, "limit must be an int", [ending(first)], 0.0),
    ]
    for error, message, ends, limit in bad:
        with pytest.raises(error, match=message):
            QueuedTask.objects.finish_and_claim(ends, "w", queues=None, limit=limit)
    with pytest.raises(ValueError, match="owner"):
        QueuedTask.objects.finish_and_claim([ending(first)], "", queues=None, limit=1)
    statuses = sorted(QueuedTask.objects.values_list("status", flat=True))
    assert statuses == ["READY", "RUNNING", "RUNNING"]


# --- a retry's delay, applied by the database's clock --------------------------------------


def run_after_less_updated_at(alias: str, seq: int) -> float:
    """``run_after - updated_at`` of row ``seq``, in seconds: both written by
    one statement from the database's clock."""
    row = QueuedTask.objects.using(alias).get(seq=seq)
    return (row.run_after - row.updated_at).total_seconds()


def test_a_retrys_delay_sets_run_after_by_the_databases_clock(tasks_alias: str) -> None:
    enqueue(3)
    one, many, at_once = QueuedTask.objects.claim_many("w", queues=None, limit=3)
    error = {"exception_class_path": "builtins.ValueError", "traceback": "ValueError: no"}
    assert QueuedTask.objects.finish(one, status="READY", error=error, delay=0.75) is True
    written = QueuedTask.objects.finish_many(
        [ending(many, "READY", error=error, delay=1.5), ending(at_once, "READY", error=error)]
    )
    assert written == {many.seq: True, at_once.seq: True}
    assert run_after_less_updated_at(tasks_alias, one.seq) == pytest.approx(0.75, abs=0.002)
    assert run_after_less_updated_at(tasks_alias, many.seq) == pytest.approx(1.5, abs=0.002)
    assert QueuedTask.objects.using(tasks_alias).get(seq=at_once.seq).run_after is None
    # Not claimed before its run_after; then claimed, by the database's clock.
    assert [c.seq for c in QueuedTask.objects.claim_many("w", queues=None, limit=3)] == [
        at_once.seq
    ]
    again = wait_until(
        "the delayed retry", lambda: QueuedTask.objects.claim_many("w", queues=None, limit=3)
    )
    assert [claim.seq for claim in again] == [one.seq]


def test_a_timed_out_runs_late_end_is_refused_by_the_fence(tasks_alias: str) -> None:
    """What a worker's renewer writes for a run past its timeout and grace
    (READY after its delay, the TaskTimedOut error), then the run's own end,
    by its old token: nothing written, whether the row waits or was claimed again."""
    enqueue(1)
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=1)
    timed_out = {"exception_class_path": "django_bgtasks.exceptions.TaskTimedOut", "traceback": ""}
    assert QueuedTask.objects.finish(claim, status="READY", error=timed_out) is True
    assert QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="1") is None
    assert QueuedTask.objects.finish_many([ending(claim)]) == {}
    [again] = QueuedTask.objects.claim_many("w", queues=None, limit=1)  # the same owner, even
    assert QueuedTask.objects.finish(claim, status="SUCCESSFUL", return_value="1") is None
    row = QueuedTask.objects.using(tasks_alias).get(seq=claim.seq)
    assert (row.status, row.token, row.return_value) == ("RUNNING", again.token, None)
    assert row.errors == [timed_out]


@pytest.mark.parametrize("delay", [-0.1, float("nan"), float("inf"), "1", None])
def test_a_bad_delay_is_refused_and_nothing_written(refusal_alias: str, delay: Any) -> None:
    enqueue(1)
    [claim] = QueuedTask.objects.claim_many("w", queues=None, limit=1)
    with pytest.raises(ValueError, match="retry's delay"):
        QueuedTask.objects.finish(claim, status="READY", delay=delay)
    with pytest.raises(ValueError, match="retry's delay"):
        QueuedTask.objects.finish_many([ending(claim, "READY", delay=delay)])
    assert set(QueuedTask.objects.values_list("status", flat=True)) == {"RUNNING"}
