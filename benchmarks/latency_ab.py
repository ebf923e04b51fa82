"""Two versions of django-bgtasks' worker, idle, side by side: how soon a task
enqueued starts, and what the idle worker costs meanwhile. ``--base REF`` (a
git ref, checked out in a temporary worktree) and this tree, in alternating
rounds of one run on one database (benchmarks/drain_ab.py's way).

Each round starts one worker process of ``--concurrency`` threads polling
every 50 ms (as benchmarks/tasks_throughput.py runs every backend), lets it
settle, then enqueues ``--samples`` tasks one at a time, each after a random
idle gap of 50-150 ms, each writing ``time.time()`` as it starts
(throughput_tasks.py's stamp task). Figures a round:

* ``p50_ms``, ``p90_ms``, ``p99_ms``: from just before ``enqueue()`` to the
  task's start;
* ``enqueue_ms``: the median ``enqueue()`` call alone (its commit included):
  what the worker can't shorten;
* ``idle_cpu_pct``: the worker's CPU over the samples' wall time, in percent
  of one core;
* ``commits_s``: PostgreSQL's commits a second meanwhile (the samples'
  enqueues among them): the worker's claims.

    .venv-bench/bin/python benchmarks/latency_ab.py --base HEAD~1 \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain_ab

FIGURES = ("p50_ms", "p90_ms", "p99_ms", "enqueue_ms", "idle_cpu_pct", "commits_s")


def idle(dsn: str, args: argparse.Namespace, tree: str) -> dict[str, float]:
    """One round: a worker of ``tree`` (a checkout), idle between samples."""
    import psutil
    import tasks_peers
    import tasks_rounds
    import throughput_tasks

    tasks_peers.clear(["bgtasks"])
    stamp = throughput_tasks.STAMP["bgtasks"]
    folder = Path(tempfile.mkdtemp(prefix="bgtasks-bench-stamps-"))
    script = str(Path(tree) / "benchmarks/tasks_throughput.py")
    worker_command = tasks_peers.worker_commands("bgtasks", 1, args.concurrency)[0]
    command = [sys.executable, script, "manage", dsn, str(args.conn_max_age), *worker_command]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        stamp.enqueue(str(folder / "first"))
        tasks_rounds.stamped(folder / "first", [worker])
        time.sleep(args.settle)
        process = psutil.Process(worker.pid)
        cpu, counted, began = process.cpu_times(), tasks_rounds.database_counts(), time.time()
        latencies, enqueues = [], []
        for number in range(args.samples):
            time.sleep(random.uniform(0.05, 0.15))
            path = folder / str(number)
            before = time.time()
            stamp.enqueue(str(path))
            enqueues.append(time.time() - before)
            latencies.append(tasks_rounds.stamped(path, [worker]) - before)
        wall = time.time() - began
        after = process.cpu_times()
        commits = tasks_rounds.database_counts()[0] - counted[0]
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait()
        shutil.rmtree(folder)
    latencies.sort()
    worker_cpu = (after.user + after.system) - (cpu.user + cpu.system)

    def at(share: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * share))] * 1000

    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "enqueue_ms": statistics.median(enqueues) * 1000,
        "idle_cpu_pct": worker_cpu / wall * 100,
        "commits_s": commits / wall,
    }


def main() -> None:
    parser = drain_ab.arguments(__doc__ or "")
    parser.add_argument("--base", required=True, help="the git ref to compare this tree with")
    parser.add_argument("--samples", type=int, default=200, help="tasks a round")
    parser.set_defaults(settle=1.0, concurrency=8)
    args = parser.parse_args()
    title = (f"\none worker of {args.concurrency} threads, {args.samples} samples a round, "
             f"{args.rounds} rounds a side; medians of the rounds")  # fmt: skip
    drain_ab.against_base(args, lambda tree: lambda: idle(args.dsn, args, tree), FIGURES, title)


if __name__ == "__main__":
    main()
