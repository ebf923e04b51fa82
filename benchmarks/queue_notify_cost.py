"""What waking the workers costs an enqueue on PostgreSQL: a trigger per row
against one per statement.

A Django Task stored ready notifies ``bgtasks_queue`` so that idle workers
claim it at once. Migration 0010 does it with a row-level trigger: one
PL/pgSQL call and one ``pg_notify()`` per row (PostgreSQL folds the identical
payloads into one notification at commit, but each row still pays for its
call). The alternative for an INSERT is a statement-level trigger reading
the transition table of the rows inserted: one call and one ``pg_notify()``
per queue per statement, but every row copied into the transition table and
read back. Is it cheaper for ``enqueue_many()``, and what does it cost
``enqueue()``?

This times the backend's own enqueue statement (``QueuedTask.objects``'s
``enqueue``, prepared, on bare psycopg, each call its own commit) on
copies of the queue table that differ only in their trigger: none (the
floor), migration 0010's per row, and the one per statement; with
one task per statement (``enqueue()``) and with 10,000 (``enqueue_many()``).
Rounds alternate their order; each variant is reported as the median time
per task, and its median paired difference from the floor in the same
round. Each variant's notifications are checked first: one per statement
from the triggers, none without. The commits don't wait for the disk
(``synchronous_commit = off``, this session only; ``--durable`` waits): the
flush is the same for every variant, and on a shared machine its noise
drowns what the triggers cost, which is CPU.

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/queue_notify_cost.py [--dsn URL] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.site import alternating, server_for, setup_django  # noqa: E402

# Migration 0010's row trigger and the statement trigger, on copies.
ROW_FUNCTION = """
    CREATE OR REPLACE FUNCTION bench_queue_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('bgtasks_queue', json_build_object('queue', NEW.queue_name)::text);
        RETURN NULL;
    END $$
"""
STATEMENT_FUNCTION = """
    CREATE OR REPLACE FUNCTION bench_queue_statement() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('bgtasks_queue', json_build_object('queue', ready.queue_name)::text)
        FROM (SELECT DISTINCT queue_name FROM inserted WHERE status = 'READY') ready;
        RETURN NULL;
    END $$
"""
TRIGGERS = {
    "bench_queue_none": None,
    "bench_queue_row": "AFTER INSERT ON {copy} FOR EACH ROW WHEN (NEW.status = 'READY')"
    " EXECUTE FUNCTION bench_queue_row()",
    "bench_queue_statement": "AFTER INSERT ON {copy} REFERENCING NEW TABLE AS inserted"
    " FOR EACH STATEMENT EXECUTE FUNCTION bench_queue_statement()",
}
LABELS = {
    "bench_queue_none": "no trigger",
    "bench_queue_row": "a trigger per row (migration 0010)",
    "bench_queue_statement": "a trigger per statement",
}


def make_copies(conn: psycopg.Connection, table: str) -> None:
    conn.execute(ROW_FUNCTION)
    conn.execute(STATEMENT_FUNCTION)
    for copy, trigger in TRIGGERS.items():
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
        conn.execute(f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL)")
        if trigger:
            conn.execute(f"CREATE TRIGGER bench {trigger.format(copy=copy)}")


def drop_copies(conn: psycopg.Connection) -> None:
    for copy in TRIGGERS:
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
    conn.execute("DROP FUNCTION IF EXISTS bench_queue_row()")
    conn.execute("DROP FUNCTION IF EXISTS bench_queue_statement()")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--singles", type=int, default=300, help="single enqueues per round")
    parser.add_argument("--batch", type=int, default=10_000, help="tasks per bulk statement")
    parser.add_argument("--durable", action="store_true", help="wait for each commit's flush")
    args = parser.parse_args()
    args.dsn, server = server_for(args.dsn)
    setup_django(args.dsn)

    from django.db import connection

    from django_bgtasks.db import engines
    from django_bgtasks.models import QueuedTask

    table = QueuedTask._meta.db_table
    template = engines.queue_statements(connection, table=table).enqueue
    quoted = connection.ops.quote_name(table)
    task = {
        "task_path": "benchmarks.noop", "backend": "default", "queue_name": "default",
        "priority": 0, "takes_context": False, "run_after": None, "max_attempts": 1,
        "ttl": 120.0, "unique_key": "", "active_key": None,
    }  # fmt: skip

    def rows(count: int) -> str:
        args_kwargs = {"args": [], "kwargs": {}}
        return json.dumps(
            [{"uuid": uuid.uuid4().hex, "args_kwargs": args_kwargs} for _ in range(count)]
        )

    conn = psycopg.connect(args.dsn, autocommit=True)
    try:
        make_copies(conn, table)
        if not args.durable:
            conn.execute("SET synchronous_commit = off")
        cursor = conn.cursor()

        def enqueue(copy: str, text: str) -> None:
            sql = template.replace(quoted, copy)
            cursor.execute(sql, {**task, "rows": text}, prepare=True).fetchall()

        with psycopg.connect(args.dsn, autocommit=True) as listener:
            listener.execute("LISTEN bgtasks_queue")
            for copy, trigger in TRIGGERS.items():
                enqueue(copy, rows(100))
                got = list(listener.notifies(timeout=0.5))
                assert len(got) == (1 if trigger else 0), (copy, got)

        row = conn.execute("SELECT version()").fetchone()
        assert row is not None
        print(f"{str(row[0]).split(' on ')[0]}; {os.cpu_count()} CPUs; {args.rounds} rounds")
        commits = "a durable commit" if args.durable else "a commit (synchronous_commit off)"
        print(f"the enqueue statement on bare psycopg, prepared, each call {commits};")
        print("median time per task, and paired difference from no trigger in the same round\n")
        for title, count, calls in (
            ("enqueue(): one task per statement", 1, args.singles),
            (f"enqueue_many(): {args.batch:,} tasks per statement", args.batch, 1),
        ):
            times: dict[str, list[float]] = {copy: [] for copy in TRIGGERS}
            for copy in alternating(list(TRIGGERS), args.rounds):
                conn.execute(f"TRUNCATE {copy}")
                texts = [rows(count) for _ in range(calls + 1)]
                enqueue(copy, texts.pop())  # warm: prepared, cached
                started = time.perf_counter()
                for text in texts:
                    enqueue(copy, text)
                times[copy].append((time.perf_counter() - started) / calls / count * 1e6)
            print(title)
            floor = times["bench_queue_none"]
            for copy, values in times.items():
                paired = statistics.median(a - b for a, b in zip(values, floor, strict=True))
                print(
                    f"  {LABELS[copy]:<42} {statistics.median(values):8.2f} us/task"
                    f"   {paired:+7.2f} us"
                )
            print("  rounds (us/task):", json.dumps({LABELS[c]: v for c, v in times.items()}))
    finally:
        drop_copies(conn)
        conn.close()
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
