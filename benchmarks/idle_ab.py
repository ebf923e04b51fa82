"""Two versions of django-bgtasks' workers, idle, side by side: what idle
workers cost the database, and what they cost a bulk enqueue made while
they poll. ``--base REF`` (a git ref, checked out in a temporary worktree)
and this tree, in alternating rounds of one run on one database
(benchmarks/drain_ab.py's way).

Each round starts ``--workers`` worker processes of ``--concurrency``
threads polling every 50 ms (as benchmarks/tasks_throughput.py runs every
backend), lets them settle, then measures:

* ``database_pct``: the machine's CPU outside the workers and this process
  (so the database server's, on a quiet machine) over ``--idle`` seconds
  with the queue empty, in percent of one core;
* ``workers_pct``: the workers' CPU meanwhile, the same way;
* ``bulk_rate``: ``--tasks`` no-op tasks enqueued by one ``enqueue_many()``
  in one transaction, tasks a second from the call to its commit, the
  workers polling (and draining them after, untimed).

    .venv-bench/bin/python benchmarks/idle_ab.py --base HEAD~1 \\
        --dsn mysql://root@127.0.0.1:3306/bgtasks_bench

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain_ab

FIGURES = ("database_pct", "workers_pct", "bulk_rate")


def idle(dsn: str, args: argparse.Namespace, tree: str) -> dict[str, float]:
    """One round, the workers running django_bgtasks from ``tree``."""
    import tasks_peers
    import tasks_rounds
    import throughput_tasks
    from django.db import transaction

    tasks_peers.clear(["bgtasks"])
    script = str(Path(tree) / "benchmarks/tasks_throughput.py")  # puts its tree on the path
    worker = tasks_peers.worker_commands("bgtasks", 1, args.concurrency)[0]
    command = [sys.executable, script, "manage", dsn, str(args.conn_max_age), *worker]
    workers = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
        for _ in range(args.workers)
    ]
    try:
        time.sleep(args.settle)
        before = tasks_rounds.Spend.now(workers)
        time.sleep(args.idle)
        spent = tasks_rounds.Spend.now(workers).since(before)
        started = time.perf_counter()
        with transaction.atomic():
            tasks_peers.bulk_enqueue("bgtasks")(
                throughput_tasks.NOOP["bgtasks"], [([], {})] * args.tasks
            )
        bulk = args.tasks / (time.perf_counter() - started)
        tasks_rounds.wait_finished("bgtasks", args.tasks, workers)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait()
    return {
        "database_pct": (spent.machine - spent.workers - spent.bench) / spent.wall * 100,
        "workers_pct": spent.workers / spent.wall * 100,
        "bulk_rate": bulk,
    }


def main() -> None:
    parser = drain_ab.arguments(__doc__ or "")
    parser.add_argument("--base", required=True, help="the git ref to compare this tree with")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds measured idle")
    parser.set_defaults(tasks=10_000)
    args = parser.parse_args()
    title = (f"\n{args.workers} idle workers of {args.concurrency} threads, --poll 0.05: "
             f"{args.idle:g} s idle, then {args.tasks:,} tasks in one enqueue_many(); "
             f"{args.rounds} rounds a side, medians")  # fmt: skip
    drain_ab.against_base(args, lambda tree: lambda: idle(args.dsn, args, tree), FIGURES, title)


if __name__ == "__main__":
    main()
