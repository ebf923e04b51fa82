"""A PgBouncer (Debian's package) in front of the embedded PostgreSQL, for
this run only: the ``pgbouncer`` alias of tests/settings.py goes through it.

:func:`bouncer` writes a config in a fresh folder, starts ``pgbouncer`` on a
free port of 127.0.0.1 and stops it when the block ends. As with the embedded
server (tests/pgserver.py), a watchdog process in a session of its own stops
it if the run is killed before that: it waits for its stdin to close, which
happens however the suite's process ends.

One PgBouncer per pool mode: ``transaction`` (the usual setting in front of
Django, and the one that can't hold prepared statements before PgBouncer
1.21) and ``session``. A client's database name is passed on to the server
(the ``*`` entry), so the aliases reach the test database of the ``postgres``
alias, as the ``postgres`` user (``auth_type = any``: PgBouncer lets any
client in and logs in as that user; the embedded server trusts local
connections).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EXECUTABLE = "/usr/sbin/pgbouncer"
PREFIX = "bgtasks-pgbouncer-"
# Enough server connections that consecutive transactions of one client
# really do land on different ones (what breaks prepared statements).
POOL_SIZE = 4


def available() -> bool:
    return os.access(EXECUTABLE, os.X_OK)


def version() -> tuple[int, ...]:
    out = subprocess.run([EXECUTABLE, "--version"], capture_output=True, text=True).stdout
    # "PgBouncer 1.18.0"
    return tuple(int(part) for part in out.split()[1].split("."))


@dataclass(frozen=True)
class Bouncer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(directory: Path, port: int, socket_dir: str, server_port: int, mode: str) -> str:
    owner = directory.owner() if os.geteuid() == 0 else ""
    return f"""
[databases]
* = host={socket_dir} port={server_port} user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = {mode}
default_pool_size = {POOL_SIZE}
max_client_conn = 500
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits,options
logfile = {directory / "pgbouncer.log"}
pidfile = {directory / "pgbouncer.pid"}
{f"user = {owner}" if owner else ""}
"""


@contextlib.contextmanager
def bouncer(socket_dir: str, server_port: int, mode: str) -> Iterator[Bouncer]:
    """PgBouncer in ``pool_mode = mode`` in front of the server at
    ``socket_dir``:``server_port``, until the block ends."""
    directory = Path(tempfile.mkdtemp(prefix=PREFIX))
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; it drops to the user that owns
        # its folder (the embedded server's, which can reach its socket).
        user = Path(socket_dir).owner()
        shutil.chown(directory, user=user)
    port = _free_port()
    config = directory / "pgbouncer.ini"
    config.write_text(_config(directory, port, socket_dir, server_port, mode))
    process = subprocess.Popen(
        [EXECUTABLE, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    watchdog = subprocess.Popen(
        [sys.executable, __file__, "watch", str(process.pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "COVERAGE_PROCESS_START"},
        start_new_session=True,
    )
    try:
        _wait_for_port(port, process, directory)
        yield Bouncer(port, directory, process)
    finally:
        try:
            stop(process)
        finally:
            assert watchdog.stdin is not None
            watchdog.stdin.close()
            watchdog.wait(timeout=30)
            shutil.rmtree(directory, ignore_errors=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop PgBouncer (it closes its server connections), if it still runs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], directory: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (directory / "pgbouncer.log").read_text(errors="replace")
            raise RuntimeError(f"pgbouncer exited with {process.returncode}:\n{log}")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{port} within 15 s")


def watch(pid: int) -> None:
    """The watchdog: wait for stdin to close, then end PgBouncer ``pid``."""
    import psutil

    sys.stdin.buffer.read()
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        # Normally long gone by now; make sure the pid was not reused.
        if Path(process.exe()).name == "pgbouncer":
            process.kill()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "watch":
        sys.exit("usage: python tests/pgbouncer.py watch PID")
    watch(int(sys.argv[2]))
