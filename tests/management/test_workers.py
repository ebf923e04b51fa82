"""What the ``bgtasks`` worker subcommands do (management/workers.py):
``worker`` runs the registered tasks and the queued Django Tasks, with its
log at the verbosity asked, and refuses a bad site schedule or a queue no
backend has before it starts; ``workers`` lists each worker by the
database's clock; ``request`` files one request, and refuses bad input."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks.choices import Outcome
from django_bgtasks.management import workers
from django_bgtasks.models import BackgroundTask
from tests import djtasks
from tests.worker.test_loop import objects, runs


def test_djangos_verbosity_option_is_accepted_after_the_worker_subcommand(
    site_alias: str,
) -> None:
    from django.core.management import CommandError, call_command

    for verbosity in ("0", "3"):
        assert objects.request_run("surface-quick")
        call_command("bgtasks", "worker", "--task", "surface-quick", "--once", "-v", verbosity)
    assert [run.outcome for run in runs("surface-quick")] == [Outcome.SUCCEEDED] * 2
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("bgtasks", "worker", "--task", "surface-quick", "--once", "-v", "4")
    assert len(runs("surface-quick")) == 2


def test_a_bad_site_schedule_stops_the_worker_before_it_starts(
    db_alias: str, settings: Any
) -> None:
    from django.core.management import CommandError, call_command

    settings.BGTASKS_SCHEDULES = {"surface-quick": "not cron"}
    with pytest.raises(CommandError, match=r"BGTASKS_SCHEDULES\['surface-quick'\]: .*five-field"):
        call_command("bgtasks", "worker", "--task", "surface-quick", "--once")
    assert not BackgroundTask.objects.exists()


def test_bgtasks_request_files_one_request_and_refuses_bad_input(db_alias: str) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("bgtasks", "request", "surface-quick", "--kwargs", '{"total": 2}', stdout=out)
    assert "Requested 'surface-quick'" in out.getvalue()
    row = BackgroundTask.objects.get(name="surface-quick")
    assert (row.request, row.requested_by) == (
        {"args": [], "kwargs": {"total": 2}},
        "manage.py bgtasks",
    )
    with pytest.raises(CommandError, match="already has a pending request"):
        call_command("bgtasks", "request", "surface-quick")
    with pytest.raises(CommandError, match="No background task is registered as 'nope'"):
        call_command("bgtasks", "request", "nope")
    with pytest.raises(CommandError, match=r"args must be a list or tuple \(a JSON array\)"):
        call_command("bgtasks", "request", "surface-slow", "--args", '{"a": 1}')
    with pytest.raises(CommandError, match="is not valid JSON"):
        call_command("bgtasks", "request", "surface-slow", "--kwargs", "{nope")
    assert not BackgroundTask.objects.filter(name__in=["nope", "surface-slow"]).exists()


def test_bgtasks_workers_lists_each_worker_by_the_database_clock(db_alias: str) -> None:
    import json
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("bgtasks", "workers", stdout=out)
    assert out.getvalue().strip() == "No worker has reported itself."
    objects.work.beat(
        worker="h:1:x", host="h", pid=1, tasks=["a", "b"], concurrency=2, running=["a"]
    )
    out = StringIO()
    call_command("bgtasks", "workers", "--json", stdout=out)
    [worker] = json.loads(out.getvalue())["workers"]
    assert (worker["id"], worker["tasks"], worker["running"], worker["concurrency"]) == (
        "h:1:x",
        ["a", "b"],
        ["a"],
        2,
    )
    assert 0 <= worker["age"] < 5
    out = StringIO()
    call_command("bgtasks", "workers", "--no-color", stdout=out)
    assert "h:1:x" in out.getvalue() and "a, b" in out.getvalue()
    objects.work.gone("h:1:x")
    assert objects.work.workers() == []


def test_the_worker_command_runs_queued_tasks(tasks_alias: str) -> None:
    results = [djtasks.add.enqueue(i, i) for i in range(5)]
    other = djtasks.add.using(queue_name="other").enqueue(1, 1)
    stderr = StringIO()
    call_command(
        "bgtasks", "worker", "--once", "--queue", "default", "--poll", "0.05", stderr=stderr
    )
    assert [djtasks.add.get_result(r.id).return_value for r in results] == [0, 2, 4, 6, 8]
    assert not djtasks.add.get_result(other.id).is_finished


def test_a_queue_no_lease_backend_has_is_refused_before_the_worker_starts(
    refusal_alias: str,
) -> None:
    """A typing mistake: such a worker would claim nothing, ever."""
    assert workers.uses_lease_backend()
    with pytest.raises(
        CommandError,
        match=r"^--queue 'defualt': no LeaseBackend of TASKS has such a queue "
        r"\(their QUEUES: default, other\)\.$",
    ):
        call_command("bgtasks", "worker", "--queue", "defualt", "--once")
    assert objects.work.workers() == []
