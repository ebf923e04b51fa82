"""What a scrape of ``bgtasks:metrics`` costs, and that the run history does
not change it.

On a throwaway embedded PostgreSQL (or ``--dsn``'s server), it fills 1,000
tasks (one lease row each, some running, some stale, some requested) and 20
workers, and times a scrape (``cluster_counts()`` and the text Prometheus
reads, what the view does after authentication) with the statements it runs,
on three databases of one server, filled alike (and a queue of 1,000 ready
and 100 running Django Tasks) but for:

1. ``default``: no history;
2. ``history``: 1,000,000 rows in the run history (``TaskRun``);
3. ``results``: those, and 200,000 finished Django Tasks (results that
   ``bgtasks prune`` has not deleted yet).

Scrapes alternate between the three for ``--rounds`` rounds; it prints each
one's median, its statement count and its ratio to ``default``'s, then the
plan of each statement on ``results``, to show which index answers it (none
reads the history). The rows are made with
``INSERT ... SELECT generate_series`` (seconds, not minutes).

Usage (niced; the machine may be shared):

    nice .venv/bin/python benchmarks/metrics_scrape.py [--dsn URL] [--rounds 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.site import server_for

TASKS = 1_000
HISTORY = 1_000_000
READY, RUNNING, RESULTS = 1_000, 100, 200_000


def fill_tasks(cursor: Any, task: str, worker: str) -> None:
    # 1,000 tasks: every 10th running (live), every 50th stale, every 7th requested.
    cursor.execute(
        f"""
        INSERT INTO {task} (name, value, running, owner, token, ttl, started_at,
            finished_at, updated_at, cancel_requested, outcome, error, requested_at)
        SELECT 'task-' || n, NULL, mod(n, 10) = 0 OR mod(n, 50) = 1, 'w', n, 30,
            now() - interval '1 hour', NULL,
            CASE WHEN mod(n, 50) = 1 THEN now() - interval '10 minutes' ELSE now() END,
            false, '', '', CASE WHEN mod(n, 7) = 0 THEN now() END
        FROM generate_series(1, %s) n
        """,
        [TASKS],
    )
    cursor.execute(
        f"""
        INSERT INTO {worker} (id, host, pid, tasks, concurrency, running, started_at,
            updated_at, ttl)
        SELECT 'worker-' || n, 'host', n, '[]', 4, '[]', now(),
            CASE WHEN mod(n, 5) = 0 THEN now() - interval '1 minute' ELSE now() END, 15
        FROM generate_series(1, 20) n
        """
    )


def fill_queue(cursor: Any, table: str, count: int, status: str, offset: int) -> None:
    cursor.execute(
        f"""
        INSERT INTO {table} (uuid, task_path, backend, queue_name, priority, takes_context,
            args_kwargs, run_after, status, enqueued_at, attempts, max_attempts, worker_ids,
            errors, owner, token, ttl, cancel_requested, unique_key, updated_at, finished_at)
        SELECT gen_random_uuid(), 'app.tasks.job', 'default',
            CASE WHEN mod(n, 3) = 0 THEN 'mail' ELSE 'default' END, 0, false,
            '{{"args": [], "kwargs": {{}}}}', NULL, %s,
            now() - mod(n, 600) * interval '1 second', 1, 1, '[]', '[]', 'w', 1, 30, false, '',
            CASE WHEN %s::text = 'RUNNING' THEN now() END,
            CASE WHEN %s::text IN ('SUCCESSFUL', 'FAILED') THEN now() END
        FROM generate_series(%s, %s) n
        """,
        [status, status, status, offset + 1, offset + count],
    )


def fill_history(cursor: Any, table: str) -> None:
    cursor.execute(
        f"""
        INSERT INTO {table} (name, token, owner, started_at, finished_at, outcome, error,
            value, trigger, attempt, skipped, result_note)
        SELECT 'task-' || (mod(n, %s) + 1), n, 'w', now() - interval '1 day',
            now() - interval '1 day', 'succeeded', '', NULL, 'schedule', 1, 0, ''
        FROM generate_series(1, %s) n
        """,
        [TASKS, HISTORY],
    )


def settle(cursor: Any) -> None:
    """After a fill: statistics, the visibility map and a checkpoint, so that
    the next state's figures don't carry the fill's background work."""
    cursor.execute("VACUUM ANALYZE")
    cursor.execute("CHECKPOINT")


def scrape() -> bytes:
    """What the view does once the request is authenticated."""
    from prometheus_client import CollectorRegistry, generate_latest

    from django_bgtasks.http.monitoring import ClusterCollector
    from django_bgtasks.operations.cluster import cluster_counts

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(cluster_counts()))
    return bytes(generate_latest(registry))


def timed(alias: str) -> float:
    from django.test.utils import override_settings

    # (override_settings: the app keeps the settings it read until told.)
    with override_settings(BGTASKS_DATABASE=alias):
        start = time.perf_counter()
        scrape()
        return time.perf_counter() - start


def statements_of(alias: str) -> list[str]:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext, override_settings

    with (
        override_settings(BGTASKS_DATABASE=alias),
        CaptureQueriesContext(connections[alias]) as captured,
    ):
        scrape()
    return [query["sql"] for query in captured]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN"))
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    dsn, server = server_for(args.dsn)
    try:
        run(dsn, args.rounds)
    finally:
        if server is not None:
            server.cleanup()


STATES = {  # alias: (history rows, finished Django Tasks)
    "default": (0, 0),
    "history": (HISTORY, 0),
    "results": (HISTORY, RESULTS),
}


def setup(dsn: str) -> list[str]:
    """A scratch database per state on the server, Django on them, migrated."""
    import dj_database_url
    import django
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    names = [f"bgtasks_scrape_{alias}_{os.getpid()}" for alias in STATES]
    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    base = urlsplit(dsn)
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={
            alias: dj_database_url.parse(base._replace(path=f"/{name}").geturl())
            for alias, name in zip(STATES, names, strict=True)
        },
        USE_TZ=True,
    )
    django.setup()
    for alias in STATES:
        call_command("migrate", database=alias, verbosity=0)
    return names


def run(dsn: str, rounds: int) -> None:
    names = setup(dsn)
    try:
        compare(rounds)
    finally:
        from django.db import connections

        connections.close_all()
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def compare(rounds: int) -> None:
    from django.db import connections

    from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun, Worker

    print(f"{TASKS:,} tasks, 20 workers, {READY:,} ready and {RUNNING} running Django Tasks")
    for alias, (history, finished) in STATES.items():
        connection = connections[alias]
        table = {
            model.__name__: connection.ops.quote_name(model._meta.db_table)
            for model in (BackgroundTask, TaskRun, Worker, QueuedTask)
        }
        with connection.cursor() as cursor:
            fill_tasks(cursor, table["BackgroundTask"], table["Worker"])
            fill_queue(cursor, table["QueuedTask"], READY, "READY", 0)
            fill_queue(cursor, table["QueuedTask"], RUNNING, "RUNNING", READY)
            start = time.perf_counter()
            if history:
                fill_history(cursor, table["TaskRun"])
            if finished:
                fill_queue(cursor, table["QueuedTask"], finished, "SUCCESSFUL", READY + RUNNING)
            filled = time.perf_counter() - start
            settle(cursor)
            if history:
                print(
                    f"{alias}: {history:,} history and {finished:,} finished rows "
                    f"inserted in {filled:.1f} s"
                )
    times: dict[str, list[float]] = {alias: [] for alias in STATES}
    for alias in STATES:  # warm: statements rendered, connections open
        timed(alias)
    for _ in range(rounds):  # alternating, so that the machine's moods fall on each alike
        for alias in STATES:
            times[alias].append(timed(alias))
    base = statistics.median(times["default"])
    print(
        f"\n{'state':<10} {'history rows':>13} {'results':>8} {'scrape ms':>10} "
        f"{'statements':>11} {'÷ none':>7}"
    )
    for alias, (history, finished) in STATES.items():
        took = statistics.median(times[alias])
        count = len(statements_of(alias))
        print(
            f"{alias:<10} {history:>13,} {finished:>8,} {took * 1000:>10.2f} {count:>11} "
            f"{took / base:>7.2f}"
        )
    print(f"(medians of {rounds} alternating rounds)\n")
    print("Plans with the history and the results (the 'results' database):")
    with connections["results"].cursor() as cursor:
        for sql in statements_of("results"):
            cursor.execute(f"EXPLAIN (COSTS OFF) {sql}")
            print(f"- {' '.join(sql.split())[:110]}")
            for (line,) in cursor.fetchall():
                print(f"    {line}")


if __name__ == "__main__":
    main()
