"""What reporting progress per item costs: coalesced ``update()`` against the seed.

A body calls ``lease.update({"done": i, ...})`` once per item. Prints, from one
run on one PostgreSQL server:

* the wall time of N ``update()`` calls through ``lease()`` (coalesced by
  ``BGTASKS_PROGRESS_INTERVAL``, the default 0.5 s), next to the seed's loop of
  N ``UPDATE``s on bare psycopg (one commit each), and the ratio;
* the database writes each side made (``n_tup_upd`` of its table, heartbeats
  included);
* how stale the progress was for another replica: a reader on its own
  connection polls the row every 10 ms while the body runs. A read that shows
  item *k* is as stale as the time since the body reported item *k + 1* (0
  if it had not yet); the worst and p99, next to the promise (the interval
  plus one write).

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/progress.py [--dsn URL] [--updates 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.lease_cycle import SEED_CLAIM, SEED_TABLE, SEED_UPDATE  # noqa: E402
from benchmarks.site import server_for, setup_django  # noqa: E402


def updates_of(conn: psycopg.Connection, table: str) -> int:
    """n_tup_upd of ``table``, after every session flushed its counters."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.5)  # other sessions flush when they go idle
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = %s", [table]
    ).fetchone()
    assert row is not None
    return int(row[0])


def watch(
    dsn: str, table: str, stop: threading.Event, reported: list[float], lags: list[float]
) -> None:
    """Another replica, every 10 ms: how long a newer value than the one it
    reads has existed (``reported[k]``: when the body reported item k)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = f"SELECT value->>'done' FROM {table} WHERE name = 'bench-progress' AND running"
        while not stop.wait(0.01):
            row = conn.execute(query).fetchone()
            read_at = time.monotonic()
            if row is not None and row[0] is not None:
                newer = int(row[0]) + 1
                if newer < len(reported) and reported[newer]:
                    lags.append(max(read_at - reported[newer], 0.0))
                else:
                    lags.append(0.0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--updates", type=int, default=100_000)
    args = parser.parse_args()

    args.dsn, server = server_for(args.dsn)
    setup_django(args.dsn)

    from django.db import connection

    from django_bgtasks import lease
    from django_bgtasks.conf import conf
    from django_bgtasks.models import BackgroundTask

    table = BackgroundTask._meta.db_table
    seed = psycopg.connect(args.dsn, autocommit=True)
    seed.execute(SEED_TABLE)
    version = seed.execute("SELECT version()").fetchone()[0].split(" on ")[0]  # type: ignore[index]
    n, interval = args.updates, conf.PROGRESS_INTERVAL
    print(f"{version}; {n} updates per side; BGTASKS_PROGRESS_INTERVAL {interval:g} s\n")

    # The seed: one UPDATE, one commit, per item.
    seed.execute(SEED_CLAIM, ["bench-progress", "null", "bench-owner"])
    before = updates_of(seed, "seed_background_task")
    start = time.perf_counter()
    for done in range(n):
        value = json.dumps({"done": done, "total": n})
        seed.execute(SEED_UPDATE, [value, "bench-progress", "bench-owner"])
    seed_took = time.perf_counter() - start
    seed_writes = updates_of(seed, "seed_background_task") - before

    # Ours: the same loop through lease(), with a replica watching.
    lags: list[float] = []
    reported = [0.0] * n
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(args.dsn, table, stop, reported, lags))
    before = updates_of(seed, table)
    with lease("bench-progress", ttl=30) as running:  # a heartbeat every 10 s
        watcher.start()
        start = time.perf_counter()
        for done in range(n):
            reported[done] = time.monotonic()
            running.update({"done": done, "total": n})
        ours_took = time.perf_counter() - start
        stop.set()
        watcher.join()
        time.sleep(interval * 2)  # the last value is written by the heartbeat thread
    ours_writes = updates_of(seed, table) - before - 1  # minus the release

    print(f"{'':<28}{'wall time':>12}{'updates/s':>12}{'db writes':>11}")
    for label, took, writes in (
        ("seed: UPDATE per item", seed_took, seed_writes),
        ("ours: coalesced update()", ours_took, ours_writes),
    ):
        print(f"{label:<28}{took:>10.2f} s{n / took:>12.0f}{writes:>11}")
    print(f"\nratio (seed time / ours): {seed_took / ours_took:.1f}x faster")
    lags.sort()
    p99, median = lags[int(len(lags) * 0.99)], statistics.median(lags)
    print(
        f"progress a replica saw: {len(lags)} reads, median lag {median * 1000:.0f}"
        f" ms, p99 {p99 * 1000:.0f} ms, worst {lags[-1] * 1000:.0f} ms "
        f"(promise: the interval, {interval * 1000:.0f} ms, plus one write)"
    )
    assert lags and any(lags), "the reader saw nothing: the measure is broken"
    final = BackgroundTask.objects.get_state("bench-progress")
    assert final is not None and final.value is not None and final.value["done"] == n - 1
    seed.close()
    connection.close()
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    main()
