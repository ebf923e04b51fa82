"""Crashing and starting the machine's MariaDB, for the torture run.

The torture run on MariaDB restarts the server the suite's ``mysql`` alias
uses (127.0.0.1:3306 by default): there is no embedded MariaDB to own. The
crash is ``SIGKILL`` to ``mariadbd`` (its pid from the server's own
``pid_file``), as the PostgreSQL profile's immediate stop is a crash; InnoDB
recovers committed transactions on start.

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
# ``service mariadb start`` outlives the wait for the server (see above): kept
# here so that it isn't collected while it runs.
_starting: list[subprocess.Popen[bytes]] = []


def _ping(settings: dict[str, Any] | None = None) -> bool:
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


def crash(timeout: float = 30) -> None:
    """SIGKILL the server and wait until its process is gone."""
    pid = server_pid()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"mariadbd {pid} still there {timeout} s after SIGKILL")
        time.sleep(0.01)


def start(settings: dict[str, Any] | None = None, timeout: float = 60) -> None:
    """Start the machine's MariaDB if it doesn't answer, and wait until it does."""
    if _ping(settings):
        return
    _starting.append(
        subprocess.Popen(
            ["service", "mariadb", "start"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    deadline = time.monotonic() + timeout
    while not _ping(settings):
        if time.monotonic() > deadline:
            raise RuntimeError(f"MariaDB did not answer {timeout} s after `service mariadb start`")
        time.sleep(0.2)
