"""An admin filled as a production site fills it, for the layout tests:
owner ids of 60-character hosts (a cloud VM's name, a Kubernetes pod's),
UUIDs, dotted task paths, long multi-line tracebacks, hundreds of runs,
silent workers, every status and outcome. Built with the lease and queue
operations, and the ORM where a row's past is written (the runs' history,
a Django task's traceback, a worker's silence)."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from django_bgtasks.choices import Outcome
from django_bgtasks.models import BackgroundTask, QueuedTask, QueueRollup, TaskRun
from django_bgtasks.queue import rollup
from django_bgtasks.queue.execute import execute
from tests import djtasks
from tests.dbtools import backdate, backdate_worker

objects = BackgroundTask.objects

# 60 characters each: an EC2 instance's name, and a Kubernetes pod's, which
# has no dot to wrap at.
VM_HOST = "ip-10-120-34-201.eu-west-1.compute.internal.prod.example.org"
POD_HOST = "bgtasks-worker-deployment-production-eu-west-1-7d9f8b6c5-x2x"
assert len(VM_HOST) == len(POD_HOST) == 60

VM = f"{VM_HOST}:48213:3f7a9c1e"
POD = f"{POD_HOST}:7:b0c4e2d8"
WEB = f"{VM_HOST}:51877:5e1f0a9b"

HISTORY_TASK = "sync-customer-invoices"
STALE_TASK = "nightly-report"
FAILED_TASK = "surface-fails"
NEVER_RUN_TASK = "surface-slow"
RUNS = 320

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.12/site-packages/django_bgtasks/core/runner.py", line 212, in _run
    result = self.function(lease, *args, **kwargs)
  File "/srv/app/billing/tasks.py", line 88, in sync_customer_invoices
    for batch in client.invoices(since=cursor, page_size=500):
  File "/srv/app/billing/clients/erp.py", line 141, in invoices
    response = self.session.get(url, params=params, timeout=self.timeout)
  File "/srv/app/.venv/lib/python3.12/site-packages/requests/sessions.py", line 602, in get
    return self.request("GET", url, **kwargs)
  File "/srv/app/.venv/lib/python3.12/site-packages/requests/sessions.py", line 589, in request
    resp = self.send(prep, **send_kwargs)
  File "/srv/app/.venv/lib/python3.12/site-packages/requests/sessions.py", line 703, in send
    r = adapter.send(request, **kwargs)
  File "/srv/app/.venv/lib/python3.12/site-packages/requests/adapters.py", line 713, in send
    raise ReadTimeout(e, request=request)
requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='erp.eu-west-1.internal.example.com', port=443): Read timed out. (read timeout=30)"""  # noqa: E501 (a real traceback's lines)

DB_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.12/site-packages/django/db/backends/utils.py", line 105, in _execute
    return self.cursor.execute(sql, params)
  File "/srv/app/.venv/lib/python3.12/site-packages/psycopg/cursor.py", line 97, in execute
    raise ex.with_traceback(None)
psycopg.errors.SerializationFailure: could not serialize access due to concurrent update

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.12/site-packages/django/tasks/base.py", line 183, in call
    return self.func(*args, **kwargs)
  File "/srv/app/reporting/tasks.py", line 57, in rebuild_customer_statistics
    Statistic.objects.bulk_update(rows, ["total", "count", "updated_at"], batch_size=1000)
  File "/srv/app/.venv/lib/python3.12/site-packages/django/db/models/query.py", line 921, in bulk_update
    rows_updated += queryset.filter(pk__in=pks).update(**update_kwargs)
django.db.utils.OperationalError: could not serialize access due to concurrent update"""  # noqa: E501

# What a run's end says when no traceback does.
ERRORS = {
    Outcome.FAILED: TRACEBACK,
    Outcome.LOST: f"lost: holder {WEB} silent for 47.2 s (ttl 30 s); taken over by {VM}",
    Outcome.INTERRUPTED: f"interrupted: worker {POD} shut down (SIGTERM) before the run ended",
    Outcome.RELEASED_BY_OPERATOR: "released by operator: admin: root",
}
PATHS = [
    "billing.tasks.reconcile_customer_invoices_for_every_tenant",
    "reporting.tasks.rebuild_customer_statistics",
    "notifications.tasks.send_weekly_digest_emails",
    "search.tasks.reindex_changed_documents",
]


@dataclass
class Filled:
    """What :func:`fill` made, for the tests to visit."""

    failed_django_task: QueuedTask
    running_django_task: QueuedTask


def _history(alias: str) -> None:
    """RUNS ended runs of HISTORY_TASK, every outcome, newest last: what a
    task scheduled every few minutes leaves in a day."""
    outcomes = [
        Outcome.SUCCEEDED,
        Outcome.SUCCEEDED,
        Outcome.FAILED,
        Outcome.LOST,
        Outcome.SUCCEEDED,
        Outcome.INTERRUPTED,
        Outcome.CANCELLED,
        Outcome.RELEASED_BY_OPERATOR,
    ]
    start = timezone.now() - dt.timedelta(minutes=5 * RUNS)
    runs = []
    for number in range(1, RUNS + 1):
        outcome = outcomes[number % len(outcomes)]
        started = start + dt.timedelta(minutes=5 * number)
        succeeded = outcome == Outcome.SUCCEEDED
        runs.append(
            TaskRun(
                name=HISTORY_TASK,
                token=48_000 + number,
                owner=(VM, POD, WEB)[number % 3],
                started_at=started,
                finished_at=started + dt.timedelta(seconds=37 + number % 400),
                outcome=outcome,
                error=ERRORS.get(outcome, ""),
                trigger=("schedule", "retry", "request", "resume")[number % 4],
                attempt=1 + number % 3,
                skipped=number % 5 == 0,
                result={"invoices": 1200 + number, "skipped": number % 7} if succeeded else None,
            )
        )
    TaskRun.objects.using(alias).bulk_create(runs)


def _background_tasks(alias: str, user: Any) -> None:
    _history(alias)
    lease = objects.try_claim(HISTORY_TASK, VM, {"done": 1234, "total": 5000}, ttl=600)
    assert lease is not None
    # Registered ones: one idle and succeeded, one failed with a traceback.
    objects.try_claim("surface-quick", WEB, ttl=30)
    objects.release("surface-quick", WEB, result={"counted": 3, "cursor": "2026-12-01T00:00Z"})
    objects.try_claim(FAILED_TASK, POD, {"done": 1, "total": 2}, ttl=30)
    objects.release(FAILED_TASK, POD, outcome=Outcome.FAILED, error=TRACEBACK)
    # A holder gone silent, a run asked to stop, and an interrupted one.
    objects.try_claim(STALE_TASK, WEB, {"progress": 0.62, "phase": "rendering"}, ttl=30)
    backdate(alias, STALE_TASK, 4000)
    objects.try_claim("purge-expired-sessions", POD, ttl=60)
    objects.request_cancel("purge-expired-sessions")
    objects.try_claim("rebuild-search-index", VM, ttl=60)
    objects.release(
        "rebuild-search-index", VM, outcome=Outcome.INTERRUPTED, error=ERRORS[Outcome.INTERRUPTED]
    )
    # The admin's own history of a task: what operators did to it.
    kind = ContentType.objects.get_for_model(BackgroundTask)
    for number in range(3):
        LogEntry.objects.create(
            user=user,
            content_type=kind,
            object_id=HISTORY_TASK,
            object_repr=HISTORY_TASK,
            action_flag=CHANGE,
            change_message=f"Requested cancel (token {48_000 + number}, owner {VM}).",
        )


def _workers(alias: str) -> None:
    names = [HISTORY_TASK, STALE_TASK, "purge-expired-sessions", "rebuild-search-index"]
    for worker, host, pid, running in (
        (VM, VM_HOST, 48213, [HISTORY_TASK]),
        (POD, POD_HOST, 7, ["purge-expired-sessions"]),
        (f"{POD_HOST}:8:c1d5f3e9", POD_HOST, 8, []),
    ):
        objects.work.beat(
            worker=worker, host=host, pid=pid, tasks=names, concurrency=4, running=running
        )
    backdate_worker(alias, f"{POD_HOST}:8:c1d5f3e9", 600)


def _django_tasks(alias: str) -> Filled:
    table = QueuedTask.objects.using(alias)
    # Claimed first (highest priority), and fails.
    failed = djtasks.fails.using(priority=99).enqueue("the ERP answered 503")
    for number in range(30):
        queue = ("default", "other")[number % 2]
        djtasks.add.using(priority=number % 10, queue_name=queue).enqueue(number, 1)
    for _ in range(12):  # some end, the failing one first
        claim = QueuedTask.objects.claim(VM, queues=None)
        assert claim is not None
        execute(claim)
    assert table.get(uuid=failed.id).status == "FAILED"
    errors = [
        {"exception_class_path": "django.db.utils.OperationalError", "traceback": DB_TRACEBACK}
    ]
    table.filter(uuid=failed.id).update(
        errors=errors, worker_ids=[VM, POD, WEB], attempts=3, max_attempts=3
    )
    running = QueuedTask.objects.claim(POD, queues=None)
    assert running is not None
    QueuedTask.objects.renew(
        running, progress={"done": 48_213, "total": 120_000}, set_progress=True
    )
    rows = list(table.order_by("seq").values_list("seq", flat=True))
    for number, seq in enumerate(rows):
        table.filter(seq=seq).update(task_path=PATHS[number % len(PATHS)])
    return Filled(
        failed_django_task=table.get(uuid=failed.id),
        running_django_task=table.get(uuid=running.uuid),
    )


def _rollup(alias: str) -> None:
    """The dashboard's last hour, as the workers' rollup would have it: a
    busy hour's counts written straight into the rollup's rows (the rows a
    real roll writes are tests/queue/test_rollup.py's), so that the
    other pages' lists are not full of the tasks behind them. A burst of
    failures and a wait 12 minutes ago."""
    end = rollup.floor(BackgroundTask.objects.work.clock() - rollup.SETTLE, 60)
    rows = []
    for back in range(1, 61):
        start = end - dt.timedelta(minutes=back)
        burst = back in (12, 13, 14)
        for queue, share in [("", 1.0), ("default", 0.7), ("other", 0.3)]:
            ok = int((40 + 25 * math.sin(back / 7)) * share)
            failed = int(share * (6 if burst else back % 3))
            times = [0] * rollup.BUCKETS
            times[6], times[8], times[11] = ok // 2, ok - ok // 2 - ok // 10, ok // 10 + failed
            lag = 1.5 + (40 if burst else 0)
            rows.append(_rolled(start, queue, "", ok, failed, times, lag))
        for number, path in enumerate(PATHS[:6]):
            times = [0] * rollup.BUCKETS
            times[6 + number % 3] = 10 - number + number % 2
            rows.append(_rolled(start, "", path, 10 - number, number % 2, times, None))
    QueueRollup.objects.using(alias).bulk_create(rows)


def _rolled(
    start: dt.datetime, queue: str, path: str, ok: int, failed: int, times: list[int], lag: Any
) -> QueueRollup:
    return QueueRollup(
        span=60,
        start=start,
        queue_name=queue,
        task_path=path,
        succeeded=ok,
        failed=failed,
        run_times=times,
        lag=lag,
    )


def fill(alias: str, user: Any) -> Filled:
    """Fill the admin of the lease database ``alias``; ``user`` did what the
    admin's history of a task shows."""
    _background_tasks(alias, user)
    _workers(alias)
    _rollup(alias)
    return _django_tasks(alias)
