"""Two replicas of the example site, on two ports, against one database.

``make serve`` runs this. It migrates, refills the log with old entries (so
that log-cleanup has work to do), then runs ``manage.py runserver`` twice, on
127.0.0.1:8001 and 127.0.0.1:8002 by default. Open the task page on both,
start a task on one and watch it on the other: each replica reads the same
lease rows. Ctrl-C stops both.

Options: ``--sqlite`` (or ``BGTASKS_DEMO_DB=sqlite``) for SQLite instead of
the embedded PostgreSQL (``DATABASE_URL``, when set, names another server), and
``--ports`` to choose the two ports.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args(argv)
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
    replicas = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "manage.py"),
                "runserver",
                f"127.0.0.1:{port}",
                "--noreload",
            ],
            env=env,
        )
        for port in args.ports
    ]

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # Installed for SIGINT too: a shell starts background jobs with SIGINT
    # ignored, and Python then leaves it ignored.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    say()
    say("Two replicas of the example site, one database:")
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
