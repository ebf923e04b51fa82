"""The public names as docs/api.md describes them: what a TaskState derives
(status, progress, its JSON), run history queries, the registered-task
helpers, the async twins, and the error for a database without lease SQL."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import NotSupportedError, connections
from django.db.backends.dummy.base import DatabaseWrapper as DummyDatabaseWrapper
from django.utils import timezone

import django_bgtasks
from django_bgtasks import (
    LeaseLost,
    RunningLease,
    TaskCancelled,
    alease,
    background_task,
    get_task,
    lease,
    registered_tasks,
    runner,
    states,
    tasks,
)
from django_bgtasks import sql as lease_sql
from django_bgtasks.leases import TaskState
from django_bgtasks.models import BackgroundTask, TaskRun
from tests.dbtools import backdate, rows, runs
from tests.procs import ROOT

objects = BackgroundTask.objects


# --- the package's names, re-exported lazily ---------------------------------------------

# The module that defines each lazily re-exported name: the package hands out
# that very object, not a copy or a wrapper.
LAZY_NAMES = {
    "lease": runner,
    "alease": runner,
    "RunningLease": runner,
    "Lease": states,
    "TaskState": states,
    "background_task": tasks,
    "get_task": tasks,
    "registered_tasks": tasks,
    "BackgroundTaskFunction": tasks,
}


@pytest.mark.parametrize("name", sorted(LAZY_NAMES))
def test_a_lazy_name_is_the_object_its_module_defines(name: str) -> None:
    module = LAZY_NAMES[name]
    defined = getattr(module, name)
    assert defined.__module__ == module.__name__  # defined there, not imported
    assert getattr(django_bgtasks, name) is defined
    assert name in django_bgtasks.__all__


def test_every_exported_name_resolves_and_nothing_else_does() -> None:
    for name in django_bgtasks.__all__:
        assert getattr(django_bgtasks, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'LeaseManager'"):
        django_bgtasks.LeaseManager  # noqa: B018  (the lookup is the test)


# Run in a fresh interpreter: in this one, Django's set-up imported everything.
IMPORT_ALONE = """
import json, sys
import django_bgtasks
loaded_before_setup = sorted(m for m in sys.modules if m.startswith("django_bgtasks."))
try:
    django_bgtasks.lease
except Exception as exc:  # the models need the app registry
    refused_before_setup = type(exc).__name__
else:
    refused_before_setup = None
import django
django.setup()
from django_bgtasks import runner
print(json.dumps({
    "loaded_before_setup": loaded_before_setup,
    "refused_before_setup": refused_before_setup,
    "same_object_after_setup": django_bgtasks.lease is runner.lease,
}))
"""


def test_importing_the_package_alone_imports_no_runner_models_or_sql() -> None:
    """``import django_bgtasks`` before Django is set up (in a settings file,
    say) is safe: it loads the exceptions only; the runner, the models and the
    SQL come on first use, and are then the very objects they define."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONWARNINGS": "error"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALONE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["loaded_before_setup"] == ["django_bgtasks.exceptions"]
    assert found["refused_before_setup"] == "AppRegistryNotReady"
    assert found["same_object_after_setup"] is True


# --- TaskState: status, progress, as_json --------------------------------------


def state_with(value: Any = None, **fields: Any) -> TaskState:
    base: dict[str, Any] = {
        "name": "t",
        "value": value,
        "running": False,
        "owner": "a",
        "token": 1,
        "ttl": 30.0,
        "started_at": None,
        "finished_at": None,
        "updated_at": None,
        "cancel_requested": False,
        "outcome": "",
        "error": "",
        "stale": False,
        "heartbeat_age": None,
    }
    return TaskState(**{**base, **fields})


def test_status_reads_the_four_states_from_the_database(db_alias: str) -> None:
    lease_ = objects.try_claim("job", "a", ttl=30)
    assert objects.get_state("job").status == "running"
    objects.request_cancel("job")
    assert objects.get_state("job").status == "cancel requested"
    backdate(db_alias, "job", 31)
    assert objects.get_state("job").status == "stale"
    objects.expire_stale()
    assert objects.get_state("job").status == "idle"
    assert not objects.heartbeat("job", "a", token=lease_.token)


@pytest.mark.parametrize(
    ("value", "progress"),
    [
        ({"done": 3, "total": 4}, 0.75),
        ({"done": 9, "total": 4}, 1.0),  # clamped
        ({"done": -1, "total": 4}, 0.0),
        ({"done": 1, "total": 0}, None),  # no division by zero
        ({"done": 1, "total": 0, "progress": 0.5}, 0.5),  # falls back
        ({"progress": 0.25}, 0.25),
        ({"progress": 7}, 1.0),
        ({"progress": True}, None),  # a bool is not a number here
        ({"done": "3", "total": "4"}, None),
        ({"phase": "scanning"}, None),
        ([0.5], None),
        (None, None),
    ],
)
def test_progress_comes_from_done_and_total_or_progress(value: Any, progress: Any) -> None:
    assert state_with(value).progress == progress


def test_as_json_is_the_state_with_iso_times_status_and_progress(db_alias: str) -> None:
    objects.try_claim("job", "a", {"done": 1, "total": 2}, ttl=30)
    state = objects.get_state("job")
    data = json.loads(json.dumps(state.as_json()))  # JSON-ready as it is
    assert data["status"] == "running" and data["progress"] == 0.5
    assert data["value"] == {"done": 1, "total": 2}
    assert dt.datetime.fromisoformat(data["started_at"]) == state.started_at
    assert dt.datetime.fromisoformat(data["updated_at"]) == state.updated_at
    assert data["finished_at"] is None
    assert set(data) == set(TaskState.__dataclass_fields__) | {"status", "progress"}


# --- history -------------------------------------------------------------------


def finish_runs(name: str, count: int) -> list[int]:
    tokens = []
    for _ in range(count):
        claim = objects.try_claim(name, "a", ttl=30)
        objects.release(name, "a", token=claim.token)
        tokens.append(claim.token)
    return tokens


def test_for_task_lists_a_tasks_runs_newest_first(db_alias: str) -> None:
    tokens = finish_runs("job", 3)
    finish_runs("other", 1)
    assert list(TaskRun.objects.for_task("job").values_list("token", flat=True)) == tokens[::-1]
    assert str(TaskRun.objects.for_task("job").first()) == f"job #{tokens[-1]}"
    assert str(BackgroundTask.objects.get(name="job")) == "job"


def test_older_than_keeps_recent_runs_and_each_tasks_newest(db_alias: str) -> None:
    old, recent = finish_runs("job", 2)
    [only] = finish_runs("lonely", 1)
    long_ago = timezone.now() - dt.timedelta(days=40)
    TaskRun.objects.using(db_alias).filter(token__in=[old, only]).update(finished_at=long_ago)
    TaskRun.objects.using(db_alias).filter(name="job", token=recent).update(finished_at=long_ago)
    # Both of job's runs are old, but the newest is kept; lonely's only run too.
    assert list(TaskRun.objects.older_than(30).values_list("name", "token")) == [("job", old)]
    assert not TaskRun.objects.older_than(50).exists()
    TaskRun.objects.older_than(30).delete()
    assert objects.try_claim("job", "a", ttl=30).token == recent + 1


# --- registered tasks -------------------------------------------------------------


def test_description_options_and_the_registry() -> None:
    @background_task(name="t-documented", ttl=30)
    def documented(running: RunningLease) -> None:
        """Rebuild the search index.

        Takes a while."""

    @background_task(name="t-undocumented")
    def undocumented(running: RunningLease) -> None:
        pass

    assert documented.description == "Rebuild the search index."
    assert undocumented.description == ""
    longer = documented.options(ttl=600)
    assert (longer.ttl, longer.name, longer.func) == (600, "t-documented", documented.func)
    assert documented.options().ttl is None  # back to BGTASKS_TTL for that run
    assert get_task("t-documented").ttl == 30  # the registry is unchanged
    with pytest.raises(ValueError, match="ttl"):
        documented.options(ttl=-1)
    tasks = registered_tasks()
    assert tasks["t-documented"] is documented and tasks["t-undocumented"] is undocumented
    assert list(tasks) == sorted(tasks)


# --- the runner's view -----------------------------------------------------------


def test_a_running_lease_shows_who_holds_it_and_a_cancel_request(db_alias: str) -> None:
    with pytest.raises(TaskCancelled), lease("job", ttl=30) as running:
        assert (
            repr(running) == f"<RunningLease 'job' token={running.token} owner={running.owner!r}>"
        )
        assert (running.name, running.ttl, running.cancel_requested) == ("job", 30, False)
        objects.request_cancel("job")
        running.update({"done": 1})  # the renewal brings the request
    assert running.cancel_requested


def test_a_body_that_fails_after_losing_its_lease_raises_its_own_error(db_alias: str) -> None:
    """The work's exception wins over the loss, and the operator's release is
    not overwritten by a 'failed' from a holder that no longer holds it."""
    with pytest.raises(RuntimeError, match="late failure"), lease("job", ttl=30):
        assert objects.force_release("job")
        raise RuntimeError("late failure")
    assert objects.get_state("job").outcome == "released-by-operator"
    assert [run["outcome"] for run in runs(db_alias)] == ["released-by-operator"]


def test_a_started_task_that_outlived_its_lease_reports_lease_lost(db_alias: str) -> None:
    gate = threading.Event()

    @background_task(name="t-outlived", ttl=30)
    def outlived(running: RunningLease) -> str:
        gate.wait(10)
        return "done"

    started = outlived.start()
    assert started is not None
    assert objects.force_release("t-outlived")
    gate.set()
    assert started.wait(10)
    # It ran to the end, but part of it without the lease: the caller is told.
    assert started.result == "done" and isinstance(started.exception, LeaseLost)
    assert objects.get_state("t-outlived").outcome == "released-by-operator"


def test_a_heartbeat_interval_that_is_not_a_number_is_refused(
    db_alias: str, settings: Any
) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = "10"
    with (
        pytest.raises(TypeError, match="BGTASKS_HEARTBEAT_INTERVAL must be a number"),
        lease("job", ttl=30),
    ):
        pytest.fail("body must not run")
    assert rows(db_alias) == []


# --- async twins ---------------------------------------------------------------------


def test_the_operator_async_twins(db_alias: str) -> None:
    async def main() -> None:
        claim = await objects.atry_claim("job", "a", ttl=30)
        renewal = await objects.arenew("job", "a", token=claim.token, value={"n": 1})
        assert renewal is not None and not renewal.cancel_requested
        assert await objects.arequest_cancel("job")
        assert (await objects.arenew("job", "a", token=claim.token)).cancel_requested
        assert [s.name for s in await objects.alist_states()] == ["job"]
        assert await objects.aforce_release("job")
        assert not await objects.aforce_release("job")
        assert (await objects.aget_state("job")).outcome == "released-by-operator"

    async def run_and_close() -> None:
        try:
            await main()
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(run_and_close())


def test_alease_records_a_failing_body_and_reraises(db_alias: str) -> None:
    async def main() -> None:
        try:
            with pytest.raises(RuntimeError, match="disk on fire"):
                async with alease("job", ttl=30) as running:
                    await running.aupdate({"done": 1})
                    raise RuntimeError("disk on fire")
        finally:
            await sync_to_async(connections.close_all)()

    asyncio.run(main())
    state = objects.get_state("job")
    assert (state.running, state.outcome, state.value) == (False, "failed", {"done": 1})
    assert "RuntimeError: disk on fire" in state.error


# --- a database without lease SQL -------------------------------------------------------


def test_a_database_without_lease_sql_is_a_clear_error() -> None:
    """System check E001 reports it at start-up; a caller that runs anyway gets
    NotSupportedError naming the database, before any SQL is sent."""
    other = DummyDatabaseWrapper({**connections["default"].settings_dict}, alias="legacy")
    with pytest.raises(NotSupportedError, match=r"postgresql and sqlite, not 'unknown'.*'legacy'"):
        lease_sql.statements(other, task="t", run="r")
