"""How soon an enqueued task starts, next to the floor of this machine: the
same path with nothing of Django or of django-bgtasks on it. In alternating
rounds of one run on one PostgreSQL database:

* **bare**: three psycopg connections and no Django. The "enqueue" is one
  autocommit statement that inserts a row of a one-column table and calls
  ``pg_notify`` (the INSERT's commit sends it); a thread listening on a
  second connection, woken by the notification, "claims" the row with one
  autocommit ``UPDATE`` on a third, and the time is taken when that returns.
  So: two commits, one notification, no thread hand-off, no fencing, no
  flow limits, no task run.
* **ours**: one idle ``bgtasks worker`` of ``--concurrency`` threads, and
  ``task.enqueue()`` of a task that writes ``time.time()`` as it starts
  (benchmarks/latency_ab.py's round, this tree's code).

Each sample follows a random idle gap of 50-150 ms, as on a server whose
enqueues come now and then: an idle virtual machine's CPUs are slow to wake,
and that, not the CPU work, is most of these milliseconds. Figures a round:
``p50_ms``, ``p90_ms``, ``p99_ms`` from just before the enqueue to the start
(ours) or the claim's return (bare), and ``enqueue_ms``, the enqueue alone
(its commit included). The ratio is ours over bare: what the worker, the
backend and Django add to what the machine costs.

    .venv-bench/bin/python benchmarks/latency_floor.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench

(``make bench-env`` builds .venv-bench; the database must exist. Its queue
is emptied, and the table ``bench_latency_floor`` made and dropped.)
"""

from __future__ import annotations

import operator
import random
import statistics
import sys
import threading
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drain_ab
import latency_ab

FIGURES = ("p50_ms", "p90_ms", "p99_ms", "enqueue_ms")
TABLE = "bench_latency_floor"
CHANNEL = "bench_latency_floor"


def bare(dsn: str, samples: int) -> dict[str, float]:
    """One round of the bare path (the module docstring)."""
    import psycopg

    enqueuer, listener, claimer = (psycopg.connect(dsn, autocommit=True) for _ in range(3))
    enqueuer.execute(f"DROP TABLE IF EXISTS {TABLE}")
    enqueuer.execute(f"CREATE TABLE {TABLE} (id serial PRIMARY KEY, claimed boolean NOT NULL)")
    listener.execute(f"LISTEN {CHANNEL}")
    claimed: dict[int, float] = {}
    arrived = threading.Condition()

    def claim() -> None:
        for notification in listener.notifies():
            if notification.payload == "stop":
                return
            row = int(notification.payload)
            claimer.execute(f"UPDATE {TABLE} SET claimed = true WHERE id = %s", [row])
            with arrived:
                claimed[row] = time.perf_counter()
                arrived.notify()

    thread = threading.Thread(target=claim)
    thread.start()
    latencies, enqueues = [], []
    try:
        for _ in range(samples):
            time.sleep(random.uniform(0.05, 0.15))
            before = time.perf_counter()
            (row,) = enqueuer.execute(
                f"WITH i AS (INSERT INTO {TABLE} (claimed) VALUES (false) RETURNING id)"
                f" SELECT id FROM i, pg_notify('{CHANNEL}', id::text) AS n"
            ).fetchone()  # type: ignore[misc]
            enqueues.append(time.perf_counter() - before)
            with arrived:
                if not arrived.wait_for(partial(operator.contains, claimed, row), timeout=10):
                    sys.exit(f"row {row}: no claim within 10 s")
            latencies.append(claimed[row] - before)
    finally:
        enqueuer.execute(f"SELECT pg_notify('{CHANNEL}', 'stop')")
        thread.join()
        enqueuer.execute(f"DROP TABLE {TABLE}")
        for connection in (enqueuer, listener, claimer):
            connection.close()
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p90_ms": latencies[int(len(latencies) * 0.9)] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "enqueue_ms": statistics.median(enqueues) * 1000,
    }


def main() -> None:
    parser = drain_ab.arguments(__doc__ or "")
    parser.add_argument("--samples", type=int, default=200, help="tasks a round")
    parser.set_defaults(settle=1.0, concurrency=8, rounds=2)
    args = parser.parse_args()
    if not args.dsn.startswith(("postgres://", "postgresql://")):
        parser.error("--dsn must be a PostgreSQL database: the path compared is its NOTIFY")
    if args.samples < 10:
        parser.error(f"--samples must be at least 10, not {args.samples}")
    drain_ab.setup(args.dsn)
    from django.db import connection

    # psycopg's own form of the Django connection's settings.
    dsn = " ".join(f"{key}={value}" for key, value in connection.get_connection_params().items()
                   if key in ("dbname", "user", "password", "host", "port") and value)  # fmt: skip
    title = (f"\none idle worker of {args.concurrency} threads against the bare path, "
             f"{args.samples} samples a round, {args.rounds} rounds a side; medians")  # fmt: skip
    drain_ab.compare(
        args,
        {
            "bare psycopg": lambda: bare(dsn, args.samples),
            "django-bgtasks": lambda: latency_ab.idle(args.dsn, args, str(drain_ab.ROOT)),
        },
        FIGURES,
        title,
    )


if __name__ == "__main__":
    main()
