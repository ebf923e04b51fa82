"""The queue's indexes on PostgreSQL before migration 0017 and after it: the
plain status-led indexes against the partial ones, in alternating rounds of
one run on one database.

Each round migrates ``django_bgtasks`` to one side (``0016_trace_context``,
then ``0017_postgresql_partial_queue_indexes``, the order turning each
round), empties and vacuums the queue table, starts ``--workers`` worker
processes of ``--concurrency`` threads (``bgtasks worker``, as
benchmarks/tasks_throughput.py starts them), enqueues ``--tasks`` no-op
tasks in one transaction with the table's statistics (``ANALYZE``), and
times the drain from that commit to the last ``finished_at``. For each
round it prints the drain rate and where the drain's time went, a task
(tasks_rounds.Spend): CPU of the workers and of the database server, the
commits and WAL bytes PostgreSQL counted; then each side's medians and
their ratios. It leaves the database migrated to the newest migration.

    .venv-bench/bin/python benchmarks/queue_indexes.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIDES = ("0016_trace_context", "0017_postgresql_partial_queue_indexes")
FIGURES = ("rate", "workers_ms", "database_ms", "commits", "wal_bytes")


def drain(dsn: str, args: argparse.Namespace) -> dict[str, float]:
    """One drain at the current migration: its rate and Spend.per_task()."""
    import tasks_peers
    import tasks_rounds
    import throughput_tasks
    from django.db import connection, transaction

    tasks_peers.clear(["bgtasks"])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE django_bgtasks_queuedtask")
    command = [sys.executable, tasks_rounds.THIS, "manage", dsn, "600",
               *tasks_peers.worker_commands("bgtasks", 1, args.concurrency)[0]]  # fmt: skip
    workers = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
        for _ in range(args.workers)
    ]
    try:
        time.sleep(args.settle)
        with transaction.atomic():
            tasks_peers.bulk_enqueue("bgtasks")(
                throughput_tasks.NOOP["bgtasks"], [([], {})] * args.tasks
            )
            tasks_rounds.analyze("bgtasks")
        committed = time.time()
        spent, counted = tasks_rounds.Spend.now(workers), tasks_rounds.database_counts()
        tasks_rounds.wait_finished("bgtasks", args.tasks, workers)
        spent = tasks_rounds.Spend.now(workers).since(spent)
        took = tasks_peers.last_finish("bgtasks") - committed
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait()
    spent.commits, spent.wal = (
        after - before
        for after, before in zip(tasks_rounds.database_counts(), counted, strict=True)
    )
    return {"rate": args.tasks / took, **spent.per_task(args.tasks)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a PostgreSQL database of its own")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4, help="drains per side")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds for workers to start")
    args = parser.parse_args()
    os.environ["BENCH_BACKENDS"] = "bgtasks"  # for the workers
    import tasks_throughput

    tasks_throughput.setup_django(args.dsn, 600)
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        sys.exit("queue_indexes.py compares PostgreSQL's indexes: give it a PostgreSQL --dsn")
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    try:
        for number in range(args.rounds):
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                call_command("migrate", "django_bgtasks", side, verbosity=0)
                figures = drain(args.dsn, args)
                rounds[side].append(figures)
                print(f"round {number + 1} {side[:4]}: "
                      + "  ".join(f"{name} {figures[name]:,.3f}" for name in FIGURES),
                      flush=True)  # fmt: skip
    finally:
        call_command("migrate", "django_bgtasks", verbosity=0)
    medians = {
        side: {name: statistics.median(r[name] for r in done) for name in FIGURES}
        for side, done in rounds.items()
    }
    print(f"\n{args.tasks} no-op tasks a drain, {args.workers} workers of {args.concurrency}"
          f" threads, {args.rounds} rounds a side; medians, a task")  # fmt: skip
    print(f"{'side':<40}" + "".join(f"{name:>13}" for name in FIGURES))
    for side in SIDES:
        print(f"{side:<40}" + "".join(f"{medians[side][n]:>13,.3f}" for n in FIGURES))
    before, after = (medians[side] for side in SIDES)
    print(f"{'0017 ÷ 0016':<40}" + "".join(f"{after[n] / before[n]:>13.3f}" for n in FIGURES))


if __name__ == "__main__":
    main()
