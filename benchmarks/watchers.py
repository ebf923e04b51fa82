"""1,000 watchers of one task: pushed over the event stream, or polling the JSON API.

One uvicorn process serves benchmarks/status_api_site.py (sessions, CSRF,
auth; persistent connections) on a PostgreSQL. One task is updated 10 times a
second by a writer in this process (another replica, as far as the server
knows), each value carrying the time it was written. Then, in the same run,
against the same server:

* **events**: ``--watchers`` (1,000) concurrent ``GET /bgtasks/<task>/events/``
  streams, each a staff session;
* **polling**: as many clients, each ``GET /bgtasks/<task>/`` once a second
  with ``If-None-Match`` (what the admin's page did before).

For each: database transactions per second (``pg_stat_database``; every
autocommit statement is one, the writer's 10 included), the p50/p99 delivery
latency (from the write's return to a client holding the value: for a
poll, the first poll that sees it), how many updates reached the clients, and
the server process's CPU (user + system, from /proc, as % of one core), and
the clients' (this process's, the writer's included).
Targets: the events' database load independent of the number of watchers,
p99 delivery <= 50 ms. Times are the machine's monotonic clock, which every
process on one Linux machine shares; the clients run in this process, on the
same cores as the server.

Usage (an embedded PostgreSQL is started unless a DSN is given):

    .venv/bin/python benchmarks/watchers.py [--dsn URL] [--watchers 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.site import server_for  # noqa: E402
from benchmarks.status_api import TASK, free_port, prepare  # noqa: E402

OWNER = "web-1:4242:bench"  # status_api.prepare's holder of TASK
RATE = 10  # updates a second
# The stream forwards a run's progress at most once per BGTASKS_PROGRESS_INTERVAL;
# below the update period, every update is forwarded and the figures are the
# push's own latency (BENCH_PROGRESS_INTERVAL overrides it).
INTERVAL = 0.05
DONE = re.compile(rb'"done":(\d+)')


def server_cpu(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def transactions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


class Writer(threading.Thread):
    """Updates TASK RATE times a second with {"done": n, "sent": monotonic}."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.sent: dict[int, float] = {}

    def run(self) -> None:
        from django.db import connection

        from django_bgtasks.models import BackgroundTask

        token = BackgroundTask.objects.get_state(TASK).token  # type: ignore[union-attr]
        n = 10**6  # above any value from before the window: the clients count rises
        next_at = time.monotonic()
        while not self.stopping.is_set():
            n += 1
            value = {"done": n, "total": 10**9, "phase": "bench"}
            assert BackgroundTask.objects.update_state(TASK, OWNER, value, token=token)
            self.sent[n] = time.monotonic()  # committed, visible to every replica
            next_at += 1 / RATE
            self.stopping.wait(max(0.0, next_at - time.monotonic()))
        connection.close()


class Seen:
    """What the clients received: per update, the first time each client had it."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.updates: set[int] = set()
        self.requests = 0
        self.refused = 0
        self.first: dict[int, float] = {}
        self.ended = 0  # streams the server ended before the phase did

    def saw(self, done: int, at: float, writer: Writer) -> None:
        sent = writer.sent.get(done)
        if sent is not None:  # an update from before the window has no time
            self.latencies.append(at - sent)
            # The earliest any client had each update: a pause of the whole
            # server (a full garbage collection) shows as one late for all.
            first = self.first.get(done)
            self.first[done] = at - sent if first is None else min(first, at - sent)
            self.updates.add(done)


async def request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    status = int((await reader.readline()).split()[1])
    response_headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode().partition(":")
        response_headers[key.strip().lower()] = value.strip()
    length = int(response_headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return status, response_headers, body


async def watcher(
    port: int, cookie: str, ready: asyncio.Event, count: list[int], seen: Seen, w: Writer
) -> None:
    headers = f"Cookie: sessionid={cookie}\r\nAccept: text/event-stream"
    opening = f"GET /bgtasks/{TASK}/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n\r\n"
    while True:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        writer.write(opening.encode())
        status = (await reader.readline()).split()[1]
        if status == b"200":
            break
        # Refused at open (PostgreSQL's connection backlog overflowed while
        # hundreds of streams opened at once): counted, and tried again.
        seen.refused += 1
        writer.close()
        await asyncio.sleep(1)
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    opened, last, tail = False, -1, b""
    try:
        # Read as it comes, not line by line: only each state's update number
        # is needed, found with one regex over what arrived (an event is one
        # data line, and only states carry "done"), so that these clients, on
        # the server's two cores, cost as little as they can.
        while data := await reader.read(1 << 16):
            at = time.monotonic()
            data = tail + data  # a number split between two reads
            tail = data[-24:]
            for found in DONE.finditer(data):
                done = int(found[1])
                if done <= last:
                    continue  # found again in the tail
                last = done
                if not opened:
                    opened = True
                    count[0] += 1
                    if count[0] == count[1]:
                        ready.set()
                seen.saw(done, at, w)
        seen.ended += 1
    finally:
        writer.close()


async def poller(port: int, cookie: str, until: float, seen: Seen, w: Writer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    etag = ""
    last = -1
    await asyncio.sleep(hash(os.urandom(4)) % 1000 / 1000)  # spread over the second
    try:
        while (now := time.monotonic()) < until:
            headers = {"Cookie": f"sessionid={cookie}", "Accept": "application/json"}
            if etag:
                headers["If-None-Match"] = etag
            status, response_headers, body = await request(
                reader, writer, f"/bgtasks/{TASK}/", headers
            )
            seen.requests += 1
            if status == 200:
                etag = response_headers.get("etag", "")
                done = json.loads(body)["value"]["done"]
                if done != last:
                    seen.saw(done, time.monotonic(), w)
                    last = done
            await asyncio.sleep(max(0.0, now + 1.0 - time.monotonic()))
    finally:
        writer.close()


def more_sessions(count: int) -> list[str]:
    """``count`` more staff members, each with a session of their own."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    permission = Permission.objects.get(codename="view_backgroundtask")
    cookies = []
    for number in range(count):
        user = get_user_model().objects.create_user(f"bench-{number}", is_staff=True)
        user.user_permissions.add(permission)
        client = Client()
        client.force_login(user)
        cookies.append(client.cookies["sessionid"].value)
    return cookies


def report(
    label: str, seen: Seen, seconds: float, xacts: int, cpu: float, clients: float, writes: int
) -> None:
    latencies = sorted(seen.latencies)
    if latencies:
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[min(len(latencies) - 1, round(len(latencies) * 0.99))] * 1000
        delivery = f"delivery p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
    else:
        delivery = "delivery: nothing arrived"
    extra = f", {seen.requests / seconds:,.0f} requests/s" if seen.requests else ""
    if seen.ended:
        extra += f", {seen.ended} streams ended early"
    if seen.first and not seen.requests:
        extra += f", slowest update first seen after {max(seen.first.values()) * 1000:.0f} ms"
    if seen.refused:
        extra += f", {seen.refused} opens refused (500) and retried"
    share = cpu / seconds * 100
    print(
        f"{label:<8} db {xacts / seconds:8,.1f} transactions/s   {delivery}   "
        f"updates seen {len(seen.updates)}/{writes}{extra}   server CPU {share:5.1f}%   "
        f"clients' CPU {clients / seconds * 100:5.1f}%"
    )


async def phase_events(
    port: int, cookies: list[str], watchers: int, seconds: float, pid: int
) -> None:
    ready = asyncio.Event()
    count = [0, watchers]
    seen = Seen()
    w = Writer()
    tasks = []
    # Connect in batches: each stream's opening reads take a database
    # connection for a moment, and the server allows 100.
    for start in range(0, watchers, 10):
        tasks += [
            asyncio.create_task(watcher(port, cookies[n % len(cookies)], ready, count, seen, w))
            for n in range(start, min(start + 10, watchers))
        ]
        await asyncio.sleep(0.1)
    await asyncio.wait_for(ready.wait(), 120)
    await asyncio.sleep(1)
    before, cpu = await asyncio.to_thread(transactions), server_cpu(pid)
    own_cpu = time.process_time()
    w.start()
    await asyncio.sleep(seconds)
    w.stopping.set()
    await asyncio.to_thread(w.join)
    await asyncio.sleep(0.5)  # the last update's delivery
    xacts, cpu = await asyncio.to_thread(transactions) - before, server_cpu(pid) - cpu
    own_cpu = time.process_time() - own_cpu
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)
    report("events", seen, seconds, xacts, cpu, own_cpu, len(w.sent))


async def phase_polling(
    port: int, cookies: list[str], clients: int, seconds: float, pid: int
) -> None:
    seen = Seen()
    w = Writer()
    before, cpu = await asyncio.to_thread(transactions), server_cpu(pid)
    own_cpu = time.process_time()
    w.start()
    until = time.monotonic() + seconds
    await asyncio.gather(
        *(poller(port, cookies[n % len(cookies)], until, seen, w) for n in range(clients))
    )
    w.stopping.set()
    await asyncio.to_thread(w.join)
    xacts, cpu = await asyncio.to_thread(transactions) - before, server_cpu(pid) - cpu
    own_cpu = time.process_time() - own_cpu
    report("polling", seen, seconds, xacts, cpu, own_cpu, len(w.sent))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--server-gc-threshold",
        metavar="G0,G1,G2",
        help="gc.set_threshold() in the server process after start-up (e.g. "
        "100000,50,1000); default: Python's",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=1,
        help="distinct staff sessions the clients use, round robin (default: one "
        "operator's many tabs; --sessions 1000: a thousand operators)",
    )
    args = parser.parse_args()

    dsn, server = server_for(args.dsn)
    cookie, _ = prepare(dsn)
    cookies = [cookie, *more_sessions(args.sessions - 1)]
    port = free_port()
    interval = os.environ.get("BENCH_PROGRESS_INTERVAL", str(INTERVAL))
    env = dict(os.environ, BENCH_DATABASE_URL=dsn, BENCH_PROGRESS_INTERVAL=interval)
    env["BENCH_POOL"] = "1"
    if args.server_gc_threshold:
        env["BENCH_GC_THRESHOLD"] = args.server_gc_threshold
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.status_api_site"
    uvicorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "benchmarks.status_api_site:asgi",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
            "--backlog",
            "4096",
            "--timeout-graceful-shutdown",
            "5",
        ],
        env=env,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if uvicorn.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("uvicorn did not start")
            time.sleep(0.1)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT version()")
            version = cursor.fetchone()[0].split(" on ")[0]
        print(
            f"{version}; one uvicorn process; {args.watchers} clients per phase; one task "
            f"updated {RATE}/s for {args.seconds:g} s; BGTASKS_PROGRESS_INTERVAL {interval} s; "
            f"{len(cookies)} staff session(s); a pool of up to 40 connections; server GC "
            f"thresholds {args.server_gc_threshold or 'Python defaults'}"
        )
        asyncio.run(phase_events(port, cookies, args.watchers, args.seconds, uvicorn.pid))
        asyncio.run(phase_polling(port, cookies, args.watchers, args.seconds, uvicorn.pid))
        connection.close()
    finally:
        uvicorn.terminate()
        try:
            uvicorn.wait(30)
        except subprocess.TimeoutExpired:
            uvicorn.kill()
            uvicorn.wait()
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
