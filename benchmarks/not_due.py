"""Tasks that are not due, ahead in the claim's order: what they cost a
claim and an idle poll, beside the same with none ahead, on one database, in
one run (issue 49; docs/operations.md, "What stays fast").

The claim takes ready tasks by priority, then enqueue order (``seq``), and
asks each whether it is due (``run_after``) as it reads it. Tasks scheduled
for later keep their place in that order, and so do retries waiting out
their delay; a backlog of them ahead of the due ones is read by every claim.

The table, built once and untimed (``enqueue_many()``): queue ``behind``
holds ``--waiting`` tasks due tomorrow, then ``--ready`` due now; queue
``clear`` holds ``--ready`` due now, enqueued last. On PostgreSQL the table
is ``VACUUM ANALYZE``-d empty first and not after (stale statistics, as
autovacuum leaves them for a minute after a big import, or always with it
off). Each round, in alternating order, for each queue: the median of 5
claims of 8 (``claim_many()``, each put back ``READY`` after) and of 5 idle
polls (``any_ready()``), in ms; printed with the ratio behind / clear.

    .venv-bench/bin/python benchmarks/not_due.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_notdue
    .venv-bench/bin/python benchmarks/not_due.py \\
        --dsn mysql://root@127.0.0.1:3306/bgtasks_notdue
    .venv-bench/bin/python benchmarks/not_due.py --dsn sqlite:////tmp/bgtasks_notdue.sqlite3

(``make bench-env`` builds .venv-bench; a server's database must exist. It
is emptied: use one of its own.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
QUEUES = ("clear", "behind")
FIGURES = ("claim_ms", "poll_ms")


def _django(dsn: str) -> None:
    """Django on ``dsn`` with this tree's django_bgtasks, every queue name
    allowed, Django's defaults otherwise (the engines' options as
    benchmarks/tasks_throughput.py sets them)."""
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    import dj_database_url
    import django
    import tasks_throughput
    from django.conf import settings

    database: dict[str, Any] = dict(dj_database_url.parse(dsn))
    if "sqlite" in database["ENGINE"]:
        database["OPTIONS"] = tasks_throughput.SQLITE_OPTIONS
    elif "mysql" in database["ENGINE"]:
        database["OPTIONS"] = tasks_throughput.MYSQL_OPTIONS
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={"default": database},
        USE_TZ=True,
        TASKS={"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": []}},
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()


def build(waiting: int, ready: int) -> None:
    """The table (untimed): the module's docstring."""
    import fairness_tasks
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from django_bgtasks.models import QueuedTask

    call_command("migrate", verbosity=0)
    QueuedTask.objects.all().delete()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {QueuedTask._meta.db_table}")
    tomorrow = timezone.now() + timedelta(days=1)
    for queue, count, run_after in (
        ("behind", waiting, tomorrow),
        ("behind", ready, None),
        ("clear", ready, None),
    ):
        task = fairness_tasks.plain.using(queue_name=queue, run_after=run_after)
        for first in range(0, count, 10_000):
            rows = [((n,), {}) for n in range(first, min(count, first + 10_000))]
            task.get_backend().enqueue_many(task, rows)


def _median_ms(work: Callable[[], Any], after: Callable[[Any], None]) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        done = work()
        times.append((time.perf_counter() - start) * 1000)
        after(done)
    return statistics.median(times)


def measure(queue: str) -> dict[str, float]:
    """A claim of 8 and an idle poll of ``queue``, medians of 5, in ms."""
    from django_bgtasks.models import QueuedTask

    def put_back(claimed: list[Any]) -> None:
        assert len(claimed) == 8, f"a claim of {queue} took {len(claimed)}, not 8"
        QueuedTask.objects.filter(seq__in=[claim.seq for claim in claimed]).update(
            status="READY", owner="", started_at=None, attempts=0
        )

    def found(ready: bool) -> None:
        assert ready, f"the idle poll of {queue} found nothing"

    return {
        "claim_ms": _median_ms(
            lambda: QueuedTask.objects.claim_many("bench", queues=[queue], limit=8), put_back
        ),
        "poll_ms": _median_ms(lambda: QueuedTask.objects.any_ready(queues=[queue]), found),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a database of its own: it is emptied")
    parser.add_argument("--waiting", type=int, default=100_000, help="tasks due tomorrow")
    parser.add_argument("--ready", type=int, default=10_000, help="tasks due now, each queue")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not args.dsn.startswith(("postgres://", "postgresql://", "mysql://", "sqlite://")):
        parser.error("--dsn must be a PostgreSQL, MySQL/MariaDB or SQLite database")
    if args.ready < 50:
        parser.error(f"--ready must be at least 50 (five claims of 8 and more), not {args.ready}")
    if args.waiting < 0 or args.rounds < 1:
        parser.error("--waiting must be 0 or more, and --rounds 1 or more")
    _django(args.dsn)
    from django.db import connection

    build(args.waiting, args.ready)
    found: dict[str, list[dict[str, float]]] = {queue: [] for queue in QUEUES}
    for round_ in range(args.rounds):
        for queue in QUEUES if round_ % 2 == 0 else reversed(QUEUES):
            figures = measure(queue)
            found[queue].append(figures)
            print(f"round {round_ + 1} {queue:>6}: " + "  ".join(
                f"{name} {value:8.3f}" for name, value in figures.items()
            ), flush=True)  # fmt: skip
    print(
        f"\n{connection.vendor}: {args.waiting:,} tasks due tomorrow ahead of {args.ready:,}"
        f" due now (behind), against {args.ready:,} due now alone (clear); medians"
    )
    print(f"{'queue':<8}" + "".join(f"{name:>12}" for name in FIGURES))
    medians = {
        queue: {name: statistics.median(r[name] for r in rounds) for name in FIGURES}
        for queue, rounds in found.items()
    }
    for queue in QUEUES:
        print(f"{queue:<8}" + "".join(f"{medians[queue][name]:12.3f}" for name in FIGURES))
    print(f"{'ratio':<8}" + "".join(
        f"{medians['behind'][name] / medians['clear'][name]:12.2f}" for name in FIGURES
    ))  # fmt: skip


if __name__ == "__main__":
    main()
