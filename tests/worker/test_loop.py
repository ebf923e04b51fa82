"""The worker's loop (worker/loop.py), in this process, on every database:
requests run once, its options and start-up line, the connection it keeps
from poll to poll, the run's end written whatever the task left open, and
the idle wait that the change feed ends; the options and schedules a task
is registered with. Its parts have tests of their own (tests/worker/: the
schedule slots, test_slots.py; retries and resumes, test_rescue.py; its
heartbeat, its runs, its stop), the command's subcommands
tests/management/test_workers.py; tests/faults/test_workers.py has real
worker processes, races and signals.
Tasks are built here and handed to the Worker, not registered, so the
registry the surfaces' tests see is unchanged."""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import functools
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_bgtasks import RunningLease, background_task
from django_bgtasks.background import registry
from django_bgtasks.background.functions import BackgroundTaskFunction
from django_bgtasks.background.schedules import Cron, Every, parse_schedule
from django_bgtasks.choices import Outcome, Status, Trigger
from django_bgtasks.models import BackgroundTask, TaskRun
from django_bgtasks.push import feed as changes
from django_bgtasks.worker.loop import Worker
from tests.dbtools import a_worker_runs
from tests.procs import ROOT, wait_until, worker_env

objects = BackgroundTask.objects


def make_task(name: str, func: Any, **options: Any) -> BackgroundTaskFunction[..., Any]:
    """A task as @background_task would make it, without registering it."""
    options.setdefault("ttl", 5)
    resume = options.pop("resume", False)
    return BackgroundTaskFunction(
        name,
        func,
        options.pop("ttl"),
        parse_schedule(options.pop("schedule", None)),
        resume,
        options.pop("max_attempts", 3 if resume else 1),
        options.pop("retry_delay", 0.0),
    )


def echo(lease: RunningLease, n: int = 0) -> dict[str, int]:
    lease.update({"n": n})
    return {"n": n}


def runs(name: str) -> list[TaskRun]:
    return list(TaskRun.objects.for_task(name).order_by("token"))


def test_a_request_is_run_once_with_its_arguments(db_alias: str) -> None:
    task = make_task("w-echo", echo)
    a_worker_runs("w-echo")  # a worker that runs it has reported itself
    assert objects.request_run("w-echo", args=(7,), requested_by="test") is True
    # At most one pending request per task.
    assert objects.request_run("w-echo", args=(8,)) is False
    state = objects.get_state("w-echo")
    assert state is not None and state.status == Status.REQUESTED and state.requested_at

    Worker([task], poll=0.05).run(once=True)

    (run,) = runs("w-echo")
    assert (run.outcome, run.trigger, run.attempt, run.value) == (
        Outcome.SUCCEEDED,
        Trigger.REQUEST,
        1,
        {"n": 7},
    )
    state = objects.get_state("w-echo")
    assert state is not None and state.requested_at is None and state.status == Status.IDLE
    assert objects.request_run("w-echo", kwargs={"n": 9}) is True


def test_a_request_made_while_the_task_runs_is_kept_and_run_after(db_alias: str) -> None:
    task = make_task("w-echo", echo)
    a_worker_runs("w-echo")
    lease = objects.try_claim("w-echo", "someone", ttl=30)
    assert lease is not None
    assert objects.request_run("w-echo", kwargs={"n": 3}) is True
    worker = Worker([task], poll=0.05)
    assert worker.tick() == 0  # held: the request waits
    assert objects.release("w-echo", "someone", token=lease.token)
    worker.run(once=True)
    assert [(r.token, r.trigger, r.value) for r in runs("w-echo")] == [
        (lease.token, Trigger.MANUAL, None),
        (lease.token + 1, Trigger.REQUEST, {"n": 3}),
    ]


def test_request_arguments_json_cannot_encode_are_refused_with_nothing_written(
    db_alias: str,
) -> None:
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        objects.request_run("w-bad", args=(object(),))
    with pytest.raises(TypeError, match="args must be a list or tuple"):
        objects.request_run("w-bad", args="abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        objects.request_run("w-bad", kwargs=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="task name"):
        objects.request_run("", args=())
    assert not BackgroundTask.objects.filter(name="w-bad").exists()


def test_prune_forgets_workers_silent_for_long(db_alias: str) -> None:
    from io import StringIO

    from django.core.management import call_command

    objects.work.beat(worker="gone", host="h", pid=1, tasks=[], concurrency=1, running=[])
    objects.work.beat(worker="live", host="h", pid=2, tasks=[], concurrency=1, running=[])
    from django_bgtasks.models import Worker as WorkerRow

    WorkerRow.objects.using(db_alias).filter(id="gone").update(
        updated_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    )
    out = StringIO()
    call_command("bgtasks", "prune", stdout=out)
    assert "Forgot 1 worker(s) silent for more than" in out.getvalue()
    assert [worker.id for worker in objects.work.workers()] == ["live"]


def test_a_worker_keeps_its_connection_from_poll_to_poll_under_djangos_default(
    db_alias: str,
) -> None:
    """``CONN_MAX_AGE = 0`` (Django's default, and the suite's) means one
    connection a request. A worker's poll is no request: its polls share one
    connection, where each used to open its own."""
    from django.db.backends.signals import connection_created

    assert connections[db_alias].settings_dict["CONN_MAX_AGE"] == 0
    opened: list[str] = []
    polls: list[float] = []

    def on_connected(sender: Any, connection: Any, **kwargs: Any) -> None:
        if threading.current_thread().name == "test-worker" and connection.alias == db_alias:
            opened.append(connection.alias)

    worker = Worker([make_task("w-conn", lambda lease: None)], poll=0.02)
    tick = worker.tick

    def counted_tick() -> Any:
        polls.append(time.monotonic())
        return tick()

    worker.tick = counted_tick  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run, name="test-worker")
    connection_created.connect(on_connected)
    try:
        thread.start()
        wait_until("12 polls", lambda: len(polls) >= 12, timeout=WITHIN)
    finally:
        connection_created.disconnect(on_connected)
        worker.stop()
        thread.join(WITHIN)
        connections.close_all()
    assert not thread.is_alive()
    assert len(opened) == 1, f"{len(opened)} connections for {len(polls)} polls"


def test_a_run_that_leaves_a_transaction_open_still_records_its_end(db_alias: str) -> None:
    """As after a request, the connection the function left in a transaction
    is closed before the run's end is written with it: the end commits (it
    would go into that transaction, and be rolled back with it), and what
    the function left uncommitted is rolled back."""
    from tests.testapp.models import Counter

    def leaves_it_open(lease: RunningLease) -> str:
        connections[db_alias].set_autocommit(False)
        Counter.objects.using(db_alias).create(name="left-open")
        return "done"

    a_worker_runs("w-open")
    assert objects.request_run("w-open") is True

    Worker([make_task("w-open", leaves_it_open)], poll=0.05).run(once=True)

    (run,) = runs("w-open")
    assert (run.outcome, run.result) == (Outcome.SUCCEEDED, "done")
    state = objects.get_state("w-open")
    assert state is not None and state.status == Status.IDLE
    assert not Counter.objects.using(db_alias).filter(name="left-open").exists()


def test_a_worker_run_stores_its_result_and_logs_a_failure_once(
    db_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    a_worker_runs("w-echo", "w-broken")
    assert objects.request_run("w-echo", kwargs={"n": 5})
    Worker([make_task("w-echo", echo)], poll=0.02).run(once=True)
    (run,) = runs("w-echo")
    assert (run.outcome, run.result, run.result_note) == (Outcome.SUCCEEDED, {"n": 5}, "")
    assert objects.get_state("w-echo").result == {"n": 5}

    def fails(lease: RunningLease) -> None:
        raise RuntimeError("disk on fire")

    assert objects.request_run("w-broken")
    worker = Worker([make_task("w-broken", fails)], poll=0.02)
    worker.run(once=True)
    [record] = [
        r for r in caplog.records if r.name.startswith("django_bgtasks") and r.levelno >= 40
    ]
    assert record.name == "django_bgtasks" and str(record.exc_info[1]) == "disk on fire"  # type: ignore[index]
    (broken,) = runs("w-broken")
    assert (record.task, record.token, record.owner) == (  # type: ignore[attr-defined]
        "w-broken",
        broken.token,
        worker.id,
    )
    assert (broken.outcome, broken.result) == (Outcome.FAILED, None)


def test_a_workers_start_up_line_names_its_tasks_and_its_queues() -> None:
    tasks = [make_task("w-echo", echo), make_task("w-other", echo)]
    workers = {
        "2 task(s) (w-echo, w-other), queue(s) (none)": Worker(tasks, poll=0.5),
        "0 task(s) (none), queue(s) (default, emails)": Worker(
            [], poll=0.5, queues=["emails", "default"]
        ),
        "2 task(s) (w-echo, w-other), queue(s) (all)": Worker(tasks, poll=0.5, run_queued=True),
    }
    for said, worker in workers.items():
        assert worker.start_up_line() == f"worker {worker.id}: {said}, concurrency 4, poll 0.5 s"


def test_the_retry_delay_grows_per_attempt() -> None:
    task = make_task("w-delay", echo, retry_delay=2.0)
    assert [task.retry_delay_for(n) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]


def test_bad_worker_options_and_schedules_are_clear_errors() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="concurrency"):
            Worker([], concurrency=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll"):
        Worker([], poll=0)
    with pytest.raises(ValueError, match="grace"):
        Worker([], grace=-1)
    with pytest.raises(ValueError, match="not a valid cron expression"):
        background_task(name="bad-cron", schedule="61 * * * *")
    with pytest.raises(ValueError, match="five-field"):
        background_task(name="bad-cron", schedule="* * *")
    with pytest.raises(ValueError, match="above zero"):
        background_task(name="bad-every", schedule=dt.timedelta(0))
    with pytest.raises(ValueError, match="above zero"):
        background_task(name="bad-every", schedule=dt.timedelta(seconds=-5))
    with pytest.raises(TypeError, match="schedule must be"):
        background_task(name="bad-every", schedule=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_attempts"):
        background_task(name="bad", max_attempts=0)
    with pytest.raises(TypeError, match="resume"):
        background_task(name="bad", resume="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retry_delay"):
        background_task(name="bad", retry_delay=float("nan"))


@pytest.mark.parametrize(
    ("timeout", "error", "reason"),
    [
        (0, ValueError, "above 0 and at most 604800 seconds, not 0"),
        (-1.5, ValueError, "not -1.5"),
        (604801, ValueError, "at most 604800"),
        (float("nan"), ValueError, "not nan"),
        (float("inf"), ValueError, "not inf"),
        ("5", TypeError, "timeout must be a number of seconds, not str"),
        (True, TypeError, "not bool"),
    ],
)
def test_a_bad_timeout_is_refused_at_registration(
    timeout: Any, error: type[Exception], reason: str
) -> None:
    with pytest.raises(error, match=re.escape(reason)):
        background_task(name="bad-timeout", timeout=timeout)
    assert "bad-timeout" not in registry.registered()


def test_a_worker_refuses_a_task_whose_ttl_the_heartbeat_interval_does_not_fit(
    settings: Any,
) -> None:
    # Before it claims anything: a run it claimed could not be renewed in time.
    settings.BGTASKS_HEARTBEAT_INTERVAL = 5
    short = BackgroundTaskFunction("w-short", lambda running: None, ttl=10)
    with pytest.raises(ValueError, match="below half the ttl"):
        Worker([short])
    settings.BGTASKS_TTL = 8
    with pytest.raises(ValueError, match="below half the ttl"):
        Worker([BackgroundTaskFunction("w-default-ttl", lambda running: None)])


def test_schedules_say_their_next_slot() -> None:
    every = parse_schedule(dt.timedelta(minutes=5))
    assert isinstance(every, Every) and every.text == "every 300s"
    now = dt.datetime(2026, 12, 1, 8, 3, 10, tzinfo=dt.UTC)
    assert every.next_after(now) == dt.datetime(2026, 12, 1, 8, 5, tzinfo=dt.UTC)
    assert every.next_after(dt.datetime(2026, 12, 1, 8, 5, tzinfo=dt.UTC)) == dt.datetime(
        2026, 12, 1, 8, 10, tzinfo=dt.UTC
    )
    cron = parse_schedule("0  3 * * *")
    assert isinstance(cron, Cron) and cron.text == "0 3 * * *"
    assert cron.next_after(now) == dt.datetime(2026, 12, 2, 3, 0, tzinfo=dt.UTC)


def test_a_site_schedule_replaces_the_registered_one(settings: Any) -> None:
    task = make_task("w-sched", echo, schedule=dt.timedelta(hours=1))
    assert task.effective_schedule == Every(dt.timedelta(hours=1))
    settings.BGTASKS_SCHEDULES = {"w-sched": "*/5 * * * *"}
    assert task.effective_schedule == Cron("*/5 * * * *")
    settings.BGTASKS_SCHEDULES = {"w-sched": None}
    assert task.effective_schedule is None


def test_checks_for_the_executor_and_site_schedules(settings: Any) -> None:
    from django_bgtasks.checks.settings import check_executor
    from django_bgtasks.checks.tasks import check_schedules

    assert check_executor() == []
    settings.BGTASKS_EXECUTOR = "celery"
    [error] = check_executor()
    assert error.id == "bgtasks.E007" and "'celery'" in error.msg and "worker" in error.hint

    assert check_schedules() == []
    settings.BGTASKS_SCHEDULES = {"surface-quick": "61 * * * *", "surface-slow": None}
    [error] = check_schedules()
    assert error.id == "bgtasks.E008" and "surface-quick" in error.msg and "cron" in error.hint
    settings.BGTASKS_SCHEDULES = {"surface-quick": dt.timedelta(0)}
    assert [m.id for m in check_schedules()] == ["bgtasks.E008"]
    settings.BGTASKS_SCHEDULES = {"no-such-task": dt.timedelta(minutes=1)}
    [warning] = check_schedules()
    assert warning.id == "bgtasks.W002" and "no-such-task" in warning.msg
    settings.BGTASKS_SCHEDULES = ["surface-quick"]
    assert [m.id for m in check_schedules()] == ["bgtasks.E008"]


def test_run_now_with_the_worker_executor_files_one_request(db_alias: str, settings: Any) -> None:
    from django_bgtasks.operations import writes

    settings.BGTASKS_EXECUTOR = "worker"
    result = writes.start("surface-quick", requested_by="someone")
    assert isinstance(result, writes.Requested)
    assert result.state.status == Status.REQUESTED and not result.state.running
    again = writes.start("surface-quick")
    assert isinstance(again, writes.AlreadyRequested)
    row = BackgroundTask.objects.get(name="surface-quick")
    assert (row.requested_by, row.request, row.token) == (
        "someone",
        {"args": [], "kwargs": {}},
        0,
    )
    # `bgtasks run` (executor="thread") still runs here, in this process.
    started = writes.start("surface-quick", executor="thread")
    assert isinstance(started, writes.Started)
    assert started.running.wait(10)


# --- the idle wait: woken by the change feed ------------------------------------

# The poll of the workers below: a test that waits for less than this for
# work to start shows the change feed woke the worker.
LONG_POLL = 30.0
WITHIN = 10.0
before_the_poll = functools.partial(
    wait_until, timeout=WITHIN, every=0.02, why=f"the worker's poll is {LONG_POLL:g} s"
)


@contextlib.contextmanager
def idle_worker(*tasks: BackgroundTaskFunction[..., Any]) -> Iterator[Worker]:
    """A worker with a 30 s poll running in a thread, past its first poll;
    stopped (and checked to have stopped) at the end."""
    worker = Worker(tasks, poll=LONG_POLL, grace=5)
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    try:
        before_the_poll(
            "reported", lambda: [w for w in objects.work.workers() if w.id == worker.id]
        )
        assert changes.feed().synced.wait(WITHIN)
        # Its first poll ends a moment after it reports itself: what the test
        # does next then comes while it waits (the tests below make two
        # changes, so that the second one surely does).
        time.sleep(0.5)
        yield worker
    finally:
        worker.stop()
        thread.join(WITHIN)
        connections.close_all()
    assert not thread.is_alive(), "stop() did not end the worker's wait"


def ran(name: str, count: int) -> list[TaskRun]:
    return before_the_poll(
        f"{count} run(s) of {name!r} ended",
        lambda: len(done := [r for r in runs(name) if r.outcome]) >= count and done,
    )


def test_an_idle_worker_starts_a_request_at_once_not_at_its_next_poll(db_alias: str) -> None:
    with idle_worker(make_task("w-echo", echo)):
        assert objects.request_run("w-echo", kwargs={"n": 1}, requested_by="elsewhere")
        ran("w-echo", 1)
        assert objects.request_run("w-echo", kwargs={"n": 2}, requested_by="elsewhere")
        done = ran("w-echo", 2)
    assert [(r.trigger, r.outcome, r.value) for r in done] == [
        (Trigger.REQUEST, Outcome.SUCCEEDED, {"n": 1}),
        (Trigger.REQUEST, Outcome.SUCCEEDED, {"n": 2}),
    ]


def test_a_release_elsewhere_wakes_the_worker_for_the_request_that_waited(
    db_alias: str,
) -> None:
    held = objects.try_claim("w-echo", "elsewhere", ttl=LONG_POLL * 2)
    assert held is not None
    a_worker_runs("w-echo")
    assert objects.request_run("w-echo", kwargs={"n": 4})
    with idle_worker(make_task("w-echo", echo)):
        # Held: the request waits; its holder's progress starts nothing.
        assert objects.update_state("w-echo", "elsewhere", {"done": 1}, token=held.token)
        assert objects.release("w-echo", "elsewhere", token=held.token)
        held_run, requested = ran("w-echo", 2)
    assert held_run.owner == "elsewhere"
    assert (requested.trigger, requested.value, requested.token) == (
        Trigger.REQUEST,
        {"n": 4},
        held.token + 1,
    )


def test_a_holder_going_silent_wakes_the_worker_to_resume_when_its_ttl_runs_out(
    db_alias: str,
) -> None:
    seen: list[Any] = []
    task = make_task("w-resume", lambda lease: seen.append(lease.resume_from), resume=True)
    with idle_worker(task):
        # Nobody writes when a holder dies: the feed re-reads the task as its
        # ttl runs out, and that change wakes the worker.
        lease = objects.try_claim("w-resume", "dead", ttl=1.0, run_args={"args": [], "kwargs": {}})
        assert lease is not None
        assert objects.update_state("w-resume", "dead", {"done": 3}, token=lease.token)
        lost, resumed = ran("w-resume", 2)
    assert (lost.outcome, resumed.trigger, resumed.outcome) == (
        Outcome.LOST,
        Trigger.RESUME,
        Outcome.SUCCEEDED,
    )
    assert seen == [{"done": 3}]


def test_a_worker_whose_feed_connection_is_killed_still_starts_requested_work(
    pg_direct_alias: str,
) -> None:
    with idle_worker(make_task("w-echo", echo)):
        feed = changes.feed()
        pid = feed.listener_pid
        assert pid is not None
        with connections[pg_direct_alias].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        # Made while the listener may be gone: the feed's resync after it
        # reconnects (or, failing all, the poll) brings it to the worker.
        assert objects.request_run("w-echo", kwargs={"n": 5})
        ran("w-echo", 1)
        before_the_poll("listening again", lambda: feed.listener_pid not in (None, pid))
        # And the new connection wakes it too.
        assert objects.request_run("w-echo", kwargs={"n": 6})
        done = ran("w-echo", 2)
    assert [r.value for r in done] == [{"n": 5}, {"n": 6}]


def test_an_idle_queue_thread_claims_an_enqueued_task_at_once_on_postgresql(
    pg_direct_alias: str,
) -> None:
    """Migration 0010's notification, through the feed: a queue thread with a
    30 s poll runs a Django Task enqueued elsewhere within seconds."""
    from django_bgtasks.compat import TaskResultStatus
    from tests import djtasks

    worker = Worker([], poll=LONG_POLL, concurrency=2, run_queued=True)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        before_the_poll("listening", lambda: changes.feed().listener_pid is not None)
        time.sleep(0.5)  # not a check: the queue threads' first look, for nothing
        for n in (1, 2):  # the second surely enqueued while they wait
            result = djtasks.add.enqueue(n, n)

            def done(result: Any = result) -> bool:
                result.refresh()
                return bool(result.status == TaskResultStatus.SUCCESSFUL)

            before_the_poll(f"task {n} run", done)
            assert result.return_value == 2 * n
    finally:
        started = time.monotonic()
        worker.stop()
        thread.join(WITHIN)
        connections.close_all()
    assert not thread.is_alive() and time.monotonic() - started < WITHIN


# --- the documented LOGGING ------------------------------------------------------------------

TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) \S+: ")


def documented_logging(where: str) -> dict[str, Any]:
    """The ``LOGGING`` of docs/operations.md (its python block), or of the
    example site's settings, as written there."""
    text = Path(ROOT, where).read_text()
    if where.endswith(".md"):
        blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
        [text] = [block for block in blocks if block.startswith("LOGGING = {")]
    [assignment] = [
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "LOGGING"
    ]
    logging: dict[str, Any] = ast.literal_eval(assignment.value)
    return logging


@pytest.mark.parametrize("where", ["docs/operations.md", "example_project/demo_site/settings.py"])
def test_the_documented_logging_gives_every_line_of_a_worker_a_timestamp(
    sqlite_alias: str, where: str
) -> None:
    """A real ``bgtasks worker`` with the LOGGING the docs (and the demo) give,
    DEBUG on (Django's own console handler too): every line it writes has a
    time, once, Django's "Task id=... state=..." lines included."""
    from tests import djtasks

    assert objects.request_run("surface-quick")
    result = djtasks.add.enqueue(1, 2)
    env = worker_env(
        sqlite_alias,
        LOGGING=documented_logging(where),
        DEBUG=True,
        TASKS={"default": {"BACKEND": "django_bgtasks.backend.LeaseBackend"}},
    )
    worker = ["bgtasks", "worker", "--task", "surface-quick", "--queue", "default", "--once"]
    process = subprocess.run(
        [sys.executable, "-m", "django", *worker, "--settings", "tests.worker_settings"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    lines = process.stderr.splitlines()
    assert lines and [line for line in lines if not TIMESTAMPED.match(line)] == [], lines
    said = [TIMESTAMPED.sub("", line) for line in lines]
    assert said[0].endswith(
        ": 1 task(s) (surface-quick), queue(s) (default), concurrency 4, poll 1 s"
    ), said
    start, end = [line for line in said if line.startswith("task 'surface-quick' ")]
    assert start == "task 'surface-quick' started (token 1, request, attempt 1)"
    assert re.fullmatch(r"task 'surface-quick' \(token 1, attempt 1\) ended: succeeded after "
                        r"\d+\.\d{3} s", end)  # fmt: skip
    # Django's own lines: once each, with their time.
    django_lines = [line for line in said if line.startswith("Task id=")]
    assert django_lines == [
        f"Task id={result.id} path=tests.djtasks.add state={state}"
        for state in ("RUNNING", "SUCCESSFUL")
    ], lines
