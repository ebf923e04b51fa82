"""Starting the processes of the torture and partition tests.

A :class:`Scenario` is ``python -m tests.faults.torture.workers <scenario> ...``,
optionally under a command prefix (``ip netns exec NAME`` puts it in a
network namespace), with its database settings in the environment as
``tests.procs`` passes them. Its stdout is read by a thread, so that waiting
for a line really times out even when the process says nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from tests.procs import ENV_DB, ENV_SETTINGS, ROOT, Worker


def db_env(db: dict[str, Any], **bgtasks_settings: Any) -> dict[str, str]:
    """The environment of a process that connects to ``db`` (a DATABASES entry)."""
    env = dict(os.environ)
    env[ENV_DB] = json.dumps(db, default=str)
    env[ENV_SETTINGS] = json.dumps(bgtasks_settings)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Scenario(Worker):
    """One process running a scenario of ``tests.faults.torture.workers``."""

    def __init__(
        self,
        env: dict[str, str],
        scenario: str,
        *args: Any,
        prefix: Sequence[str] = (),
        stderr: IO[Any] | int | None = None,
    ) -> None:
        self.process = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "tests.faults.torture.workers",
                scenario,
                *map(str, args),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, word: str, timeout: float = 30) -> str:
        """Read stdout until a line starting with ``word``; return that line."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                raise AssertionError(
                    f"process {self.pid} did not say {word!r} in {timeout} s; it said {self.lines}"
                ) from None
            if line is None:
                raise AssertionError(
                    f"process {self.pid} exited ({self.process.wait()}) before {word!r}; "
                    f"it said {self.lines}"
                )
            self.lines.append(line)
            if line.startswith(word):
                return line

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def go(self) -> None:
        self.send("go")

    def kill(self) -> None:
        """Kill the process if it is still running, and close its pipes once
        the reader has seen the end of its output."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
