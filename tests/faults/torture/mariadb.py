"""Crashing and starting the machine's MariaDB, for the torture run.

The torture run on MariaDB restarts the server the suite's ``mysql`` alias
uses (127.0.0.1:3306 by default): there is no embedded MariaDB to own. The
crash is ``SIGKILL`` to ``mariadbd`` (its pid from the server's own
``pid_file``), as the PostgreSQL profile's immediate stop is a crash; InnoDB
recovers committed transactions on start. When ``mysqld_safe`` supervises it
(as after Debian's ``service mariadb start``), the supervisor is killed
first: it would start the server again at once, and the outage must be
longer than the ttl. (A first run without this had the server back within
half a second, and the checker rightly found a holder that "never gave the
lease up" across an outage that never was.)

Starting it again is ``service mariadb start`` in the background while the
server is polled with ``mariadb-admin ping``: Debian's init script then waits
half a minute for a check of its own that fails in this container (``.ci/run``
does the same). Whoever crashes it starts it again, also when the run fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

_pid_file: str | None = None


def ping(settings: dict[str, Any] | None = None) -> bool:
    """Whether the server answers."""
    db = settings or _settings()
    args = ["mariadb-admin", "--connect-timeout=2", "-u", db.get("USER") or "root"]
    if db.get("PASSWORD"):
        args.append(f"-p{db['PASSWORD']}")
    args += ["-h", db.get("HOST") or "127.0.0.1", "-P", str(db.get("PORT") or 3306), "ping"]
    return subprocess.run(args, capture_output=True).returncode == 0


def _settings() -> dict[str, Any]:
    from django.db import connection

    return dict(connection.settings_dict)


def server_pid() -> int:
    """The running server's process id, from its pid file."""
    global _pid_file
    if _pid_file is None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT @@pid_file")
            _pid_file = str(cursor.fetchone()[0])
    return int(Path(_pid_file).read_text().split()[0])


def _kill(pid: int, timeout: float) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} still there {timeout} s after SIGKILL")
        time.sleep(0.01)


def crash(timeout: float = 30) -> None:
    """SIGKILL the server (its supervisor first, if it has one) and wait
    until it is gone."""
    pid = server_pid()
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    if parent > 1 and Path(f"/proc/{parent}/cmdline").read_bytes().find(b"mysqld_safe") >= 0:
        _kill(parent, timeout)
    _kill(pid, timeout)


def start(settings: dict[str, Any] | None = None, timeout: float = 60) -> None:
    """Start the machine's MariaDB if it doesn't answer, and wait until it does."""
    if ping(settings):
        return
    # In the background, as .ci/run does: the init script's own wait (see
    # above) outlives the server's start by half a minute.
    subprocess.run(
        ["sh", "-c", "service mariadb start >/dev/null 2>&1 &"],
        check=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while not ping(settings):
        if time.monotonic() > deadline:
            raise RuntimeError(f"MariaDB did not answer {timeout} s after `service mariadb start`")
        time.sleep(0.2)
