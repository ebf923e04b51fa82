"""The README's first command, end to end: ``example_project/demo.py``, run as a
newcomer runs it, on SQLite, on the embedded PostgreSQL it starts by itself,
and on the server named by ``DATABASE_URL`` when that is set.

The story: three ``manage.py bgtasks worker`` processes, one request that
exactly one of them claims, a SIGKILL of that worker mid-run, and another
worker resuming the run from its last checkpoint with a higher token. Each
test checks what the demo printed, then reads the database it left behind.

Each run gets its own data folder (and on ``DATABASE_URL`` its own database),
so these never touch a developer's demo data or another checkout's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.settings import CHECKOUT_ID

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "example_project" / "demo.py"
MANAGE = [sys.executable, str(ROOT / "example_project" / "manage.py")]
TTL = 3.0
POLL = 0.2  # the demo's workers' --poll
WORKERS = {"worker-1", "worker-2", "worker-3"}
OLD_ROWS = 1500
BATCH = 50  # log-cleanup's batch_size (demo_site/tasks.py), which the demo doesn't change
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
    checkout and pytest-xdist's process; its URL. Dropped afterwards."""
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = f"bgtasks_demo_{CHECKOUT_ID}{os.environ.get('PYTEST_XDIST_WORKER', '')}"

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
        env_after = dict(env, BGTASKS_DEMO_DB="sqlite")
    elif database == "postgres-env":
        env["DATABASE_URL"] = request.getfixturevalue("env_database")
        env_after = env
    else:
        env_after = env
    expected_db = {
        "sqlite": "SQLite",
        "postgres-embedded": "PostgreSQL, embedded",
        "postgres-env": "PostgreSQL from DATABASE_URL",
    }[database]

    if database != "postgres-embedded":
        story = check_story(run_demo(env, *args), expected_db)
        check_database(story, read_database(env_after))
        return
    pgdata = tmp_path / "data" / "pgdata"
    try:
        first = run_demo(env, *args)
        story = check_story(first, expected_db)
        # The demo stops the server it started when it exits...
        assert not (pgdata / "postmaster.pid").exists(), first.stderr
        # ...and keeps its data (read here by a manage.py that starts it again)...
        check_database(story, read_database(env_after))
        assert not (pgdata / "postmaster.pid").exists()
        # ...so a second run starts it again on the same folder, and the
        # task's tokens go on rising from the first run's.
        second = run_demo(env, *args)
        again = check_story(second, expected_db)
        assert again.first_token > story.resumed_token
        check_database(again, read_database(env_after))
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


@dataclass
class Story:
    """What the demo's output says happened."""

    pids: dict[str, int]
    holder: str
    first_token: int
    done_before_kill: int
    resumer: str
    resumed_token: int


def check_story(result: subprocess.CompletedProcess[str], expected_db: str) -> Story:
    """Assert everything the demo's timeline and summary say; return the story."""
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert re.search(rf"^database  {expected_db}", out, re.M), out

    # Three real `manage.py bgtasks worker` processes.
    started = re.search(r"^workers   (.+), each running `manage.py bgtasks worker ", out, re.M)
    assert started, out
    pids = {label: int(pid) for label, pid in re.findall(r"(worker-\d) \(pid (\d+)\)", started[1])}
    assert set(pids) == WORKERS and len(set(pids.values())) == 3

    # One request, claimed by exactly one worker (as that worker logged it).
    first = re.search(
        r"^  request      accepted \(request_run\); claimed by (worker-\d) alone, "
        r"with token (\d+)$",
        out,
        re.M,
    )
    assert first, out
    holder, first_token = first[1], int(first[2])
    claims = re.findall(
        r"  (worker-\d)\s+task 'log-cleanup' started \(token (\d+), (\w+), "
        r"attempt (\d+)\)$",
        out,
        re.M,
    )
    assert [c for c in claims if c[2] == "request"] == [(holder, str(first_token), "request", "1")]

    # The holder was SIGKILLed mid-run...
    killed = re.search(
        r"^  killed       (worker-\d) with SIGKILL at [\d.]+ s, mid-run, after (\d+) of (\d+) "
        r"rows \(its last checkpoint\)$",
        out,
        re.M,
    )
    assert killed and killed[1] == holder, out
    done_before_kill, total = int(killed[2]), int(killed[3])
    assert total == OLD_ROWS and 0 < done_before_kill < total
    assert f"SIGKILL {holder} (pid {pids[holder]}), the holder" in out

    # ...and exactly one other worker resumed it, with a higher token, from
    # the lost run's last checkpoint (lease.resume_from).
    resumed = re.search(
        r"^  resumed      by (worker-\d) with token (\d+) \(> (\d+)\), attempt 2 of 3, "
        r"from row (\d+) of (\d+) \(lease\.resume_from\)$",
        out,
        re.M,
    )
    assert resumed, out
    resumer, resumed_token = resumed[1], int(resumed[2])
    assert resumer != holder
    assert int(resumed[3]) == first_token < resumed_token
    # Its total is its own count: the checkpoint plus the old rows left when it
    # started. The killed holder may have deleted a batch (or more, on a
    # loaded machine) after its last checkpoint and before the SIGKILL landed;
    # those rows are gone and counted by nobody (demo_site/tasks.py says so),
    # so the total falls short of OLD_ROWS by whole batches. That every old
    # row ends deleted is asserted from the database below ("log").
    assert int(resumed[4]) == done_before_kill
    resumed_total = int(resumed[5])
    assert done_before_kill < resumed_total <= OLD_ROWS
    assert (OLD_ROWS - resumed_total) % BATCH == 0, resumed_total
    assert [c for c in claims if c[2] == "resume"] == [
        (resumer, str(resumed_token), "resume", "2")
    ]
    assert len(claims) == 2, claims

    # Not before the ttl had passed since the last heartbeat, by the database's
    # clock, and within a poll or so of it.
    delay = re.search(
        r"^  delay        ([\d.]+) s from the last heartbeat to the resume", out, re.M
    )
    assert delay and TTL <= float(delay[1]) <= TTL + POLL + 1.5, out
    assert f"a write with the killed worker's token {first_token} is refused" in out

    # History: the killed run lost at its checkpoint, the resumed one succeeded; nothing else.
    history = re.findall(
        r"^  (?:history)?\s+token (\d+)\s+(worker-\d)\s+(\w+)\s+attempt (\d)\s+(\w+)\s+"
        r"(\d+) of (\d+) rows(?:, from (\d+))?$",
        out,
        re.M,
    )
    assert len(history) == 2, out
    lost, finished = history
    assert lost == (
        str(first_token),
        holder,
        "request",
        "1",
        "lost",
        str(done_before_kill),
        "1500",
        "",
    )
    assert finished[:5] == (str(resumed_token), resumer, "resume", "2", "succeeded")
    # Done to the end (a batch deleted after the checkpoint is not counted again).
    assert finished[5] == finished[6] and finished[7] == str(done_before_kill)
    assert re.search(
        r"^  log          1500 of 1500 old entries deleted, 0 left; 300 of 300", out, re.M
    ), out
    others = sorted(WORKERS - {holder})
    assert re.search(
        rf"^  stopped      on SIGTERM, exit status: {others[0]} 0, {others[1]} 0$", out, re.M
    ), out

    # And it says how to go on.
    assert "make serve" in out
    assert "http://127.0.0.1:8001/" in out
    return Story(pids, holder, first_token, done_before_kill, resumer, resumed_token)


READ_DATABASE = """
import json
from demo_site.models import LogEntry
from django_bgtasks.models import BackgroundTask, TaskRun
runs = [
    {"token": r.token, "owner": r.owner, "outcome": r.outcome, "trigger": r.trigger,
     "attempt": r.attempt, "value": r.value, "started_at": r.started_at.isoformat(),
     "finished_at": r.finished_at.isoformat()}
    for r in TaskRun.objects.filter(name="log-cleanup").order_by("token")
]
print(json.dumps({
    "runs": runs,
    "state": BackgroundTask.objects.get_state("log-cleanup").as_json(),
    "logs": LogEntry.objects.count(),
    "workers": [w.as_json() for w in BackgroundTask.objects.work.workers()],
}))
"""


def read_database(env: dict[str, str]) -> dict[str, Any]:
    """What the demo left in its database, read by the example site's manage.py."""
    result = subprocess.run(
        [*MANAGE, "shell", "-v0", "-c", READ_DATABASE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def owner_pid(owner: str) -> int:
    return int(owner.split(":")[-2])


def check_database(story: Story, data: dict[str, Any]) -> None:
    """The rows agree with the story the demo told."""
    runs = {run["token"]: run for run in data["runs"]}
    lost, resumed = runs[story.first_token], runs[story.resumed_token]
    # Nothing ran in between, and nothing after.
    assert [t for t in runs if t >= story.first_token] == [story.first_token, story.resumed_token]
    assert (lost["outcome"], lost["trigger"], lost["attempt"]) == ("lost", "request", 1)
    assert owner_pid(lost["owner"]) == story.pids[story.holder]
    assert lost["value"]["done"] == story.done_before_kill
    assert (resumed["outcome"], resumed["trigger"], resumed["attempt"]) == (
        "succeeded",
        "resume",
        2,
    )
    assert owner_pid(resumed["owner"]) == story.pids[story.resumer]
    assert resumed["value"]["from"] == lost["value"]["done"]
    assert resumed["value"]["done"] == resumed["value"]["total"]
    # The lost run ended at its last heartbeat; the resume came a ttl or more later.
    gap = dt.datetime.fromisoformat(resumed["started_at"]) - dt.datetime.fromisoformat(
        lost["finished_at"]
    )
    assert gap.total_seconds() >= TTL
    state = data["state"]
    assert (state["token"], state["running"], state["outcome"]) == (
        story.resumed_token,
        False,
        "succeeded",
    )
    assert state["requested_at"] is None
    assert data["logs"] == 300  # only the recent entries are left
    # The two workers stopped with SIGTERM removed their rows; the killed one could not.
    listed = {worker["pid"] for worker in data["workers"]}
    assert story.pids[story.holder] in listed
    assert not listed & {pid for label, pid in story.pids.items() if label != story.holder}


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


def test_demo_clears_what_an_interrupted_demo_left(tmp_path: Path) -> None:
    """Ctrl-C stops the workers too, gracefully: log-cleanup is left
    interrupted, which workers resume at once. The next demo clears that (and
    a pending request) first, and tells its own story."""
    env = demo_env(tmp_path / "data", BGTASKS_DEMO_DB="sqlite")
    subprocess.run([*MANAGE, "migrate", "-v0"], env=env, check=True, timeout=60)
    leftover = (
        "from django_bgtasks.models import BackgroundTask as T;"
        "lease = T.objects.try_claim('log-cleanup', 'a-stopped-worker', ttl=60,"
        " run_args={'args': [], 'kwargs': {}});"
        "T.objects.update_state('log-cleanup', lease.owner, {'done': 700, 'total': 1500},"
        " token=lease.token);"
        "T.objects.release('log-cleanup', lease.owner, token=lease.token, outcome='interrupted');"
        "assert T.objects.request_run('log-cleanup');"
        "print(lease.token)"
    )
    held = subprocess.run(
        [*MANAGE, "shell", "-v0", "-c", leftover],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    result = run_demo(env)
    assert "setup     cleared what an earlier, interrupted demo left of log-cleanup" in (
        result.stdout
    ), result.stdout + result.stderr
    story = check_story(result, "SQLite")
    assert story.first_token > int(held.stdout.strip())
    data = read_database(env)
    check_database(story, data)
    # The interrupted run stays in history, as it ended.
    (interrupted,) = [run for run in data["runs"] if run["token"] == int(held.stdout)]
    assert (interrupted["outcome"], interrupted["value"]) == (
        "interrupted",
        {"done": 700, "total": 1500},
    )


@pytest.mark.parametrize(
    ("args", "extra", "message"),
    [
        (["--workers", "1"], {}, "--workers must be at least 2"),
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
