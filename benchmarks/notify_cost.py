"""What the change notification costs one lease write on PostgreSQL.

Every lease change but a heartbeat notifies ``bgtasks_changes`` (migration
0008's trigger). This times our update statement (``renew_with_value``, a
progress write) on bare psycopg, prepared and durable, on copies of the lease
table that differ only in how they notify:

* no trigger at all (the floor);
* a trigger that does nothing (``RETURN NULL``): what calling PL/pgSQL costs;
* migration 0008's trigger, calling the app's own ``bgtasks_notify_change()``;
* no trigger, the same ``pg_notify()`` written into the statement instead (a
  data-modifying CTE): the alternative to the trigger;

and our heartbeat (``renew``) on the real table next to a copy without
triggers, to show a heartbeat pays for none of them. Rounds alternate; each
variant is reported as its median time and its median paired difference
from the floor (the same round), which is steadier on a noisy disk than
the difference of two medians.

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/notify_cost.py [--dsn URL] [--rounds 30] [--calls 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.site import server_for, setup_django  # noqa: E402

COPIES = ("bench_notify_none", "bench_notify_noop", "bench_notify_trigger", "bench_notify_stmt")


def make_copies(conn: psycopg.Connection, table: str, name: str) -> None:
    """The lease table's copies, each holding ``name``'s row, with their triggers."""
    conn.execute(
        "CREATE OR REPLACE FUNCTION bench_notify_noop() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"
    )
    for copy in COPIES:
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
        conn.execute(f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL)")
        conn.execute(f"INSERT INTO {copy} SELECT * FROM {table} WHERE name = %s", [name])
    # The same UPDATE OF list as migration 0008's, so the same statements fire it.
    columns = conn.execute(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
        " AND attname <> 'updated_at'",
        [table],
    ).fetchone()
    assert columns is not None
    for copy, function in (
        ("bench_notify_noop", "bench_notify_noop"),
        ("bench_notify_trigger", "bgtasks_notify_change"),
    ):
        conn.execute(
            f"CREATE TRIGGER bench AFTER UPDATE OF {columns[0]} ON {copy}"
            f" FOR EACH ROW EXECUTE FUNCTION {function}()"
        )


def drop_copies(conn: psycopg.Connection) -> None:
    for copy in COPIES:
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
    conn.execute("DROP FUNCTION IF EXISTS bench_notify_noop()")


def in_statement(update: str) -> str:
    """``update`` with the notification the trigger sends written into it."""
    returning = update.rstrip().rsplit("RETURNING", 1)
    assert len(returning) == 2, update
    return (
        f"WITH changed AS ({returning[0]} RETURNING {returning[1].strip()}, name, token)"
        " SELECT changed.cancel_requested, pg_notify('bgtasks_changes',"
        " json_build_object('name', changed.name, 'token', changed.token)::text)"
        " FROM changed"
    )


def check_notifications(
    dsn: str,
    silent: dict[str, Callable[[], object]],
    notifying: dict[str, Callable[[], object]],
) -> None:
    """Each variant once, with a listener: the ``notifying`` ones deliver a
    notification and the ``silent`` ones none, so the timings compare what
    they claim to."""
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN bgtasks_changes")
        for label, work in (silent | notifying).items():
            work()
            got = list(listener.notifies(timeout=0.5, stop_after=1))
            assert bool(got) == (label in notifying), (label, got)


def interleaved(
    variants: dict[str, Callable[[], object]], rounds: int, calls: int
) -> dict[str, list[float]]:
    """Per round, the mean call time of each variant (µs), order reversed every other round."""
    times: dict[str, list[float]] = {label: [] for label in variants}
    order = list(variants.items())
    for round_ in range(rounds):
        for label, work in order if round_ % 2 else order[::-1]:
            for _ in range(10):
                work()
            start = time.perf_counter()
            for _ in range(calls):
                work()
            times[label].append((time.perf_counter() - start) / calls * 1e6)
    return times


def report(title: str, times: dict[str, list[float]], floor: str) -> None:
    print(title)
    for label, values in times.items():
        paired = statistics.median(a - b for a, b in zip(values, times[floor], strict=True))
        print(f"  {label:<44} {statistics.median(values):6.0f} us   {paired:+6.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    args.dsn, server = server_for(args.dsn)
    setup_django(args.dsn)

    from django.db import connection

    from django_bgtasks.core import store
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects
    table = BackgroundTask._meta.db_table
    objects.filter(name="bench-notify").delete()
    lease = objects.try_claim("bench-notify", "bench-owner", {"done": 0}, ttl=86400)
    assert lease is not None
    statements = store.statements(connection)
    params = {"name": "bench-notify", "owner": "bench-owner", "token": lease.token}
    params_value = {**params, "value": '{"done": 5, "total": 100}'}

    conn = psycopg.connect(args.dsn, autocommit=True)
    try:
        make_copies(conn, table, "bench-notify")
        cursor = conn.cursor()
        row = conn.execute("SELECT version()").fetchone()
        assert row is not None
        version = str(row[0]).split(" on ")[0]
        print(f"{version}; {args.rounds} alternating rounds of {args.calls} calls each")
        print("bare psycopg, prepared, durable commits; median per call, and paired")
        print("difference from the first row's time in the same round\n")

        def timed(sql: str, values: dict[str, object]) -> Callable[[], object]:
            return lambda: cursor.execute(sql, values, prepare=True).fetchall()

        def on(copy: str, query: str) -> str:
            sql = query.replace(connection.ops.quote_name(table), copy)
            assert sql != query, "the statement names the table as expected"
            return sql

        update = statements.renew_with_value
        silent = {
            "no trigger": timed(on("bench_notify_none", update), params_value),
            "a trigger that does nothing": timed(on("bench_notify_noop", update), params_value),
        }
        notifying = {
            "migration 0008's trigger (notifies)": timed(
                on("bench_notify_trigger", update), params_value
            ),
            "no trigger, pg_notify() in the statement": timed(
                on("bench_notify_stmt", in_statement(update)), params_value
            ),
        }
        check_notifications(args.dsn, silent, notifying)
        report(
            "an update (value and heartbeat), on copies of the lease table:",
            interleaved(silent | notifying, args.rounds, args.calls),
            "no trigger",
        )
        renew = statements.renew
        report(
            "\na heartbeat (renew), which notifies nobody:",
            interleaved(
                {
                    "a copy without triggers": timed(on("bench_notify_none", renew), params),
                    "the lease table, its triggers in place": timed(renew, params),
                },
                args.rounds,
                args.calls,
            ),
            "a copy without triggers",
        )
    finally:
        drop_copies(conn)
        conn.close()
        objects.filter(name="bench-notify").delete()
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
