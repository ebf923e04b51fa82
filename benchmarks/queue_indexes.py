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

The workers refuse a database with a migration not applied (issue 50), so
``--sides`` can only name the newest migration now. ``--toggle MIGRATION``
compares an index a migration makes with its absence instead, on the newest
schema: each round runs the migration's statements backwards (the side
"without") or forwards ("with") before it drains, and the run ends with them
made. It takes the migrations whose schema entry on the database's engine
(db/<engine>/schema.py) is its statements alone, such as 0023, 0025, 0027:

    .venv-bench/bin/python benchmarks/queue_indexes.py \\
        --dsn postgres://postgres@127.0.0.1:5432/bgtasks_bench --toggle 0027_finished_by_time

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
    parser.add_argument("--toggle", help="a migration: its index, without and with (see above)")
    args = parser.parse_args()
    setup(args.dsn)
    from django.core.management import call_command

    if args.toggle:
        made = _statements(args.toggle, "forwards")
        dropped = _statements(args.toggle, "backwards")

        # (MySQL's CREATE INDEX and DROP INDEX have no IF [NOT] EXISTS: each
        # runs only where it changes something.)
        present = [True]

        def toggled(wanted: bool) -> Callable[[], dict[str, float]]:
            def side() -> dict[str, float]:
                if present[0] != wanted:
                    _execute(made if wanted else dropped)
                    present[0] = wanted
                return drain(args.dsn, args)

            return side

        try:
            compare(args, {"without": toggled(False), "with": toggled(True)})
        finally:
            if not present[0]:
                _execute(made)
        return

    def at(migration: str) -> Callable[[], dict[str, float]]:
        def side() -> dict[str, float]:
            call_command("migrate", "django_bgtasks", migration, verbosity=0)
            return drain(args.dsn, args)

        return side

    try:
        compare(args, {side: at(side) for side in args.sides})
    finally:
        call_command("migrate", "django_bgtasks", verbosity=0)


def _statements(migration: str, which: str) -> list[str]:
    """The migration's statements ``forwards`` or ``backwards`` on this
    database's engine: its entry in db/<engine>/schema.py."""
    from django.db import connection

    from django_bgtasks.db import engines

    return list(getattr(engines.driver(connection).schema[migration], which))


def _execute(statements: list[str]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


if __name__ == "__main__":
    main()
