"""Two replicas of the example site, on two ports, against one database.

``make serve`` runs this. It migrates, refills the log with old entries (so
that log-cleanup has work to do), then runs ``manage.py runserver`` twice, on
127.0.0.1:8001 and 127.0.0.1:8002 by default. Open the task page on both,
start a task on one and watch it on the other: each replica reads the same
lease rows. Ctrl-C stops both.

Options: ``--sqlite`` (or ``BGTASKS_DEMO_DB=sqlite``) for SQLite instead of
the embedded PostgreSQL (``DATABASE_URL``, when set, names another server),
``--ports`` to choose the two ports, and ``--asgi`` to serve each replica with
uvicorn (``demo_site.asgi``) instead of runserver: then the task page follows
the API's event stream, pushed, where under runserver (WSGI, which answers
the stream with 501) it polls the JSON API every second.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

HERE = Path(__file__).resolve().parent


def say(text: str = "") -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sqlite", action="store_true", help="use SQLite, the lightest start")
    parser.add_argument(
        "--ports",
        type=int,
        nargs=2,
        default=[8001, 8002],
        metavar="PORT",
        help="(default: 8001 8002)",
    )
    parser.add_argument(
        "--asgi",
        action="store_true",
        help="serve with uvicorn (ASGI): the task page follows the event stream",
    )
    args = parser.parse_args(argv)
    if args.asgi and importlib.util.find_spec("uvicorn") is None:
        parser.error(
            "--asgi serves the site with uvicorn: pip install uvicorn (the dev extra has it)"
        )
    if args.sqlite:
        os.environ["BGTASKS_DEMO_DB"] = "sqlite"

    # Starts the embedded PostgreSQL when that is the database; this process
    # keeps it up until both replicas have stopped.
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo_site.settings"
    import django

    django.setup()

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from demo_site import database
    from demo_site.demo_data import (
        DEMO_PASSWORD,
        DEMO_USERNAME,
        ensure_demo_user,
        ensure_storage_tree,
        reset_logs,
    )
    from demo_site.models import LogEntry

    say(f"database  {database.describe(connection.settings_dict)}")
    call_command("migrate", verbosity=0)
    if not LogEntry.objects.exists():
        reset_logs()
    ensure_storage_tree(settings.DEMO_STORAGE_ROOT)
    ensure_demo_user()
    connection.close()

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.asgi:
        # demo_site (in example_project/) and this checkout's django_bgtasks.
        path = [str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, path))

    def command(port: int) -> list[str]:
        if args.asgi:
            return [
                *(sys.executable, "-m", "uvicorn", "demo_site.asgi:application"),
                *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
            ]
        return [
            sys.executable,
            str(HERE / "manage.py"),
            "runserver",
            f"127.0.0.1:{port}",
            "--noreload",
        ]

    replicas = [subprocess.Popen(command(port), env=env) for port in args.ports]

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Installed for SIGINT too: a shell starts background jobs with SIGINT
    # ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    say()
    server = "uvicorn (ASGI): the task page is pushed" if args.asgi else "runserver"
    say(f"Two replicas of the example site, one database, served by {server}:")
    for port in args.ports:
        say(f"  http://127.0.0.1:{port}/        the task page (admin: /admin/, API: /bgtasks/)")
    say(f"Log in as {DEMO_USERNAME} / {DEMO_PASSWORD} (a local demo account). Ctrl-C stops both.")
    say()
    try:
        while all(replica.poll() is None for replica in replicas):
            time.sleep(0.2)
        say("A replica stopped; stopping the other.")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for replica in replicas:
            if replica.poll() is None:
                replica.terminate()
        for replica in replicas:
            try:
                replica.wait(10)
            except subprocess.TimeoutExpired:
                replica.kill()
                replica.wait()


if __name__ == "__main__":
    sys.exit(main())
