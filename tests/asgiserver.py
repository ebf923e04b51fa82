"""A real ASGI server (uvicorn, in its own process) serving the test project
on the test run's databases, and a small Server-Sent Events client for it."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.procs import ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def uvicorn(aliases: list[str], **bgtasks_settings: Any) -> Iterator[str]:
    """Serve tests.asgi with uvicorn on a free port; yield its base URL."""
    from django.db import connections

    databases = {alias: connections[alias].settings_dict for alias in aliases}
    env = dict(os.environ)
    env["BGTASKS_TEST_DATABASES"] = json.dumps(databases, default=str)
    env["BGTASKS_TEST_SETTINGS"] = json.dumps(bgtasks_settings)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.asgi:application",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"uvicorn did not start (exit status {process.poll()})")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        stop(process)


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM a server the test started; SIGKILL it if it is not gone in 10 s."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Event:
    kind: str  # "state", "removed", "end", or "comment"
    id: str | None = None
    data: Any = None
    text: str = ""


@dataclass
class Stream:
    """An open ``text/event-stream`` response, read event by event."""

    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse
    last_id: str | None = None
    comments: list[str] = field(default_factory=list)

    def next(self, timeout: float = 10) -> Event:
        """The next event or comment (``retry:`` lines skipped)."""
        assert self.connection.sock is not None
        self.connection.sock.settimeout(timeout)
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline().decode()  # de-chunked
            if not line:
                raise EOFError("the stream ended")
            line = line.rstrip("\n")
            if line.startswith(":"):
                return Event("comment", text=line[1:].strip())
            if line == "":
                if "event" in fields or "data" in fields:
                    self.last_id = fields.get("id", self.last_id)
                    data = json.loads(fields["data"]) if "data" in fields else None
                    return Event(fields.get("event", "message"), fields.get("id"), data)
                fields = {}
                continue
            key, _, value = line.partition(":")
            fields[key] = value[1:] if value.startswith(" ") else value

    def next_event(self, timeout: float = 10) -> Event:
        """The next event that is not a comment."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(0.01, deadline - time.monotonic()))
            if event.kind != "comment":
                return event

    def close(self) -> None:
        self.connection.close()


def get(
    host: str, path: str, *, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes | Stream]:
    """``(status, headers, body)``; an event stream's body is a :class:`Stream`."""
    connection = http.client.HTTPConnection(host, timeout=10)
    connection.request(method, path, headers=headers or {})
    response = connection.getresponse()
    response_headers = {key.lower(): value for key, value in response.getheaders()}
    if response_headers.get("content-type", "").startswith("text/event-stream"):
        return response.status, response_headers, Stream(connection, response)
    body = response.read()
    connection.close()
    return response.status, response_headers, body
