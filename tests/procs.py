"""Real worker processes for the concurrency tests.

The test starts ``python -m tests.procs <scenario> ...`` with the test
database's connection settings in the environment. Each worker sets Django up
on its own, says ``ready``, waits for ``go`` on stdin (so that all of them
start together), runs its scenario and prints one ``result <json>`` line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

ENV_DB = "BGTASKS_TEST_DB"
ENV_SETTINGS = "BGTASKS_TEST_SETTINGS"
# The apps of a worker process (and of tests/worker_settings.py).
WORKER_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_bgtasks",
    "tests.testapp",
    "tests.workerapp",
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = TypeVar("T")


# --- the test side -------------------------------------------------------------


def require_server(connection: Any, alias: str) -> None:
    """Fail, with the reason, when a server the suite needs can't be reached."""
    import pytest

    try:
        connection.ensure_connection()
    except Exception as exc:
        pytest.fail(
            f"The server of the {alias!r} database can't be reached: {exc}. "
            "The suite tests real databases and does not skip them.",
            pytrace=False,
        )
    finally:
        connection.close()


def worker_env(alias: str, **bgtasks_settings: Any) -> dict[str, str]:
    from django.db import connections

    db = connections[alias].settings_dict
    keys = (
        "ENGINE",
        "NAME",
        "USER",
        "PASSWORD",
        "HOST",
        "PORT",
        "OPTIONS",
        "DISABLE_SERVER_SIDE_CURSORS",
    )
    env = dict(os.environ)
    env[ENV_DB] = json.dumps({key: db[key] for key in keys if key in db}, default=str)
    env[ENV_SETTINGS] = json.dumps(bgtasks_settings, default=_encode_setting)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    # Warnings are errors in the workers too, with pyproject.toml's one
    # exception (platformdirs' note about XDG_RUNTIME_DIR, for the chaos
    # process that restarts the embedded PostgreSQL).
    env["PYTHONWARNINGS"] = "error,ignore:XDG_RUNTIME_DIR is not set:UserWarning"
    return env


# A setting's value JSON has no type for (SCHEDULES' timedelta), across to a worker.
_TIMEDELTA = "__timedelta_seconds__"


def _encode_setting(value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        return {_TIMEDELTA: value.total_seconds()}
    raise TypeError(f"a worker's setting can't be {type(value).__name__}")


def _decode_setting(value: dict[str, Any]) -> Any:
    if set(value) == {_TIMEDELTA}:
        return dt.timedelta(seconds=value[_TIMEDELTA])
    return value


class Worker:
    """One worker process, started and waiting for ``go``."""

    def __init__(self, alias: str, scenario: str, *args: Any, **settings: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.procs", scenario, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=worker_env(alias, **settings),
            cwd=ROOT,
        )
        self.lines: list[str] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, word: str, timeout: float = 30) -> str:
        """Read stdout until a line starting with ``word``; return that line."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(
                    f"worker {self.pid} exited ({self.process.wait()}) before {word!r}; "
                    f"it said {self.lines}"
                )
            self.lines.append(line.rstrip("\n"))
            if line.startswith(word):
                return line.rstrip("\n")
        raise AssertionError(f"worker {self.pid} did not say {word!r} in {timeout} s")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def result(self, timeout: float = 60) -> Any:
        line = self.wait_for("result", timeout)
        self.process.wait(timeout)
        return json.loads(line.split(" ", 1)[1])

    def kill(self) -> None:
        """Kill the worker if it is still running, and close its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()


def wait_until(
    what: str,
    check: Callable[[], T | None],
    timeout: float = 30,
    *,
    every: float = 0.05,
    why: str = "",
) -> T:
    """Poll ``check`` every ``every`` seconds until it returns something
    truthy, and return that; fail after ``timeout`` seconds, saying ``what``
    was awaited (and ``why`` the timeout is what it is, if that matters to
    the reader of the failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    because = f" ({why})" if why else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{because}")


def run_python(
    code: str,
    *,
    settings: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] = ROOT,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a Python process of its own, from ``cwd``,
    for what this process can't show any more (an import, a ``setup()``, a
    project without the app): with ``settings``, that settings module, the
    checkout on the path and warnings as errors; else ``env`` (this one's by
    default). Fail with its stderr unless it exits 0."""
    if settings is not None:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "PYTHONWARNINGS": "error"}
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def start_together(workers: Sequence[Worker]) -> None:
    for worker in workers:
        worker.wait_for("ready")
    for worker in workers:
        worker.go()


# --- the worker side -------------------------------------------------------------


def _setup_django() -> None:
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=WORKER_APPS,
        DATABASES={"default": json.loads(os.environ[ENV_DB])},
        USE_TZ=True,
        **json.loads(os.environ.get(ENV_SETTINGS, "{}"), object_hook=_decode_setting),
    )
    django.setup()


def _ready() -> None:
    from django.db import connection

    connection.ensure_connection()  # connect before the start line, not after
    print("ready", flush=True)
    sys.stdin.readline()


def _result(value: Any) -> None:
    print("result " + json.dumps(value), flush=True)


def race(prefix: str, count: str, owner: str) -> None:
    """Claim ``prefix-0`` .. ``prefix-<count-1>``, all at once with the others."""
    from django_bgtasks.models import BackgroundTask

    names = [f"{prefix}-{i}" for i in range(int(count))]
    _ready()
    won = {}
    began = time.monotonic()
    for name in names:
        lease = BackgroundTask.objects.try_claim(name, owner, {"by": owner}, ttl=60)
        if lease is not None:
            won[name] = lease.token
    _result({"won": won, "began": began, "ended": time.monotonic()})


def storm(name: str, ttl: str, seconds: str, owner: str) -> None:
    """Grab a short lease over and over for ``seconds``; hold it for a random
    time (often past the ttl, so others take over), and sometimes release."""
    from django_bgtasks.models import BackgroundTask

    objects = BackgroundTask.objects
    rng = random.Random(owner)
    _ready()
    deadline = time.monotonic() + float(seconds)
    claims, released = [], []
    while time.monotonic() < deadline:
        lease = objects.try_claim(name, owner, {"by": owner}, ttl=float(ttl))
        if lease is None:
            time.sleep(rng.uniform(0, 0.02))
            continue
        claims.append(lease.token)
        time.sleep(rng.uniform(0, 1.5 * float(ttl)))
        if rng.random() < 0.5 and objects.release(name, owner, token=lease.token):
            released.append(lease.token)
    _result({"claims": claims, "released": released})


def _db_now() -> Any:
    """The database's clock, for timestamps the tests compare across processes."""
    from django.db import connection

    sql = {
        "postgresql": "SELECT clock_timestamp()",
        "mysql": "SELECT SYSDATE(6)",
    }.get(connection.vendor, "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
    with connection.cursor() as cursor:
        cursor.execute(sql)
        now = cursor.fetchone()[0]
    if isinstance(now, str):
        now = dt.datetime.fromisoformat(now)
    if now.tzinfo is None:  # SQLite's text and MySQL's DATETIME: naive UTC
        now = now.replace(tzinfo=dt.UTC)
    return now


def _fenced_increment(running: Any, counter: str) -> int:
    """One fenced read-modify-write of ``counter``, logged in the ledger."""
    from django.db import transaction

    with transaction.atomic():
        running.fence()
        return _ledger_increment(counter, running.owner, running.token)


def _ledger_increment(counter: str, owner: str, token: int) -> int:
    """Inside a fenced transaction: increment ``counter`` and log it in the ledger."""
    from tests.testapp.models import Counter, LedgerEntry

    began = _db_now()
    row = Counter.objects.select_for_update().get(name=counter)
    row.value += 1
    row.save(update_fields=["value"])
    LedgerEntry.objects.create(
        counter=counter,
        owner=owner,
        token=token,
        value=row.value,
        began_at=began,
        ended_at=_db_now(),
    )
    value: int = row.value
    return value


def _retry_outages(work: Callable[[], Any]) -> Any:
    """What a real job does with its own writes when the database restarts:
    reconnect and try again (the lease itself is the runner's business)."""
    from django.db import InterfaceError, OperationalError, connection

    while True:
        try:
            return work()
        except (OperationalError, InterfaceError):
            connection.close()
            time.sleep(0.1)


def hold(name: str, ttl: str, seconds: str) -> None:
    """Hold ``name`` under the runner, updating and doing a fenced increment in
    a loop, and saying ``idle`` between transactions (a safe point to pause
    it). Reports how the lease ended, and whether writes after that were refused."""
    from django.db import transaction

    from django_bgtasks import LeaseLost, TaskCancelled, lease
    from django_bgtasks.models import BackgroundTask

    _ready()
    report: dict[str, Any] = {"committed": 0, "updates": 0}
    deadline = time.monotonic() + float(seconds)
    try:
        with lease(name, ttl=float(ttl), value={"by": "holder"}) as running:
            report["token"], report["owner"] = running.token, running.owner
            print(f"held {running.token}", flush=True)
            while time.monotonic() < deadline:
                running.update({"by": "holder", "i": report["updates"] + 1})
                report["updates"] += 1
                _retry_outages(lambda: _fenced_increment(running, name))
                report["committed"] += 1
                print(f"idle {report['committed']}", flush=True)
                time.sleep(0.3)
        report["ended"] = "finished"
    except LeaseLost as exc:
        report["ended"] = "lost"
        report["reason"] = exc.reason
        # A woken holder that tries again is refused, locally and by the database.
        try:
            _retry_outages(lambda: _fenced_increment(running, name))
            report["fence_after_loss"] = "accepted"
        except LeaseLost:
            report["fence_after_loss"] = "refused"

        def db_fence() -> bool:
            with transaction.atomic():
                return BackgroundTask.objects.fence(name, running.owner, running.token)

        report["db_fence_after_loss"] = _retry_outages(db_fence)
        report["update_after_loss"] = _retry_outages(
            lambda: BackgroundTask.objects.update_state(
                name, running.owner, {"by": "holder", "late": True}, token=running.token
            )
        )
    except TaskCancelled:
        report["ended"] = "cancelled"
    _result(report)


def standby(name: str, ttl: str) -> None:
    """Poll every 0.1 s until the lease can be claimed; then hold it (renewed
    by the runner) until told to stop, and report when it took over."""
    from django_bgtasks.core.runner import RunningLease

    _ready()
    attempts = 0
    while True:
        attempts += 1
        running = RunningLease.claim(name, ttl=float(ttl), value={"by": "standby"})
        if running is not None:
            break
        time.sleep(0.1)
    claimed_at = time.monotonic()
    print(f"claimed {running.token}", flush=True)
    sys.stdin.readline()  # hold until the test says so
    running.check()
    running.finish(None)
    _result({"claimed_at": claimed_at, "token": running.token, "attempts": attempts})


def counter(name: str, ttl: str, seconds: str) -> None:
    """Take turns on a short lease; inside it, fenced increments with random
    pauses, some longer than the ttl while the row is locked."""
    from django_bgtasks import LeaseHeld, LeaseLost, lease

    rng = random.Random()
    _ready()
    report = {"committed": 0, "lost": 0, "held_by_other": 0, "claims": 0}
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            with lease(name, ttl=float(ttl)) as running:
                report["claims"] += 1
                for _ in range(rng.randint(1, 5)):
                    _fenced_increment_with_pause(running, name, rng, float(ttl))
                    report["committed"] += 1
        except LeaseHeld:
            report["held_by_other"] += 1
            time.sleep(rng.uniform(0, 0.05))
        except LeaseLost:
            report["lost"] += 1
    _result(report)


def _fenced_increment_with_pause(
    running: Any, counter: str, rng: random.Random, ttl: float
) -> None:
    from django.db import transaction

    from tests.testapp.models import Counter, LedgerEntry

    with transaction.atomic():
        running.fence()
        began = _db_now()
        row = Counter.objects.select_for_update().get(name=counter)
        # Sometimes stall inside the fenced transaction for longer than the ttl:
        # nobody may take over until it ends, and this holder must notice after.
        time.sleep(rng.choice([0, 0, 0, 0.01, 0.05, ttl * 1.5]))
        row.value += 1
        row.save(update_fields=["value"])
        LedgerEntry.objects.create(
            counter=counter,
            owner=running.owner,
            token=running.token,
            value=row.value,
            began_at=began,
            ended_at=_db_now(),
        )


def bgtasks(*args: str) -> None:
    """``manage.py bgtasks ...`` in this process: the real command (a worker),
    through the command line as manage.py runs it, so that a ``CommandError``
    exits with its own status (a worker stopped at once: 128 + the signal).
    The system checks are skipped, as ``call_command`` skips them."""
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", "bgtasks", "--skip-checks", *args])


def beating(seconds: str, *args: str) -> None:
    """``bgtasks ...`` (a worker) whose workers beat every ``seconds`` instead
    of every 5 s, so their ttl (three beats) is short and a test of a killed
    worker is quick. Set before the command makes its Worker, which reads it."""
    from django_bgtasks.worker import heartbeat

    heartbeat.WORKER_BEAT_SECONDS = float(seconds)
    bgtasks(*args)


def requester(name: str, first: str, count: str, seconds: str) -> None:
    """Request ``name`` with n = first .. first+count-1, each until accepted
    (one request may be pending at a time), all at once with the others."""
    from django_bgtasks.models import BackgroundTask

    _ready()
    accepted, refused = [], 0
    deadline = time.monotonic() + float(seconds)
    for n in range(int(first), int(first) + int(count)):
        while time.monotonic() < deadline:
            if BackgroundTask.objects.request_run(name, kwargs={"n": n}, requested_by="test"):
                accepted.append(n)
                break
            refused += 1
            time.sleep(0.01)
    _result({"accepted": accepted, "refused": refused})


def enqueue(path: str, prefix: str, count: str) -> None:
    """Enqueue ``count`` Django Tasks (``tests.djtasks.record``) through Django's
    public API, all at once with the others; report their result ids."""
    from tests import djtasks

    _ready()
    ids = [djtasks.record.enqueue(path, f"{prefix}-{i}").id for i in range(int(count))]
    _result({"ids": ids})


def enqueue_unique(path: str, count: str) -> None:
    """Enqueue the unique task ``tests.djtasks.unique_record`` ``count`` times,
    all at once with the others; report the result ids it was given."""
    from tests import djtasks

    _ready()
    ids = [djtasks.unique_record.enqueue(path, "once", 3).id for _ in range(int(count))]
    _result({"ids": ids})


def traced(path: str, *scenario: str) -> None:
    """``scenario`` (``bgtasks worker ...``) with the OpenTelemetry SDK
    configured, its spans written to ``path`` (tests/otel.py)."""
    from tests.otel import traced_worker

    traced_worker(path)
    SCENARIOS[scenario[0]](*scenario[1:])


def without_otel(name: str) -> None:
    """Enqueue ``tests.djtasks.echo`` and request ``name`` where
    ``opentelemetry`` can't be imported (as without the otel extra: see
    ``__main__``); report what was filed and what was imported."""
    from django_bgtasks import tracing
    from django_bgtasks.models import BackgroundTask
    from tests import djtasks

    result = djtasks.echo.enqueue("untraced")
    requested = BackgroundTask.objects.request_run(name)
    imported = sorted(
        module
        for module, found in sys.modules.items()
        if module.startswith("opentelemetry") and found is not None
    )
    _result(
        {"id": result.id, "requested": requested, "enabled": tracing.ENABLED, "imported": imported}
    )


SCENARIOS: dict[str, Callable[..., None]] = {
    "traced": traced,
    "without_otel": without_otel,
    "enqueue": enqueue,
    "enqueue_unique": enqueue_unique,
    "bgtasks": bgtasks,
    "beating": beating,
    "requester": requester,
    "race": race,
    "storm": storm,
    "hold": hold,
    "standby": standby,
    "counter": counter,
}


if __name__ == "__main__":
    if sys.argv[1] == "without_otel":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # importing it fails
    _setup_django()
    SCENARIOS[sys.argv[1]](*sys.argv[2:])


# --- the machine's MariaDB: stopped and started by the restart tests ---------------


def mariadb_is_local(alias: str) -> bool:
    """Whether ``alias`` is this machine's MariaDB, which a test may restart."""
    from django.db import connections

    host = connections[alias].settings_dict.get("HOST") or "localhost"
    return host in ("127.0.0.1", "localhost", "::1") and shutil.which("service") is not None


def mariadb_up(alias: str) -> bool:
    from django.db import connections

    db = connections[alias].settings_dict
    try:
        socket.create_connection((db["HOST"] or "127.0.0.1", int(db["PORT"] or 3306)), 1).close()
    except OSError:
        return False
    return True


def start_mariadb(alias: str, timeout: float = 60) -> None:
    """Start the machine's MariaDB and wait until it answers. (Debian's init
    script waits half a minute for a check of its own that fails here, so it
    runs in the background while the port is polled.)"""
    # Detached by the shell, so that no Popen outlives the test.
    subprocess.run(
        ["sh", "-c", "service mariadb start >/dev/null 2>&1 &"],
        check=True,
        start_new_session=True,
    )
    wait_until("MariaDB to answer", lambda: mariadb_up(alias), timeout)


def stop_mariadb(alias: str) -> None:
    """Shut the server down (every connection is cut) and wait until it is gone."""
    from django.db import connections

    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute("SHUTDOWN")
    connection.close()
    wait_until("MariaDB to stop", lambda: not mariadb_up(alias))
