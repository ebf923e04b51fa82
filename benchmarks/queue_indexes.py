"""The queue's indexes on PostgreSQL before migration 0017 and after it: the
plain status-led indexes against the partial ones, in alternating rounds of
one run on one database (benchmarks/drain_ab.py's drains and figures).

Each round migrates ``django_bgtasks`` to its side (``0016_trace_context``
or ``0017_postgresql_partial_queue_indexes``, the order turning each round),
then drains as drain_ab.py does. It leaves the database migrated to the
newest migration.

    .venv-bench/bin/python benchmarks/queue_indexes.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench

(``make bench-env`` builds .venv-bench; the database must exist. It is
emptied: use one of its own.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drain_ab import arguments, compare, drain, setup

SIDES = ("0016_trace_context", "0017_postgresql_partial_queue_indexes")


def main() -> None:
    args = arguments(__doc__ or "").parse_args()
    setup(args.dsn)
    from django.core.management import call_command
    from django.db import connection

    if connection.vendor != "postgresql":
        sys.exit("queue_indexes.py compares PostgreSQL's indexes: give it a PostgreSQL --dsn")

    def at(migration: str) -> Callable[[], dict[str, float]]:
        def side() -> dict[str, float]:
            call_command("migrate", "django_bgtasks", migration, verbosity=0)
            return drain(args.dsn, args)

        return side

    try:
        compare(args, {side: at(side) for side in SIDES})
    finally:
        call_command("migrate", "django_bgtasks", verbosity=0)


if __name__ == "__main__":
    main()
