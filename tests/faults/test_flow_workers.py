"""Flow limits of Django Tasks kept by real ``bgtasks worker`` processes, and
by threads claiming at once, on every database: ``concurrency=2`` over two
keys on three workers of four threads, ``rate_limit="5/s"``, a task over its
limit passed over for the one behind it. Each invariant is read from the
rows: a run's start (``last_attempted_at``) and end (``finished_at``) are
the database's clock, written by the claim and the finish. The tasks are
tests/djtasks.py's; the claim's own rules, in this process:
tests/queue/test_flow.py."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from django_bgtasks.models import FlowSlot, QueuedTask, Worker
from tests import djtasks
from tests.faults.harness import Workers
from tests.procs import wait_until

# A run's recorded start and the time its rate slot took are one read of the
# clock on every vendor (tests/queue/test_flow.py), made after the slot was
# judged free: starts a window apart by the limit are a window apart by the
# rows. SQLite stores milliseconds, and judges a slot free half of one early
# (db/sqlite/leases.py): that much is allowed. A limit that let a sixth start
# through would still show: all fifteen are ready at once, and a free slot
# is taken within a poll (0.05 s).
STORED_TO = dt.timedelta(milliseconds=1)


@pytest.fixture
def workers(tasks_alias: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(tasks_alias, tmp_path, args=("--poll", "0.05"), TASKS=settings.TASKS)
    yield group
    group.stop_all()


def all_finished(alias: str, ids: list[str], timeout: float) -> list[QueuedTask]:
    def done() -> list[QueuedTask] | None:
        rows = list(QueuedTask.objects.using(alias).filter(uuid__in=ids))
        return rows if all(row.status == "SUCCESSFUL" for row in rows) else None

    return wait_until(f"{len(ids)} tasks to succeed", done, timeout)


def most_at_once(rows: list[QueuedTask]) -> int:
    """The most runs of ``rows`` between their start and their end at one
    time (a run that ends as another starts does not overlap it)."""
    events = sorted(
        [(row.finished_at, -1) for row in rows] + [(row.last_attempted_at, 1) for row in rows]
    )
    now = most = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def most_starts_in_a_window(starts: list[dt.datetime], window: dt.timedelta) -> int:
    starts = sorted(starts)
    return max(
        sum(1 for later in starts[i:] if later - start < window - STORED_TO)
        for i, start in enumerate(starts)
    )


def test_two_keys_run_two_at_a_time_each_side_by_side_on_three_workers(
    tasks_alias: str, workers: Workers
) -> None:
    for _ in range(3):
        workers.start("--queue", "default", "--concurrency", "4")
    # All three polling before the tasks come, so that each claims its share.
    wait_until("three workers", lambda: Worker.objects.using(tasks_alias).count() == 3, 60)
    ids = [djtasks.per_account.enqueue(account, 0.3).id for account in "ab" * 6]
    rows = all_finished(tasks_alias, ids, timeout=60)
    by_key = {k: [r for r in rows if r.concurrency_key == f"account:{k}"] for k in "ab"}
    assert [len(group) for group in by_key.values()] == [6, 6]
    # Never more than two of a key at once, and two at once did run.
    assert [most_at_once(group) for group in by_key.values()] == [2, 2]
    # The keys ran side by side: up to four at once (twelve threads).
    assert most_at_once(rows) >= 3
    # Every slot came back with its task's end.
    assert not FlowSlot.objects.using(tasks_alias).filter(seq__isnull=False).exists()


def test_five_a_second_start_at_most_five_in_any_second_and_no_slower(
    tasks_alias: str, workers: Workers
) -> None:
    ids = [djtasks.five_a_second.enqueue(n).id for n in range(15)]
    for _ in range(3):
        workers.start("--queue", "default", "--concurrency", "4")
    rows = all_finished(tasks_alias, ids, timeout=60)
    starts = sorted(row.last_attempted_at for row in rows)
    assert most_starts_in_a_window(starts, dt.timedelta(seconds=1)) == 5
    # And no slower: each start after the first five comes within a poll or
    # so of the slot it takes being free again, a window after the start
    # five before it (the workers poll every 0.05 s). Bounded per window,
    # with room for a loaded machine, not over the whole run, where a
    # loaded machine's delays add up.
    later = [start - before for before, start in zip(starts, starts[5:], strict=False)]
    assert max(later) < dt.timedelta(seconds=1.8), later


def test_a_task_over_its_limit_does_not_hold_back_the_task_behind_it(
    tasks_alias: str, workers: Workers
) -> None:
    """One worker of three threads: two tasks of a key run, the third of the
    key waits, and the third thread takes the task behind it at once."""
    limited = [djtasks.per_account.enqueue("a", 1.0).id for _ in range(3)]
    behind = djtasks.add.enqueue(1, 1).id
    workers.start("--queue", "default", "--concurrency", "3")
    rows = {str(row.uuid): row for row in all_finished(tasks_alias, [*limited, behind], 60)}
    first_end = min(rows[i].finished_at for i in limited[:2])
    assert rows[behind].finished_at < first_end
    assert rows[limited[2]].last_attempted_at >= first_end
    assert most_at_once([rows[i] for i in limited]) == 2


# How long the claimers may go on past their 1.5 s for the tasks without a
# limit (a loaded machine's claims are slow), before the test fails on them.
STILL_CLAIMING = 30.0


@pytest.mark.parametrize("threads", [8])
def test_claimers_racing_never_pass_a_limit(server_alias: str, threads: int) -> None:
    """Eight threads, each its own connection, claim in batches of two and
    finish what they claimed, for a second and a half from the first claim's
    reply, and on until every task without a limit was claimed: the rows
    say that no more than two of the key ran at once, no more than five of
    the rate key started in any second, and every other task was claimed
    once. (Timed from the first claim, not from before the threads start:
    on a loaded machine their start took a third of the run, and the rate
    key's second second never came; and on one, 1.5 s did not reach all
    the tasks without a limit.)"""
    limited = [djtasks.per_account.enqueue("race").id for _ in range(40)]
    rated = [djtasks.five_a_second.enqueue(n).id for n in range(20)]
    plain = [djtasks.add.enqueue(n, n).id for n in range(20)]
    deadlines: list[float] = []
    first = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)
    unclaimed = set(plain)

    def going() -> bool:
        if not deadlines:
            return True
        now = time.monotonic()
        return now < deadlines[0] or (bool(unclaimed) and now < deadlines[0] + STILL_CLAIMING)

    def claimer(n: int) -> None:
        try:
            barrier.wait()
            while going():
                claims = QueuedTask.objects.claim_many(f"t{n}", queues=None, limit=2)
                with first:
                    if not deadlines:
                        deadlines.append(time.monotonic() + 1.5)
                    unclaimed.difference_update(str(claim.uuid) for claim in claims)
                for claim in claims:
                    time.sleep(random.uniform(0, 0.01))
                    assert QueuedTask.objects.finish(claim, status="SUCCESSFUL")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    group = [threading.Thread(target=claimer, args=(n,)) for n in range(threads)]
    for thread in group:
        thread.start()
    for thread in group:
        thread.join()
    assert errors == []
    rows = {str(row.uuid): row for row in QueuedTask.objects.using(server_alias)}
    ran = [rows[i] for i in limited if rows[i].status == "SUCCESSFUL"]
    assert most_at_once(ran) == 2 and len(ran) >= 10
    started = [rows[i].last_attempted_at for i in rated if rows[i].status == "SUCCESSFUL"]
    assert most_starts_in_a_window(started, dt.timedelta(seconds=1)) == 5
    assert len(started) > 5, "the rate key's second second came"
    assert {rows[i].status for i in plain} == {"SUCCESSFUL"}
    assert all(rows[i].attempts == 1 for i in plain)
    assert {rows[i].attempts for i in limited + rated} <= {0, 1}
    assert (
        not FlowSlot.objects.using(server_alias)
        .filter(kind="concurrency", seq__isnull=False)
        .exists()
    )
