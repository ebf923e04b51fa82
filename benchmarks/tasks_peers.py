"""The four Django Tasks backends that benchmarks/tasks_throughput.py
compares, each as its own documentation sets it up: its app, its ``TASKS``
entry, its worker command, its tables, its bulk enqueue if it has one, and
how to tell that a task has finished.

Every worker polls every 50 ms when idle (ours, django-tasks-db's and
django-ox's ``--interval``/``--poll``, dj-queue's ``polling_interval``);
dj-queue keeps its default LISTEN/NOTIFY wake-up on PostgreSQL, as ours
keeps its own. The settings read from the environment are the ones the
benchmark sets for its worker processes (BENCH_*).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLL = "0.05"


@dataclass(frozen=True)
class Peer:
    """One backend: what it is called, how it is installed and run."""

    alias: str  # its TASKS alias, and its tasks' suffix in throughput_tasks
    label: str
    dist: str  # the distribution, for its version
    module: str  # importable when it is installed
    app: str
    backend: str
    threads: bool  # its worker has a thread count to set
    tables: tuple[str, ...]  # cleared between rounds, children first
    # Its TASKS alias, when it is another's tasks (ours with flow limits).
    of: str = ""
    # Kept from round to round (not cleared), but vacuumed with the tables.
    kept: tuple[str, ...] = ()

    @property
    def tasks_alias(self) -> str:
        """The TASKS alias its tasks are sent to."""
        return self.of or self.alias

    def installed(self) -> bool:
        """Whether this environment has it."""
        return importlib.util.find_spec(self.module) is not None


PEERS = (
    Peer("bgtasks", "django-bgtasks", "django-bgtasks", "django_bgtasks", "django_bgtasks",
         "django_bgtasks.backend.LeaseBackend", True,
         ("django_bgtasks_queuedtask",), kept=("django_bgtasks_flowslot",)),
    # Ours again, its tasks declared with flow limits that never bind
    # (throughput_tasks.py): what declaring them costs. A key's slots stay
    # from round to round, as a site's do (made by the key's first enqueue:
    # tasks_rounds.py makes them before the first round, and times it).
    Peer("bgtasks_limits", "bgtasks, limits", "django-bgtasks", "django_bgtasks",
         "django_bgtasks", "django_bgtasks.backend.LeaseBackend", True,
         ("django_bgtasks_queuedtask",), of="bgtasks", kept=("django_bgtasks_flowslot",)),
    Peer("db", "django-tasks-db", "django-tasks-db", "django_tasks_db", "django_tasks_db",
         "django_tasks_db.DatabaseBackend", False, ("django_tasks_database_dbtaskresult",)),
    Peer("djq", "dj-queue", "dj-queue", "dj_queue", "dj_queue",
         "dj_queue.backend.DjQueueBackend", True,
         ("dj_queue_ready_executions", "dj_queue_claimed_executions",
          "dj_queue_failed_executions", "dj_queue_scheduled_executions",
          "dj_queue_blocked_executions", "dj_queue_jobs")),
    Peer("ox", "django-ox", "django-ox", "django_ox", "django_ox",
         "django_ox.backend.OxBackend", True, ("django_ox_oxtask",)),
)  # fmt: skip
BY_ALIAS = {peer.alias: peer for peer in PEERS}


def tasks_setting() -> dict[str, Any]:
    """TASKS for the peers this environment has, less those left out of
    BENCH_BACKENDS (set for the workers: a backend whose checks refuse the
    database would stop every worker's start with its error); dj-queue's
    worker topology comes from BENCH_DJQ ("processes,threads")."""
    wanted = os.environ.get("BENCH_BACKENDS", ",".join(BY_ALIAS)).split(",")
    processes, threads = os.environ.get("BENCH_DJQ", "1,1").split(",")
    options: dict[str, dict[str, Any]] = {
        "djq": {
            "workers": [
                {
                    "queues": "*",
                    "threads": int(threads),
                    "processes": int(processes),
                    "polling_interval": float(POLL),
                }
            ],
            "silence_polling": True,
        }
    }
    setting = {
        peer.alias: {"BACKEND": peer.backend, "QUEUES": [], "OPTIONS": options.get(peer.alias, {})}
        for peer in PEERS
        if peer.installed()
        and not peer.of
        and {peer.alias} & {BY_ALIAS[alias].tasks_alias for alias in wanted if alias in BY_ALIAS}
    }
    # Django wants a "default"; the first of them, under a second name.
    return {"default": next(iter(setting.values())), **setting}


def worker_commands(alias: str, workers: int, threads: int) -> list[list[str]]:
    """The management commands to start, one list a process: ``workers``
    worker processes of ``threads`` threads (django-tasks-db's runs one task
    at a time). dj-queue's is one supervisor forking ``workers`` processes,
    as its docs scale it (the command's environment sets BENCH_DJQ)."""
    if alias.startswith("bgtasks"):
        one = ["bgtasks", "-v", "0", "worker", "--queue", "default", "--concurrency",
               str(threads), "--poll", POLL]  # fmt: skip
    elif alias == "db":
        one = ["db_worker", "--backend", "db", "--interval", POLL, "--no-startup-delay", "-v", "0"]
    elif alias == "ox":
        # -v 0: without it, a log line a task on stderr (ours and
        # django-tasks-db's run at -v 0 too; dj-queue's is quiet).
        one = ["ox_worker", "--backend", "ox", "--interval", POLL, "--concurrency", str(threads),
               "-v", "0"]  # fmt: skip
    else:
        return [["dj_queue", "--backend", "djq", "--only-work", "--skip-recurring"]]
    return [one] * workers


def bulk_enqueue(alias: str) -> Callable[[Any, Sequence[tuple[list[Any], dict[str, Any]]]], Any]:
    """The backend's documented bulk enqueue, or None: ours is
    ``LeaseBackend.enqueue_many`` once it exists, dj-queue's
    ``enqueue_all``, django-ox's ``django_ox.bulk.enqueue_many``;
    django-tasks-db has none."""
    if alias.startswith("bgtasks"):
        from django_bgtasks.backend import LeaseBackend

        if not hasattr(LeaseBackend, "enqueue_many"):
            return None  # type: ignore[return-value]
        return lambda task, calls: task.get_backend().enqueue_many(task, calls)
    if alias == "djq":
        return lambda task, calls: task.get_backend().enqueue_all(
            [(task, args, kwargs) for args, kwargs in calls]
        )
    if alias == "ox":
        from django_ox.bulk import enqueue_many

        return enqueue_many  # type: ignore[no-any-return]
    return None  # type: ignore[return-value]


def counts(alias: str) -> tuple[int, int]:
    """(finished, failed) tasks, as the backend's tables say."""
    if alias == "djq":
        from dj_queue.models import FailedExecution, Job

        failed = FailedExecution.objects.count()
        return Job.objects.filter(finished_at__isnull=False).count() + failed, failed
    model = _model(alias)
    rows = {
        row["status"]: row["n"]
        for row in model.objects.values("status").annotate(n=_count()).order_by()
    }
    failed = rows.get("FAILED", 0) + rows.get("LOST", 0)
    return rows.get("SUCCESSFUL", 0) + failed, failed


def last_finish(alias: str) -> float:
    """When the last task finished (the database's finished_at, as a Unix time)."""
    from django.db.models import Max

    if alias == "djq":
        from dj_queue.models import Job

        model: Any = Job
    else:
        model = _model(alias)
    return float(model.objects.aggregate(last=Max("finished_at"))["last"].timestamp())


def _model(alias: str) -> Any:
    if alias.startswith("bgtasks"):
        from django_bgtasks.models import QueuedTask

        return QueuedTask
    if alias == "db":
        from django_tasks_db.models import DBTaskResult

        return DBTaskResult
    from django_ox.models import OxTask

    return OxTask


def _count() -> Any:
    from django.db.models import Count

    return Count("pk")


def clear(aliases: Sequence[str]) -> None:
    """Empties the task tables of these backends (untimed, between rounds)."""
    from django.db import connection

    with connection.cursor() as cursor:
        for alias in aliases:
            for table in BY_ALIAS[alias].tables:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
