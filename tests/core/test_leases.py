"""The holder's lease operations (core/leases.py) on every database: claims,
fencing, takeover, heartbeats and releases, results, the run history
(``TaskRun.objects``) and the async twins. Each test runs once per database.
(The operator's operations and reads: tests/core/test_requests.py; a
write's durability: tests/core/test_store.py.)"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils import timezone

from django_bgtasks import NotInAtomicBlock
from django_bgtasks.core.leases import Lease, default_owner
from django_bgtasks.models import BackgroundTask, TaskRun
from tests.dbtools import a_worker_runs, backdate, rows, runs

objects = BackgroundTask.objects


def test_first_claim_gets_token_1_and_the_state_shows_it(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", {"phase": "start"}, ttl=30)

    assert lease == Lease(name="cleanup", owner="a", token=1, ttl=30.0)
    state = objects.get_state("cleanup")
    assert state is not None
    assert (state.running, state.stale, state.owner, state.token) == (True, False, "a", 1)
    assert state.value == {"phase": "start"}
    assert state.ttl == 30.0
    assert state.started_at is not None and state.started_at.tzinfo is not None
    assert state.updated_at is not None and state.finished_at is None
    assert state.heartbeat_age is not None and 0 <= state.heartbeat_age < 5
    assert state.status == "running"


def test_a_held_lease_cannot_be_claimed_and_is_left_as_it_was(db_alias: str) -> None:
    objects.try_claim("cleanup", "a", {"n": 1}, ttl=30)
    before = rows(db_alias)

    assert objects.try_claim("cleanup", "b", {"n": 2}, ttl=30) is None
    assert objects.try_claim("cleanup", "a", {"n": 3}, ttl=30) is None  # not re-entrant
    assert rows(db_alias) == before


def test_release_ends_the_run_records_history_and_frees_the_name(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", {"done": 0}, ttl=30)
    assert lease is not None

    assert objects.release("cleanup", "a", {"done": 10}, token=lease.token)

    state = objects.get_state("cleanup")
    assert state is not None
    assert (state.running, state.outcome, state.value) == (False, "succeeded", {"done": 10})
    assert state.finished_at is not None and state.finished_at >= state.started_at
    assert state.status == "idle"
    [run] = runs(db_alias, "cleanup")
    assert (run["token"], run["owner"], run["outcome"], run["value"]) == (
        1,
        "a",
        "succeeded",
        {"done": 10},
    )
    assert run["started_at"] == state.started_at and run["finished_at"] == state.finished_at

    again = objects.try_claim("cleanup", "b", ttl=30)
    assert again is not None and again.token == 2
    assert objects.get_state("cleanup").outcome == ""  # a new run starts clean


def test_release_without_a_final_value_keeps_the_last_progress(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", ttl=30)
    assert objects.update_state("cleanup", "a", {"done": 3}, token=lease.token)
    assert objects.release("cleanup", "a", token=lease.token, outcome="failed", error="boom")
    state = objects.get_state("cleanup")
    assert (state.value, state.outcome, state.error) == ({"done": 3}, "failed", "boom")
    assert runs(db_alias)[0]["error"] == "boom"


def test_only_the_holder_can_update_heartbeat_or_release(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", {"n": 1}, ttl=30)
    before = rows(db_alias)

    assert not objects.update_state("cleanup", "b", {"n": 2})
    assert not objects.heartbeat("cleanup", "b")
    assert not objects.release("cleanup", "b")
    assert not objects.update_state("cleanup", "a", {"n": 2}, token=lease.token + 1)
    assert not objects.release("cleanup", "a", token=lease.token + 1)
    assert rows(db_alias) == before
    assert runs(db_alias) == []


def test_update_and_heartbeat_move_the_heartbeat_forward(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", ttl=30)
    backdate(db_alias, "cleanup", 10)
    old = objects.get_state("cleanup").updated_at

    assert objects.heartbeat("cleanup", "a", token=lease.token)
    after_heartbeat = objects.get_state("cleanup")
    assert after_heartbeat.updated_at > old
    assert after_heartbeat.value is None

    assert objects.update_state("cleanup", "a", {"done": 1, "total": 4}, token=lease.token)
    state = objects.get_state("cleanup")
    assert state.value == {"done": 1, "total": 4} and state.progress == 0.25
    # Without a token, the owner string alone identifies the holder.
    assert objects.heartbeat("cleanup", "a")


def test_a_stale_lease_reads_as_not_running_and_is_taken_over(db_alias: str) -> None:
    objects.try_claim("cleanup", "a", {"done": 5}, ttl=30)
    backdate(db_alias, "cleanup", 31)

    state = objects.get_state("cleanup")
    assert (state.running, state.stale, state.status) == (False, True, "stale")
    assert state.heartbeat_age is not None and state.heartbeat_age > 30

    lease = objects.try_claim("cleanup", "b", {"done": 0}, ttl=10)
    assert lease is not None and lease.token == 2
    state = objects.get_state("cleanup")
    assert (state.running, state.owner, state.ttl, state.value) == (True, "b", 10.0, {"done": 0})
    # The run that went silent is in history as lost, as of its last heartbeat.
    [lost] = runs(db_alias, "cleanup")
    assert (lost["token"], lost["owner"], lost["outcome"], lost["value"]) == (
        1,
        "a",
        "lost",
        {"done": 5},
    )
    assert lost["error"] == "lease expired; taken over by b"
    assert lost["finished_at"] < state.started_at


def test_a_stale_holder_can_no_longer_write_even_if_nobody_took_over(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", {"done": 1}, ttl=30)
    backdate(db_alias, "cleanup", 31)
    before = rows(db_alias)

    assert not objects.heartbeat("cleanup", "a", token=lease.token)
    assert not objects.update_state("cleanup", "a", {"done": 2}, token=lease.token)
    assert not objects.release("cleanup", "a", token=lease.token)
    with transaction.atomic(using=db_alias):
        assert not objects.fence("cleanup", "a", lease.token)
    assert rows(db_alias) == before


def test_staleness_uses_the_holders_ttl_not_the_claimers(db_alias: str) -> None:
    objects.try_claim("cleanup", "a", ttl=60)
    backdate(db_alias, "cleanup", 30)
    assert objects.try_claim("cleanup", "b", ttl=1) is None
    backdate(db_alias, "cleanup", 31)
    assert objects.try_claim("cleanup", "b", ttl=1) is not None


def test_an_old_holder_is_fenced_off_even_with_the_same_owner_string(db_alias: str) -> None:
    old = objects.try_claim("cleanup", "worker-1", {"by": "old"}, ttl=30)
    backdate(db_alias, "cleanup", 31)
    new = objects.try_claim("cleanup", "worker-1", {"by": "new"}, ttl=30)
    assert old is not None and new is not None and new.token == old.token + 1
    before = rows(db_alias)

    # The paused process wakes up and writes with the token it had.
    assert not objects.update_state("cleanup", "worker-1", {"by": "old"}, token=old.token)
    assert not objects.heartbeat("cleanup", "worker-1", token=old.token)
    assert not objects.release("cleanup", "worker-1", {"by": "old"}, token=old.token)
    with transaction.atomic(using=db_alias):
        assert not objects.fence("cleanup", "worker-1", old.token)
    assert rows(db_alias) == before
    assert objects.release("cleanup", "worker-1", token=new.token)


def test_tokens_keep_rising_even_if_the_lease_row_is_deleted(db_alias: str) -> None:
    for _ in range(3):
        lease = objects.try_claim("cleanup", "a", ttl=30)
        objects.release("cleanup", "a", token=lease.token)
    BackgroundTask.objects.using(db_alias).filter(name="cleanup").delete()

    assert objects.try_claim("cleanup", "a", ttl=30).token == 4


def test_values_round_trip_as_json(db_alias: str) -> None:
    value = {"s": "ünïcødé ✓", "n": [1, 2.5, None, True], "nested": {"deep": {"x": "y"}}}
    lease = objects.try_claim("cleanup", "a", value, ttl=30)
    assert objects.get_state("cleanup").value == value
    for scalar in ("just text", 42, 0.5, False, []):
        assert objects.update_state("cleanup", "a", scalar, token=lease.token)
        assert objects.get_state("cleanup").value == scalar


def test_a_renewal_that_waited_on_a_fence_rechecks_staleness_after_the_wait(
    db_alias: str,
) -> None:
    """A heartbeat sent just before its holder froze inside a fenced
    transaction waits for that transaction. If the lease expired meanwhile,
    the heartbeat must fail: a staleness check made before the wait must not
    revive the lease."""
    ttl = 0.5
    lease = objects.try_claim("cleanup", "a", ttl=ttl)
    renewed: list[bool] = []

    def heartbeat() -> None:
        try:
            renewed.append(objects.heartbeat("cleanup", "a", token=lease.token))
        finally:
            connections[db_alias].close()

    thread = threading.Thread(target=heartbeat)
    with transaction.atomic(using=db_alias):
        assert objects.fence("cleanup", "a", lease.token)
        thread.start()
        time.sleep(0.2)
        assert thread.is_alive(), "the heartbeat should wait for the fenced transaction"
        time.sleep(2 * ttl)  # the holder is frozen past its ttl
    thread.join(10)

    assert renewed == [False]
    state = objects.get_state("cleanup")
    assert (state.running, state.stale) == (False, True)
    with transaction.atomic(using=db_alias):
        assert not objects.fence("cleanup", "a", lease.token)


def test_fence_needs_a_transaction(db_alias: str) -> None:
    lease = objects.try_claim("held", "a", ttl=30)
    with pytest.raises(NotInAtomicBlock):
        objects.fence("held", "a", lease.token)
    with transaction.atomic(using=db_alias):
        assert objects.fence("held", "a", lease.token)


@pytest.mark.parametrize("shift", [dt.timedelta(hours=1), dt.timedelta(hours=-1)])
def test_the_app_servers_clock_changes_nothing(db_alias: str, shift: dt.timedelta) -> None:
    real_now = dt.datetime.now(dt.UTC)
    objects.try_claim("fresh", "a", ttl=60)
    objects.try_claim("silent", "a", ttl=60)
    backdate(db_alias, "silent", 61)

    with time_machine.travel(real_now + shift, tick=True):
        assert abs(dt.datetime.now(dt.UTC) - real_now - shift) < dt.timedelta(minutes=1)
        # A fresh lease is not stale to an app server whose clock runs ahead...
        assert objects.try_claim("fresh", "b", ttl=60) is None
        fresh = objects.get_state("fresh")
        assert fresh.running and 0 <= fresh.heartbeat_age < 5
        # ...and a stale one is taken over by one whose clock lags.
        assert objects.try_claim("silent", "b", ttl=60) is not None
        # Times written are the database's, not the app server's.
        started = objects.get_state("silent").started_at
        assert abs(started - real_now) < dt.timedelta(minutes=1)


def test_default_owner_is_host_pid_random() -> None:
    owner = default_owner()
    host, pid, random_part = owner.rsplit(":", 2)
    assert host and int(pid) > 0 and len(random_part) == 8
    assert default_owner() == owner


# --- run history: TaskRun.objects --------------------------------------------------


def finish_runs(name: str, count: int) -> list[int]:
    tokens = []
    for _ in range(count):
        claim = objects.try_claim(name, "a", ttl=30)
        objects.release(name, "a", token=claim.token)
        tokens.append(claim.token)
    return tokens


def test_for_task_lists_a_tasks_runs_newest_first(db_alias: str) -> None:
    tokens = finish_runs("job", 3)
    finish_runs("other", 1)
    assert list(TaskRun.objects.for_task("job").values_list("token", flat=True)) == tokens[::-1]
    assert str(TaskRun.objects.for_task("job").first()) == f"job #{tokens[-1]}"
    assert str(BackgroundTask.objects.get(name="job")) == "job"


def test_older_than_keeps_recent_runs_and_each_tasks_newest(db_alias: str) -> None:
    old, recent = finish_runs("job", 2)
    [only] = finish_runs("lonely", 1)
    long_ago = timezone.now() - dt.timedelta(days=40)
    TaskRun.objects.using(db_alias).filter(token__in=[old, only]).update(finished_at=long_ago)
    TaskRun.objects.using(db_alias).filter(name="job", token=recent).update(finished_at=long_ago)
    # Both of job's runs are old, but the newest is kept; lonely's only run too.
    assert list(TaskRun.objects.older_than(30).values_list("name", "token")) == [("job", old)]
    assert not TaskRun.objects.older_than(50).exists()
    TaskRun.objects.older_than(30).delete()
    assert objects.try_claim("job", "a", ttl=30).token == recent + 1


# --- the async twins of the operator operations ------------------------------------


def test_the_operator_async_twins(db_alias: str) -> None:
    async def main() -> None:
        claim = await objects.atry_claim("job", "a", ttl=30)
        renewal = await objects.arenew("job", "a", token=claim.token, value={"n": 1})
        assert renewal is not None and not renewal.cancel_requested
        assert await objects.arequest_cancel("job")
        assert (await objects.arenew("job", "a", token=claim.token)).cancel_requested
        assert [s.name for s in await objects.alist_states()] == ["job"]
        assert await objects.aforce_release("job")
        assert not await objects.aforce_release("job")
        assert (await objects.aget_state("job")).outcome == "released-by-operator"

    async def run_and_close() -> None:
        try:
            await main()
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(run_and_close())


# --- a run's result ----------------------------------------------------------------------


def test_release_stores_the_result_on_the_row_and_in_history(db_alias: str) -> None:
    lease = objects.try_claim("report", "a", {"done": 1}, ttl=30)
    assert objects.release("report", "a", {"done": 2}, token=lease.token, result={"rows": 12})

    state = objects.get_state("report")
    assert (state.value, state.result, state.result_note) == ({"done": 2}, {"rows": 12}, "")
    assert state.as_json()["result"] == {"rows": 12} and state.as_json()["result_note"] == ""
    [run] = runs(db_alias, "report")
    assert (run["value"], run["result"], run["result_note"]) == ({"done": 2}, {"rows": 12}, "")

    # Every claim starts the new run without one: a claim by try_claim, ...
    lease = objects.try_claim("report", "b", ttl=30)
    state = objects.get_state("report")
    assert (state.result, state.result_note) == (None, "")
    assert objects.release("report", "b", token=lease.token, result="a string")
    assert objects.get_state("report").result == "a string"
    # ... and a worker's claim.
    a_worker_runs("report")
    assert objects.request_run("report")
    assert objects.work.claim_request("report", "c", 30) is not None
    assert (objects.get_state("report").result, objects.get_state("report").result_note) == (
        None,
        "",
    )
    assert [run["result"] for run in runs(db_alias, "report")] == [{"rows": 12}, "a string"]


@pytest.mark.parametrize(
    ("result", "note"),
    [
        ({1, 2}, "not stored: TypeError: result is not JSON-serialisable"),
        (float("nan"), "not stored: ValueError: result is not valid JSON"),
        ({"x": "nul\x00"}, "not stored: ValueError: result must not contain NUL"),
    ],
)
def test_a_result_that_cant_be_stored_is_noted_and_the_run_still_ends(
    db_alias: str, result: Any, note: str
) -> None:
    lease = objects.try_claim("report", "a", ttl=30)
    assert objects.release("report", "a", token=lease.token, result=result)
    state = objects.get_state("report")
    assert not state.running and state.outcome == "succeeded"
    assert state.result is None and state.result_note.startswith(note), state.result_note
    [run] = runs(db_alias, "report")
    assert run["result"] is None and run["result_note"] == state.result_note


def test_a_result_larger_than_the_value_limit_is_noted(db_alias: str, settings: Any) -> None:
    settings.BGTASKS_MAX_VALUE_BYTES = 100
    lease = objects.try_claim("report", "a", ttl=30)
    assert objects.release("report", "a", token=lease.token, result="x" * 200)
    state = objects.get_state("report")
    assert state.result is None
    assert state.result_note == (
        "not stored: ValueError: result is 202 bytes of JSON; the limit is 100 "
        "(BGTASKS_MAX_VALUE_BYTES)"
    )


def test_runs_ended_by_others_have_no_result(db_alias: str) -> None:
    for name in ("taken", "released", "expired"):
        objects.try_claim(name, "a", ttl=30)
    backdate(db_alias, "taken", 31)
    assert objects.try_claim("taken", "b", ttl=30) is not None  # a takeover: lost
    assert objects.force_release("released")
    backdate(db_alias, "expired", 31)
    assert objects.expire_stale() == 1
    ended = runs(db_alias)
    assert [(run["name"], run["result"], run["result_note"]) for run in ended] == [
        ("expired", None, ""),
        ("released", None, ""),
        ("taken", None, ""),
    ]


def test_a_refused_release_writes_no_result(db_alias: str) -> None:
    lease = objects.try_claim("report", "a", ttl=30)
    before = (rows(db_alias), runs(db_alias))
    assert not objects.release("report", "someone-else", token=lease.token, result={"n": 1})
    assert not objects.release("report", "a", token=lease.token + 1, result={"n": 1})
    assert (rows(db_alias), runs(db_alias)) == before


def test_arelease_stores_the_result(db_alias: str) -> None:
    async def main() -> None:
        try:
            claim = await objects.atry_claim("job", "a", ttl=30)
            assert await objects.arelease("job", "a", token=claim.token, result=[1, 2])
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())
    assert objects.get_state("job").result == [1, 2]


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ"])
def test_on_mysql_a_takeover_waits_for_the_fence_then_judges_staleness_after_the_wait(
    mysql_alias: str, isolation: str
) -> None:
    """InnoDB: the fence is the lease row's lock, held by the holder's
    transaction. A takeover claimed meanwhile waits for it, whatever the
    isolation level (REPEATABLE READ's snapshot does not apply to an UPDATE,
    which reads the newest row version), and wins only after the fenced
    transaction committed, judging staleness by SYSDATE() after the wait."""
    ttl = 0.5
    lease = objects.try_claim("job", "a", ttl=ttl)
    claimed: list[Any] = []

    def isolate() -> None:
        with connections[mysql_alias].cursor() as cursor:
            cursor.execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")

    def takeover() -> None:
        try:
            isolate()
            time.sleep(2 * ttl)  # the holder is frozen inside its fenced transaction
            claimed.append(objects.try_claim("job", "b", ttl=30))
            claimed.append(time.monotonic())
        finally:
            connections[mysql_alias].close()

    isolate()
    thread = threading.Thread(target=takeover)
    try:
        with transaction.atomic(using=mysql_alias):
            assert objects.fence("job", "a", lease.token)
            thread.start()
            time.sleep(4 * ttl)
            assert thread.is_alive(), "the takeover should wait for the fenced transaction"
            committed = time.monotonic()
        thread.join(10)
    finally:
        with connections[mysql_alias].cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    new, when = claimed
    assert new is not None and new.token == lease.token + 1 and when >= committed
    [lost] = runs(mysql_alias, "job")
    assert (lost["token"], lost["outcome"]) == (lease.token, "lost")
    # And the old holder's fence now fails: its writes can't commit any more.
    with transaction.atomic(using=mysql_alias):
        assert not objects.fence("job", "a", lease.token)


@pytest.mark.parametrize("meanwhile", ["request", "claim"])
def test_on_mysql_a_first_claim_that_meets_a_row_inserted_meanwhile(
    mysql_alias: str, meanwhile: str
) -> None:
    """A first claim is an UPDATE that matches nothing, then an INSERT. If
    another process inserts the row in between, the INSERT hits its key and
    the UPDATE runs once more: it claims a row a request created, and
    refuses one another claim holds. (Django's execute_wrapper runs the other
    process's write, on another connection, just before the INSERT.)"""
    other: list[Any] = []
    a_worker_runs("job")

    def insert_meanwhile(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().startswith("INSERT") and not other:

            def write() -> None:
                try:
                    if meanwhile == "request":
                        other.append(objects.request_run("job"))
                    else:
                        other.append(objects.try_claim("job", "other", ttl=30))
                finally:
                    connections[mysql_alias].close()

            thread = threading.Thread(target=write)
            thread.start()
            thread.join(10)
        return execute(sql, params, many, context)

    with connections[mysql_alias].execute_wrapper(insert_meanwhile):
        lease = objects.try_claim("job", "a", ttl=30)
    state = objects.get_state("job")
    if meanwhile == "request":
        assert other == [True]
        assert lease is not None and lease.token == 1 and state.owner == "a"
    else:
        assert other[0] is not None and other[0].token == 1
        assert lease is None and (state.owner, state.token) == ("other", 1)


@pytest.mark.parametrize("batched", [True, False], ids=["one-round-trip", "multi-statements-off"])
def test_on_mysql_a_claim_reads_its_own_token_with_or_without_multi_statements(
    mysql_alias: str, batched: bool
) -> None:
    """A claim's UPDATE and its ``SELECT LAST_INSERT_ID()`` go in one query
    where mysqlclient allows several statements (its default), else in two.
    Either way the claim gets the token it set, and a claim that matched
    nothing is refused although LAST_INSERT_ID() still holds an earlier
    claim's token."""
    from django_bgtasks.db.mysql import leases as mysql

    connection = connections[mysql_alias]
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    if not batched:
        options["multi_statements"] = False
    try:
        first = objects.try_claim("job", "a", ttl=0.5)  # the INSERT
        assert mysql.multi_statements(connection) is batched
        assert first is not None and first.token == 1
        assert objects.try_claim("job", "b", ttl=30) is None  # held: matched nothing
        assert objects.release("job", "a", token=first.token)
        second = objects.try_claim("job", "b", ttl=0.5)  # the UPDATE
        assert second is not None and second.token == 2
        assert objects.try_claim("job", "c", ttl=30) is None
        time.sleep(0.6)
        third = objects.try_claim("job", "c", ttl=30)  # a takeover: the trigger fires
        assert third is not None and third.token == 3
        assert objects.get_state("job").owner == "c"
        assert [(r["token"], r["outcome"]) for r in runs(mysql_alias, "job")] == [
            (1, "succeeded"),
            (2, "lost"),
        ]
    finally:
        options.pop("multi_statements", None)
        connection.close()
