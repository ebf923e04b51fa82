"""The admin's dashboard, read (django_bgtasks/operations/dashboard.py), on
every database: a window before any rollup (every point there, zeros); the
rollup's minutes for the cluster, a queue or a task path, and the tables of
queues and task paths, from the workers' rollup; what is true now; a bad
window or scope refused before anything is read. (The page that shows it:
tests/admin/test_dashboard.py.)"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from django_bgtasks.conf import conf
from django_bgtasks.models import BackgroundTask, QueueRollup
from django_bgtasks.operations.dashboard import TOP_TASKS, WINDOWS, Total, dashboard
from django_bgtasks.queue import rollup
from tests.dbtools import ended_a_minute_ago

MINUTE = dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("scope", "said"),
    [
        ({"window": "week"}, "unknown window 'week': one of hour, day"),
        ({"queue": "default", "task": "tests.djtasks.echo"}, "a queue or a task path, not both"),
    ],
)
def test_a_bad_window_or_scope_is_refused(
    refusal_alias: str, scope: dict[str, str], said: str
) -> None:
    with pytest.raises(ValueError, match=f"^{said}"):
        dashboard(**scope)
    assert not QueueRollup.objects.using(conf.DATABASE).exists()


def test_before_any_rollup_every_point_of_the_window_is_there_with_nothing_in_it(
    tasks_alias: str,
) -> None:
    hour = dashboard()
    assert hour.end is None and hour.window == WINDOWS["hour"]
    assert hour.clock <= BackgroundTask.objects.work.clock()
    assert len(hour.points) == 60 and hour.points[0].start == hour.start
    steps = {b.start - a.start for a, b in itertools.pairwise(hour.points)}
    assert steps == {MINUTE}
    assert {(p.ended, p.minutes, p.p50, p.lag, p.failure_ratio) for p in hour.points} == {
        (0, 1, None, None, None)
    }
    assert (hour.totals.succeeded, hour.totals.failed, hour.totals.failure_ratio) == (0, 0, None)
    assert hour.queues == [] and hour.tasks == [] and hour.workers == []
    day = dashboard("day")
    assert 92 <= len(day.points) <= 96 and {p.minutes for p in day.points[:-1]} == {15}
    assert day.start.minute == 0 and day.start.second == 0  # whole hours, as the tables


def test_the_rollups_points_and_tables_for_the_cluster_a_queue_and_a_task_path(
    tasks_alias: str,
) -> None:
    minute = ended_a_minute_ago(tasks_alias)  # 3 succeeded in 15 ms, 1 failed on "other"
    board = dashboard()
    # The newest minute rolled up, not the clock: that minute's end, or the
    # next one's where the clock passed a minute while the helper rolled up.
    assert board.end == rollup.rolled_until()
    assert board.end in (minute + MINUTE, minute + 2 * MINUTE)
    [last] = [point for point in board.points if point.start == minute]
    assert (last.start, last.succeeded, last.failed, last.failure_ratio) == (minute, 3, 1, 0.25)
    assert last.p50 is not None and 0.01 <= last.p50 < 0.02  # within its bucket
    assert sum(point.ended for point in board.points) == 4
    assert board.queues == [Total("default", 3, 0), Total("other", 0, 1)]
    assert board.tasks == [Total("tests.djtasks.echo", 3, 1)] and len(board.tasks) <= TOP_TASKS
    # Now: the task still ready (enqueued beside them), and no worker.
    assert board.now.queue_tasks[("default", "READY")] == 1 and board.workers == []

    other = dashboard(queue="other")
    assert (other.totals.name, other.totals.succeeded, other.totals.failed) == ("other", 0, 1)
    echo = dashboard(task="tests.djtasks.echo").totals
    assert (echo.succeeded, echo.failed, echo.failure_ratio) == (3, 1, 0.25)
    day = dashboard("day")
    assert (day.totals.succeeded, day.totals.failed) == (3, 1)
    assert day.queues == board.queues  # from the hours' rows
