"""The operator's side of ``BackgroundTask.objects`` (core/requests.py,
``django_bgtasks.core.requests.OperatorRequests``) on every database:
ending a holder's run (``force_release``), asking it to stop
(``request_cancel``), recording silent holders as lost (``expire_stale``),
asking the workers for a run of a task some process runs (``request_run``),
and the reads of every task's state. (The holder's operations and the async
twins: tests/core/test_leases.py; pausing: tests/operations/test_pause.py.)"""

from __future__ import annotations

import dataclasses

import pytest

from django_bgtasks import UnknownTask
from django_bgtasks.models import BackgroundTask
from tests.dbtools import a_worker_runs, backdate, rows, runs

objects = BackgroundTask.objects

# --- ending a run: force_release -------------------------------------------------------


def test_force_release_ends_the_holder_and_never_reuses_its_token(db_alias: str) -> None:
    lease = objects.try_claim("cleanup", "a", {"done": 2}, ttl=30)

    assert objects.force_release("cleanup")
    assert not objects.force_release("cleanup")  # nothing left to release

    state = objects.get_state("cleanup")
    assert (state.running, state.outcome, state.token) == (False, "released-by-operator", 1)
    assert not objects.heartbeat("cleanup", "a", token=lease.token)
    assert not objects.update_state("cleanup", "a", {"done": 3}, token=lease.token)
    assert not objects.release("cleanup", "a", token=lease.token)
    [run] = runs(db_alias, "cleanup")
    assert (run["token"], run["owner"], run["outcome"]) == (1, "a", "released-by-operator")
    assert objects.try_claim("cleanup", "a", ttl=30).token == 2


def test_force_release_with_a_token_ends_only_that_claim(db_alias: str) -> None:
    seen = objects.try_claim("cleanup", "a", ttl=30)
    objects.force_release("cleanup")
    newer = objects.try_claim("cleanup", "b", ttl=30)  # took over since the operator looked

    assert not objects.force_release("cleanup", token=seen.token)
    assert objects.get_state("cleanup").running
    assert objects.force_release("cleanup", token=newer.token)
    assert objects.get_state("cleanup").outcome == "released-by-operator"


# --- asking a holder to stop: request_cancel --------------------------------------------


def test_cancel_is_seen_by_the_holder_and_cleared_by_the_next_claim(db_alias: str) -> None:
    assert not objects.request_cancel("cleanup")  # nobody holds it
    lease = objects.try_claim("cleanup", "a", ttl=30)
    assert objects.renew("cleanup", "a", token=lease.token).cancel_requested is False

    assert objects.request_cancel("cleanup")
    state = objects.get_state("cleanup")
    assert state.cancel_requested and state.status == "cancel requested"
    assert objects.renew("cleanup", "a", token=lease.token).cancel_requested is True
    assert objects.renew("cleanup", "a", token=lease.token, value={"n": 1}).cancel_requested

    objects.release("cleanup", "a", token=lease.token, outcome="cancelled")
    assert objects.try_claim("cleanup", "b", ttl=30) is not None
    assert not objects.get_state("cleanup").cancel_requested


def test_cancel_with_a_token_asks_only_that_run(db_alias: str) -> None:
    first = objects.try_claim("cleanup", "a", ttl=30)
    objects.force_release("cleanup", token=first.token)
    second = objects.try_claim("cleanup", "a", ttl=30)  # same owner, newer run

    assert not objects.request_cancel("cleanup", token=first.token)
    assert not objects.get_state("cleanup").cancel_requested
    assert objects.request_cancel("cleanup", token=second.token)
    assert objects.get_state("cleanup").cancel_requested


def test_cancel_is_refused_for_a_stale_lease(db_alias: str) -> None:
    objects.try_claim("cleanup", "a", ttl=30)
    backdate(db_alias, "cleanup", 31)
    assert not objects.request_cancel("cleanup")


# --- asking the workers for a run: request_run -----------------------------------------


def test_a_request_for_a_task_no_process_runs_is_refused_with_nothing_written(
    db_alias: str,
) -> None:
    # A row that lease() made is no sign that a worker runs the name.
    assert objects.release("adhoc", "a", token=objects.try_claim("adhoc", "a", ttl=30).token)
    before = (rows(db_alias), runs(db_alias))
    for name in ("no-such-task", "adhoc"):
        with pytest.raises(UnknownTask, match=f"registered as {name!r}") as refused:
            objects.request_run(name, kwargs={"n": 1})
        assert isinstance(refused.value, LookupError)
    assert (rows(db_alias), runs(db_alias)) == before

    # Known: registered in this process (tests/testapp), with its own ttl ...
    assert objects.request_run("surface-quick")
    assert objects.get_state("surface-quick").ttl == 30.0
    # ... or reported by a worker, which this process does not import.
    a_worker_runs("no-such-task")
    assert objects.request_run("no-such-task", kwargs={"n": 1})
    assert objects.get_state("no-such-task").status == "requested"


# --- silent holders: expire_stale -------------------------------------------------------


def test_expire_stale_records_silent_holders_as_lost(db_alias: str) -> None:
    objects.try_claim("silent", "a", {"done": 1}, ttl=30)
    objects.try_claim("alive", "b", ttl=30)
    backdate(db_alias, "silent", 31)

    assert objects.expire_stale() == 1
    assert objects.expire_stale() == 0
    silent = objects.get_state("silent")
    assert (silent.running, silent.stale, silent.outcome) == (False, False, "lost")
    assert silent.finished_at == silent.updated_at
    assert objects.get_state("alive").running
    [run] = runs(db_alias)
    assert (run["name"], run["outcome"], run["value"]) == ("silent", "lost", {"done": 1})
    assert not objects.heartbeat("silent", "a", token=1)


# --- reads -------------------------------------------------------------------------------


def test_list_states_returns_every_task_by_name(db_alias: str) -> None:
    assert objects.list_states() == []
    objects.try_claim("b-task", "x", ttl=30)
    objects.try_claim("a-task", "x", ttl=30)
    backdate(db_alias, "b-task", 31)
    states = objects.list_states()
    assert [(s.name, s.running, s.stale) for s in states] == [
        ("a-task", True, False),
        ("b-task", False, True),
    ]
    again = objects.get_state("a-task")
    assert dataclasses.replace(states[0], heartbeat_age=None) == dataclasses.replace(
        again, heartbeat_age=None
    )
