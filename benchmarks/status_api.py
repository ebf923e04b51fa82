"""What polling the JSON status API costs, next to the cheapest Django view.

Starts gunicorn serving benchmarks/status_api_site.py on loopback, then loads
it with wrk (a second process) for each endpoint in turn, in alternating
rounds, all with the session cookie of a staff member who may view tasks
(not a superuser, whose permission checks would need no queries):

* ``empty``: ``JsonResponse({})``, the reference;
* ``staff-empty``: the same behind the API's permission check (session and
  user lookups), to tell authentication's cost from the task read's;
* ``status``: ``GET /bgtasks/<name>/`` of a running task (200 with the state);
* ``status-304``: the same with ``If-None-Match`` (304, no body).

It prints req/s, p99 latency and bytes per response (medians over the
rounds) and each endpoint's req/s as a ratio of ``empty``'s and of
``staff-empty``'s. The target: ``status`` at least 0.8x ``empty``.

Then, with the server stopped, it times in this process the pieces a status
request is made of (the session, user and permission reads that
authentication costs, the task read, the ETag and the JSON), to show where
the time goes.

Usage (needs wrk: ``apt-get install wrk``):

    .venv/bin/python benchmarks/status_api.py [--database-url URL] [--rounds 5]
        [--duration 5] [--connections 8] [--workers 2]

Without ``--database-url`` it uses a SQLite file in a temp dir. With a
PostgreSQL URL it creates a scratch database beside the one named, and drops
it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
TASK = "log-cleanup"
ENDPOINTS = {
    "empty": ("/bench/empty/", {}),
    "staff-empty": ("/bench/staff-empty/", {}),
    "status": (f"/bgtasks/{TASK}/", {}),
    "status-304": (f"/bgtasks/{TASK}/", {"If-None-Match": "<etag>"}),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scratch_postgres(url: str) -> tuple[str, str]:
    """Create a scratch database on the server ``url`` names; return its URL and name."""
    import psycopg

    name = f"bgtasks_bench_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlsplit(url)._replace(path=f"/{name}").geturl(), name


def drop_postgres(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def prepare(database_url: str) -> tuple[str, str]:
    """Migrate, make a staff member with the view permission and a session,
    and a running task.
    Returns the session cookie and the task's current ETag."""
    os.environ["BENCH_DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.status_api_site"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.core.management import call_command
    from django.test import Client

    from django_bgtasks.models import BackgroundTask

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_backgroundtask"))
    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"].value
    # A long ttl: the task reads as running, with a fixed ETag, for the whole run.
    BackgroundTask.objects.try_claim(
        TASK, "web-1:4242:bench", {"done": 512, "total": 1000, "phase": "deleting"}, ttl=86400
    )
    response = client.get(f"/bgtasks/{TASK}/", HTTP_HOST="127.0.0.1")
    assert response.status_code == 200, response.content
    from django.db import connections

    connections.close_all()
    return cookie, str(response["ETag"])


def start_server(database_url: str, port: int, workers: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        BENCH_DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="benchmarks.status_api_site",
        PYTHONPATH=str(ROOT),
    )
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "benchmarks.status_api_site:application",
            f"--bind=127.0.0.1:{port}",
            f"--workers={workers}",
            # gthread keeps connections alive, as a proxy in front would.
            "--worker-class=gthread",
            "--threads=1",
            "--keep-alive=30",
            "--log-level=warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/bench/empty/", timeout=1).read()
            return server
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"gunicorn did not start; see {log}:\n{log.read_text()}")


def check(port: int, path: str, headers: dict[str, str], expected: int) -> None:
    """One request before the load, to be sure wrk measures the right answer."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        status = urllib.request.urlopen(request, timeout=5).status  # noqa: S310
    except urllib.error.HTTPError as exc:
        status = exc.code
    if status != expected:
        raise SystemExit(f"{path} with {headers} answered {status}, not {expected}")


def wrk(
    port: int, path: str, headers: dict[str, str], args: argparse.Namespace
) -> dict[str, float]:
    command = [
        "wrk",
        "--threads=1",
        f"--connections={args.connections}",
        f"--duration={args.duration}s",
        "--latency",
    ]
    for key, value in headers.items():
        command += ["--header", f"{key}: {value}"]
    command.append(f"http://127.0.0.1:{port}{path}")
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    if "Non-2xx or 3xx responses" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors on {path}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()  # type: ignore[union-attr]
    p99_ms = float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    size, prefix = re.search(r"Transfer/sec:\s+([\d.]+)([KMG]?)B", out).groups()  # type: ignore[union-attr]
    per_second = float(size) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[prefix]
    return {"rps": rps, "p99_ms": p99_ms, "bytes": per_second / rps}


def breakdown(cookie: str, batches: int = 5, calls: int = 400) -> dict[str, float]:
    """Microseconds per call of each piece of a status request, in this process."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.http import JsonResponse

    from django_bgtasks.http import responses
    from django_bgtasks.models import BackgroundTask

    user_id = SessionStore(cookie).load()["_auth_user_id"]
    users = get_user_model()._default_manager
    state = BackgroundTask.objects.get_state(TASK)
    assert state is not None
    item = state.as_json()

    def permissions() -> None:
        # A fresh user object, as each request has: its permission cache is empty.
        user = users.get(pk=user_id)
        assert user.has_perm("django_bgtasks.view_backgroundtask")

    pieces = {
        "session row": lambda: SessionStore(cookie).load(),
        "user row": lambda: users.get(pk=user_id),
        "user row + permissions": permissions,
        "get_state()": lambda: BackgroundTask.objects.get_state(TASK),
        "TaskState.as_json()": state.as_json,
        "responses.etag()": lambda: responses.etag([item]),
        "JsonResponse(state)": lambda: JsonResponse(item),
        "JsonResponse({})": lambda: JsonResponse({}),
    }
    timings = {}
    for name, piece in pieces.items():
        samples = []
        for _ in range(batches):
            started = time.perf_counter()
            for _ in range(calls):
                piece()
            samples.append((time.perf_counter() - started) / calls * 1e6)
        timings[name] = statistics.median(samples)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="PostgreSQL server to use (default: SQLite)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--json", action="store_true", help="also print the raw figures as JSON")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install -y wrk")

    workdir = Path(tempfile.mkdtemp(prefix="bgtasks-bench-"))
    scratch: str | None = None
    if args.database_url:
        database_url, scratch = scratch_postgres(args.database_url)
        engine = "PostgreSQL"
    else:
        database_url = f"sqlite:///{workdir / 'bench.sqlite3'}"
        engine = "SQLite"
    server = None
    try:
        cookie, etag = prepare(database_url)
        port = free_port()
        server = start_server(database_url, port, args.workers, workdir / "gunicorn.log")
        session = {"Cookie": f"sessionid={cookie}"}
        targets = {
            name: (path, {**session, **dict.fromkeys(extra, etag)})
            for name, (path, extra) in ENDPOINTS.items()
        }
        for name, (path, headers) in targets.items():
            check(port, path, headers, 304 if name == "status-304" else 200)
        check(port, f"/bgtasks/{TASK}/", {}, 403)  # and no data without the session

        results: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        names = list(targets)
        for round_ in range(args.rounds):
            # Rotate the order, so that no endpoint always runs first or last.
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                path, headers = targets[name]
                results[name].append(wrk(port, path, headers, args))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        server = None
        pieces = breakdown(cookie)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
        if scratch is not None and args.database_url:
            from django.db import connections

            connections.close_all()
            drop_postgres(args.database_url, scratch)
        shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"{engine}, gunicorn {args.workers} gthread workers, wrk 1 thread "
        f"{args.connections} connections, {args.rounds} rounds x {args.duration} s "
        "(medians)"
    )
    base = statistics.median(r["rps"] for r in results["empty"])
    staff = statistics.median(r["rps"] for r in results["staff-empty"])
    print(
        f"{'endpoint':<12} {'req/s':>8} {'p99 ms':>8} {'B/resp':>7} {'x empty':>8} "
        f"{'x staff-empty':>14}"
    )
    for name, runs in results.items():
        rps = statistics.median(r["rps"] for r in runs)
        p99 = statistics.median(r["p99_ms"] for r in runs)
        size = statistics.median(r["bytes"] for r in runs)
        print(
            f"{name:<12} {rps:>8.0f} {p99:>8.2f} {size:>7.0f} {rps / base:>8.2f} "
            f"{rps / staff:>14.2f}"
        )

    def ratio(name: str, reference: str) -> float:
        pairs = zip(results[name], results[reference], strict=True)
        return statistics.median(a["rps"] / b["rps"] for a, b in pairs)

    verdict = "met" if ratio("status", "empty") >= 0.8 else "MISSED"
    print("median of the per-round ratios:")
    print(f"  status / empty       {ratio('status', 'empty'):.2f} (target >= 0.80: {verdict})")
    print(f"  status / staff-empty {ratio('status', 'staff-empty'):.2f}")
    print(f"  status-304 / status  {ratio('status-304', 'status'):.2f}")
    print("the pieces of a status request, in-process (median µs per call):")
    for name, micros in pieces.items():
        print(f"  {name:<24} {micros:>7.0f}")
    if args.json:
        print(json.dumps({"wrk": results, "pieces": pieces}))


if __name__ == "__main__":
    main()
