"""The queue's indexes before a migration and after it, in alternating
rounds of one run on one database (benchmarks/drain_ab.py's drains and
figures): by default PostgreSQL's before 0017 and after it (the plain
status-led indexes against the partial ones); ``--sides`` names others,
such as SQLite's claim index (0018).

Each round migrates ``django_bgtasks`` to its side (the order turning each
round), then drains as drain_ab.py does. It leaves the database migrated to
the newest migration.

    .venv-bench/bin/python benchmarks/queue_indexes.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench
    .venv-bench/bin/python benchmarks/queue_indexes.py --dsn sqlite:///.tmp/indexes.sqlite3 \\
        --sides 0017_postgresql_partial_queue_indexes 0018_sqlite_claim_index

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
    parser = arguments(__doc__ or "")
    parser.add_argument("--sides", nargs=2, default=SIDES, help="two migrations of django_bgtasks")
    args = parser.parse_args()
    setup(args.dsn)
    from django.core.management import call_command

    def at(migration: str) -> Callable[[], dict[str, float]]:
        def side() -> dict[str, float]:
            call_command("migrate", "django_bgtasks", migration, verbosity=0)
            return drain(args.dsn, args)

        return side

    try:
        compare(args, {side: at(side) for side in args.sides})
    finally:
        call_command("migrate", "django_bgtasks", verbosity=0)


if __name__ == "__main__":
    main()
