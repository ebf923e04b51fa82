"""A worker's own metrics (``bgtasks worker --metrics-port``), in this
process on every database: known runs (background tasks and Django Tasks:
successes, a failure, a lost lease) scraped from the port it serves, and
the refusals of ``--metrics-port`` (a bad or busy port, no prometheus_client)
before the worker starts. (A real Prometheus scraping a worker process:
tests/http/test_prometheus.py.)"""

from __future__ import annotations

import datetime as dt
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_bgtasks import RunningLease
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun
from django_bgtasks.worker import prometheus
from django_bgtasks.worker.loop import Worker
from tests import djtasks, tools
from tests.asgiserver import free_port
from tests.dbtools import a_worker_runs
from tests.worker.test_loop import make_task

objects = BackgroundTask.objects


def succeeds(lease: RunningLease) -> str:
    return "ok"


def fails(lease: RunningLease) -> None:
    raise RuntimeError("boom")


def loses_its_lease(lease: RunningLease) -> None:
    """An operator force-releases the lease under the run; the renewer's
    next beat is refused and the run ends without its lease."""
    assert objects.force_release(lease.name, token=lease.token)
    deadline = time.monotonic() + 5
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.02)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each sample served on ``port``, by its name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_worker_serves_its_runs_outcomes_durations_waits_and_beats(
    tasks_alias: str, settings: Any
) -> None:
    settings.BGTASKS_HEARTBEAT_INTERVAL = 0.1
    tasks = [
        make_task("m-ok", succeeds),
        make_task("m-fails", fails),
        make_task("m-lost", loses_its_lease, ttl=1),
    ]
    a_worker_runs(*(task.name for task in tasks))
    for task in tasks:
        assert objects.request_run(task.name) is True
    waited = djtasks.add.enqueue(1, 2)
    djtasks.fails.enqueue("no")
    QueuedTask.objects.using(tasks_alias).filter(uuid=waited.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=60)
    )
    hooks = prometheus.WorkerMetrics(lambda: worker.slots())
    worker = Worker(tasks, concurrency=3, poll=0.05, queues=["default"], hooks=hooks)
    port = free_port()
    close = hooks.serve(port, "127.0.0.1")
    try:
        assert scrape(port)[("bgtasks_worker_slots", (("state", "free"),))] == 6
        worker.run(once=True)
        found = scrape(port)
    finally:
        close()

    def runs(task: str, outcome: str) -> float:
        return found.get(("bgtasks_runs_total", (("outcome", outcome), ("task", task))), 0)

    assert runs("m-ok", "succeeded") == 1
    assert runs("m-fails", "failed") == 1
    assert runs("m-lost", "lost") == 1
    assert runs("tests.djtasks.add", "succeeded") == 1
    assert runs("tests.djtasks.fails", "failed") == 1
    assert sum(v for (name, _), v in found.items() if name == "bgtasks_runs_total") == 5
    assert found[("bgtasks_lease_losses_total", (("task", "m-lost"),))] == 1
    assert ("bgtasks_lease_losses_total", (("task", "m-ok"),)) not in found
    for task in ("m-ok", "m-fails", "m-lost", "tests.djtasks.add"):
        assert found[("bgtasks_run_duration_seconds_count", (("task", task),))] == 1
    # The lost run waited for its loss: at least one beat.
    assert found[("bgtasks_run_duration_seconds_sum", (("task", "m-lost"),))] >= 0.1
    # Both Django Tasks waited, one of them 60 s (by the database's clock).
    wait = ("queue", "default")
    assert found[("bgtasks_claim_wait_seconds_count", (wait,))] == 2
    assert 60 <= found[("bgtasks_claim_wait_seconds_sum", (wait,))] < 120
    assert found[("bgtasks_claim_wait_seconds_bucket", (("le", "30.0"), wait))] == 1
    # The renewer beat at least once (the lost run's refusal came from a beat).
    assert found[("bgtasks_heartbeat_seconds_count", ())] >= 1
    assert found[("bgtasks_worker_slots", (("state", "busy"),))] == 0
    # What the database says of the same runs.
    outcomes = {
        run.name: run.outcome
        for run in TaskRun.objects.using(tasks_alias).filter(name__startswith="m-")
    }
    assert outcomes == {"m-ok": "succeeded", "m-fails": "failed", "m-lost": "released-by-operator"}
    assert set(QueuedTask.objects.using(tasks_alias).values_list("status", flat=True)) == {
        "SUCCESSFUL",
        "FAILED",
    }


@pytest.mark.parametrize("port", ["0", "65536", "http", "-1"])
def test_a_bad_metrics_port_is_refused_before_the_worker_starts(
    refusal_alias: str, port: str
) -> None:
    with pytest.raises(CommandError, match="TCP port"):
        call_command("bgtasks", "worker", "--once", "--metrics-port", port)
    assert objects.work.workers() == []


def test_a_busy_metrics_port_is_a_clear_error_before_the_worker_starts(
    refusal_alias: str,
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104  (where the worker would bind)
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"--metrics-port {port}: can't serve"):
            call_command("bgtasks", "worker", "--once", "--metrics-port", str(port))
    assert objects.work.workers() == []


@pytest.fixture
def without_prometheus_client() -> Iterator[None]:
    """The app as it runs without the metrics extra, and as it was afterwards."""
    with tools.without_prometheus_client(prometheus):
        yield


def test_without_prometheus_client_metrics_port_says_what_to_install(
    refusal_alias: str, without_prometheus_client: None
) -> None:
    with pytest.raises(CommandError, match=r"pip install 'django-bgtasks\[metrics\]'"):
        call_command("bgtasks", "worker", "--once", "--metrics-port", str(free_port()))
    assert objects.work.workers() == []
