"""django-bgtasks at production scale: the drain, the enqueue, the claim and
every operator surface as the queue's table grows, on one database.

Each table state is built with SQL (fast, and the same rows an enqueue and a
drain would leave), without ANALYZE or VACUUM: on a server with
``autovacuum = off`` (this machine's PostgreSQL) the planner then has the
statistics of whatever the table held before, as in production after a bulk
enqueue; on one with autovacuum on, it gets them when autovacuum runs. Run
it on both (docs/benchmarks.md, "A million tasks" has the commands and
the figures). The states:

* **backlog N**: N ready tasks (``--backlogs``);
* **history N**: ``--drain`` ready tasks behind N finished ones, eight
  succeeded for one failed (``--histories``);
* **spec**: ``--spec`` rows as issue 49 sets them: a tenth ready, eight
  tenths succeeded, a tenth failed, over 20 queues and 500 task paths.

For each state but **spec**, in this order:

* **drain** (tasks/s): ``--workers`` worker processes of ``--threads``
  threads (``bgtasks worker``, every queue) drain ``--drain`` tasks, timed by
  the database's ``finished_at`` from the 1,000th to the last (so the
  workers' start is not in it); the median of ``--rounds`` drains of each
  worker count, alternating, each after a VACUUM on PostgreSQL (``vacuum``
  says why). Each drain is paired with one of the baseline, right after it:
  the same drain from a table that holds nothing but its tasks, in a
  database of its own beside this one (its name and ``_base``, created
  where missing), and the ratio is that of their medians. (A baseline
  drained once at the start moved by a factor of two within one run on the
  development machine: the ratio to it said more of the machine than of
  the table.)
* **enqueue** (tasks/s): one ``enqueue_many()`` of 10,000 tasks, and 300
  single ``enqueue()`` calls, each its own commit;
* **claim** (ms): 200 claims of one task each with no worker running, p50
  and p99 (each then ended, untimed).

For **spec**: every surface (``--spec`` rows; skipped with 0): both admin
lists with and without each filter, their search, a task's page, a
"select all" action, the filter counts (the admin's page itself), the
search's terms and a bulk action's confirmation, the JSON API's list with
each filter (the search's terms too) and a second page, ``bgtasks list``,
``show``, ``workers`` and ``health``, the metrics and the readiness views:
each timed three times, the median and the slowest printed.

With ``--prune N``: N finished tasks 40 days old behind 200,000 ready ones of
the queue ``default``; four workers of ``--threads`` threads drain that queue
while ``bgtasks prune --days 30`` runs, and a probe claims one task of
another queue every 20 ms: its slowest claim during the prune against before
it, the prune's time, and the workers' rate during it against before.

    .venv-bench/bin/python benchmarks/scale.py --dsn postgres://postgres@127.0.0.1:5432/bgtasks_scale
    .venv-bench/bin/python benchmarks/scale.py --dsn mysql://root@127.0.0.1:3306/bgtasks_scale \\
        --backlogs 100000 1000000 --histories 100000 1000000 --spec 1000000 --prune 1000000

(``make bench-env`` builds .venv-bench. The database is emptied and
refilled, and left holding the last state: use one of its own; the
baseline's, beside it, likewise. The
workers' logs go to .tmp/scale-workers.log.)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

QUEUES, PATHS = 20, 500
TABLE = "django_bgtasks_queuedtask"
THROUGHPUT = str(HERE / "tasks_throughput.py")
PROBE_QUEUE = "probe"
WORKER_LOG = HERE.parent / ".tmp" / "scale-workers.log"

# --- the site --------------------------------------------------------------------------

# The database the functions below read and write ("default", the state's, or
# "base", the baseline's: ``on``), and each one's DSN, for its workers.
_ALIAS = "default"
DSNS: dict[str, str] = {}


@contextlib.contextmanager
def on(alias: str) -> Iterator[None]:
    """The functions below on the database ``alias``, meanwhile."""
    global _ALIAS
    before, _ALIAS = _ALIAS, alias
    try:
        yield
    finally:
        _ALIAS = before


def base_dsn(dsn: str) -> str:
    """The baseline's database beside ``dsn``'s: its name (or file) and ``_base``."""
    parts = urllib.parse.urlsplit(dsn)
    path = Path(parts.path)
    return urllib.parse.urlunsplit(parts._replace(path=str(path.with_stem(path.stem + "_base"))))


def _database(dsn: str) -> dict[str, Any]:
    import dj_database_url
    import tasks_throughput

    database: dict[str, Any] = dict(dj_database_url.parse(dsn))
    database["CONN_MAX_AGE"] = 600
    if "sqlite" in database["ENGINE"]:
        database["OPTIONS"] = tasks_throughput.SQLITE_OPTIONS
    elif "mysql" in database["ENGINE"]:
        database["OPTIONS"] = tasks_throughput.MYSQL_OPTIONS
    return database


def setup(dsn: str) -> None:
    """Django with the admin and the JSON API on ``dsn`` ("default"; the
    baseline's database as "base"), LeaseBackend under the aliases
    benchmarks/tasks_throughput.py's workers use."""
    import django
    from django.conf import settings

    DSNS.update(default=dsn, base=base_dsn(dsn))
    backend = {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": []}
    settings.configure(
        SECRET_KEY="django-bgtasks-scale",  # noqa: S106  (benchmark only)
        DEBUG=False,
        USE_TZ=True,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF="scale_site",
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django_bgtasks",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        STATIC_URL="/static/",
        DATABASES={alias: _database(each) for alias, each in DSNS.items()},
        TASKS={"default": backend, "bgtasks": backend},
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def vendor() -> str:
    from django.db import connections

    return str(connections[_ALIAS].vendor)


def execute(sql: str, params: Any = None) -> None:
    from django.db import connections

    with connections[_ALIAS].cursor() as cursor:
        cursor.execute(sql, params)


def fetch(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connections

    with connections[_ALIAS].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def migrate(dsn: str) -> None:
    """``dsn``'s database migrated as the workers' settings (tasks_throughput.py's,
    which have their own apps) see it."""
    command = [sys.executable, THROUGHPUT, "manage", dsn, "600", "migrate", "-v", "0"]
    subprocess.run(command, check=True, env={**os.environ, "BENCH_BACKENDS": "bgtasks"})


def migrate_base() -> None:
    """The baseline's database, created where missing, and migrated."""
    name = urllib.parse.urlsplit(DSNS["base"]).path.lstrip("/")
    if vendor() == "postgresql" and not fetch(
        "SELECT 1 FROM pg_database WHERE datname = %s", [name]
    ):
        execute(f'CREATE DATABASE "{name}"')
    elif vendor() == "mysql":
        execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    migrate(DSNS["base"])


# --- the table's states (SQL: the rows an enqueue and a drain leave) -------------------

COLUMNS = """uuid, task_path, backend, queue_name, priority, takes_context, args_kwargs,
    status, enqueued_at, started_at, finished_at, last_attempted_at, attempts, max_attempts,
    worker_ids, errors, return_value, owner, token, ttl, cancel_requested, unique_key"""

# Each vendor's INSERT of ``n`` rows numbered from ``first`` (``g``): what the
# rows hold is the same everywhere (``ROW`` below), in each one's dialect.
SERIES = {
    "postgresql": "SELECT {row} FROM generate_series(%(first)s::bigint, %(last)s::bigint) g",
    "mysql": """WITH RECURSIVE s(g) AS (SELECT %(first)s UNION ALL SELECT g + 1 FROM s
        WHERE g < %(last)s) SELECT {row} FROM s""",
    "sqlite": """WITH RECURSIVE s(g) AS (SELECT %(first)s UNION ALL SELECT g + 1 FROM s
        WHERE g < %(last)s) SELECT {row} FROM s""",
}
# A row: a finished one (SUCCESSFUL, or FAILED for one in nine) of one of
# the 500 task paths and 20 queues, finished %(age)s days ago; or a ready
# one, runnable by the bench's workers (its task path %(noop)s) or of those
# paths and queues (%(spread)s).
PIECES = {
    "postgresql": {
        "uuid": "gen_random_uuid()",
        "mod": "(g %% {n})",
        "cat": "{a} || {b}",
        "ago": "now() - %(age)s * interval '1 day' + g * interval '1 microsecond'",
        "json": "'{text}'::jsonb",
        "true": "true",
        "false": "false",
    },
    "mysql": {
        "uuid": "UUID()",
        "mod": "(g %% {n})",
        "cat": "CONCAT({a}, {b})",
        # (In microseconds: MySQL takes a DAY interval's fraction as a whole day.)
        "ago": "NOW(6) - INTERVAL ROUND(%(age)s * 86400000000) MICROSECOND"
        " + INTERVAL g MICROSECOND",
        "json": "'{text}'",
        "true": "1",
        "false": "0",
    },
    "sqlite": {
        "uuid": "lower(hex(randomblob(16)))",
        "mod": "(g %% {n})",
        "cat": "{a} || {b}",
        "ago": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || %(age)s || ' days')",
        "json": "'{text}'",
        "true": "1",
        "false": "0",
    },
}


def _row(name: str, *, ready: bool) -> str:
    p = PIECES[name]
    ago, json_ = p["ago"], p["json"]
    path = p["cat"].format(a="'app.tasks.task_'", b=p["mod"].format(n=PATHS))
    queue = p["cat"].format(a="'queue_'", b=p["mod"].format(n=QUEUES))
    if ready:
        status, finished, attempts, workers, errors, value, owner, token = (
            "'READY'", "NULL", "0", json_.format(text="[]"), json_.format(text="[]"),
            "NULL", "''", "0",
        )  # fmt: skip
        task = f"CASE WHEN %(spread)s THEN {path} ELSE %(noop)s END"
        queue = f"CASE WHEN %(spread)s THEN {queue} ELSE 'default' END"
        started = "NULL"
    else:
        failed = f"{p['mod'].format(n=9)} = 0"
        status = f"CASE WHEN {failed} THEN 'FAILED' ELSE 'SUCCESSFUL' END"
        finished = started = ago
        attempts, owner, token = "1", "'host:1:bench'", "1"
        workers = json_.format(text='["host:1:bench"]')
        error = json_.format(text='[{"traceback": "ValueError: bench"}]')
        errors = f"CASE WHEN {failed} THEN {error} ELSE {json_.format(text='[]')} END"
        value = f"CASE WHEN {failed} THEN NULL ELSE {json_.format(text='42')} END"
        task = path
    args = json_.format(text='{"args": [], "kwargs": {}}')
    return (
        f"{p['uuid']}, {task}, 'bgtasks', {queue}, 0, {p['false']}, {args}, {status}, {ago},"
        f" {started}, {finished}, {started}, {attempts}, 1, {workers}, {errors}, {value},"
        f" {owner}, {token}, 120, {p['false']}, ''"
    )


def insert(count: int, *, ready: bool, spread: bool = False, age: float = 2.0) -> None:
    """``count`` rows (``_row``), in statements of a million at most. The
    finished ones end ``age`` days ago, all within a few seconds: by default
    before the day the workers' rollup catches up on when it starts
    (queue/rollup.py), which would otherwise count millions of ends in one
    of its minutes, a minute no real queue has."""
    import throughput_tasks

    if count <= 0:
        return
    name = vendor()
    sql = f"INSERT INTO {TABLE} ({COLUMNS}) " + SERIES[name].format(row=_row(name, ready=ready))
    noop = throughput_tasks.NOOP["bgtasks"].module_path
    if name == "mysql":
        execute("SET SESSION max_recursive_iterations = 100000000")
    step = 1_000_000 if name == "postgresql" else 200_000
    for first in range(1, count + 1, step):
        last = min(first + step - 1, count)
        execute(sql, {"first": first, "last": last, "noop": noop, "spread": spread, "age": age})


def empty() -> None:
    """No Django Task, no flow slot, no pause and no rollup (untimed)."""
    for table in (TABLE, "django_bgtasks_flowslot", "django_bgtasks_pausedqueue",
                  "django_bgtasks_queuerollup"):  # fmt: skip
        execute(f"DELETE FROM {table}" if vendor() == "sqlite" else f"TRUNCATE TABLE {table}")


# --- what is measured -----------------------------------------------------------------


def workers(count: int, threads: int, queue: str | None = None) -> list[Any]:
    """``count`` worker processes of ``threads`` threads (every queue, or ``queue``)."""
    from django.db import connections

    command = [sys.executable, THROUGHPUT, "manage", DSNS[_ALIAS], "600", "bgtasks", "-v", "0",
               "worker", "--concurrency", str(threads), "--poll", "0.05"]  # fmt: skip
    if queue is not None:
        command += ["--queue", queue]
    env = {**os.environ, "BENCH_BACKENDS": "bgtasks"}
    connections.close_all()
    # Their logs apart from the figures: at each stop, a worker logs the
    # tasks claimed for threads that stopped before running them.
    WORKER_LOG.parent.mkdir(exist_ok=True)
    with WORKER_LOG.open("a") as log:
        return [
            subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
            )
            for _ in range(count)
        ]


def stop(processes: list[Any]) -> None:
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        process.wait()


def finished_since(since: Any, after: int) -> list[float]:
    """The ``finished_at`` of the tasks above ``seq`` ``after`` (the ready
    ones of the state) that succeeded after ``since`` (any, with ``None``),
    as Unix times, in order: a read of the status index from ``after`` (not
    of the million ready rows of the same task path)."""
    from django_bgtasks.models import QueuedTask

    # (Without the model's ordering, newest first: read in that order, from
    # the primary key, a poll stepped over the whole ready backlog, 10,000,000
    # rows, twice a second, which slowed the drain it timed.)
    rows = QueuedTask.objects.using(_ALIAS).filter(status="SUCCESSFUL", seq__gt=after)
    if since is not None:
        rows = rows.filter(finished_at__gt=since)
    ends = rows.order_by().values_list("finished_at", flat=True)
    return sorted(at.timestamp() for at in ends if at is not None)


def vacuum() -> None:
    """PostgreSQL: the dead rows of the drain before out of the table and its
    indexes (``INDEX_CLEANUP ON``: with few of them VACUUM would leave the
    indexes' alone), so that each drain measures the state, not the dead
    entries the one before left at the head of the ready rows' index, which
    a claim steps over (autovacuum removes them in time; where it is off, a
    long drain slows as they pile up: docs/operations.md). Nothing on
    MariaDB (InnoDB's purge removes them) and SQLite (no dead rows)."""
    if vendor() == "postgresql":
        execute(f"VACUUM (INDEX_CLEANUP ON) {TABLE}")


def drain(count: int, processes: int, threads: int, after: int) -> float:
    """Tasks a second, from the 1,000th of ``count`` finished to the last."""
    from django.db.models import Max

    from django_bgtasks.models import QueuedTask

    vacuum()
    # (The end of the drains before, by the database's clock and on either
    # database: the tasks this one times end after it.)
    since = (
        QueuedTask.objects.using(_ALIAS)
        .filter(status="SUCCESSFUL", seq__gt=after)
        .aggregate(last=Max("finished_at"))["last"]
    )
    running = workers(processes, threads)
    try:
        deadline = time.monotonic() + 600
        while len(done := finished_since(since, after)) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"the drain did not finish {count} tasks in 10 minutes")
            time.sleep(0.5)
    finally:
        stop(running)
    window = done[1000:count]
    return (len(window) - 1) / (window[-1] - window[0])


def enqueue_rates() -> tuple[float, float]:
    """(enqueue_many of 10,000, single enqueue()) in tasks a second."""
    import throughput_tasks
    from django.db import transaction

    noop = throughput_tasks.NOOP["bgtasks"]
    started = time.perf_counter()
    with transaction.atomic():
        noop.get_backend().enqueue_many(noop, [((), {})] * 10_000)
    bulk = 10_000 / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(300):
        noop.enqueue()
    return bulk, 300 / (time.perf_counter() - started)


def claim_latency() -> tuple[float, float]:
    """(p50, p99) ms of 200 claims of one task, each then ended."""
    from django_bgtasks.models import QueuedTask

    times = []
    for _ in range(200):
        started = time.perf_counter()
        [claim] = QueuedTask.objects.claim_many("bench:claim", queues=None, limit=1)
        times.append((time.perf_counter() - started) * 1000)
        QueuedTask.objects.finish(claim, status="SUCCESSFUL")
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def surfaces() -> dict[str, tuple[float, float]]:
    """Every operator surface on the table as it is: (median, slowest) s of 3."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from django_bgtasks.models import QueuedTask
    from django_bgtasks.operations.queued import of_status

    user = User.objects.filter(username="bench").first()
    if user is None:
        user = User.objects.create_superuser("bench", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    some = QueuedTask.objects.order_by("-seq").values_list("uuid", flat=True)[5000]
    admin, api = "/admin/django_bgtasks/queuedtask/", "/bgtasks/django-tasks/"
    gets = {
        "admin: background tasks": "/admin/django_bgtasks/backgroundtask/",
        "admin: Django tasks": admin,
        **{f"admin: status {s}": f"{admin}?status__exact={s}"
           for s in ("READY", "RUNNING", "SUCCESSFUL", "FAILED")},
        "admin: queue": f"{admin}?queue_name=queue_3",
        "admin: backend": f"{admin}?backend=bgtasks",
        "admin: queue and status": f"{admin}?queue_name=queue_3&status__exact=FAILED",
        "admin: page 50": f"{admin}?p=49",
        "admin: search a path": f"{admin}?q=task_77",
        "admin: search an id": f"{admin}?q={some}",
        "admin: search, nothing": f"{admin}?q=no-such-task",
        "admin: a task's page": f"{admin}{some}/change/",
        # The search's terms (issue 51), each where no index has it: a term
        # that matches none reads the search's whole budget of rows.
        "admin: term, none match": f"{admin}?q=args%3A%7B%22x%22%3A1%7D",
        "admin: term and status": f"{admin}?status__exact=FAILED&q=error%3Abench",
        "admin: will retry": f"{admin}?status__exact=RETRYING",
        "admin: bulk confirmation": f"{admin}bulk/retry/?status__exact=FAILED",
        "admin: bulk confirmation, term": f"{admin}bulk/cancel/?q=args%3A%7B%22x%22%3A1%7D",
        "API: list": api,
        **{f"API: {n}": f"{api}?{q}" for n, q in (
            ("status", "status=FAILED"), ("ready", "status=READY"), ("queue", "queue=queue_3"),
            ("task", "task=app.tasks.task_77"), ("backend", "backend=bgtasks"),
            ("limit 500", "limit=500"),
            ("task and status", "task=app.tasks.task_77&status=FAILED"),
            ("args, none match", "args=%7B%22x%22%3A1%7D"),
            ("error and status", "error=bench&status=FAILED"),
            ("since 1h", "since=1h"),
        )},
        "API: a task": f"{api}{some}/",
        "metrics": "/bgtasks/metrics/",
        "readiness": "/bgtasks/ready/",
        # The dashboard (issue 51), on a full day of the rollup (rollup_day()).
        "admin: dashboard": f"{admin}dashboard/",
        "admin: dashboard, day": f"{admin}dashboard/?window=day",
        "admin: dashboard, a queue's day": f"{admin}dashboard/?window=day&queue=queue_3",
        "admin: dashboard, a task's day": f"{admin}dashboard/?window=day&task=app.tasks.task_77",
    }  # fmt: skip
    second = client.get(f"{api}?status=SUCCESSFUL").json()["next"]
    gets["API: second page"] = second

    def page(url: str) -> Callable[[], None]:
        def get() -> None:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return get

    def command(*args: str) -> Callable[[], None]:
        return lambda: call_command("bgtasks", *args, stdout=io.StringIO())

    # A ready task to tick, read once, untimed (and from the ready rows' own
    # index: ``of_status``; read newest first from another, it took 1.7 s of
    # the first run's 2.1 s "select all").
    [ready] = of_status(QueuedTask.objects.all(), "READY").values_list("uuid", flat=True)[:1]

    def select_all() -> None:
        response = client.post(
            f"{admin}?status__exact=READY",
            {"action": "cancel", "select_across": "1", "_selected_action": [str(ready)]},
        )
        assert response.status_code == 302, response.status_code

    reads: dict[str, Callable[[], None]] = {name: page(url) for name, url in gets.items()}
    reads.update({
        "admin: select all, cancel": select_all,
        "bgtasks list": command("list"),
        "bgtasks list --args": command("list", "--args", '{"x": 1}'),
        "bgtasks show": command("show", str(some)),
        "bgtasks workers": command("workers"),
        "bgtasks health": command("health"),
    })  # fmt: skip
    timed = {}
    for name, read in reads.items():
        times = []
        for _ in range(3):
            started = time.perf_counter()
            read()
            times.append(time.perf_counter() - started)
        timed[name] = (statistics.median(times), max(times))
    return timed


# --- the dashboard's rollup -------------------------------------------------------------


def rollup_day() -> int:
    """The rollup as the workers leave it after a day in which every one of
    the 20 queues and 500 task paths ended tasks every minute (the most rows
    a day can have at this shape): a row a minute for the cluster, each
    queue and each path, and a row an hour likewise. Written straight (the
    rows a roll writes are tests/queue/test_rollup.py's). Answers the rows."""
    import datetime as dt

    from django_bgtasks.models import BackgroundTask, QueueRollup
    from django_bgtasks.queue import rollup

    table = QueueRollup.objects.all()
    table.delete()
    end = rollup.floor(BackgroundTask.objects.work.clock() - rollup.SETTLE, 60)
    scopes = [("", "")] + [(f"queue_{q}", "") for q in range(QUEUES)]
    scopes += [("", f"app.tasks.task_{p}") for p in range(PATHS)]
    times = [0] * 5 + [30, 50, 15, 4, 1] + [0] * (rollup.BUCKETS - 10)
    written = 0
    for span, count in ((60, 24 * 60), (3600, 24)):
        for back in range(1, count + 1):
            start = rollup.floor(end, span) - dt.timedelta(seconds=span * back)
            rows = [
                QueueRollup(span=span, start=start, queue_name=queue, task_path=path,
                            succeeded=90, failed=10, run_times=times,
                            lag=2.0 if span == 60 and not path else None)
                for queue, path in scopes
            ]  # fmt: skip
            table.bulk_create(rows, batch_size=1000)
            written += len(rows)
    return written


def roll_costs(per_minute: int) -> dict[str, float]:
    """Seconds a roll takes on the table as it is: one minute in which
    ``per_minute`` tasks ended (as a worker rolls each minute), and ten such
    minutes (a catch-up's call). The ends are inserted untimed, each
    minute's in one statement (spread over 20 queues and 500 paths)."""
    import datetime as dt

    from django_bgtasks.models import BackgroundTask
    from django_bgtasks.queue import rollup

    now = BackgroundTask.objects.work.clock()
    last = rollup.floor(now - rollup.SETTLE, 60) - dt.timedelta(minutes=1)
    minutes = [last - dt.timedelta(minutes=back) for back in range(10)]
    for minute in minutes:
        age = (now - (minute + dt.timedelta(seconds=20))).total_seconds() / 86400
        insert(per_minute, ready=False, age=age)
    costs = {}
    for name, first in (("one minute", last), ("ten minutes", minutes[-1])):
        started = time.perf_counter()
        rollup.recount(first, last + dt.timedelta(minutes=1))
        costs[name] = time.perf_counter() - started
    return costs


# --- bgtasks prune beside a drain ------------------------------------------------------


def prune_beside_a_drain(history: int, threads: int) -> dict[str, Any]:
    """See the module docstring (``--prune``)."""
    import throughput_tasks

    from django_bgtasks.models import BackgroundTask, QueuedTask
    from django_bgtasks.operations.prune import Pruned, prune

    empty()
    insert(history, ready=False, age=40)
    insert(200_000, ready=True)
    noop = throughput_tasks.NOOP["bgtasks"].using(queue_name=PROBE_QUEUE)
    noop.get_backend().enqueue_many(noop, [((), {})] * 20_000)
    claims: list[tuple[float, float]] = []  # (when, ms)
    stopping = threading.Event()

    def probe() -> None:
        from django.db import connection

        try:
            while not stopping.is_set():
                started = time.perf_counter()
                [claim] = QueuedTask.objects.claim_many(
                    "bench:probe", queues=[PROBE_QUEUE], limit=1
                )
                claims.append((time.monotonic(), (time.perf_counter() - started) * 1000))
                QueuedTask.objects.finish(claim, status="SUCCESSFUL")
                time.sleep(0.02)
        finally:
            connection.close()

    since = BackgroundTask.objects.work.clock()
    running = workers(4, threads, queue="default")
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        time.sleep(8)
        began = time.monotonic()
        result = prune(30)
        assert isinstance(result, Pruned)
        ended = time.monotonic()
        time.sleep(3)
    finally:
        stopping.set()
        prober.join()
        stop(running)
    done = finished_since(since, history)
    offset = time.time() - time.monotonic()

    def rate(start: float, end: float) -> float:
        inside = [at for at in done if start + offset <= at <= end + offset]
        return len(inside) / (end - start) if end > start else 0.0

    before = [ms for at, ms in claims if at < began]
    pruning = [(ms, at - began) for at, ms in claims if began <= at <= ended]
    during = [ms for ms, _into in pruning]
    # The slowest claims during the prune, and when (seconds into it), to
    # lay beside the server's log of its checkpoints and autovacuum runs.
    slowest = sorted(pruning, reverse=True)
    return {
        "claims_over_100ms": float(sum(ms > 100 for ms in during)),
        "claims_during": float(len(during)),
        "slowest_claims": [(round(at, 1), round(ms)) for ms, at in slowest[:8]],
        "deleted": float(result.queued),
        "prune_s": ended - began,
        "claim_max_ms_before": max(before),
        "claim_p99_ms_before": sorted(before)[int(len(before) * 0.99) - 1],
        "claim_max_ms_during": max(during),
        "claim_p99_ms_during": sorted(during)[int(len(during) * 0.99) - 1],
        "drain_before": rate(began - 6, began),
        "drain_during": rate(began, ended),
    }


# --- the run ----------------------------------------------------------------------------


def describe() -> str:
    """The server, and whether autovacuum runs there."""
    name = vendor()
    if name == "postgresql":
        [(version, autovacuum)] = fetch("SELECT version(), current_setting('autovacuum')")
        return f"{version.split(' on ')[0]}, autovacuum {autovacuum}"
    if name == "mysql":
        [(version,)] = fetch("SELECT VERSION()")
        return f"MariaDB/MySQL {version}"
    [(version,)] = fetch("SELECT sqlite_version()")
    return f"SQLite {version}"


def state(name: str, args: argparse.Namespace) -> int:
    """Build the table state ``name`` ("empty", "backlog N", "history N"):
    the ``seq`` its ready tasks come after."""
    empty()
    kind, _, size = name.partition(" ")
    if kind == "history":
        insert(int(size), ready=False)
    [(after,)] = fetch(f"SELECT COALESCE(MAX(seq), 0) FROM {TABLE}")
    # (Each drain takes its tasks and a few more, till its workers stop: one
    # drain's worth to spare.)
    drains = args.rounds * len(args.workers) + 1
    insert(int(size) if kind == "backlog" else args.drain * drains, ready=True)
    return int(after)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a database of its own: it is emptied")
    parser.add_argument("--backlogs", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument(
        "--histories", type=int, nargs="*", default=[100_000, 1_000_000, 10_000_000]
    )
    parser.add_argument(
        "--spec", type=int, default=10_000_000, help="rows of the spec state (0: none)"
    )
    parser.add_argument(
        "--roll-minute",
        type=int,
        default=60_000,
        help="ends a minute, for the spec's rollup costs (60,000: 1,000 tasks/s)",
    )
    parser.add_argument("--prune", type=int, default=0, help="finished rows to prune (0: no run)")
    parser.add_argument("--drain", type=int, default=20_000, help="tasks a drain times")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="drains of each worker count")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    if args.drain <= 1000 or any(n < 1 for n in args.workers):
        parser.error("--drain must be more than 1000 (the first 1,000 are the workers' start)")
    migrate(args.dsn)
    setup(args.dsn)
    names = [f"backlog {n}" for n in args.backlogs] + [f"history {n}" for n in args.histories]
    if names:
        migrate_base()
    print(f"=== {describe()}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
    report: dict[str, Any] = {"server": describe(), "states": {}}
    if names:
        print(f"{'state':<18}"
              + "".join(f"{f'drain {w}w':>11}{'empty':>8}{'ratio':>7}" for w in args.workers)
              + f"{'bulk/s':>9}{'single/s':>9}{'claim p50':>10}{'p99 ms':>8}")  # fmt: skip
    for name in names:
        started = time.monotonic()
        after = state(name, args)
        built = time.monotonic() - started
        with on("base"):
            base_after = state("empty", args)
        rounds: dict[int, list[float]] = {count: [] for count in args.workers}
        bases: dict[int, list[float]] = {count: [] for count in args.workers}
        backlog = int(name.split()[1]) if name.startswith("backlog") else 0
        for number in range(args.rounds):
            # (The order turns each round: drift hits every worker count alike.)
            turn = number % len(args.workers)
            for count in args.workers[turn:] + args.workers[:turn]:
                if backlog and backlog < args.drain * (args.rounds * len(args.workers) + 1):
                    after = state(name, args)  # a small backlog is drained anew for each
                size = min(args.drain, backlog or args.drain)
                rounds[count].append(drain(size, count, args.threads, after))
                with on("base"):
                    bases[count].append(drain(size, count, args.threads, base_after))
        rates = {count: statistics.median(each) for count, each in rounds.items()}
        base = {count: statistics.median(each) for count, each in bases.items()}
        bulk, single = enqueue_rates()
        p50, p99 = claim_latency()
        figures = "".join(
            f"{rates[w]:>11,.0f}{base[w]:>8,.0f}{rates[w] / base[w]:>7.2f}" for w in args.workers
        )
        print(f"{name:<18}{figures}{bulk:>9,.0f}{single:>9,.0f}{p50:>10.2f}{p99:>8.2f}"
              f"   (built in {built:.0f} s)", flush=True)  # fmt: skip
        report["states"][name] = {
            "drain": rates,
            "rounds": rounds,
            "empty": base,
            "empty_rounds": bases,
            "bulk": bulk,
            "single": single,
            "claim_p50": p50,
            "claim_p99": p99,
        }
    if args.spec:
        empty()
        started = time.monotonic()
        tenth = args.spec // 10
        insert(args.spec - tenth, ready=False)
        insert(tenth, ready=True, spread=True)
        rolled = rollup_day()
        print(f"\nspec: {args.spec:,} rows, and {rolled:,} of the dashboard's rollup, built in"
              f" {time.monotonic() - started:.0f} s;"
              " each surface three times, median and slowest, seconds")  # fmt: skip
        timed = surfaces()
        for surface, (median, slowest) in timed.items():
            print(f"  {surface:<36}{median:>8.3f}{slowest:>8.3f}")
        worst = max(timed.items(), key=lambda item: item[1][1])
        print(f"  the slowest: {worst[0]}, {worst[1][1]:.3f} s")
        report["surfaces"] = timed
        costs = roll_costs(args.roll_minute)
        print(f"  the rollup, {args.roll_minute:,} ends a minute: a minute rolled up in"
              f" {costs['one minute']:.3f} s, ten (a catch-up's call) in"
              f" {costs['ten minutes']:.3f} s")  # fmt: skip
        report["rollup"] = costs
    if args.prune:
        pruned = prune_beside_a_drain(args.prune, args.threads)
        print(f"\nprune of {pruned['deleted']:,.0f} finished tasks beside a drain of 4 workers:"
              f" {pruned['prune_s']:.1f} s; a probe's slowest claim"
              f" {pruned['claim_max_ms_before']:.1f} ms before"
              f" (p99 {pruned['claim_p99_ms_before']:.1f}),"
              f" {pruned['claim_max_ms_during']:.1f} ms during"
              f" (p99 {pruned['claim_p99_ms_during']:.1f}); the workers"
              f" {pruned['drain_before']:,.0f} tasks/s before, {pruned['drain_during']:,.0f}"
              " during")  # fmt: skip
        print(f"  claims over 100 ms: {pruned['claims_over_100ms']:.0f} of"
              f" {pruned['claims_during']:.0f} during the prune; the slowest, as"
              f" (s into the prune, ms): {pruned['slowest_claims']}")  # fmt: skip
        report["prune"] = pruned
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
