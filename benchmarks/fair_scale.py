"""Fair shares at production scale, PostgreSQL: this tree beside ``--base
REF`` (a git ref with fair shares, checked out in a temporary worktree), in
alternating rounds of one run on one database (benchmarks/drain_ab.py's way).

The table, built once and untimed, with the statistics of an empty table
(``VACUUM ANALYZE`` before the build, none after: autovacuum's state in the
minutes after a big import, or always with autovacuum off): ``--plain``
ready tasks without a key (queue ``default``), ``--lone`` of one key (queue
``lone``) and ``--keyed`` of three keys (queue ``three``). Each round, for
each side, from processes that import that side's checkout first:

* ``estimate``: the full claim's generic plan, prepared as the workers'
  cursor prepares it (``EXPLAIN EXECUTE``, queue ``three``): over
  ``jit_above_cost`` (100,000 by default), PostgreSQL compiles it with its
  JIT at every run;
* ``three_ms``, ``every_ms``: the median of 5 claims of 8 (``claim_many()``,
  the claims each side's worker would send, from Python), of queue
  ``three`` and of every queue, each put back ``READY`` after;
* ``drain``: tasks a second that one worker (``bgtasks worker --queue
  three``, ``--threads`` threads) finishes in ``--seconds``, by the
  database's ``finished_at``.

    .venv-bench/bin/python benchmarks/fair_scale.py --base a17fe82 \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_fair

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.)
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIGURES = ("estimate", "three_ms", "every_ms", "drain")


def _django(tree: str, dsn: str) -> None:
    """Django on ``dsn`` with ``tree``'s django_bgtasks (first on the path),
    every queue name allowed, Django's defaults otherwise."""
    sys.path[:0] = [tree, str(HERE)]
    import dj_database_url
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={"default": dict(dj_database_url.parse(dsn))},
        USE_TZ=True,
        TASKS={"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend", "QUEUES": []}},
        LOGGING={"version": 1, "root": {"level": "WARNING"}},
    )
    django.setup()
    import django_bgtasks

    if not str(Path(django_bgtasks.__file__).resolve()).startswith(str(Path(tree).resolve())):
        sys.exit(f"django_bgtasks came from {django_bgtasks.__file__}, not {tree}")


def build(args: argparse.Namespace) -> None:
    """The table (untimed), stale statistics: the module's docstring."""
    import fairness_tasks
    from django.db import connection

    from django_bgtasks.models import FairShare, QueuedTask

    QueuedTask.objects.all().delete()
    FairShare.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {QueuedTask._meta.db_table}")
    kinds = [
        (fairness_tasks.plain, "default", args.plain, 1),
        (fairness_tasks.keyed, "lone", args.lone, 1),
        (fairness_tasks.keyed, "three", args.keyed, 3),
    ]
    for declared, queue, count, tenants in kinds:
        on_queue = declared.using(queue_name=queue)
        for first in range(0, count, 10_000):
            rows: list[tuple[tuple[int], dict[str, Any]]] = [
                ((n % tenants,), {}) for n in range(first, min(count, first + 10_000))
            ]
            on_queue.get_backend().enqueue_many(on_queue, rows)


def _estimate() -> float:
    """The full claim's generic plan's cost, of queue ``three`` (infinite if
    the JIT would compile it)."""
    import re

    from django.db import connection
    from psycopg.sql import Literal

    from django_bgtasks.db import engines
    from django_bgtasks.db.postgresql.queue import with_limit
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.manager import _claim_params

    types = {"all": "boolean", "queues": "text[]", "owner": "text"}
    text = with_limit(QueuedTask.objects._statements(connection).claim, 8)
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", text)
    params = engines.encode(connection, _claim_params("bench", ["three"], 8))
    literals = ", ".join(Literal(params[name]).as_string(connection.connection) for name in names)
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(f"PREPARE fair_scale({', '.join(types[n] for n in names)}) AS {numbered}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE fair_scale({literals})")
        [plan] = cursor.fetchone()[0]
        cursor.execute("ROLLBACK")
        cursor.execute("DEALLOCATE fair_scale")
    return float(plan["Plan"]["Total Cost"])


def _claims_ms(queues: list[str] | None) -> float:
    """The median of 5 claims of 8, each put back ``READY`` after."""
    from django_bgtasks.models import QueuedTask

    times = []
    for _ in range(5):
        start = time.perf_counter()
        claimed = QueuedTask.objects.claim_many("bench", queues=queues, limit=8)
        times.append((time.perf_counter() - start) * 1000)
        QueuedTask.objects.filter(seq__in=[claim.seq for claim in claimed]).update(
            status="READY", owner="", started_at=None, attempts=0
        )
    return statistics.median(times)


def measure() -> None:
    print(json.dumps({
        "estimate": _estimate(),
        "three_ms": _claims_ms(["three"]),
        "every_ms": _claims_ms(None),
    }))  # fmt: skip


def _side(tree: str, args: argparse.Namespace, mode: str, *more: str) -> list[str]:
    return [sys.executable, __file__, mode, tree, args.dsn, *more]


def drain(tree: str, args: argparse.Namespace) -> float:
    """Tasks a second one worker of ``tree`` finishes of queue ``three``."""
    import psycopg

    with psycopg.connect(args.dsn, autocommit=True) as connection:
        [(since,)] = connection.execute("SELECT clock_timestamp()").fetchall()
        worker = subprocess.Popen(_side(tree, args, "worker", "--concurrency", str(args.threads)))
        time.sleep(args.seconds)
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        [(count, seconds)] = connection.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(finished_at))"
            " FROM django_bgtasks_queuedtask WHERE queue_name = 'three'"
            " AND status = 'SUCCESSFUL' AND finished_at > %s + interval '2 seconds'",
            [since],
        ).fetchall()
    return count / float(seconds) if count > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", required=True, help="a PostgreSQL database of its own")
    parser.add_argument("--base", required=True, help="the git ref to compare this tree with")
    parser.add_argument("--plain", type=int, default=1_000_000)
    parser.add_argument("--lone", type=int, default=200_000)
    parser.add_argument("--keyed", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per side")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="of each drain")
    args = parser.parse_args()
    if not args.dsn.startswith(("postgres://", "postgresql://")):
        parser.error("--dsn must be a PostgreSQL database")
    if args.seconds < 5:
        parser.error(f"--seconds must be at least 5, not {args.seconds}")
    import drain_ab

    args.newer_schema = True
    built: list[bool] = []

    def side(tree: str) -> Any:
        def one_round() -> dict[str, float]:
            if not built:
                subprocess.run(_side(str(HERE.parent), args, "build", json.dumps(vars(args))),
                               check=True)  # fmt: skip
                built.append(True)
            done = subprocess.run(
                _side(tree, args, "measure"), check=True, capture_output=True, text=True
            )
            return {**json.loads(done.stdout.splitlines()[-1]), "drain": drain(tree, args)}

        return one_round

    title = (
        f"\n{args.plain:,} tasks without a key, {args.lone:,} of a lone key, {args.keyed:,} of"
        f" three keys; statistics of the empty table; medians"
    )
    drain_ab.against_base(args, side, FIGURES, title)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] in ("build", "measure", "worker"):
        mode, tree, dsn = sys.argv[1:4]
        _django(tree, dsn)
        if mode == "build":
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            build(argparse.Namespace(**json.loads(sys.argv[4])))
        elif mode == "measure":
            measure()
        else:
            from django.core.management import call_command

            call_command("bgtasks", "worker", "--queue", "three", "--poll", "0.05", *sys.argv[4:])
    else:
        main()
