"""The admin's dashboard, read: the last hour or day of the finished Django
Tasks, for the whole cluster, one queue or one task path, from the rollup
the workers keep (:mod:`django_bgtasks.queue.rollup`); beside it what
is true now, as the metrics view reads it (``cluster_counts()``), and the
workers.

Every number comes from the database, so every replica shows the same. A
read is a few statements, each over the rollup's rows of the window (at
most a day of minutes for the chart's scope, a day of hours for the tables),
never over the tasks' table, so its cost does not grow with the queue.

The window ends at the newest minute rolled up, not at the clock: a chart
whose last minute is still being counted would show a dip that isn't there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import F, Sum

from django_bgtasks.core.states import WorkerState
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations.cluster import ClusterCounts, cluster_counts
from django_bgtasks.queue.rollup import (
    HOUR,
    MINUTE,
    Tally,
    floor,
    percentile,
    rolled_until,
    rollups,
)

# The task paths a table lists, those that ended most tasks in the window.
TOP_TASKS = 20


@dataclass(frozen=True)
class Window:
    """A dashboard's span of time, and the width of its chart's points."""

    name: str
    hours: int
    step: int  # seconds a point

    def start(self, end: dt.datetime) -> dt.datetime:
        """The window before ``end``: an hour of minutes; or, for a day, the
        hours that end's hour and the 23 before it began (whole hour rows
        for the tables, so the charts start there too)."""
        if self.hours == 1:
            return end - dt.timedelta(hours=1)
        return floor(end - dt.timedelta(seconds=1), HOUR) - dt.timedelta(hours=self.hours - 1)


WINDOWS = {"hour": Window("hour", 1, MINUTE), "day": Window("day", 24, 15 * MINUTE)}


@dataclass(frozen=True)
class Point:
    """One point of the charts: ``minutes`` minutes from ``start``."""

    start: dt.datetime
    minutes: int
    succeeded: int
    failed: int
    p50: float | None
    p95: float | None
    lag: float | None

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed

    @property
    def succeeded_per_minute(self) -> float:
        return self.succeeded / self.minutes

    @property
    def failed_per_minute(self) -> float:
        return self.failed / self.minutes

    @property
    def failure_ratio(self) -> float | None:
        return self.failed / self.ended if self.ended else None


@dataclass(frozen=True)
class Total:
    """A queue's or a task path's ends over the window."""

    name: str
    succeeded: int
    failed: int

    @property
    def failure_ratio(self) -> float | None:
        ended = self.succeeded + self.failed
        return self.failed / ended if ended else None


@dataclass(frozen=True)
class Dashboard:
    """What the dashboard page shows (see the module docstring)."""

    window: Window
    queue: str
    task: str
    start: dt.datetime
    end: dt.datetime | None  # the newest minute rolled up; None before any
    clock: dt.datetime  # the database's, as it was read
    points: list[Point]
    queues: list[Total]
    tasks: list[Total]
    now: ClusterCounts
    workers: list[WorkerState]

    @property
    def totals(self) -> Total:
        return Total(
            self.queue or self.task,
            sum(point.succeeded for point in self.points),
            sum(point.failed for point in self.points),
        )


def dashboard(window: str = "hour", queue: str = "", task: str = "") -> Dashboard:
    """The dashboard of ``window`` (``"hour"`` or ``"day"``) for the cluster,
    or ``queue``, or ``task`` (a path): a ``ValueError`` for an unknown
    window, or for a queue and a task path at once (the rollup counts each
    alone)."""
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}: one of {', '.join(WINDOWS)}")
    if queue and task:
        raise ValueError("a queue or a task path, not both: the rollup counts each alone")
    chosen = WINDOWS[window]
    rolled, clock = rolled_until(), BackgroundTask.objects.work.clock()
    end = rolled or floor(clock, MINUTE)
    start = chosen.start(end)
    return Dashboard(
        window=chosen,
        queue=queue,
        task=task,
        start=start,
        end=rolled,
        clock=clock,
        points=_points(chosen, queue, task, start, end),
        queues=_totals(chosen, start, end, "queue_name"),
        tasks=_totals(chosen, start, end, "task_path")[:TOP_TASKS],
        now=cluster_counts(),
        workers=[worker for worker in BackgroundTask.objects.work.workers() if not worker.silent],
    )


def _points(
    window: Window, queue: str, task: str, start: dt.datetime, end: dt.datetime
) -> list[Point]:
    """The scope's minutes in [start, end), a point a ``window.step``, every
    step there (zeros where nothing ended); a point's lag is its minutes' largest."""
    rows = rollups().filter(
        span=MINUTE, queue_name=queue, task_path=task, start__gte=start, start__lt=end
    )
    steps: dict[dt.datetime, tuple[Tally, list[float]]] = {}
    moment = start
    while moment < end:
        steps[moment] = (Tally(), [])
        moment += dt.timedelta(seconds=window.step)
    for row in rows.values_list("start", "succeeded", "failed", "run_times", "lag"):
        minute, succeeded, failed, run_times, lag = row
        step = start + dt.timedelta(
            seconds=(int((minute - start).total_seconds()) // window.step) * window.step
        )
        tally, lags = steps[step]
        tally.add(succeeded, failed, run_times)
        if lag is not None:
            lags.append(lag)
    return [
        Point(
            start=moment,
            minutes=max(1, min(window.step, int((end - moment).total_seconds())) // MINUTE),
            succeeded=tally.succeeded,
            failed=tally.failed,
            p50=percentile(tally.run_times, 0.5),
            p95=percentile(tally.run_times, 0.95),
            lag=max(lags) if lags else None,
        )
        for moment, (tally, lags) in steps.items()
    ]


def _totals(window: Window, start: dt.datetime, end: dt.datetime, column: str) -> list[Total]:
    """Each queue's (``column`` ``queue_name``) or task path's ends over the
    window, most first: summed by the database from the minutes' rows for an
    hour, the hours' for a day."""
    other = "task_path" if column == "queue_name" else "queue_name"
    span = MINUTE if window.step == MINUTE else HOUR
    rows = (
        rollups()
        .filter(span=span, start__gte=start, start__lt=end, **{other: ""})
        .exclude(**{column: ""})
        .values(column)
        .annotate(ok=Sum("succeeded"), ko=Sum("failed"))
        .order_by((F("ok") + F("ko")).desc(), column)
    )
    return list(_as_totals(rows, column))


def _as_totals(rows: Iterable[dict[str, object]], column: str) -> Iterable[Total]:
    for row in rows:
        yield Total(str(row[column]), int(row["ok"] or 0), int(row["ko"] or 0))  # type: ignore[call-overload]
