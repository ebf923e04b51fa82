"""The README's first command, end to end: ``example_project/demo.py``, run as a
newcomer runs it, on SQLite, on the embedded PostgreSQL it starts by itself,
and on the server named by ``DATABASE_URL`` when that is set.

Each run gets its own data folder (and on ``DATABASE_URL`` its own database),
so these never touch a developer's demo data or another checkout's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.settings import CHECKOUT_ID

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "example_project" / "demo.py"
TTL = 3.0
REPLICAS = {"replica-1", "replica-2", "replica-3"}
# The budget for the demo, after install.
DEMO_LIMIT = 60


def demo_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The caller's environment, minus anything that would choose the demo's
    database or settings for it, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("BGTASKS_DEMO")
        and key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["BGTASKS_DEMO_DATA"] = str(data_dir)
    env.update(extra)
    return env


def run_demo(
    env: dict[str, str], *args: str, timeout: float = DEMO_LIMIT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.fixture
def env_database() -> Iterator[str]:
    """A fresh database on ``DATABASE_URL``'s server, named after this
    checkout; its URL. Dropped afterwards."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = f"bgtasks_demo_{CHECKOUT_ID}"

    def admin(statement: str) -> None:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(statement)

    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(url)._replace(path=f"/{name}").geturl()
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


DATABASES = ["sqlite", "postgres-embedded"]
if os.environ.get("DATABASE_URL"):
    DATABASES.append("postgres-env")


@pytest.mark.parametrize("database", DATABASES)
def test_demo_tells_the_whole_story(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if database == "postgres-embedded":
        # Not under tmp_path: the server runs as another user, and every new
        # pytest session on this machine takes the group and other bits off
        # pytest's base folder, which would lock that user out mid-run.
        tmp_path = Path(tempfile.mkdtemp(prefix="bgtasks-demo-"))
        request.addfinalizer(lambda: shutil.rmtree(tmp_path, ignore_errors=True))
    env = demo_env(tmp_path / "data")
    args: list[str] = []
    if database == "sqlite":
        args.append("--sqlite")
    elif database == "postgres-env":
        env["DATABASE_URL"] = request.getfixturevalue("env_database")
    expected_db = {
        "sqlite": "SQLite",
        "postgres-embedded": "PostgreSQL, embedded",
        "postgres-env": "PostgreSQL from DATABASE_URL",
    }[database]

    if database != "postgres-embedded":
        check_story(run_demo(env, *args), expected_db)
        return
    pgdata = tmp_path / "data" / "pgdata"
    try:
        first = run_demo(env, *args)
        first_token = check_story(first, expected_db)
        # The demo stops the server it started when it exits...
        assert not (pgdata / "postmaster.pid").exists(), first.stderr
        # ...and keeps its data: a second run starts it again on the same
        # folder, and the task's tokens go on rising from the first run's.
        second = run_demo(env, *args)
        assert check_story(second, expected_db) > first_token + 1
        assert not (pgdata / "postmaster.pid").exists(), second.stderr
    finally:
        stop_postmaster(pgdata)


def stop_postmaster(pgdata: Path) -> None:
    """If a failed run left its embedded server up, stop it (fast shutdown)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)


def check_story(result: subprocess.CompletedProcess[str], expected_db: str) -> int:
    """Assert everything the demo's summary says; return the first claim's token."""
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(rf"^database  {expected_db}", out, re.M), out

    # Exactly one replica won the first try; the other two were told who holds it.
    first = re.search(
        r"^  first claim  (replica-\d) won with token (\d+); "
        r"refused: (.+) \(held by (replica-\d)\)$",
        out,
        re.M,
    )
    assert first, out
    winner, first_token, refused, held_by = first[1], int(first[2]), first[3], first[4]
    assert held_by == winner
    assert set(refused.split(", ")) == REPLICAS - {winner}
    assert len(re.findall(r"claimed log-cleanup: token \d+; it runs the task", out)) == 1
    assert len(re.findall(r"refused: log-cleanup is held by " + winner, out)) == 2

    # The winner was killed, and another replica took over with a higher token.
    killed = re.search(r"^  killed       (replica-\d) with SIGKILL at ([\d.]+) s", out, re.M)
    assert killed and killed[1] == winner, out
    takeover = re.search(r"^  takeover     (replica-\d) with token (\d+) \(> (\d+)\)", out, re.M)
    assert takeover, out
    assert takeover[1] != winner
    assert int(takeover[3]) == first_token
    assert int(takeover[2]) > first_token
    assert len(re.findall(r"took over log-cleanup: token \d+", out)) == 1
    assert "claimed log-cleanup again" not in out

    # Not before the ttl had passed since the last heartbeat, by the database's clock.
    delay = re.search(r"^  delay        ([\d.]+) s from the last heartbeat", out, re.M)
    assert delay and float(delay[1]) >= TTL, out

    # The killed run is in history as lost; the takeover's run succeeded; no other runs.
    history = re.findall(r"^  (?:history)?\s+token (\d+)  (replica-\d)\s+(\w+)\s", out, re.M)
    assert history == [
        (str(first_token), winner, "lost"),
        (takeover[2], takeover[1], "succeeded"),
    ], out
    assert re.search(
        r"^  log          1500 of 1500 old entries deleted, 0 left; 300 of 300", out, re.M
    ), out

    # And it says how to go on.
    assert "make serve" in out
    assert "http://127.0.0.1:8001/" in out
    return first_token


def test_demo_will_not_run_over_a_live_run(tmp_path: Path) -> None:
    """Someone else holds log-cleanup (another demo, ``make serve``): the
    demo says so and stops, and leaves that holder's lease alone."""
    env = demo_env(tmp_path / "data", BGTASKS_DEMO_DB="sqlite")
    manage = [sys.executable, str(ROOT / "example_project" / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, timeout=60)
    claim = (
        "from django_bgtasks.models import BackgroundTask as T;"
        "print(T.objects.try_claim('log-cleanup', 'someone-else', ttl=600).token)"
    )
    held = subprocess.run(
        [*manage, "shell", "-v0", "-c", claim],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    result = run_demo(env)
    assert result.returncode == 1
    assert "log-cleanup is running right now, held by someone-else" in result.stdout
    state = (
        "from django_bgtasks.models import BackgroundTask as T;"
        "s = T.objects.get_state('log-cleanup'); print(s.owner, s.token, s.running)"
    )
    after = subprocess.run(
        [*manage, "shell", "-v0", "-c", state],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert after.stdout.split() == ["someone-else", held.stdout.strip(), "True"]


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [
        (["--replicas", "1"], {}, "--replicas must be at least 2"),
        (["--ttl", "0"], {}, "--ttl must be above 0"),
        (["--ttl", "0.05"], {}, "from 0.1 to 10 seconds"),
        (
            [],
            {"BGTASKS_DEMO_DB": "mysql"},
            "BGTASKS_DEMO_DB is 'mysql'; use one of postgres, sqlite",
        ),
    ],
)
def test_demo_refuses_bad_options(
    args: list[str], extra: dict[str, str], message: str, tmp_path: Path
) -> None:
    result = run_demo(demo_env(tmp_path / "data", **extra), *args, timeout=30)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
