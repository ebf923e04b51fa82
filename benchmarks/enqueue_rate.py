"""Enqueue rates: LeaseBackend's ``enqueue()`` and ``enqueue_many()`` next to
django-tasks-db's ``enqueue()``, on the same PostgreSQL (or MariaDB/MySQL)
in the same run.

Each variant stores no-op tasks from this process through Django's public
Tasks API, on one connection Django keeps open (as a web process does
between requests within ``CONN_MAX_AGE``, and a script always does), each
call in autocommit: its own durable commit.

* ``enqueue()``, ours and django-tasks-db's: ``--singles`` calls, one task each;
* ``enqueue_many()`` (ours; django-tasks-db has none): batches of 1,000 and
  of 10,000 tasks, ``--bulk`` tasks in all for each size;
* with ``--limits``, our ``enqueue()`` and ``enqueue_many()`` again for a
  task declared with flow limits that never bind (``concurrency=10_000``,
  ``rate_limit="10000/s"``, one key: benchmarks/throughput_tasks.py), and
  each one's ratio to the same without limits. The key's slots are made by
  the warm-up (a key's first enqueue, once in its life) and kept;
* on MariaDB, our ``enqueue()`` also as it runs on MySQL (an INSERT and a read
  of what it stored, in one query), and as the INSERT from ``JSON_TABLE`` that
  ``enqueue_many()`` sends, next to MariaDB's INSERT of one task's ``VALUES``
  (each with ``RETURNING``).

With ``--sides A B`` (two migrations of django_bgtasks), our variants run
at each, migrated there before each run (untimed; django-tasks-db's is
left out), and each is printed with its ratio, B over A: what a
migration's triggers cost an enqueue (0021 and 0022: the slots' trigger
once a row, and once a statement).

Rounds alternate the order of the variants, so drift in the machine's load
hits them alike; both tables are emptied before each variant. The figure is
the median of the rounds, in tasks a second, with its ratio to
django-tasks-db's ``enqueue()``; ``client CPU`` is this process's CPU time per
task (``time.process_time()``), the rest of the time is the database's and the
wait for its commit.

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/enqueue_rate.py [--dsn URL] [--rounds 5] [--singles 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(HERE)]

from benchmarks.site import alternating, server_for  # noqa: E402

TABLES = ("django_bgtasks_queuedtask", "django_tasks_database_dbtaskresult")
BATCHES = (1_000, 10_000)


# Alike tasks_throughput.py's settings, as that one was (it now configures every
# peer, from a Python 3.12+ environment): this needs django-tasks-db alone,
# which the project's .venv has.
def setup_django(dsn: str) -> None:
    """Both backends on ``dsn``: ``bgtasks`` (ours) and ``db`` (django-tasks-db's)."""
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
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


LIMITS = ", limits"  # a variant's label with flow limits declared


def variants(
    singles: int, bulk: int, limits: bool = False
) -> dict[str, tuple[int, Callable[[], object]]]:
    """Each variant: how many tasks it stores, and the work that stores them."""
    import throughput_tasks

    ours, theirs = throughput_tasks.noop_bgtasks, throughput_tasks.noop_db
    limited = throughput_tasks.NOOP["bgtasks_limits"]
    backend: Any = ours.get_backend()

    def single(task: Any) -> Callable[[], object]:
        def work() -> None:
            for _ in range(singles):
                task.enqueue()

        return work

    def many(size: int, task: Any = ours) -> Callable[[], object]:
        items = [((), {})] * size

        def work() -> None:
            for _ in range(max(1, bulk // size)):
                backend.enqueue_many(task, items)

        return work

    found: dict[str, tuple[int, Callable[[], object]]] = {
        "LeaseBackend enqueue()": (singles, single(ours)),
        "django-tasks-db enqueue()": (singles, single(theirs)),
    }
    if limits:
        found["LeaseBackend enqueue()" + LIMITS] = (singles, single(limited))
    for size in BATCHES:
        found[f"LeaseBackend enqueue_many({size:,})"] = (max(1, bulk // size) * size, many(size))
        if limits:
            found[f"LeaseBackend enqueue_many({size:,})" + LIMITS] = (
                max(1, bulk // size) * size,
                many(size, limited),
            )
    from django.db import connection

    if connection.vendor == "mysql" and connection.mysql_is_mariadb:
        found[MYSQL_WAY] = (singles, as_mysql(single(ours)))
        found[JSON_TABLE_WAY] = (singles, from_json_table(single(ours)))
    return found


# On MariaDB, our enqueue() as MySQL runs it too: the INSERT and a read of what
# it stored in one query, where MariaDB's INSERT ... RETURNING is one statement.
MYSQL_WAY = "LeaseBackend enqueue(), MySQL's way"


def as_mysql(work: Callable[[], object]) -> Callable[[], object]:
    from django.db import DEFAULT_DB_ALIAS, connections

    # The connection itself, not django.db.connection (a proxy, whose vars()
    # are its own): popping the proxy's left every later variant MySQL's.
    connection = connections[DEFAULT_DB_ALIAS]

    def run() -> None:
        connection.mysql_is_mariadb = False  # Django's cached_property, for this run
        try:
            work()
        finally:
            vars(connection).pop("mysql_is_mariadb", None)

    return run


# And a task alone as MariaDB stored it before 41573a0: the INSERT from
# JSON_TABLE that enqueue_many() sends, where one task's is an INSERT of VALUES.
JSON_TABLE_WAY = "LeaseBackend enqueue(), JSON_TABLE"


def from_json_table(work: Callable[[], object]) -> Callable[[], object]:
    from django_bgtasks.db.mysql import mariadb as mariadb_queue
    from django_bgtasks.db.mysql.leases import MYSQL_STEP

    enqueue = mariadb_queue.READERS["enqueue"]

    def several_only(connection: Any, statement: str, query: str, params: Any) -> Any:
        several = query.split(MYSQL_STEP)[0]  # (the reader's query: several, then one)
        return enqueue(connection, statement, MYSQL_STEP.join([several, several]), params)

    def run() -> None:
        mariadb_queue.READERS["enqueue"] = several_only
        try:
            work()
        finally:
            mariadb_queue.READERS["enqueue"] = enqueue

    return run


def at_sides(
    work: dict[str, tuple[int, Callable[[], object]]], sides: list[str]
) -> dict[str, tuple[int, Callable[[], object]]]:
    """Our variants of ``work`` at each migration of ``sides``: each migrates
    django_bgtasks there first (untimed: :func:`run` times the store alone)."""
    from django.core.management import call_command

    at: list[str] = []

    def migrated(side: str, store: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            if at != [side]:
                call_command("migrate", "django_bgtasks", side, verbosity=0)
                at[:] = [side]
            return store()

        return run

    return {
        f"[{side}] {label}": (count, migrated(side, store))
        for side in sides
        for label, (count, store) in work.items()
        if label.startswith("LeaseBackend") and "MySQL" not in label and "JSON" not in label
    }


def print_sides(
    rates: dict[str, list[float]], cpu: dict[str, list[float]], sides: list[str]
) -> None:
    """Each variant at both sides, and its ratio, the second over the first."""
    first, second = (f"[{side}] " for side in sides)
    print(f"{'':<40}{sides[0][:4]:>9}{sides[1][:4]:>9}{'ratio':>8}   (tasks/s; client CPU us/t)")
    for label in [label.removeprefix(first) for label in rates if label.startswith(first)]:
        a, b = (statistics.median(rates[side + label]) for side in (first, second))
        cpu_a, cpu_b = (statistics.median(cpu[side + label]) for side in (first, second))
        print(f"{label:<40}{a:>9,.0f}{b:>9,.0f}{b / a:>8.2f}   ({cpu_a:.1f}, {cpu_b:.1f})")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    print("rounds (tasks/s):", json.dumps({k: [round(r) for r in v] for k, v in rates.items()}))


def empty() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in TABLES:  # (MySQL's TRUNCATE takes one table)
            cursor.execute(f"TRUNCATE {table}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--singles", type=int, default=1000, help="enqueue() calls per round")
    parser.add_argument("--bulk", type=int, default=20_000, help="tasks per batch size per round")
    parser.add_argument(
        "--limits",
        action="store_true",
        help="ours also with flow limits that never bind, and the ratio to none",
    )
    parser.add_argument(
        "--sides", nargs=2, metavar="MIGRATION", help="ours at two migrations, B over A"
    )
    args = parser.parse_args()
    args.dsn, server = server_for(args.dsn)
    try:
        setup_django(args.dsn)
        run(args)
    finally:
        if server is not None:
            server.cleanup()


def run(args: argparse.Namespace) -> None:
    from importlib.metadata import version as installed

    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        server_version = cursor.fetchone()[0].split(" on ")[0]
    print(
        f"{server_version}; Django {django.get_version()}, django-tasks-db "
        f"{installed('django-tasks-db')}; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )
    print(
        f"{args.singles} enqueue() calls and {args.bulk:,} tasks per batch size per round, "
        f"{args.rounds} alternating rounds, median\n"
    )
    work = variants(args.singles, args.bulk, args.limits)
    if args.sides:
        work = at_sides(work, args.sides)
    for _count, store in work.values():  # warm: imports, connections, prepared statements
        store()
    rates: dict[str, list[float]] = {label: [] for label in work}
    cpu: dict[str, list[float]] = {label: [] for label in work}
    for label in alternating(list(work), args.rounds):
        count, store = work[label]
        empty()
        started, started_cpu = time.perf_counter(), time.process_time()
        store()
        took, took_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        rates[label].append(count / took)
        cpu[label].append(took_cpu / count * 1e6)
    empty()
    if args.sides:
        print_sides(rates, cpu, args.sides)
        return
    theirs = statistics.median(rates["django-tasks-db enqueue()"])
    ours = statistics.median(rates["LeaseBackend enqueue()"])
    print(
        f"{'':<36}{'tasks/s':>9}  {'client CPU':>12}  {'vs theirs':>9}  {'vs our enqueue()':>16}"
    )
    for label in work:
        rate = statistics.median(rates[label])
        print(
            f"{label:<36}{rate:>9,.0f}  {statistics.median(cpu[label]):>7.1f} us/t  "
            f"{rate / theirs:>8.2f}x  {rate / ours:>15.2f}x"
        )
    for label in work:
        if label.endswith(LIMITS):
            plain = statistics.median(rates[label.removesuffix(LIMITS)])
            print(f"{label}: limits declared ÷ none = "
                  f"{statistics.median(rates[label]) / plain:.2f}x")  # fmt: skip
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    print(
        "rounds (tasks/s):",
        json.dumps({label: [round(r) for r in v] for label, v in rates.items()}),
    )


if __name__ == "__main__":
    main()
