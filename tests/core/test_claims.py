"""The workers' lease operations (core/claims.py, ``BackgroundTask.objects.work``),
on every database: a claim of a request or of a scheduled slot won once,
the one statement that renews every lease a worker holds, a slot taken in
the caller's transaction, and the workers' own rows: listed by the
database's clock (a silent one's runs as their leases say), and forgotten
once silent for long."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid

import pytest
from django.utils import timezone

from django_bgtasks.choices import Outcome, Trigger
from django_bgtasks.db.shared import RENEW_QUEUED, RENEW_TASK
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from tests.dbtools import a_worker_runs, backdate
from tests.worker.test_renewal import _heartbeat

objects = BackgroundTask.objects
# The holder of the leases the renewal statement renews.
OWNER = "renewing-worker"


def test_a_request_is_claimed_once_with_its_arguments_and_taken_with_the_claim(
    db_alias: str,
) -> None:
    a_worker_runs("c-request")
    assert objects.request_run("c-request", args=(7,), kwargs={"n": 1})
    won = objects.work.claim_request("c-request", "worker-a", 30)
    assert won is not None
    assert (won.lease.owner, won.attempt, won.args, won.kwargs) == ("worker-a", 1, (7,), {"n": 1})
    assert objects.work.claim_request("c-request", "worker-b", 30) is None  # held
    assert objects.release("c-request", "worker-a", token=won.lease.token)
    # The request went with the first claim: nothing is left to claim.
    assert objects.work.claim_request("c-request", "worker-b", 30) is None
    [run] = TaskRun.objects.for_task("c-request")
    assert (run.owner, run.trigger) == ("worker-a", Trigger.REQUEST)
    assert run.outcome == Outcome.SUCCEEDED


def test_a_due_slot_is_claimed_once_and_the_row_moves_on_to_the_next(db_alias: str) -> None:
    work = objects.work
    clock = work.clock()
    due, next_slot = clock - dt.timedelta(seconds=30), clock + dt.timedelta(seconds=30)
    assert work.ensure_schedule("c-slot", schedule="every 60s", next_slot=due, ttl=5)
    slot = {"due": due, "next_slot": next_slot, "schedule": "every 60s"}
    won = work.claim_scheduled("c-slot", "worker-a", 5, **slot)
    assert won is not None and won.lease.owner == "worker-a"
    assert objects.release("c-slot", "worker-a", token=won.lease.token)
    # Another worker that polled at the same time saw the same slot: taken.
    assert work.claim_scheduled("c-slot", "worker-b", 5, **slot) is None
    assert BackgroundTask.objects.using(db_alias).get(name="c-slot").next_run_at == next_slot
    [run] = TaskRun.objects.for_task("c-slot")
    assert (run.owner, run.trigger, run.scheduled_for) == ("worker-a", Trigger.SCHEDULE, due)


def test_a_worker_silent_past_its_ttl_is_listed_silent_and_its_runs_as_their_leases_say(
    db_alias: str,
) -> None:
    """By the database's clock: a worker whose last beat is older than the ttl
    it stated is silent, and what it reported running is described by each
    lease row (stale, still held, taken over, ended), not as running."""
    from django_bgtasks.choices import WorkerRunStatus as Run
    from tests.dbtools import backdate, backdate_worker

    for name, ttl in (("w-stale", 30), ("w-held", 600), ("w-taken", 30), ("w-ended", 30)):
        assert objects.try_claim(name, "dead", ttl=ttl) is not None
    assert objects.force_release("w-taken")
    taken = objects.try_claim("w-taken", "other", ttl=30)
    assert taken is not None
    ended = objects.get_state("w-ended")
    assert ended is not None and objects.release("w-ended", "dead", token=ended.token)
    reported = ["w-stale", "w-held", "w-taken", "w-ended"]
    objects.work.beat(
        worker="dead", host="h", pid=1, tasks=reported, concurrency=4, running=reported, ttl=10
    )
    objects.work.beat(worker="live", host="h", pid=2, tasks=[], concurrency=1, running=[], ttl=10)
    [dead, live] = objects.work.workers()
    assert (dead.ttl, dead.silent, live.silent) == (10.0, False, False)
    assert [run.status for run in dead.runs] == [Run.RUNNING] * 4  # its report stands

    backdate_worker(db_alias, "dead", 11)  # a beat a ttl and a second ago
    backdate(db_alias, "w-stale", 31)
    [dead, live] = objects.work.workers()
    assert dead.silent and 11 <= dead.age < 20 and not live.silent
    assert [(run.name, run.status) for run in dead.runs] == [
        ("w-stale", Run.STALE),
        ("w-held", Run.HELD),
        ("w-taken", Run.TAKEN_OVER),
        ("w-ended", Run.ENDED),
    ]
    assert (dead.runs[2].owner, dead.runs[2].token) == ("other", taken.token)
    assert dead.runs[3].outcome == Outcome.SUCCEEDED
    assert dead.as_json()["silent"] is True
    assert dead.as_json()["runs"][0] == {
        "name": "w-stale",
        "status": "stale",
        "owner": "dead",
        "token": dead.runs[0].token,
        "heartbeat_age": dead.runs[0].heartbeat_age,
        "outcome": "",
    }


def test_silent_workers_are_forgotten_after_an_hour_and_never_within_their_own_ttl(
    db_alias: str,
) -> None:
    from django_bgtasks.limits import FORGET_WORKERS_AFTER
    from tests.dbtools import backdate_worker

    for worker, ttl in (("gone", 10.0), ("slow", 2 * FORGET_WORKERS_AFTER), ("live", 10.0)):
        objects.work.beat(
            worker=worker, host="h", pid=1, tasks=[], concurrency=1, running=[], ttl=ttl
        )
    backdate_worker(db_alias, "gone", FORGET_WORKERS_AFTER + 1)
    # Silent for longer than the hour, but not for its own (longer) ttl: kept.
    backdate_worker(db_alias, "slow", FORGET_WORKERS_AFTER + 1)
    assert objects.work.forget_workers(FORGET_WORKERS_AFTER) == 1
    assert sorted(worker.id for worker in objects.work.workers()) == ["live", "slow"]


def _running_queued(alias: str, token: int = 3, **fields: object) -> QueuedTask:
    """A queued task RUNNING under ``OWNER`` with ``token``, beaten just now
    (by the ORM, so on every vendor, MariaDB too, before its queue runs there)."""
    return QueuedTask.objects.using(alias).create(
        uuid=uuid.uuid4(),
        task_path="tests.djtasks.add",
        backend="default",
        queue_name="default",
        args_kwargs={"args": [], "kwargs": {}},
        status="RUNNING",
        owner=OWNER,
        token=token,
        ttl=30,
        **{"updated_at": timezone.now(), "last_attempted_at": timezone.now(), **fields},
    )


def test_one_statement_renews_lease_rows_and_queued_rows_and_says_which_are_held(
    db_alias: str,
) -> None:
    objects = BackgroundTask.objects
    kept = objects.try_claim("renew-kept", OWNER, ttl=30)
    cancelled = objects.try_claim("renew-cancelled", OWNER, ttl=30)
    taken = objects.try_claim("renew-taken", OWNER, ttl=30)
    assert kept and cancelled and taken
    assert objects.request_cancel("renew-cancelled")
    # Taken over: stale, then claimed by another owner (a higher token).
    backdate(db_alias, "renew-taken", 31)
    other = objects.try_claim("renew-taken", "other-worker", ttl=30)
    assert other is not None and other.token == taken.token + 1
    queued = _running_queued(db_alias)
    queued_cancelled = _running_queued(db_alias, cancel_requested=True)
    queued_stale = _running_queued(db_alias, updated_at=timezone.now() - dt.timedelta(seconds=60))
    queued_other = _running_queued(db_alias, token=4)
    before = _heartbeat(db_alias, BackgroundTask, "name", "renew-kept")

    answer = objects.work.renew_many(
        [
            ("renew-kept", OWNER, kept.token),
            ("renew-cancelled", OWNER, cancelled.token),
            ("renew-taken", OWNER, taken.token),
        ],
        [
            (queued.seq, OWNER, 3),
            (queued_cancelled.seq, OWNER, 3),
            (queued_stale.seq, OWNER, 3),
            (queued_other.seq, OWNER, 3),  # another token: not ours
        ],
    )

    # Each with the age of its run by the database's clock (what timeouts are judged by).
    assert all(0 <= age < 60 for _, age in answer.values()), answer
    assert {key: cancel for key, (cancel, _) in answer.items()} == {
        (RENEW_TASK, "renew-kept", kept.token): False,
        (RENEW_TASK, "renew-cancelled", cancelled.token): True,
        (RENEW_QUEUED, str(queued.seq), 3): False,
        (RENEW_QUEUED, str(queued_cancelled.seq), 3): True,
    }
    # Written: the heartbeats of what it held, and nothing else.
    assert _heartbeat(db_alias, BackgroundTask, "name", "renew-kept") > before
    assert BackgroundTask.objects.get_state("renew-taken").owner == "other-worker"
    stale = _heartbeat(db_alias, QueuedTask, "seq", queued_stale.seq)
    assert stale < timezone.now() - dt.timedelta(seconds=59)
    assert _heartbeat(db_alias, QueuedTask, "seq", queued_other.seq) <= (
        queued_other.updated_at + dt.timedelta(seconds=1)
    )


def test_nothing_held_renews_nothing(db_alias: str) -> None:
    assert BackgroundTask.objects.work.renew_many([], []) == {}


def test_take_slot_is_one_compare_and_set_in_the_callers_transaction(db_alias: str) -> None:
    """The statement alone, on every engine (MySQL/MariaDB too, which runs
    it for the queue there): of two takes of the slot seen, one matches; it
    needs the caller's transaction; a rolled-back take leaves the slot due."""
    from django.db import transaction

    from django_bgtasks.conf import conf

    work = BackgroundTask.objects.work
    name, text = "tasks:default:take", "every 60s"
    clock = work.clock()
    due = clock - dt.timedelta(seconds=30)
    next_slot = clock + dt.timedelta(seconds=30)
    assert work.ensure_schedule(name, schedule=text, next_slot=due, ttl=5)
    with pytest.raises(RuntimeError, match=r"inside transaction\.atomic"):
        work.take_slot(name, due=due, next_slot=next_slot, schedule=text)
    with contextlib.suppress(ZeroDivisionError), transaction.atomic(using=conf.DATABASE):
        assert work.take_slot(name, due=due, next_slot=next_slot, schedule=text)
        1 / 0  # noqa: B018  (the enqueue failed: the slot is not used up)
    with transaction.atomic(using=conf.DATABASE):
        assert work.take_slot(name, due=due, next_slot=next_slot, schedule=text) is True
    with transaction.atomic(using=conf.DATABASE):
        assert work.take_slot(name, due=due, next_slot=next_slot, schedule=text) is False
    row = BackgroundTask.objects.using(db_alias).get(name=name)
    assert (row.scheduled_for, row.next_run_at) == (due, next_slot)
