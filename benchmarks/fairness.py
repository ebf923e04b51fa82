"""Fair shares (issue 53), measured with real workers (``bgtasks worker``
processes) on one database, each figure beside its comparison in the same
run:

* **interleave**: tenant A enqueues ``--backlog`` tasks of ``--seconds``
  (20,000 of 5 ms), one worker of 4 threads starts on them, and a second
  later tenants B and C enqueue 20 each. Printed: how many of A's tasks
  started between B's enqueue and the last start of B's and C's (the
  issue's target: under 200), for tasks keyed by tenant and, beside them,
  the same tasks without a key (where B and C wait for A's backlog).
* **weights**: tenants 1 (weight 3) and 2 (weight 1) each enqueue
  ``--backlog`` tasks of ``--seconds``; one worker of 4 threads. Printed:
  each 10-second window's starts of the two while both had work (from the
  later of their first starts; ``--windows`` of them), and their ratio (the
  target: within 10 % of 3:1).
* **enqueue** (PostgreSQL): what migration 0028 costs ``enqueue_many()``
  of ``--tasks`` tasks without a key, against the table without its index
  and trigger (dropped and made again between rounds).
* **drains**: ``--tasks`` tasks that do nothing, drained by ``--workers``
  processes of ``--concurrency`` threads, from the commit of their bulk
  enqueue to the last ``finished_at``: without a key, all of one key (a
  lone tenant), and spread over three keys, in alternating rounds; printed
  with each one's ratio to the tasks without a key (targets: a lone key
  >= 0.9x, three keys >= 0.8x). Also each side's ``enqueue_many()`` rate.

Each scenario starts from an empty queue table (``DELETE``, then ``VACUUM``
on PostgreSQL unless ``--no-vacuum``: the machine's PostgreSQL runs without
autovacuum). The statistics are left as they are: stale, as a bulk
enqueue's are until the next ANALYZE.

    .venv/bin/python benchmarks/fairness.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_fair
    # or --dsn mysql://root@127.0.0.1:3306/bgtasks_fair, --dsn sqlite:///.tmp/fair.sqlite3

The database must exist (a PostgreSQL or MariaDB one of its own: it is
emptied); it is migrated first.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

# The connection options the other benchmarks give each engine.
from tasks_throughput import MYSQL_OPTIONS, SQLITE_OPTIONS  # noqa: E402


def setup_django(dsn: str) -> None:
    """Settings of one LeaseBackend on the database ``dsn``, Django's defaults
    otherwise (``CONN_MAX_AGE`` 0)."""
    import dj_database_url
    import django
    from django.conf import settings

    database = dict(dj_database_url.parse(dsn))
    if "sqlite" in database["ENGINE"]:
        database["OPTIONS"] = SQLITE_OPTIONS
    elif "mysql" in database["ENGINE"]:
        database["OPTIONS"] = MYSQL_OPTIONS
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={"default": database},
        USE_TZ=True,
        TASKS={"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"}},
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @contextmanager
    def workers(self, count: int, threads: int) -> Iterator[None]:
        """``count`` worker processes of ``threads`` threads, stopped (SIGTERM)
        at the end; given a second to start before the caller goes on."""
        command = [sys.executable, __file__, "manage", self.args.dsn, "bgtasks", "worker"]
        command += ["--concurrency", str(threads), "--poll", "0.05"]
        log = open(self.args.log, "ab")  # noqa: SIM115 (closed below)
        processes = [subprocess.Popen(command, stderr=log) for _ in range(count)]
        try:
            time.sleep(self.args.settle)
            yield
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.wait(60)
            log.close()

    def clear(self) -> None:
        from django.db import connection

        from django_bgtasks.models import FairShare, QueuedTask

        QueuedTask.objects.all().delete()
        FairShare.objects.all().delete()
        if connection.vendor == "postgresql" and not self.args.no_vacuum:
            with connection.cursor() as cursor:
                for model in (QueuedTask, FairShare):
                    cursor.execute(f"VACUUM {model._meta.db_table}")

    @staticmethod
    def enqueue(declared: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> float:
        """Enqueues ``calls`` in one ``enqueue_many()`` and its commit; its tasks/s."""
        from django.db import transaction

        started = time.perf_counter()
        with transaction.atomic():
            declared.get_backend().enqueue_many(declared, calls)
        return len(calls) / (time.perf_counter() - started)

    @staticmethod
    def wait_for(done: Any, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not finish in time")
            time.sleep(0.1)

    def interleave(self, declared: Any) -> int:
        """A's starts between B's enqueue and the last start of B's and C's."""
        from django.db.models import Max

        from django_bgtasks.models import QueuedTask

        self.clear()
        seconds = self.args.seconds
        with self.workers(1, 4):
            self.enqueue(declared, [((0, seconds), {})] * self.args.backlog)
            time.sleep(1)
            self.enqueue(declared, [((1, seconds), {})] * 20)
            self.enqueue(declared, [((2, seconds), {})] * 20)
            late = QueuedTask.objects.filter(args_kwargs__args__0__in=[1, 2])
            self.wait_for(lambda: not late.exclude(status="SUCCESSFUL").exists())
        b_enqueued = late.order_by("seq").values_list("enqueued_at", flat=True)[0]
        last = late.aggregate(last=Max("started_at"))["last"]
        return (
            QueuedTask.objects.filter(args_kwargs__args__0=0)
            .filter(started_at__gt=b_enqueued, started_at__lte=last)
            .count()
        )

    def weights(self) -> list[tuple[int, int]]:
        """Each 10 s window's starts of tenant 1 (weight 3) and tenant 2."""
        import fairness_tasks

        from django_bgtasks.models import QueuedTask

        self.clear()
        declared, seconds = fairness_tasks.weighted, self.args.seconds
        with self.workers(1, 4):
            self.enqueue(declared, [((1, seconds), {})] * self.args.backlog)
            self.enqueue(declared, [((2, seconds), {})] * self.args.backlog)
            rows = QueuedTask.objects.all()
            # Both busy for --window-rounds windows of 10 s, or until one runs out.
            until = time.monotonic() + 10 * self.args.windows + 5
            self.wait_for(
                lambda: (
                    time.monotonic() > until
                    or not rows.filter(args_kwargs__args__0=2, status="READY").exists()
                    or not rows.filter(args_kwargs__args__0=1, status="READY").exists()
                )
            )
        starts = list(
            rows.exclude(started_at=None)
            .order_by("started_at", "seq")
            .values_list("started_at", "args_kwargs")
        )
        ends = {
            tenant: max(at for at, call in starts if call["args"][0] == tenant)
            for tenant in (1, 2)
        }
        busy_until = min(ends.values())
        # From when both have started (the worker may start tenant 1's, alone,
        # before tenant 2's enqueue commits).
        first = max(
            min(at for at, call in starts if call["args"][0] == tenant) for tenant in (1, 2)
        )
        windows: dict[int, list[int]] = {}
        for at, call in starts:
            if at > busy_until:
                break
            if at < first:
                continue
            window = windows.setdefault(int((at - first).total_seconds() // 10), [0, 0])
            window[call["args"][0] - 1] += 1
        # Only whole windows: the last is cut short by the end.
        return [tuple(counts) for number, counts in sorted(windows.items())][:-1]  # type: ignore[misc]

    def drain(self, declared: Any, keys: int, workers: int, threads: int) -> tuple[float, float]:
        """(drain tasks/s, enqueue_many tasks/s) of ``--tasks`` no-op tasks
        spread over ``keys`` tenants in turn."""
        from django.db.models import Max

        from django_bgtasks.models import QueuedTask

        self.clear()
        calls = [((n % keys, 0.0), {}) for n in range(self.args.tasks)]
        with self.workers(workers, threads):
            committed = time.time()
            enqueue_rate = self.enqueue(declared, calls)
            done = QueuedTask.objects.exclude(status="SUCCESSFUL")
            self.wait_for(lambda: not done.exists())
        last = QueuedTask.objects.aggregate(last=Max("finished_at"))["last"].timestamp()
        return self.args.tasks / (last - committed), enqueue_rate


def enqueue_cost(bench: Bench, args: argparse.Namespace) -> None:
    """PostgreSQL: what migration 0028 costs an ``enqueue_many()`` of tasks
    without a key (its index of the ready tasks without one, and its trigger
    once a statement), against the same table without them, in alternating
    rounds: the index and trigger are dropped and made again between."""
    import fairness_tasks
    from django.db import connection

    from django_bgtasks.db.postgresql import schema

    steps = schema.SCHEMA["0028_fair_shares"]
    unkeyed = [step for step in steps.forwards if "bgtasks_queued_unkeyed" in step]
    trigger = [step for step in steps.forwards if "fair_shares_made" in step]
    drop = [
        "DROP INDEX IF EXISTS bgtasks_queued_unkeyed",
        "DROP TRIGGER IF EXISTS bgtasks_fair_shares_made ON django_bgtasks_queuedtask",
    ]
    rates: dict[str, list[float]] = {"without 0028's index and trigger": [], "with them": []}
    calls = [((n, 0.0), {}) for n in range(args.tasks)]
    try:
        for number in range(args.rounds):
            for side in list(rates) if number % 2 == 0 else list(rates)[::-1]:
                bench.clear()
                with connection.cursor() as cursor:
                    for statement in drop if side.startswith("without") else unkeyed + trigger:
                        cursor.execute(statement)
                rates[side].append(bench.enqueue(fairness_tasks.plain, calls))
    finally:
        with connection.cursor() as cursor:
            for statement in unkeyed + trigger:
                cursor.execute(statement)
    base = statistics.median(rates["without 0028's index and trigger"])
    for side, figures in rates.items():
        rate = statistics.median(figures)
        print(
            f"enqueue_many({args.tasks:,}) without a key, {side}: {rate:,.0f} tasks/s"
            f" ({rate / base:.3f}x), rounds {[round(f) for f in figures]}",
            flush=True,
        )


def run(args: argparse.Namespace) -> None:
    setup_django(args.dsn)
    import fairness_tasks
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    bench = Bench(args)
    print(f"{connection.vendor} ({args.dsn}), {args.rounds} rounds", flush=True)
    if "interleave" in args.scenarios:
        for name in ("keyed", "plain"):
            counts = [bench.interleave(getattr(fairness_tasks, name)) for _ in range(args.rounds)]
            print(
                f"interleave, {name}: A's starts while B's and C's waited: {counts}"
                f" (median {statistics.median(counts):.0f}; target < 200 for keyed)",
                flush=True,
            )
    if "weights" in args.scenarios:
        for number in range(args.rounds):
            windows = bench.weights()
            ratios = [f"{one / two:.2f}" for one, two in windows if two]
            print(
                f"weights 3:1, round {number + 1}: windows {windows}, ratios {ratios}", flush=True
            )
    if "enqueue" in args.scenarios and connection.vendor == "postgresql":
        enqueue_cost(bench, args)
    if "drains" in args.scenarios:
        sides = {
            "no key": (fairness_tasks.plain, 1),
            "one key": (fairness_tasks.keyed, 1),
            "three keys": (fairness_tasks.keyed, 3),
        }
        for workers in args.workers:
            figures: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
            for number in range(args.rounds):
                order = list(sides)[number % 3 :] + list(sides)[: number % 3]
                for side in order:
                    declared, keys = sides[side]
                    figures[side].append(bench.drain(declared, keys, workers, args.concurrency))
            base = statistics.median(rate for rate, _ in figures["no key"])
            base_enqueue = statistics.median(rate for _, rate in figures["no key"])
            for side, rounds in figures.items():
                rate = statistics.median(r for r, _ in rounds)
                enqueue_rate = statistics.median(e for _, e in rounds)
                print(
                    f"drain, {workers} worker(s) x {args.concurrency} threads, {side}:"
                    f" {rate:,.0f} tasks/s ({rate / base:.3f}x), rounds"
                    f" {[round(r) for r, _ in rounds]}; enqueue_many {enqueue_rate:,.0f}"
                    f" tasks/s ({enqueue_rate / base_enqueue:.3f}x)",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument(
        "--scenarios", nargs="+", default=["interleave", "weights", "enqueue", "drains"]
    )
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=0.005)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--windows", type=int, default=4, help="10 s windows of the weights")
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--no-vacuum", action="store_true")
    parser.add_argument("--log", default=".tmp/fairness-workers.log", help="the workers' stderr")
    run(parser.parse_args())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "manage":
        setup_django(sys.argv[2])
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", *sys.argv[3:]])
    else:
        main()
