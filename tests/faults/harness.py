"""``bgtasks worker`` processes for one test: started with the test
database's settings, logged to files, and all stopped at the test's end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.procs import ROOT, worker_env


class Workers:
    """Worker processes on ``alias``; ``args`` go to every ``bgtasks worker``,
    ``settings`` into each one's Django settings (``worker_env``); ``scenario``
    is the tests.procs scenario that runs the command (``("beating", "0.3")``:
    workers that beat every 0.3 s); ``pythonpath`` goes before the suite's
    on each one's ``PYTHONPATH`` (a release's code: tests/faults/test_deploys.py)."""

    def __init__(
        self,
        alias: str,
        logs: Path,
        *,
        args: tuple[str, ...] = (),
        scenario: tuple[str, ...] = ("bgtasks",),
        pythonpath: Path | None = None,
        **settings: Any,
    ) -> None:
        self.alias, self.logs = alias, logs
        self.args, self.settings, self.scenario = args, settings, scenario
        self.pythonpath = pythonpath
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        log = (self.logs / f"worker-{len(self.processes)}.log").open("w")
        env = worker_env(self.alias, **self.settings)
        if self.pythonpath is not None:
            env["PYTHONPATH"] = f"{self.pythonpath}{os.pathsep}{env['PYTHONPATH']}"
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.procs", *self.scenario, "worker", *self.args, *args],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log.close()
        self.processes.append(process)
        return process

    def by_pid(self, pid: int) -> subprocess.Popen[str]:
        (process,) = [p for p in self.processes if p.pid == pid]
        return process

    def exit_status(self, process: subprocess.Popen[str], timeout: float) -> int:
        """``process``'s exit status, once it exits within ``timeout`` seconds;
        else fail, with what the workers logged."""
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {process.pid} did not exit within {timeout:g} s:\n{self.output()}"
            ) from None

    def output(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.logs.glob("worker-*.log")))

    def stop_all(self, timeout: float = 30) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)  # a stopped one can't stop
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
