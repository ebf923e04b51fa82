"""Two versions of django-bgtasks' worker draining the same queue, side by
side: ``--base REF`` (a git ref, checked out in a temporary worktree) and
this tree, in alternating rounds of one run on one database.

Each round empties and vacuums the queue table, starts ``--workers`` worker
processes of ``--concurrency`` threads (``bgtasks worker``, started by the
side's own benchmarks/tasks_throughput.py, which puts its checkout first on
the path), enqueues ``--tasks`` no-op tasks in one transaction
with the table's statistics (``ANALYZE`` on PostgreSQL), and times the drain
from that commit to the last ``finished_at``. For each round it prints the
drain rate and where the drain's time went, a task (tasks_rounds.Spend):
CPU of the workers and of the database server (the machine's rest), the
commits and WAL bytes PostgreSQL counted; then each side's medians and
their ratios. Both versions must have the same migrations (one schema), or
with ``--newer-schema`` this tree may add some: both then run on its schema,
as a deploy's old workers do, and the figures are the statements' cost
alone.

    .venv-bench/bin/python benchmarks/drain_ab.py --base HEAD~1 \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench

With ``--task-seconds S`` each task sleeps S seconds instead of doing
nothing (throughput_tasks.py's ``BENCH_TASK_SECONDS``): what a change costs
tasks that are short but not empty. The base then runs this tree's
throughput_tasks.py, copied into its worktree, so that both sides run the
same tasks, whether or not the base's knew the option.

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.) benchmarks/queue_indexes.py compares two
migrations the same way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("rate", "workers_ms", "database_ms", "commits", "wal_bytes")


def drain(dsn: str, args: argparse.Namespace, tree: str | None = None) -> dict[str, float]:
    """One drain: its rate and Spend.per_task(). The workers run django_bgtasks
    from ``tree`` (a checkout) when given, else from this one."""
    import tasks_peers
    import tasks_rounds
    import throughput_tasks
    from django.db import connection, transaction

    tasks_peers.clear(["bgtasks"])
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE django_bgtasks_queuedtask")
    # The tree's own tasks_throughput.py: it puts its checkout first on the path.
    script = str(Path(tree) / "benchmarks/tasks_throughput.py") if tree else tasks_rounds.THIS
    command = [sys.executable, script, "manage", dsn, str(args.conn_max_age),
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


def arguments(description: str) -> argparse.ArgumentParser:
    """The options both comparisons take."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a database of its own")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4, help="drains per side")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds for workers to start")
    parser.add_argument(
        "--conn-max-age", type=int, default=600, help="the workers' CONN_MAX_AGE (0: Django's)"
    )
    parser.add_argument(
        "--newer-schema",
        action="store_true",
        help="let this tree have migrations the base lacks (after all of the base's): both "
        "sides then run on this tree's schema, so the figures are what this tree's "
        "statements cost, not its migrations (a deploy's old workers, on the new schema)",
    )
    return parser


def compare(
    args: argparse.Namespace,
    sides: dict[str, Callable[[], dict[str, float]]],
    figures: tuple[str, ...] = FIGURES,
    title: str = "",
) -> None:
    """Runs each side's round (a drain) ``args.rounds`` times, alternating (the
    order turning each round), and prints each round's ``figures``, the
    medians and their ratio (the second side over the first)."""
    names = list(sides)
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for number in range(args.rounds):
        for name in names if number % 2 == 0 else names[::-1]:
            measured = sides[name]()
            rounds[name].append(measured)
            print(f"round {number + 1} {name}: "
                  + "  ".join(f"{figure} {measured[figure]:,.3f}" for figure in figures),
                  flush=True)  # fmt: skip
    medians = {
        name: {figure: statistics.median(r[figure] for r in done) for figure in figures}
        for name, done in rounds.items()
    }
    print(title or f"\n{args.tasks} no-op tasks a drain, {args.workers} workers of "
          f"{args.concurrency} threads, {args.rounds} rounds a side; medians, a task")  # fmt: skip
    width = max(len(name) for name in names) + 2
    print(f"{'side':<{width}}" + "".join(f"{figure:>13}" for figure in figures))
    for name in names:
        print(f"{name:<{width}}" + "".join(f"{medians[name][f]:>13,.3f}" for f in figures))
    first, second = (medians[name] for name in names)
    ratios = [second[figure] / first[figure] if first[figure] else 0 for figure in figures]
    print(f"{'ratio':<{width}}" + "".join(f"{ratio:>13.3f}" for ratio in ratios))


def setup(dsn: str) -> None:
    """Django on ``dsn`` (CONN_MAX_AGE=600), migrated, for the workers' backend."""
    os.environ["BENCH_BACKENDS"] = "bgtasks"  # for the workers
    import tasks_throughput

    tasks_throughput.setup_django(tasks_throughput.prepare(dsn), 600)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--base", required=True, help="the git ref to compare this tree with")
    parser.add_argument(
        "--task-seconds", type=float, default=0.0, help="each task sleeps this long (0: none)"
    )
    args = parser.parse_args()
    if not 0 <= args.task_seconds <= 60:
        parser.error(f"--task-seconds must be from 0 to 60, not {args.task_seconds}")
    against_base(args, lambda tree: lambda: drain(args.dsn, args, tree=tree))


def against_base(
    args: argparse.Namespace,
    side: Callable[[str], Callable[[], dict[str, float]]],
    figures: tuple[str, ...] = FIGURES,
    title: str = "",
) -> None:
    """:func:`compare` ``side(tree)`` of ``args.base`` (checked out in a
    temporary worktree) and of this tree."""
    with tempfile.TemporaryDirectory(prefix="bgtasks-base-") as base:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", base, args.base],
                       check=True, capture_output=True)  # fmt: skip
        if getattr(args, "task_seconds", 0):
            os.environ["BENCH_TASK_SECONDS"] = repr(args.task_seconds)  # for the workers
            tasks = "benchmarks/throughput_tasks.py"
            shutil.copyfile(ROOT / tasks, Path(base) / tasks)
        try:
            migrations = [
                sorted(path.name for path in (tree / "django_bgtasks/migrations").glob("0*.py"))
                for tree in (Path(base), ROOT)
            ]
            newer = migrations[1][len(migrations[0]) :]
            if migrations[0] + newer != migrations[1] or (newer and not args.newer_schema):
                sys.exit(
                    f"{args.base} and this tree have different migrations: one schema only"
                    " (--newer-schema: this tree's, where it only adds migrations)"
                )
            if newer:
                print(f"both sides on this tree's schema: {args.base}'s and {', '.join(newer)}")
            setup(args.dsn)
            compare(args, {f"base {args.base}": side(base), "this tree": side(str(ROOT))},
                    figures, title)  # fmt: skip
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", base],
                           check=False)  # fmt: skip


if __name__ == "__main__":
    main()
