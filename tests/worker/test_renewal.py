"""A worker's one renewal of every lease it holds: the statement
(``BackgroundTask.objects.work.renew_many``, every vendor) and the renewer
that sends it once a beat (django_bgtasks/worker/renewal.py)."""

from __future__ import annotations

import datetime as dt
import uuid

from django.utils import timezone

from django_bgtasks.db.rules import RENEW_QUEUED, RENEW_TASK
from django_bgtasks.models import BackgroundTask, QueuedTask
from tests.dbtools import backdate

OWNER = "renewing-worker"


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
        **{"updated_at": timezone.now(), **fields},
    )


def _heartbeat(alias: str, model: type, key: str, value: object) -> dt.datetime:
    updated: dt.datetime = model.objects.using(alias).get(**{key: value}).updated_at
    return updated


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

    assert answer == {
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
