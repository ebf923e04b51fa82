"""Two releases at once, as in a rolling deploy, on every database: the new
release enqueues Django Tasks that the old release's workers can't import (a
module it lacks, or a function its version of a module lacks). An old worker
hands such a task back ``READY`` with the attempt given back, and the admin,
the API and ``bgtasks show`` say it waits for a worker that can import it;
a worker of the new release then runs it. With none for
``OPTIONS["IMPORT_DEADLINE"]``, it ends ``FAILED`` with the import error.

Each release is a folder of its own on its workers' ``PYTHONPATH``; this
process, the new release's web process, imports the new one's."""

from __future__ import annotations

import functools
import importlib
import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import QuerySet
from django.test import Client

from django_bgtasks.conf import conf
from django_bgtasks.models import QueuedTask
from django_bgtasks.operations.queued import WAITING_FOR_IMPORT
from tests.faults.harness import Workers
from tests.procs import wait_until

NOT_IMPORTABLE = "django_bgtasks.exceptions.TaskNotImportable"

_IMPORT = """
try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task
"""
_KEPT = """

@task(max_attempts=3)
def kept():
    return "kept"
"""
_ADDED = """

@task(max_attempts=3)
def added(n):
    return n + 1
"""
_BRAND_NEW = """

@task(max_attempts=3)
def brand_new():
    return "new"
"""


class Releases:
    """The two releases' folders, under module names of this test's own."""

    def __init__(self, root: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        # A module both releases have (the new one's with a task more), and
        # one only the new release has.
        self.shared, self.new_only = f"deploy_{tag}_shared", f"deploy_{tag}_new"
        self.old, self.new = root / "old", root / "new"
        for folder in (self.old, self.new):
            folder.mkdir()
        (self.old / f"{self.shared}.py").write_text(_IMPORT + _KEPT)
        (self.new / f"{self.shared}.py").write_text(_IMPORT + _KEPT + _ADDED)
        (self.new / f"{self.new_only}.py").write_text(_IMPORT + _BRAND_NEW)

    def new_task(self, module: str, name: str) -> Any:
        return getattr(importlib.import_module(module), name)


@pytest.fixture
def releases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Releases:
    made = Releases(tmp_path)
    monkeypatch.syspath_prepend(str(made.new))  # this process: the new release's
    return made


@pytest.fixture
def release_workers(tmp_path: Path) -> Iterator[Callable[..., Workers]]:
    """``release_workers(code, name, tasks=None)``: workers of the release in
    folder ``code`` on the test's database (``TASKS`` the suite's unless
    given), each logged under ``name``, all stopped at the test's end."""
    groups: list[Workers] = []

    def workers(code: Path, name: str, tasks: dict[str, Any] | None = None) -> Workers:
        logs = tmp_path / f"{name}-logs"
        logs.mkdir()
        group = Workers(
            conf.DATABASE,
            logs,
            args=("--poll", "0.05"),
            pythonpath=code,
            TASKS=tasks or settings.TASKS,
        )
        groups.append(group)
        return group

    yield workers
    for group in groups:
        group.stop_all()


def _rows() -> QuerySet[QueuedTask]:
    return QueuedTask.objects.using(conf.DATABASE)


def _row(result_id: str) -> QueuedTask:
    return _rows().get(uuid=result_id)


def _ended(result_id: str, status: str) -> QueuedTask | None:
    row = _row(result_id)
    return row if row.status == status else None


def _handed_back(result_id: str) -> QueuedTask | None:
    row = _row(result_id)
    errors = row.errors or []
    handed = row.status == "READY" and errors and errors[-1]["exception_class_path"]
    return row if handed == NOT_IMPORTABLE else None


def _surfaces(viewer: Client, result_id: str) -> dict[str, Callable[[], bool]]:
    """Whether ``bgtasks show``, the API and the admin each say that the task
    ``result_id`` is ready, waiting for a worker that can import it."""

    def shown_by_the_cli() -> bool:
        out = StringIO()
        call_command("bgtasks", "show", result_id, stdout=out)
        return f"ready ({WAITING_FOR_IMPORT})" in out.getvalue()

    def shown_by_the_api() -> bool:
        shown = viewer.get(f"/bgtasks/django-tasks/{result_id}/").json()
        return (shown["status"], shown["waiting"]) == ("READY", WAITING_FOR_IMPORT)

    def shown_by_the_admin() -> bool:
        page = viewer.get(f"/admin/django_bgtasks/queuedtask/{result_id}/change/")
        return f"ready ({WAITING_FOR_IMPORT})" in page.content.decode()

    return {
        "bgtasks show": shown_by_the_cli,
        "the API": shown_by_the_api,
        "the admin": shown_by_the_admin,
    }


def test_an_old_worker_hands_a_new_task_back_and_a_new_worker_runs_it(
    tasks_operator_alias: str,
    releases: Releases,
    release_workers: Callable[..., Workers],
    make_staff: Any,
) -> None:
    old_workers = release_workers(releases.old, "old")
    old_workers.start("--concurrency", "2")
    added = releases.new_task(releases.shared, "added").enqueue(41)
    brand_new = releases.new_task(releases.new_only, "brand_new").enqueue()
    ids = {f"{releases.shared}.added": added.id, f"{releases.new_only}.brand_new": brand_new.id}

    # The old worker claims each, can't import it, and gives it back: READY,
    # no attempt spent, and why kept.
    for path, result_id in ids.items():
        row = wait_until(f"{path} handed back", functools.partial(_handed_back, result_id), 30)
        assert row.attempts == 0 and row.max_attempts == 3, row.errors
        worker = row.worker_ids[0]
        assert f"worker {worker} could not import {path}" in row.errors[-1]["traceback"]
        # Said so in the worker's log: the task, the error, the worker.
        logged = [line for line in old_workers.output().splitlines() if result_id in line]
        assert any(
            "WARNING" in line and path in line and worker in line and "import" in line
            for line in logged
        ), old_workers.output()

        # ... and on each surface, beside the status. The old worker claims it
        # again after each hand-back's delay (1 s, then doubling), RUNNING for
        # the moment its import takes to fail, so each surface is polled
        # until it reads the task between two claims.
        viewer = Client()
        viewer.force_login(make_staff(f"viewer-{result_id[:8]}", superuser=True))
        for surface, says in _surfaces(viewer, result_id).items():
            wait_until(f"{surface} to say {path} waits for an import", says, 30)

    # The deploy goes on: the old worker stops, and a worker of the new
    # release runs both, on their first attempt, once the last hand-back's
    # wait is over (30 s at most).
    old_workers.stop_all()
    release_workers(releases.new, "new").start()
    for path, result_id in ids.items():
        wait_until(f"{path} to run", functools.partial(_ended, result_id, "SUCCESSFUL"), 90)
    for result_id in ids.values():
        row = _row(result_id)
        assert row.attempts == 1, row.errors
        assert [e["exception_class_path"] for e in row.errors] == [NOT_IMPORTABLE] * len(
            row.errors
        )
    assert _row(added.id).return_value == 42
    assert _row(brand_new.id).return_value == "new"
    # Nothing failed or is left running (the invariant, from the database).
    assert not _rows().exclude(status="SUCCESSFUL").exists()


def test_a_task_no_worker_can_import_fails_after_the_import_deadline(
    tasks_alias: str, releases: Releases, release_workers: Callable[..., Workers]
) -> None:
    deadline = 2
    tasks: dict[str, Any] = {**settings.TASKS}
    tasks["default"] = {**tasks["default"], "OPTIONS": {"IMPORT_DEADLINE": deadline}}
    old = release_workers(releases.old, "old", tasks)
    old.start()
    result = releases.new_task(releases.new_only, "brand_new").enqueue()
    row = wait_until("the task to fail", functools.partial(_ended, result.id, "FAILED"), 30)
    # Handed back until the deadline had passed since its first claim, then
    # FAILED on that claim's attempt, with the import error itself.
    assert row.attempts == 1
    assert row.last_attempted_at is not None and row.started_at is not None
    assert (row.last_attempted_at - row.started_at).total_seconds() >= deadline
    kinds = [error["exception_class_path"] for error in row.errors]
    assert kinds[:-1] == [NOT_IMPORTABLE] * (len(kinds) - 1) and len(kinds) >= 2
    assert kinds[-1] == "builtins.ModuleNotFoundError", row.errors
    assert releases.new_only in row.errors[-1]["traceback"]
    assert "no worker could import it" in old.output(), old.output()
