"""The workers' views list the Django Tasks each worker holds, from real
worker processes on every engine (issue 50): ``bgtasks workers`` and its
``--json``, ``GET <api>/workers/`` and the admin's workers table, for a live
worker (each task's id, path and start), then for one SIGKILLed (its tasks
stale, what comes of them said), then once another worker took them back
and ran them (the dead worker's lost tasks, with what became of each). The
takeover a dead worker's background run names: tests/faults/test_workers.py."""

from __future__ import annotations

import json
import os
import signal
from io import StringIO
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.test import Client

from django_bgtasks.conf import conf
from django_bgtasks.models import QueuedTask, Worker
from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import wait_until


def workers_json() -> list[dict[str, Any]]:
    out = StringIO()
    call_command("bgtasks", "workers", "--json", stdout=out)
    return list(json.loads(out.getvalue())["workers"])


def workers_text() -> str:
    out = StringIO()
    call_command("bgtasks", "workers", "--no-color", stdout=out)
    return out.getvalue()


def test_each_worker_lists_the_django_tasks_it_holds_live_then_killed(
    tasks_operator_alias: str, tmp_path: Path, make_staff: Any
) -> None:
    started = tmp_path / "started"
    # Two runs of a task with a 2 s lease and 3 attempts ("retrying"), whose
    # first attempt sleeps a minute and whose second returns at once.
    results = [
        djtasks.sleeps_first.using(backend="retrying").enqueue(str(started), 60) for _ in range(2)
    ]
    ids = sorted(result.id for result in results)
    # Workers that beat every 0.3 s: silent 0.9 s after a SIGKILL.
    group = Workers(
        tasks_operator_alias,
        tmp_path,
        args=("--poll", "0.05"),
        scenario=("beating", "0.3"),
        TASKS=settings.TASKS,
    )
    viewer = Client()
    viewer.force_login(make_staff("viewer", superuser=True))
    try:
        worker = group.start("--queue", "default", "--concurrency", "2")
        wait_until(
            "both runs",
            lambda: started.exists() and len(started.read_text().splitlines()) == 2,
            60,
        )

        def mine() -> dict[str, Any] | None:
            found = [w for w in workers_json() if w["pid"] == worker.pid]
            return found[0] if found else None

        live = wait_until("its report", mine, 30)
        held = live["django_tasks"]
        assert sorted(task["id"] for task in held) == ids
        assert {(task["task"], task["stale"]) for task in held} == {
            ("tests.djtasks.sleeps_first", False)
        }
        assert all(task["started_at"] and task["token"] == 1 for task in held)
        [line] = [line for line in workers_text().splitlines() if live["id"] in line]
        assert "Django Tasks: tests.djtasks.sleeps_first" in line and all(i in line for i in ids)
        [api] = [
            w for w in viewer.get("/bgtasks/workers/").json()["workers"] if w["pid"] == worker.pid
        ]
        assert sorted(task["id"] for task in api["django_tasks"]) == ids
        admin = viewer.get("/admin/django_bgtasks/backgroundtask/").content.decode()
        assert all(i in admin for i in ids)

        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        dead = wait_until(
            "the worker silent and its tasks stale, by the database's clock",
            lambda: (
                (w := mine())
                and w["silent"]
                and len(w["django_tasks"]) == 2
                and all(task["stale"] for task in w["django_tasks"])
                and w
            ),
            timeout=30,
        )
        [line] = [line for line in workers_text().splitlines() if dead["id"] in line]
        assert "no heartbeat within its ttl: a worker's next poll puts it back" in line

        # Another worker's poll takes both back, then runs their second attempts.
        second = group.start("--queue", "default", "--concurrency", "2")
        after = wait_until(
            "the dead worker's tasks listed as lost, and run by the other",
            lambda: (
                (w := mine())
                and not w["django_tasks"]
                and {task["status"] for task in w["lost_tasks"]} == {"SUCCESSFUL"}
                and w
            ),
            timeout=60,
        )
        [other] = [w for w in workers_json() if w["pid"] == second.pid]
        assert sorted(task["id"] for task in after["lost_tasks"]) == ids
        assert {(task["task"], task["owner"]) for task in after["lost_tasks"]} == {
            ("tests.djtasks.sleeps_first", other["id"])
        }
        [line] = [line for line in workers_text().splitlines() if dead["id"] in line]
        assert "lost Django Tasks: tests.djtasks.sleeps_first" in line
        assert line.count(f"(successful on {other['id']})") == 2
        [api] = [
            w for w in viewer.get("/bgtasks/workers/").json()["workers"] if w["pid"] == worker.pid
        ]
        assert api["lost_tasks"] == after["lost_tasks"]
        admin = viewer.get("/admin/django_bgtasks/backgroundtask/").content.decode()
        assert "lost Django Tasks" in admin and f"successful on {other['id']}" in admin
    finally:
        group.stop_all()
    # The database: both rows ended by the other worker, on their second
    # attempt, and the dead worker's row names both as lost.
    rows = QueuedTask.objects.using(conf.DATABASE).filter(uuid__in=ids)
    assert {(row.status, row.owner, row.attempts) for row in rows} == {
        ("SUCCESSFUL", other["id"], 2)
    }
    lost = Worker.objects.using(conf.DATABASE).get(id=dead["id"]).lost
    assert sorted(lost) == ids
