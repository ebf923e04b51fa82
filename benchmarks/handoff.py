"""Release -> a waiting claimer holds the lease: how long, with ``try_claim(wait=)``.

A holder process claims a lease and, when told, releases it and prints the
time its release returned (committed). This process waits for the lease with
``try_claim(name, wait=...)``, woken by the change feed (django_bgtasks.changes:
migration 0008's notification on PostgreSQL, the per-process poll elsewhere),
and records the time its claim returned. The difference is the handoff; p50
and p99 over ``--trials`` (100). Target p99 <= 20 ms on PostgreSQL. Times are
the machine's monotonic clock, which every process on one Linux machine
shares. (benchmarks/takeover.py times the same handoff for a claimer that
polls.)

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/handoff.py [--dsn URL] [--trials 100]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.site import server_for, setup_django  # noqa: E402

# The holder: for each line "<name>" claims it and says so; for the next
# line, releases it after a moment and prints when the release returned.
HOLDER = """
import random, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.site import setup_django
setup_django(sys.argv[2], migrate=False)
from django_bgtasks.models import BackgroundTask
for line in sys.stdin:
    name = line.strip()
    lease = BackgroundTask.objects.try_claim(name, "holder", ttl=60)
    print("held", lease.token, flush=True)
    sys.stdin.readline()
    time.sleep(random.uniform(0.02, 0.05))  # the claimer is waiting by then
    assert BackgroundTask.objects.release(name, "holder", token=lease.token)
    print("released", time.monotonic(), flush=True)
"""


def handoffs(dsn: str, trials: int) -> list[float]:
    from django_bgtasks.models import BackgroundTask
    from django_bgtasks.push import feed as changes

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ROOT), dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    changes.feed().watch().close()  # start the listener before the first trial
    assert changes.feed().synced.wait(10)
    latencies = []
    for trial in range(trials):
        name = f"handoff-{trial}-{random.getrandbits(32)}"
        holder.stdin.write(f"{name}\n")
        holder.stdin.flush()
        assert holder.stdout.readline().startswith("held")
        holder.stdin.write("release\n")
        holder.stdin.flush()
        lease = BackgroundTask.objects.try_claim(name, "claimer", ttl=60, wait=30)
        claimed = time.monotonic()
        assert lease is not None, "the waiting claim timed out"
        released = float(holder.stdout.readline().split()[1])
        latencies.append(claimed - released)
        BackgroundTask.objects.release(name, "claimer", token=lease.token)
    holder.stdin.close()
    holder.wait()
    changes.stop_feeds()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()

    args.dsn, server = server_for(args.dsn)
    setup_django(args.dsn)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        version = cursor.fetchone()[0].split(" on ")[0]
    latencies = sorted(handoffs(args.dsn, args.trials))
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, round(len(latencies) * 0.99))]
    verdict = "met" if p99 <= 0.020 else "MISSED"
    print(
        f"{version}; handoff (release -> waiting claimer holds it) n={len(latencies)}: "
        f"p50 {p50 * 1000:.2f} ms   p99 {p99 * 1000:.2f} ms   "
        f"min {latencies[0] * 1000:.2f} ms   max {latencies[-1] * 1000:.2f} ms   "
        f"target p99 <= 20 ms: {verdict}"
    )
    connection.close()
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    main()
