"""A fleet of live leases: how many one PostgreSQL server keeps renewed.

N leases, held by P processes (``--processes``, 8), each renewed every ttl/3
(``--ttl`` 30 s: a renewal every 10 s), for ``--duration`` seconds per step,
stepping N up (100, 1,000, 10,000, ...) until the renewal p99 of the first
side exceeds ttl/10. Each step runs each side (``--sides``) under the same
load:

* ``worker``: each process is a worker holding its share of the leases, and
  renews them all with ONE statement a beat
  (``BackgroundTask.objects.work.renew_many``, what ``bgtasks worker`` sends);
  the processes' beats are spread evenly over the interval;
* ``ours``: each lease renewed by its own statement
  (``BackgroundTask.objects.heartbeat()``, a lease's own heartbeat thread),
  on a schedule spread evenly over the interval, as independent holders would;
* ``seed``: the seed's table renewed with its bare-psycopg ``UPDATE``, a
  statement a lease, on the same schedule.

Per step and side it prints renewals/s (leases renewed), p50/p99 renewal
latency, the share of HOT updates, the table's and its indexes' size at the
start and the end, and WAL bytes per renewal (per lease renewed). A process
claims its leases, then renews them; after one whole round the measurement
starts. A renewal that comes late is timed from when it
was due (for ``worker``, every lease of a statement is timed from its beat to
the statement's end), so a server that falls behind shows in the latency, and
a renewal refused because its lease expired meanwhile is counted ("refused").

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/fleet.py [--dsn URL] [--processes 8] [--duration 60]
        [--ttl 30] [--max-leases 100000] [--sides worker,ours,seed] [--start 100]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.lease_cycle import SEED_CLAIM, SEED_HEARTBEAT, SEED_TABLE  # noqa: E402
from benchmarks.site import server_for, setup_django  # noqa: E402


def renewer(
    side: str,
    dsn: str,
    names: list[str],
    ttl: float,
    duration: float,
    start_at: Any,
    ready: Any,
    results: Any,
    phase: float = 0.0,
) -> None:
    """One holder process: claim ``names``, say so on ``ready``, and renew each
    every ttl/3 from then on; put on ``results`` the latency (from when it
    was due) of each renewal due in [start_at, start_at + duration), and how
    many the database refused (the lease had expired: the fleet fell behind)."""
    if side == "worker":
        worker(dsn, names, ttl, duration, start_at, ready, results, phase)
        return
    owner = f"fleet-{os.getpid()}"
    if side == "ours":
        setup_django(dsn, migrate=False)
        from django_bgtasks.models import BackgroundTask

        objects = BackgroundTask.objects
        tokens = {}
        for name in names:
            lease = objects.try_claim(name, owner, ttl=ttl)
            assert lease is not None, name
            tokens[name] = lease.token

        def renew(name: str) -> bool:
            return objects.heartbeat(name, owner, token=tokens[name])
    else:
        conn = psycopg.connect(dsn, autocommit=True)
        for name in names:
            assert conn.execute(SEED_CLAIM, [name, "null", owner]).fetchone()
        cursor = conn.cursor()

        def renew(name: str) -> bool:
            cursor.execute(SEED_HEARTBEAT, [name, owner])
            return cursor.rowcount == 1

    ready.put(len(names))
    # Renewing starts at once (the leases are live), in claim order: lease i
    # is due at base + i/count of an interval, then every interval after.
    interval, count = ttl / 3, len(names)
    base = time.monotonic()
    latencies: list[float] = []
    refused = index = round_ = 0
    while True:
        due = base + (round_ + index / count) * interval
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        # Read after the sleep: a renewal due once the window has opened counts.
        start = start_at.value
        if start and due >= start + duration:
            break
        renewed = renew(names[index])
        if start and due >= start:
            latencies.append(time.monotonic() - due)
            refused += not renewed
        index += 1
        if index == count:
            index, round_ = 0, round_ + 1
    results.put((latencies, refused))


# Alike renewer()'s parameters on purpose: step() starts either with the same ones.
def worker(
    dsn: str,
    names: list[str],
    ttl: float,
    duration: float,
    start_at: Any,
    ready: Any,
    results: Any,
    phase: float,
) -> None:
    """A worker process: claim ``names`` (renewing what it holds with one
    statement every interval while it claims, as a worker's renewer does),
    then renew them all with ONE statement every ttl/3, its beats offset by
    ``phase`` of an interval (the processes' beats spread evenly). Latency
    and refusals as :func:`renewer`, each lease of a statement timed alike."""
    owner = f"fleet-{os.getpid()}"
    setup_django(dsn, migrate=False)
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects
    interval = ttl / 3
    held: list[tuple[str, str, int]] = []
    last_beat = time.monotonic()
    for name in names:
        lease = objects.try_claim(name, owner, ttl=ttl)
        assert lease is not None, name
        held.append((name, owner, lease.token))
        if time.monotonic() - last_beat >= interval:
            objects.work.renew_many(held, [])
            last_beat = time.monotonic()
    objects.work.renew_many(held, [])
    ready.put(len(names))
    base = time.monotonic() + phase * interval
    latencies: list[float] = []
    refused = round_ = 0
    while True:
        due = base + round_ * interval
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        # Read after the sleep: a beat due once the window has opened counts.
        start = start_at.value
        if start and due >= start + duration:
            break
        answer = objects.work.renew_many(held, [])
        if start and due >= start:
            latency = time.monotonic() - due
            latencies.extend([latency] * len(answer))
            refused += len(held) - len(answer)
        round_ += 1
    results.put((latencies, refused))


def table_stats(conn: psycopg.Connection, table: str) -> dict[str, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.5)  # the renewers' sessions flush their counters when idle or closed
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), pg_indexes_size(relid),"
        " pg_current_wal_lsn() - '0/0'::pg_lsn"
        " FROM pg_stat_user_tables WHERE relname = %s",
        [table],
    ).fetchone()
    assert row is not None
    keys = ("updates", "hot", "table", "indexes", "wal")
    return dict(zip(keys, map(int, row), strict=True))


def step(
    side: str, dsn: str, table: str, leases: int, processes: int, ttl: float, duration: float
) -> list[float]:
    """One side of one step; prints its line and returns the latencies."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"TRUNCATE {table} CASCADE")
    names = [f"fleet-{index}" for index in range(leases)]
    shares = [share for share in (names[p::processes] for p in range(processes)) if share]
    context = multiprocessing.get_context("spawn")
    start_at, ready, results = context.Value("d", 0.0), context.Queue(), context.Queue()
    holders = [
        context.Process(
            target=renewer,
            args=(side, dsn, share, ttl, duration, start_at, ready, results, p / len(shares)),
        )
        for p, share in enumerate(shares)
    ]
    for holder in holders:
        holder.start()
    for _ in holders:
        ready.get(timeout=600)  # every lease is claimed and being renewed
    time.sleep(ttl / 3)  # one whole round of renewals before measuring
    before = table_stats(conn, table)  # takes 1.5 s
    start_at.value = time.monotonic()
    collected = [results.get(timeout=duration + 600) for _ in holders]
    for holder in holders:
        holder.join()
    after = table_stats(conn, table)
    conn.close()
    latencies = sorted(latency for result, _ in collected for latency in result)
    refused = sum(count for _, count in collected)
    renewals = len(latencies)
    updates = after["updates"] - before["updates"]
    hot = 100 * (after["hot"] - before["hot"]) / max(updates, 1)
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[min(renewals - 1, int(renewals * 0.99))] * 1000
    wal = (after["wal"] - before["wal"]) / max(renewals, 1)
    print(
        f"  {side:<6} {leases:>7} {renewals / duration:>9.0f} {p50:>8.1f} {p99:>8.1f} {hot:>6.1f}%"
        f" {before['table'] // 1024:>8}/{after['table'] // 1024:<8}"
        f" {before['indexes'] // 1024:>8}/{after['indexes'] // 1024:<8} {wal:>8.0f}"
        f" {refused:>8}",
        flush=True,
    )
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--max-leases", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=100, help="the first step's leases")
    parser.add_argument("--sides", default="worker,ours,seed", help="which, in this order")
    args = parser.parse_args()
    sides = args.sides.split(",")
    unknown = set(sides) - {"worker", "ours", "seed"}
    if unknown:
        parser.error(f"unknown sides: {', '.join(sorted(unknown))}")

    args.dsn, server = server_for(args.dsn)
    setup_django(args.dsn)
    from django_bgtasks.models import BackgroundTask

    ours_table = BackgroundTask._meta.db_table
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(SEED_TABLE)
        version = conn.execute("SELECT version()").fetchone()
    assert version is not None
    print(
        f"{version[0].split(' on ')[0]}; {args.processes} processes, ttl {args.ttl:g} s "
        f"(a renewal every {args.ttl / 3:g} s per lease), {args.duration:g} s per step"
    )
    print(
        f"  {'side':<6} {'leases':>7} {'renew/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'HOT':>7}"
        f" {'table KiB start/end':>17} {'index KiB start/end':>17} {'WAL B':>8} {'refused':>8}"
    )
    limit = args.ttl / 10
    leases = args.start
    tables = {"worker": ours_table, "ours": ours_table, "seed": "seed_background_task"}
    while leases <= args.max_leases:
        worst: list[Any] = []
        for side in sides:
            table = tables[side]
            latencies = step(
                side, args.dsn, table, leases, args.processes, args.ttl, args.duration
            )
            worst.append(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))])
        if worst[0] > limit:
            print(f"stop: {sides[0]}'s renewal p99 {worst[0]:.2f} s is above ttl/10 ({limit:g} s)")
            break
        leases *= 10
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    main()
