"""The operator layer (django_bgtasks/operations/writes.py): start, request_cancel
and force_release, and each result they return, on every database.

The admin, the JSON API and the command only translate these results; their
own tests check the wording. Here: that each result is returned exactly when
it should be, that it carries the state read back from the database, and that
bad input raises before anything is written.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from django_bgtasks import registered_tasks
from django_bgtasks.core.leases import default_owner
from django_bgtasks.core.states import TaskState
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import writes
from django_bgtasks.operations.writes import (
    AlreadyHeld,
    CancelRequested,
    NeverRun,
    NotRegistered,
    NotRunning,
    Released,
    Requested,
    Started,
    TookOverSince,
)
from tests.dbtools import a_worker_runs, backdate, rows, runs

objects = BackgroundTask.objects
SLOW = "surface-slow"  # registered in tests/testapp/tasks.py; runs a minute unless cancelled
QUICK = "surface-quick"  # registered there too; finishes at once
SUM = "surface-sum"  # registered there too; needs its numbers


R = TypeVar("R")


def as_stored(state: TaskState | None) -> TaskState | None:
    """The state without ``heartbeat_age``, which grows between two reads."""
    return None if state is None else dataclasses.replace(state, heartbeat_age=None)


def expect(result: object, kind: type[R]) -> R:
    """``result`` is a ``kind``, and the state it carries (if any) is the row
    as the database holds it now: read back after the write."""
    assert type(result) is kind, result
    state = getattr(result, "state", None)
    if state is not None:
        assert as_stored(state) == as_stored(objects.get_state(state.name))
    return result


def finished_run(name: str, owner: str = "a") -> int:
    """Claim and release ``name``: an idle row. Returns the run's token."""
    claim = objects.try_claim(name, owner, ttl=30)
    assert claim is not None
    assert objects.release(name, owner, token=claim.token)
    return claim.token


# --- start ----------------------------------------------------------------------------


def test_start_of_an_unregistered_name_is_not_registered_and_writes_nothing(
    db_alias: str,
) -> None:
    result = writes.start("nobody-registered-this")
    assert result == NotRegistered("nobody-registered-this", tuple(registered_tasks()))
    assert {QUICK, SLOW, "surface-fails"} <= set(result.registered)
    assert rows(db_alias) == [] and runs(db_alias) == []


def test_a_request_for_a_worker_is_refused_with_nothing_written_unless_a_worker_can_run_it(
    db_alias: str, settings: Any
) -> None:
    """With BGTASKS_EXECUTOR = "worker", start() is request_run(): known to
    the cluster (registered here, or reported by a worker) and with arguments
    the task takes, or nothing is written."""
    settings.BGTASKS_EXECUTOR = "worker"
    finished_run("adhoc")  # a lease() row: no worker runs it
    before = (rows(db_alias), runs(db_alias))
    for name in ("nobody-registered-this", "adhoc"):
        assert writes.start(name) == NotRegistered(name, tuple(registered_tasks()))
    with pytest.raises(TypeError, match="missing a required argument: 'numbers'"):
        writes.start("surface-sum")  # tests/testapp; Run now gives no arguments
    assert (rows(db_alias), runs(db_alias)) == before

    a_worker_runs("worker-only")  # registered by a worker process alone
    requested = expect(writes.start("worker-only", requested_by="ops"), Requested)
    assert requested.state.status == "requested"
    assert BackgroundTask.objects.get(name="worker-only").requested_by == "ops"


def test_start_runs_a_registered_task_and_a_second_start_finds_it_held(
    db_alias: str, settle: Callable[..., Any]
) -> None:
    result = writes.start(SLOW)
    assert isinstance(result, Started)
    running = result.running
    assert (running.name, running.owner, running.ttl) == (SLOW, default_owner(), 3.0)
    state = objects.get_state(SLOW)
    assert (state.running, state.token, state.owner) == (True, running.token, running.owner)

    again = expect(writes.start(SLOW), AlreadyHeld)
    assert again.state is not None
    assert (again.state.running, again.state.token) == (True, running.token)
    assert again.state.owner == running.owner
    assert objects.get_state(SLOW).token == running.token  # not claimed a second time

    cancel = expect(writes.request_cancel(SLOW, token=running.token), CancelRequested)
    assert cancel.state.cancel_requested
    assert settle(SLOW).outcome == "cancelled"
    assert [run["token"] for run in runs(db_alias)] == [running.token]


def test_start_of_a_task_held_elsewhere_names_the_holder(db_alias: str) -> None:
    claim = objects.try_claim(QUICK, "web-2:4711:5e1f", {"done": 1}, ttl=30)
    before = rows(db_alias)
    result = expect(writes.start(QUICK), AlreadyHeld)
    assert result.state is not None
    assert (result.state.owner, result.state.token) == ("web-2:4711:5e1f", claim.token)
    assert rows(db_alias) == before


def test_start_takes_a_ttl_for_this_run(db_alias: str, settle: Callable[..., Any]) -> None:
    result = writes.start(QUICK, ttl=45)
    assert isinstance(result, Started) and result.running.ttl == 45.0
    state = settle(QUICK)
    assert (state.ttl, state.outcome, state.value) == (45.0, "succeeded", {"done": 3, "total": 3})
    assert result.running.wait(5) and result.running.result == {"counted": 3}


def test_start_passes_its_arguments_to_the_run_and_to_a_request(
    db_alias: str, settle: Callable[..., Any], settings: Any
) -> None:
    # surface-sum(lease, numbers), tests/testapp
    result = expect(writes.start(SUM, args=[[1, 2]]), Started)
    assert settle(SUM).outcome == "succeeded"
    assert result.running.wait(5) and result.running.result == 3

    settings.BGTASKS_EXECUTOR = "worker"
    requested = expect(writes.start(SUM, kwargs={"numbers": [5]}), Requested)
    assert requested.state.status == "requested"
    assert BackgroundTask.objects.get(name=SUM).request == {"args": [], "kwargs": {"numbers": [5]}}


@pytest.mark.parametrize("executor", ["thread", "worker"])
@pytest.mark.parametrize(
    ("name", "arguments", "match"),
    [
        # surface-quick(lease, total=3), surface-sum(lease, numbers), tests/testapp
        (QUICK, {"args": "[1]"}, "args must be a list or tuple (a JSON array), not a string"),
        (QUICK, {"kwargs": [1]}, "kwargs must be a dict (a JSON object), not an array (a list)"),
        (QUICK, {"kwargs": {1: 3}}, "kwargs' keys must be strings, not a number"),
        (QUICK, {"kwargs": {"bogus": 1}}, "got an unexpected keyword argument 'bogus'"),
        (QUICK, {"args": [1, 2]}, "too many positional arguments"),
        (QUICK, {"args": [1], "kwargs": {"total": 1}}, "multiple values for argument 'total'"),
        (SUM, {}, "task 'surface-sum' can't take these arguments: missing a required argument"),
    ],
)
def test_start_refuses_arguments_the_task_cant_take_and_writes_nothing(
    refusal_alias: str, settings: Any, executor: str, name: str, arguments: Any, match: str
) -> None:
    """One rule for every surface (the admin's Run now, the API's run/, bgtasks
    run and request), whichever executor: checked before anything is written."""
    settings.BGTASKS_EXECUTOR = executor
    with pytest.raises(TypeError, match=re.escape(match)):
        writes.start(name, **arguments)
    assert rows(refusal_alias) == [] and runs(refusal_alias) == []


# --- request_cancel -----------------------------------------------------------------------


def test_request_cancel_of_a_name_that_never_ran(db_alias: str) -> None:
    assert writes.request_cancel("never-claimed") == NeverRun("never-claimed", False)
    # A registered task that never ran could be started: the result says so.
    assert writes.request_cancel(QUICK) == NeverRun(QUICK, True)
    assert rows(db_alias) == []


@pytest.mark.parametrize("by_token", [False, True], ids=["any-claim", "its-token"])
def test_request_cancel_of_a_held_lease(db_alias: str, by_token: bool) -> None:
    claim = objects.try_claim("job", "a", ttl=30)
    result = expect(
        writes.request_cancel("job", token=claim.token if by_token else None),
        CancelRequested,
    )
    assert (result.state.cancel_requested, result.state.token) == (True, claim.token)
    [row] = rows(db_alias)
    assert row["cancel_requested"] is True and row["running"] is True
    renewal = objects.renew("job", "a", token=claim.token)  # the holder sees it
    assert renewal is not None and renewal.cancel_requested


def test_request_cancel_with_a_stale_token_names_the_claim_that_took_over(
    db_alias: str,
) -> None:
    old = finished_run("job")
    new = objects.try_claim("job", "b", ttl=30)
    before = rows(db_alias)
    result = expect(writes.request_cancel("job", token=old), TookOverSince)
    assert result.token == old
    assert (result.state.token, result.state.owner) == (new.token, "b")
    assert rows(db_alias) == before  # the newer run was not asked to stop


def test_request_cancel_of_an_idle_or_silent_task_is_not_running(db_alias: str) -> None:
    token = finished_run("idle")
    objects.try_claim("silent", "a", ttl=30)
    backdate(db_alias, "silent", 31)
    before = rows(db_alias)
    for name, with_token in [("idle", None), ("idle", token), ("silent", None)]:
        result = expect(writes.request_cancel(name, token=with_token), NotRunning)
        assert not result.state.running, (name, with_token)
    assert rows(db_alias) == before


# --- force_release -------------------------------------------------------------------


@pytest.mark.parametrize("silent", [False, True], ids=["live", "silent"])
def test_force_release_of_a_held_lease_with_its_token(db_alias: str, silent: bool) -> None:
    claim = objects.try_claim("job", "a", {"done": 2}, ttl=30)
    if silent:
        backdate(db_alias, "job", 31)
    result = expect(writes.force_release("job", token=claim.token), Released)
    assert (result.state.running, result.state.outcome) == (False, "released-by-operator")
    [run] = runs(db_alias)
    assert (run["token"], run["owner"], run["outcome"], run["value"]) == (
        claim.token,
        "a",
        "released-by-operator",
        {"done": 2},
    )
    assert not objects.heartbeat("job", "a", token=claim.token)  # the old holder is fenced off


def test_force_release_with_another_token_names_the_claim_that_holds_it(
    db_alias: str,
) -> None:
    old = finished_run("job")
    new = objects.try_claim("job", "b", ttl=30)
    before = (rows(db_alias), runs(db_alias))
    result = expect(writes.force_release("job", token=old), TookOverSince)
    assert result.token == old
    assert (result.state.running, result.state.token) == (True, new.token)
    assert (rows(db_alias), runs(db_alias)) == before


def test_force_release_of_an_idle_row_is_not_running(db_alias: str) -> None:
    token = finished_run("job")
    before = (rows(db_alias), runs(db_alias))
    result = expect(writes.force_release("job", token=token), NotRunning)
    assert (result.state.token, result.state.outcome) == (token, "succeeded")
    assert (rows(db_alias), runs(db_alias)) == before


def test_force_release_of_a_name_that_never_ran(db_alias: str) -> None:
    assert writes.force_release("never-claimed", token=1) == NeverRun("never-claimed", False)
    assert writes.force_release(QUICK, token=1) == NeverRun(QUICK, True)
    assert rows(db_alias) == [] and runs(db_alias) == []


# --- bad input ---------------------------------------------------------------------------

BAD_CALLS = [
    pytest.param(lambda: writes.start(""), ValueError, "blank", id="start-blank-name"),
    pytest.param(lambda: writes.start("a/b"), ValueError, "'/'", id="start-slash"),
    pytest.param(lambda: writes.start(None), TypeError, "must be a str", id="start-none"),
    pytest.param(lambda: writes.start(QUICK, ttl=0), ValueError, "ttl", id="start-ttl-0"),
    pytest.param(lambda: writes.start(QUICK, ttl="30"), TypeError, "ttl", id="start-ttl-str"),
    pytest.param(lambda: writes.request_cancel(" "), ValueError, "blank", id="cancel-blank-name"),
    pytest.param(
        lambda: writes.request_cancel("held", token=0), ValueError, "between", id="cancel-0"
    ),
    pytest.param(
        lambda: writes.request_cancel("held", token=True),
        TypeError,
        "must be an int",
        id="cancel-true",
    ),
    pytest.param(
        lambda: writes.request_cancel("held", token="1"),  # noqa: S106  (a str, not an int)
        TypeError,
        "must be an int",
        id="cancel-str",
    ),
    pytest.param(
        lambda: writes.force_release("", token=1), ValueError, "blank", id="release-blank"
    ),
    pytest.param(
        lambda: writes.force_release("held", token=0), ValueError, "between", id="release-0"
    ),
    pytest.param(
        lambda: writes.force_release("held", token=True),
        TypeError,
        "must be an int",
        id="release-true",
    ),
    pytest.param(
        lambda: writes.force_release("held", token="1"),  # noqa: S106  (a str, not an int)
        TypeError,
        "must be an int",
        id="release-str",
    ),
    pytest.param(
        lambda: writes.force_release("held", token=None),
        TypeError,
        "needs the token",
        id="release-token-none",
    ),
    pytest.param(
        lambda: writes.force_release("held"),  # type: ignore[call-arg]
        TypeError,
        "token",
        id="release-no-token",
    ),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD_CALLS)
def test_bad_input_raises_and_writes_nothing(
    db_alias: str, call: Callable[[], Any], error: type[Exception], match: str
) -> None:
    claim = objects.try_claim("held", "a", {"done": 1}, ttl=30)
    assert claim is not None and claim.token == 1  # so token=True (== 1) would match it
    before = (rows(db_alias), runs(db_alias))
    with pytest.raises(error, match=match):
        call()
    assert (rows(db_alias), runs(db_alias)) == before


# --- a Django Task's retry -------------------------------------------------------------------


def queued_rows(alias: str) -> list[dict[str, Any]]:
    from django_bgtasks.models import QueuedTask

    return list(QueuedTask.objects.using(alias).order_by("seq").values())


def test_retry_queued_puts_a_failed_task_back_and_reads_it_back(tasks_alias: str) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    QueuedTask.objects.cancel(result.id)
    answer = writes.retry_queued(result.id.upper())  # any spelling of the id
    assert isinstance(answer, writes.QueuedRetried)
    assert (str(answer.row.uuid), answer.row.status) == (result.id, "READY")
    assert answer.row == QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert answer.row.max_attempts == 1 and len(answer.row.errors) == 1


def test_retry_queued_of_a_task_that_is_not_failed_says_what_it_is_and_writes_nothing(
    tasks_alias: str,
) -> None:
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    done = djtasks.add.enqueue(1, 1)
    claim = QueuedTask.objects.claim("w", queues=None)
    assert claim is not None and execute(claim) == "SUCCESSFUL"
    running = djtasks.add.enqueue(2, 2)
    assert QueuedTask.objects.claim("w", queues=None) is not None
    ready = djtasks.add.enqueue(3, 3)
    before = queued_rows(tasks_alias)
    for result, status in ((done, "SUCCESSFUL"), (running, "RUNNING"), (ready, "READY")):
        answer = writes.retry_queued(result.id)
        assert type(answer) is writes.QueuedNotFailed
        assert (str(answer.row.uuid), answer.row.status) == (result.id, status)
    assert queued_rows(tasks_alias) == before


@pytest.mark.parametrize(
    "result_id", ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "", "1234", " "]
)
def test_retry_queued_of_an_unknown_or_malformed_id_is_unknown_and_writes_nothing(
    tasks_alias: str, result_id: str
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    QueuedTask.objects.cancel(djtasks.add.enqueue(1, 1).id)
    before = queued_rows(tasks_alias)
    assert writes.retry_queued(result_id) == writes.QueuedUnknown(result_id)
    assert queued_rows(tasks_alias) == before


def test_retry_queued_of_a_unique_task_whose_key_is_held_names_the_holder(
    tasks_alias: str, tmp_path: Any
) -> None:
    from django_bgtasks.models import QueuedTask
    from tests import djtasks

    record = str(tmp_path / "record")
    failed = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(failed.id)
    holder = djtasks.unique_record.enqueue(record, "b")
    before = queued_rows(tasks_alias)
    answer = writes.retry_queued(failed.id)
    assert type(answer) is writes.QueuedKeyHeld
    assert (str(answer.row.uuid), answer.row.status) == (failed.id, "FAILED")
    assert answer.holder is not None and str(answer.holder.uuid) == holder.id
    assert queued_rows(tasks_alias) == before
