"""Django Tasks (``LeaseBackend``) run by real ``bgtasks worker`` processes, on
every database: 800 tasks enqueued from four processes and run by three
workers exactly once each; SIGKILL of a worker mid-task (retried by another,
or FAILED "worker lost" with max_attempts 1, never left RUNNING); SIGTERM (the
task goes back to ready and another worker runs it); a rolled-back enqueue
runs nothing. Workers of several threads claim and finish in batches (issue
28): the faults land on batches, and the last tests assert it. The test side
uses Django's public Tasks API; the tasks are tests/djtasks.py's."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import transaction

from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import Worker, start_together, wait_until

READY, RUNNING = "READY", "RUNNING"
SUCCESSFUL, FAILED = "SUCCESSFUL", "FAILED"


@pytest.fixture
def workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(tasks_alias, tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    yield group
    group.stop_all()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def result_of(result_id: str, backend: str = "default") -> Any:
    return djtasks.record.using(backend=backend).get_backend().get_result(result_id)


def finished(result: Any, timeout: float = 60) -> Any:
    def done() -> Any:
        result.refresh()
        return result.is_finished and result

    return wait_until(f"{result.id} to finish", done, timeout)


# Enough that the four enqueuers overlap each other and the three workers'
# claims for the whole drain (each process enqueues for about a second),
# and few enough to drain in seconds on SQLite too: 2,000 took 38 s an engine.
TASKS_PER_PROCESS = 200
ENQUEUED = 4 * TASKS_PER_PROCESS


def test_800_tasks_from_4_processes_run_exactly_once_by_3_workers(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    enqueuers = [
        Worker(tasks_alias, "enqueue", record, f"p{i}", TASKS_PER_PROCESS, TASKS=settings.TASKS)
        for i in range(4)
    ]
    for _ in range(3):
        workers.start("--queue", "default", "--concurrency", "4")
    try:
        start_together(enqueuers)
        ids = [i for enqueuer in enqueuers for i in enqueuer.result()["ids"]]
    finally:
        for enqueuer in enqueuers:
            enqueuer.kill()
    assert len(set(ids)) == ENQUEUED
    wait_until(f"{ENQUEUED} runs", lambda: len(lines(record)) >= ENQUEUED, timeout=120)
    time.sleep(0.5)  # a run twice would show now
    workers.stop_all()
    keys = Counter(line.split()[0] for line in lines(record))
    assert len(keys) == ENQUEUED and set(keys.values()) == {1}, keys.most_common(3)
    pids = {line.split()[1] for line in lines(record)}
    assert len(pids) == 3, "every worker took a share"
    statuses = Counter(str(result_of(i).status) for i in ids)
    assert statuses == {SUCCESSFUL: ENQUEUED}


def test_a_killed_workers_task_is_retried_by_another(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    """A batch of three, claimed by one worker's three threads in one round or
    two, killed mid-run: each is recovered after its ttl and run again by
    the other worker."""
    started = tmp_path / "started"
    results = [
        djtasks.sleeps_first.using(backend="retrying").enqueue(str(started), 60) for _ in range(3)
    ]
    first = workers.start("--queue", "default", "--concurrency", "3")
    wait_until("the first attempts", lambda: len(lines(started)) == 3, timeout=60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.monotonic()
    assert {result_of(result.id, "retrying").status for result in results} == {RUNNING}
    workers.start("--queue", "default", "--concurrency", "3")
    for result in results:
        result = finished(result)
        # The ttl (2 s), the second worker's start-up (seconds on a loaded
        # machine: 14.6 s in all once) and its next poll; the default ttl,
        # which a recovery that missed the backend's own would wait, is 120 s.
        assert time.monotonic() - killed_at < 30
        assert result.status == SUCCESSFUL and result.return_value == 2
        assert len(result.worker_ids) == 2 and result.worker_ids[0] != result.worker_ids[1]
        [lost] = result.errors
        assert lost.exception_class.__name__ == "LeaseLost"
        assert "was lost" in lost.traceback


def test_a_task_calling_os_exit_ends_its_worker_and_is_recovered_by_another(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    """``os._exit()`` (or the OOM killer) takes the whole process: no thread
    survives to record anything, so the run is recovered after its ttl, as a
    killed worker's is, and retried by another worker."""
    attempts = tmp_path / "attempts"
    result = djtasks.exits_first.using(backend="retrying").enqueue(str(attempts))
    first = workers.start("--queue", "default")
    assert first.wait(60) == 3, workers.output()
    workers.start("--queue", "default")
    result = finished(result)
    assert result.status == SUCCESSFUL and result.return_value == 2
    assert [line.split()[0] for line in lines(attempts)] == ["attempt-1", "attempt-2"]
    assert len(set(result.worker_ids)) == 2
    [lost] = result.errors
    assert lost.exception_class.__name__ == "LeaseLost" and "was lost" in lost.traceback


def test_a_killed_workers_task_fails_worker_lost_with_max_attempts_1(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    results = [
        djtasks.sleeps_first.using(backend="short").enqueue(str(started), 60) for _ in range(3)
    ]
    first = workers.start("--queue", "default", "--concurrency", "3")
    wait_until("the first attempts", lambda: len(lines(started)) == 3, timeout=60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    workers.start("--queue", "default", "--concurrency", "3")
    for result in results:
        result = finished(result, timeout=30)
        assert result.status == FAILED
        [lost] = result.errors
        assert lost.exception_class.__name__ == "LeaseLost"
        assert "was lost" in lost.traceback and "attempt 1 of 1" in lost.traceback
    assert len(lines(started)) == 3, "not run again"


def test_a_worker_paused_past_its_ttl_writes_nothing_when_it_wakes(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    """SIGSTOP of the worker running a task, past the ttl: another worker
    recovers and runs it again; when the first wakes, its run ends without
    writing anything (its finish is fenced by the token it held), and the
    row keeps the second run's result."""
    from django_bgtasks.models import QueuedTask

    started = tmp_path / "started"
    # TTL 2 s: the first attempt sleeps past it, paused; the second returns 2 at once.
    result = djtasks.sleeps_first.using(backend="retrying").enqueue(str(started), 6)
    first = workers.start("--queue", "default")
    wait_until("the first attempt", lambda: lines(started), timeout=60)
    workers.start("--queue", "default")
    # A worker stopped inside a write keeps its row's lock (the whole
    # database's, on SQLite): nobody can recover the task until it goes on.
    # Such a stop is let go and made again, at another moment (as in
    # tests/faults/test_workers.py); one between writes is what this is about.
    try:
        for _ in range(3):
            os.kill(first.pid, signal.SIGSTOP)
            try:
                result = finished(result, timeout=10)
                break
            except AssertionError:
                os.kill(first.pid, signal.SIGCONT)
                time.sleep(0.35)
        else:
            pytest.fail("no stop of the first worker let the second run the task")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    # The task returns its attempt. Usually that is 2, the other worker's run.
    # A stop let go again can give the first worker time to recover and claim
    # attempt 2 itself, and the next stop can land before that run's end is
    # written: attempt 2 is lost in turn, and the other worker runs attempt 3.
    assert result.status == SUCCESSFUL and result.return_value in (2, 3)
    # The first worker's run of attempt 1 ends (its sleep was 6 s) and finds its lease lost.
    wait_until(
        "the paused worker to find its lease lost",
        lambda: "(token 1) lost" in (tmp_path / "worker-0.log").read_text(),
        timeout=30,
    )
    assert first.poll() is None, workers.output()
    workers.stop_all()
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    # The row keeps the last attempt's result, written by that attempt's
    # holder: no earlier holder's end, written after it, replaced it.
    last = row.attempts
    assert len(row.worker_ids) == last
    assert (row.status, row.return_value, row.owner) == (SUCCESSFUL, last, row.worker_ids[-1])
    assert row.token == last
    assert [error["exception_class_path"].rsplit(".", 1)[-1] for error in row.errors] == [
        "LeaseLost"
    ] * (last - 1)
    assert not QueuedTask.objects.using(tasks_alias).running().exists()


def test_sigterm_puts_the_task_back_and_another_worker_runs_it(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    """Three runs of one worker (a batch of claims), handed back together:
    their ends share finish statements."""
    started = tmp_path / "started"
    results = [djtasks.until_cancelled.enqueue(str(started), 60) for _ in range(3)]
    first = workers.start("--queue", "default", "--concurrency", "3")
    wait_until("the runs", lambda: len(lines(started)) == 3, timeout=60)
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    for result in results:
        result.refresh()
        assert result.status == READY and result.errors == []
    workers.start("--queue", "default", "--concurrency", "3")
    wait_until("the second runs", lambda: len(lines(started)) == 6, timeout=60)
    assert {result_of(result.id).status for result in results} == {RUNNING}


# A second SIGTERM or Ctrl-C ends the worker long before this grace period;
# --once ends long before this poll.
LONG_GRACE = LONG_POLL = "60"
STOPS_WITHIN = 15.0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_second_signal_stops_at_once_and_puts_the_task_back_ready(
    tasks_alias: str, workers: Workers, tmp_path: Path, signum: int
) -> None:
    from django_bgtasks.models import QueuedTask

    started = tmp_path / "started"
    result = djtasks.sleeps.enqueue(str(started), 120)  # checks nothing: ignores a stop
    worker = workers.start("--queue", "default", "--grace", LONG_GRACE)
    wait_until("the run", lambda: lines(started), timeout=60)
    worker.send_signal(signum)
    time.sleep(1.0)  # not a check: the graceful stop has begun, and the task ignores it
    assert worker.poll() is None, workers.output()
    assert result_of(result.id).status == RUNNING
    sent = time.monotonic()
    worker.send_signal(signum)
    assert workers.exit_status(worker, STOPS_WITHIN) == 128 + signum, workers.output()
    assert time.monotonic() - sent < STOPS_WITHIN
    result.refresh()
    assert result.status == READY and result.errors == []
    row = QueuedTask.objects.using(tasks_alias).get(uuid=result.id)
    assert row.attempts == 0, "the attempt given back"
    assert "stopping at once" in workers.output()


def test_a_task_that_leaves_a_transaction_open_ends_and_the_next_one_runs_afresh(
    tasks_alias: str, workers: Workers
) -> None:
    """As after a request, the connection a task left in a transaction is
    closed before the worker writes with it: the task's end commits (it
    would go into the task's transaction, never committed), what the task
    left uncommitted is rolled back, and the next task, on the same thread,
    runs on a new connection."""
    from django_bgtasks.models import QueuedTask
    from tests.testapp.models import Counter

    workers.start("--queue", "default", "--concurrency", "1")
    left_open = djtasks.counts.enqueue("left-open", leave_open=True)
    assert finished(left_open).status == SUCCESSFUL
    after = djtasks.counts.enqueue("after")
    assert finished(after).status == SUCCESSFUL
    assert list(Counter.objects.using(tasks_alias).values_list("name", flat=True)) == ["after"]
    assert not QueuedTask.objects.using(tasks_alias).running().exists()


def test_once_exits_as_soon_as_the_queue_is_done_not_a_poll_later(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    result = djtasks.sleeps.enqueue(str(tmp_path / "started"), 2)  # ends after a poll began
    # (--task: none of tests/workerapp's scheduled tasks, always due again.)
    worker = workers.start("--queue", "default", "--task", "echo", "--once", "--poll", LONG_POLL)
    assert workers.exit_status(worker, STOPS_WITHIN) == 0, workers.output()
    assert result_of(result.id).return_value == "slept"


def test_a_rolled_back_enqueue_runs_nothing(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    workers.start("--queue", "default")
    with pytest.raises(RuntimeError), transaction.atomic(using=tasks_alias):
        djtasks.record.enqueue(str(record), "rolled-back")
        raise RuntimeError("the view failed")
    kept = djtasks.record.enqueue(str(record), "kept")
    assert finished(kept).status == SUCCESSFUL
    assert [line.split()[0] for line in lines(record)] == ["kept"]


def test_one_worker_runs_by_priority_then_enqueue_order_and_waits_for_run_after(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    deferred = djtasks.record.using(run_after=soon).enqueue(str(record), "deferred")
    others = [
        djtasks.record.using(priority=priority).enqueue(str(record), key)
        for priority, key in [(0, "a"), (10, "b"), (-5, "c"), (10, "d"), (0, "e")]
    ]
    workers.start("--queue", "default", "--concurrency", "1")
    deferred = finished(deferred)
    # The deferred one may be due, and run, before the others are all done.
    for other in others:
        finished(other)
    keys = [line.split()[0] for line in lines(record)]
    # The deferred task never starts before its run_after, by the database's
    # clock. Where it falls among the others depends on how long the worker
    # took to start (on a loaded machine, more than 2 s: it is then due
    # before the others are run, and rightly runs in its enqueue order).
    # Against run_after as stored: SQLite keeps milliseconds, so the claim
    # may start it in the millisecond of ``soon``, before its microseconds.
    from django_bgtasks.models import QueuedTask

    stored = QueuedTask.objects.using(tasks_alias).get(uuid=deferred.id).run_after
    assert abs(stored - soon) < dt.timedelta(milliseconds=1)
    assert deferred.started_at >= stored
    assert sorted(keys) == sorted(["b", "d", "a", "e", "c", "deferred"])
    assert [key for key in keys if key != "deferred"] == ["b", "d", "a", "e", "c"]


def test_cancel_stops_a_running_task_and_a_ready_one_never_runs(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    started, record = tmp_path / "started", tmp_path / "record"
    running = djtasks.until_cancelled.using(backend="short").enqueue(str(started), 60)
    workers.start("--queue", "default", "--concurrency", "1")
    wait_until("the run", lambda: lines(started), timeout=60)
    waiting = djtasks.record.enqueue(str(record), "never")
    call_command("bgtasks", "cancel", waiting.id, stdout=StringIO())
    call_command("bgtasks", "cancel", running.id, stdout=StringIO())
    running = finished(running, timeout=10)
    assert running.status == FAILED
    assert running.errors[0].exception_class.__name__ == "TaskCancelled"
    waiting.refresh()
    assert waiting.status == FAILED
    time.sleep(0.5)  # the worker is free again: the cancelled one still does not run
    assert lines(record) == []


def test_a_unique_task_enqueued_50_times_at_once_by_5_processes_runs_once(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    for _ in range(2):
        workers.start("--queue", "default")
    enqueuers = [
        Worker(tasks_alias, "enqueue_unique", record, 10, TASKS=settings.TASKS) for _ in range(5)
    ]
    try:
        start_together(enqueuers)
        ids = [i for enqueuer in enqueuers for i in enqueuer.result()["ids"]]
    finally:
        for enqueuer in enqueuers:
            enqueuer.kill()
    assert len(ids) == 50 and len(set(ids)) == 1
    result = finished(result_of(ids[0]))
    assert result.status == SUCCESSFUL
    assert lines(record) and [line.split()[0] for line in lines(record)] == ["once"]


def test_a_batch_enqueued_in_one_statement_runs_exactly_once_on_3_workers(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    """``enqueue_many()`` while the workers idle: 600 tasks in one statement
    (one wake-up on PostgreSQL), each run once, every row ends SUCCESSFUL."""
    from django_bgtasks.models import QueuedTask

    record = tmp_path / "record"
    for _ in range(3):
        workers.start("--queue", "default", "--concurrency", "4")
    backend = djtasks.record.get_backend()
    items = [((str(record), f"k{n}"), {}) for n in range(600)]
    ids = [result.id for result in backend.enqueue_many(djtasks.record, items)]  # type: ignore[attr-defined]
    wait_until("600 runs", lambda: len(lines(record)) >= 600, timeout=120)
    time.sleep(0.5)  # a run twice would show now
    workers.stop_all()
    keys = Counter(line.split()[0] for line in lines(record))
    assert len(keys) == 600 and set(keys.values()) == {1}, keys.most_common(3)
    rows = QueuedTask.objects.using(tasks_alias).values_list("uuid", "status")
    assert {str(uuid): status for uuid, status in rows} == dict.fromkeys(ids, SUCCESSFUL)


# --- exactly once through database faults ----------------------------------------
# Workers whose connections break mid-drain, with the lease's default ttl (120 s)
# and three attempts: a run whose finish or claim reply was lost must be found
# again by its own worker, not recovered as lost after the ttl and run again.

FAULT_TASKS = 300  # each takes 0.05 s: about 2 s of drain on 8 threads, for the fault to land in


def _terminate_every_other_backend() -> None:
    from django.db import connections

    with connections["postgres"].cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.mark.parametrize("fault", ["restart", "terminate"])
@pytest.mark.django_db(transaction=True, databases=["postgres"])
def test_django_tasks_run_exactly_once_through_a_database_fault(
    embedded_postgres: Any, settings: Any, tmp_path: Path, fault: str
) -> None:
    from django.db import connections

    from django_bgtasks.models import QueuedTask
    from tests.faults.test_processes import checkpoint_embedded, restart_embedded

    settings.BGTASKS_DATABASE = "postgres"
    record = tmp_path / "record"
    workers = Workers("postgres", tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    if fault == "restart":
        checkpoint_embedded()
    try:
        for _ in range(2):
            workers.start("--queue", "default", "--concurrency", "4")
        ids = [
            djtasks.record_slowly.using(backend="default").enqueue(str(record), f"k{n}", 0.05).id
            for n in range(FAULT_TASKS)
        ]
        wait_until("the drain to be under way", lambda: len(lines(record)) >= 40)
        # Counted as the fault begins: the stop cuts every connection at once,
        # and the first terminate lands before any other statement.
        faulted = len(lines(record))
        if fault == "restart":
            restart_embedded(embedded_postgres, 0.5)
            connections["postgres"].close()
        else:
            for _ in range(3):  # a few times, to land on claims, finishes and renewals
                _terminate_every_other_backend()
                time.sleep(0.3)
        # Well inside the default ttl (120 s): nothing may wait for it.
        wait_until(
            f"{FAULT_TASKS} runs",
            lambda: (
                QueuedTask.objects.using("postgres").filter(status=SUCCESSFUL).count()
                == FAULT_TASKS
            ),
            timeout=60,
        )
        time.sleep(0.3)  # a run twice would show now
        assert all(process.poll() is None for process in workers.processes), workers.output()
    finally:
        workers.stop_all()
    assert faulted < FAULT_TASKS, "the fault landed mid-drain"
    keys = Counter(line.split()[0] for line in lines(record))
    assert len(keys) == FAULT_TASKS and set(keys.values()) == {1}, keys.most_common(3)
    rows = QueuedTask.objects.using("postgres").filter(uuid__in=ids)
    assert Counter(rows.values_list("status", flat=True)) == {SUCCESSFUL: FAULT_TASKS}
    # Once each: no attempt was lost, recovered or retried.
    assert set(rows.values_list("attempts", flat=True)) == {1}
    assert [r.errors for r in rows if r.errors] == []


# --- batches: several tasks per claim and per finish (issue 28) ---------------------


def runs(path: Path) -> list[tuple[str, int, int, int, float]]:
    """``runs_checking``'s record: (key, token, attempt, pid, claim sent_at) a run."""
    found = []
    for line in lines(path):
        key, token, attempt, pid, sent_at = line.split()
        found.append((key, int(token), int(attempt), int(pid), float(sent_at)))
    return found


def claim_sizes(path: Path) -> Counter[int]:
    """How many claims took how many of the recorded runs: the runs of one
    claim statement share its process and its ``sent_at``."""
    claims = Counter((pid, sent_at) for _, _, _, pid, sent_at in runs(path))
    return Counter(claims.values())


def test_one_worker_claims_several_tasks_in_one_statement_and_runs_each_once(
    tasks_alias: str, workers: Workers, tmp_path: Path
) -> None:
    from django_bgtasks.models import QueuedTask

    record = tmp_path / "record"
    ids = [djtasks.runs_checking.enqueue(str(record), f"k{n}", 0.2).id for n in range(24)]
    workers.start("--queue", "default", "--concurrency", "4")
    done = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids, status=SUCCESSFUL)
    wait_until("24 runs", lambda: done.count() == 24, timeout=60)
    time.sleep(0.3)  # a run twice would show now
    workers.stop_all()
    keys = Counter(key for key, *_ in runs(record))
    assert len(keys) == 24 and set(keys.values()) == {1}, keys.most_common(3)
    sizes = claim_sizes(record)
    assert max(sizes) > 1, f"no claim took more than one task: {sizes}"
    assert max(sizes) <= 4, f"a claim took more tasks than the worker has threads: {sizes}"


# The faults of a worker with a batch in hand: killed, paused past the ttl
# (2 s: the "retrying" backend), stopped gracefully.
BATCH_TASKS = 40


@pytest.mark.parametrize("fault", ["sigkill", "sigstop", "sigterm"])
def test_batches_through_a_workers_fault_run_each_attempt_once(
    tasks_alias: str, workers: Workers, tmp_path: Path, fault: str
) -> None:
    """Two workers of four threads drain tasks that take 0.5 s (1.5 s for the
    graceful stop), claimed and finished in batches; one of them is faulted
    with a batch running. Three in four of the tasks have a fair share among
    three tenants, so the claims take turns (and lock them) through the
    fault. From
    the database: every task succeeded, its end written by its last holder
    (no stale holder's end accepted), each attempt ran at most once and the
    last exactly once, nothing is left RUNNING or READY, and every tenant's
    turns moved on."""
    from django_bgtasks.models import FairShare, QueuedTask

    record = tmp_path / "record"
    # A graceful stop hits only runs under way (a task claimed and not yet
    # started is given back unrun): long enough runs that a loaded machine's
    # SIGTERM still lands while the first batch runs.
    seconds = 1.5 if fault == "sigterm" else 0.5
    ids = [
        (djtasks.runs_checking if n % 4 == 0 else djtasks.runs_checking_in_turn)
        .using(backend="retrying")
        .enqueue(str(record), f"k{n}", seconds)
        .id
        for n in range(BATCH_TASKS)
    ]
    victim = workers.start("--queue", "default", "--concurrency", "4")
    other = workers.start("--queue", "default", "--concurrency", "4")

    def running_in(process: Any) -> int:
        return sum(pid == process.pid for _, _, _, pid, _ in runs(record))

    wait_until("both workers' runs", lambda: running_in(victim) >= 4 and running_in(other) >= 1)
    faulted = len(runs(record))
    if fault == "sigkill":
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    elif fault == "sigstop":
        victim.send_signal(signal.SIGSTOP)
        time.sleep(4)  # past the ttl: the other worker recovers and reruns its batch
        victim.send_signal(signal.SIGCONT)
    else:
        victim.send_signal(signal.SIGTERM)
        assert workers.exit_status(victim, 30) == 0, workers.output()
    rows = QueuedTask.objects.using(tasks_alias).filter(uuid__in=ids)
    wait_until(
        f"{BATCH_TASKS} tasks to succeed",
        lambda: rows.filter(status=SUCCESSFUL).count() == BATCH_TASKS,
        timeout=90,
    )
    time.sleep(0.5)  # a late write by the faulted worker would show now
    workers.stop_all()
    assert faulted < BATCH_TASKS, "the fault landed mid-drain"
    assert Counter(rows.values_list("status", flat=True)) == {SUCCESSFUL: BATCH_TASKS}
    recorded = runs(record)
    assert len({(key, token) for key, token, *_ in recorded}) == len(recorded), "a claim ran twice"
    for row in rows:
        key = row.args_kwargs["args"][1]
        mine = [(token, attempt) for k, token, attempt, _, _ in recorded if k == key]
        # The end written is the last holder's: its token and owner.
        assert row.return_value == {"key": key, "token": row.token, "owner": row.owner}, mine
        assert [token for token, _ in mine].count(row.token) == 1
        attempts = [attempt for _, attempt in mine]
        if fault == "sigterm":  # handed back with the attempt refunded, never lost
            assert row.attempts == 1 and row.errors == [], (key, mine, row.errors)
        else:
            assert len(set(attempts)) == len(attempts) and max(attempts) == row.attempts
            lost = [error["exception_class_path"] for error in row.errors]
            assert lost == ["django_bgtasks.exceptions.LeaseLost"] * (row.attempts - 1)
    again = Counter(key for key, *_ in recorded)
    assert sum(count > 1 for count in again.values()) >= 2, "the fault hit a batch of runs"
    assert max(claim_sizes(record)) > 1, "claims batched"
    turns = FairShare.objects.using(tasks_alias).filter(queue_name="default")
    assert sorted(turns.filter(vtime__gt=0).values_list("fairness_key", flat=True)) == [
        f"tenant:{tenant}" for tenant in range(3)
    ]


def test_a_bulk_cancel_racing_two_workers_cancels_only_what_never_started(
    tasks_alias: str, workers: Workers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bgtasks cancel --task PATH`` (operations/bulk.py, batches of
    ``SCAN_CHUNK``) while two workers drain the same tasks: each task is
    taken by one side only. A task the bulk cancel took while ready never
    runs; one it found running is asked to stop; every task ends, and each
    ran at most once."""
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.operations import bulk, search
    from django_bgtasks.operations.queued import QueuedFilter

    record = tmp_path / "record"
    task = djtasks.record_slowly
    batch = task.get_backend().enqueue_many(
        task, [((str(record), f"k{n}", 0.01), {}) for n in range(400)]
    )
    for _ in range(2):
        workers.start("--queue", "default", "--concurrency", "4")
    wait_until("the drain under way", lambda: len(lines(record)) >= 40, timeout=60)
    monkeypatch.setattr(search, "SCAN_CHUNK", 20)  # batches while the workers claim and end
    selection = bulk.Selection.of(QueuedFilter.parse(task=task.module_path))
    cancelled = bulk.act("cancel", selection)
    table = QueuedTask.objects.using(tasks_alias).filter(uuid__in=[r.id for r in batch])

    def ended() -> bool:
        return not table.filter(status__in=[READY, RUNNING]).exists()

    wait_until("every task ended", ended, timeout=60)
    workers.stop_all()
    ran = Counter(line.split()[0] for line in lines(record))
    assert set(ran.values()) == {1}, ran.most_common(3)
    rows = list(table.values_list("args_kwargs", "status", "started_at", "errors"))
    never = {args["args"][1] for args, status, started, _errors in rows if started is None}
    assert never and not never & set(ran), "a task the cancel took while ready ran"
    assert all(
        status == FAILED and errors[-1]["exception_class_path"].endswith("TaskCancelled")
        for _args, status, started, errors in rows
        if started is None
    )
    assert len(never) == cancelled.done
    assert cancelled.matched == 400 == cancelled.done + cancelled.stopping + cancelled.skipped
    assert len(ran) + len(never) == 400
