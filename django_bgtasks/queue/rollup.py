"""The dashboard's rollup: the finished Django Tasks counted by minute and
by hour (:class:`~django_bgtasks.models.QueueRollup`), kept by the workers.

A read of the finished rows themselves grows with the table: a day of a
busy site is a million of them. So each minute, once it has passed, is
counted once, from the finished tasks' index by time (migration 0027): a
minute's rows, whatever the table holds. The dashboard then reads a few
thousand rollup rows at most (``operations/dashboard.py``).

Which worker rolls a minute up is no one's job in particular: every worker
that runs Django Tasks calls :func:`roll` now and then (``worker/rollup_keeper.py``),
and it rolls up what the rollup itself says has not been rolled up yet, by
the database's clock. Two workers that roll the same minute at once write
the same numbers, each by an upsert that replaces the row, so no lease is
needed and a worker killed halfway leaves the minute to the next call. The
minutes are rolled up oldest first, and the cluster's row of a minute is
written for every minute counted, with zeros when nothing finished, so the
newest such row says how far the rollup has come. A stretch of minutes in
which nothing ended is skipped, without rows (the dashboard reads a missing
minute as zeros).

What a row counts: the tasks that ended ``SUCCESSFUL`` or ``FAILED`` (a
cancelled task is a failed one) in the minute, by the database time of the
statement that ended them; an attempt that failed and will be retried is
not an end. Run times are ``finished_at - started_at`` (the last attempt's),
counted in the buckets of :data:`RUN_TIME_EDGES`; a task that ended without
starting (cancelled while ready) has none.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import connections
from django.db.models import Case, Count, IntegerField, QuerySet, Value, When
from django.db.models.lookups import GreaterThan

from django_bgtasks.choices import QueueStatus
from django_bgtasks.conf import conf
from django_bgtasks.db.times import MinuteUTC, Seconds
from django_bgtasks.models import BackgroundTask, QueuedTask, QueueRollup
from django_bgtasks.queue.lag import queue_lag

MINUTE, HOUR = 60, 3600
# The run-time buckets' upper edges, in seconds (a 1-2-5 series, 1 ms to
# 5,000 s); the last bucket holds the runs of 5,000 s and more. A
# percentile read from them is exact to the bucket (see :func:`percentile`).
RUN_TIME_EDGES: tuple[float, ...] = tuple(
    mantissa * 10.0**exponent for exponent in range(-3, 4) for mantissa in (1, 2, 5)
)
BUCKETS = len(RUN_TIME_EDGES) + 1
# A minute is rolled up this long after it ends: an end's ``finished_at`` is
# its statement's time, and its commit comes a little after.
SETTLE = dt.timedelta(seconds=10)
# The dashboard shows the last day: a rollup with nothing yet (a new install,
# an upgrade) starts a day back, and older rows are deleted.
CATCH_UP_FROM = dt.timedelta(days=1)
KEEP = dt.timedelta(days=2)
# The most minutes one call rolls up: catching up a busy day (a first start,
# an upgrade) is 144 calls, each ten minutes of finished rows, one a poll, so
# that no call holds a worker's loop for long; at 1,000 tasks a second, ten
# minutes are 600,000 rows (docs/benchmarks.md, "The dashboard").
MINUTES_A_CALL = 10

_SUCCESSFUL, _FAILED = str(QueueStatus.SUCCESSFUL), str(QueueStatus.FAILED)
_ENDED = (_SUCCESSFUL, _FAILED)
UTC = dt.UTC
Scope = tuple[str, str]  # (queue_name, task_path); "" is every one
CLUSTER: Scope = ("", "")


@dataclass
class Tally:
    """A scope's numbers over some time, summed from rows or from tasks."""

    succeeded: int = 0
    failed: int = 0
    run_times: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    # The oldest due ready task's age as the minute was rolled up (its
    # queue's, the cluster's largest); not summed.
    lag: float | None = None

    def add(self, succeeded: int, failed: int, run_times: Sequence[int]) -> None:
        self.succeeded += succeeded
        self.failed += failed
        for bucket, count in enumerate(run_times[:BUCKETS]):
            self.run_times[bucket] += count


@dataclass(frozen=True)
class Rolled:
    """What one call of :func:`roll` did: the minutes it rolled up (the
    first and the one after the last; equal when none were due) and whether
    more are due already (it stopped at ``MINUTES_A_CALL``)."""

    first: dt.datetime | None
    until: dt.datetime | None
    behind: bool

    @property
    def minutes(self) -> int:
        if self.first is None or self.until is None:
            return 0
        return int((self.until - self.first).total_seconds()) // MINUTE


def rolled_until() -> dt.datetime | None:
    """The end of the newest minute rolled up (``None`` before the first)."""
    start = (
        rollups()
        .filter(span=MINUTE, queue_name="", task_path="")
        .order_by("-start")
        .values_list("start", flat=True)
        .first()
    )
    return None if start is None else start + dt.timedelta(seconds=MINUTE)


def roll(now: dt.datetime | None = None) -> Rolled:
    """Roll up the minutes that have passed (``SETTLE`` ago) since the newest
    one rolled up, oldest first, at most ``MINUTES_A_CALL`` of them and none
    more than a day old; then their hours, from their minutes; then delete
    the rows older than ``KEEP``. ``now`` is the database's clock (read here
    when not given)."""
    now = BackgroundTask.objects.work.clock() if now is None else now
    due_until = floor(now - SETTLE, MINUTE)
    start = rolled_until() or due_until - CATCH_UP_FROM
    start = max(start, due_until - CATCH_UP_FROM)
    if start >= due_until:
        return Rolled(None, None, behind=False)
    # Minutes in which nothing ended are skipped to the first that has an
    # end (one descent of the finished tasks' index): a new install, or a
    # quiet night, catches up at once. The last minute is rolled up always,
    # for the lag and for the rollup's mark.
    start = max(start, min(_first_end_after(start), due_until - dt.timedelta(seconds=MINUTE)))
    until = min(due_until, start + dt.timedelta(seconds=MINUTE * MINUTES_A_CALL))
    # The lag is now's: it goes on the minute just passed, not on one caught up.
    recount(start, until, lag_at=now if until == due_until else None)
    rollups().filter(start__lt=now - KEEP).delete()
    return Rolled(start, until, behind=until < due_until)


def recount(start: dt.datetime, until: dt.datetime, lag_at: dt.datetime | None = None) -> None:
    """Count the whole minutes of [start, until) from the finished tasks,
    and the hours they are in from their minutes, replacing their rows (what
    :func:`roll` does with the minutes due; a test's way to count a minute
    again). With ``lag_at`` (the database's clock now), the queues' lag then
    goes on the last minute."""
    minutes = _count_finished(start, until)
    if lag_at is not None:
        _add_lags(minutes.setdefault(until - dt.timedelta(seconds=MINUTE), {}), lag_at)
    _write(MINUTE, minutes, every_minute=_minutes(start, until))
    _write(HOUR, _sum_hours({floor(minute, HOUR) for minute in _minutes(start, until)}))


def percentile(run_times: Sequence[int], fraction: float) -> float | None:
    """The run time below which ``fraction`` of the runs counted in
    ``run_times`` fall, read off the buckets: linear within the bucket that
    holds it (the first from 0 s), the lower edge for the last, open one.
    ``None`` when nothing ran."""
    total = sum(run_times)
    if not total:
        return None
    rank, seen = fraction * total, 0
    for bucket, count in enumerate(run_times):
        if count and seen + count >= rank:
            if bucket == len(RUN_TIME_EDGES):
                return RUN_TIME_EDGES[-1]
            low = RUN_TIME_EDGES[bucket - 1] if bucket else 0.0
            high = RUN_TIME_EDGES[bucket]
            return low + (high - low) * max(rank - seen, 0) / count
        seen += count
    return RUN_TIME_EDGES[-1]


# --- the reads and the writes ------------------------------------------------


def rollups() -> QuerySet[QueueRollup]:
    """The rollup's rows, on the queue's database."""
    return QueueRollup.objects.using(conf.DATABASE)


def floor(moment: dt.datetime, span: int) -> dt.datetime:
    """``moment`` down to a whole ``span`` (a minute, an hour) of UTC."""
    seconds = int(moment.timestamp()) // span * span
    return dt.datetime.fromtimestamp(seconds, tz=UTC)


def _minutes(start: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    count = int((until - start).total_seconds()) // MINUTE
    return [start + dt.timedelta(seconds=MINUTE * index) for index in range(count)]


def _first_end_after(start: dt.datetime) -> dt.datetime:
    """The minute of the first end at or after ``start`` (the far future for none)."""
    first = (
        QueuedTask.objects.using(conf.DATABASE)
        .filter(finished_at__gte=start)
        .order_by("finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    return dt.datetime.max.replace(tzinfo=UTC) if first is None else floor(first, MINUTE)


def _count_finished(
    start: dt.datetime, until: dt.datetime
) -> dict[dt.datetime, dict[Scope, Tally]]:
    """The tasks that ended in [start, until), by minute and scope: one
    statement, a ``GROUP BY`` of the rows the finished tasks' index holds
    for the range, a group for each run-time bucket (a ``CASE`` of the run's
    seconds, computed once a row in the engine: db/times.py)."""
    run = Seconds("started_at", "finished_at")
    bucket = Case(
        When(started_at__isnull=True, then=Value(-1)),
        *(When(GreaterThan(Value(edge), run), then=Value(index))
          for index, edge in enumerate(RUN_TIME_EDGES)),
        default=Value(len(RUN_TIME_EDGES)),
        output_field=IntegerField(),
    )  # fmt: skip
    # By the time alone: a status in the WHERE sent SQLite's planner to the
    # finished rows' index by status, every finished row of the table (2.6 s
    # for an empty minute at 1,000,000 rows). The statuses are told apart
    # below, from the groups (a row with a finish time has ended).
    rows = (
        QueuedTask.objects.using(conf.DATABASE)
        .filter(finished_at__gte=start, finished_at__lt=until)
        .annotate(minute=MinuteUTC("finished_at"), bucket=bucket)
        .values_list("minute", "queue_name", "task_path", "status", "bucket")
        .annotate(ended=Count("pk"))
        .order_by()
    )
    minutes: dict[dt.datetime, dict[Scope, Tally]] = defaultdict(dict)
    for minute, queue, path, status, index, ended in rows:
        if status not in _ENDED:
            continue
        ok = status == _SUCCESSFUL
        buckets = [0] * BUCKETS
        if index >= 0:  # (-1: it ended without starting)
            buckets[index] = ended
        tallies = minutes[floor(minute, MINUTE)]
        for scope in (CLUSTER, (queue, ""), ("", path)):
            tallies.setdefault(scope, Tally()).add(ended if ok else 0, 0 if ok else ended, buckets)
    return minutes


def _add_lags(tallies: dict[Scope, Tally], now: dt.datetime) -> None:
    """The lag of each queue with ready tasks now (:func:`queue_lag`'s
    reads, as the metrics view's), on its row; the cluster's is the largest."""
    lags: dict[Scope, float] = {}
    with QueuedTask.objects.index_reads():
        for queue in QueuedTask.objects.queue_names():
            lag = queue_lag(queue, now)
            if lag:
                lags[(queue, "")] = lag
    lags[CLUSTER] = max(lags.values(), default=0.0)
    for scope, lag in lags.items():
        tallies.setdefault(scope, Tally()).lag = lag


def _write(
    span: int,
    periods: dict[dt.datetime, dict[Scope, Tally]],
    every_minute: Iterable[dt.datetime] = (),
) -> None:
    """Upsert a row for each period and scope, replacing what was there;
    and the cluster's row of each of ``every_minute``, zeros if nothing ended."""
    for minute in every_minute:
        periods.setdefault(minute, {}).setdefault(CLUSTER, Tally())
    rows = []
    for start, tallies in periods.items():
        for (queue, path), tally in tallies.items():
            rows.append(
                QueueRollup(
                    span=span,
                    start=start,
                    queue_name=queue,
                    task_path=path,
                    succeeded=tally.succeeded,
                    failed=tally.failed,
                    run_times=tally.run_times,
                    lag=tally.lag,
                )
            )
    table = rollups()
    # MySQL/MariaDB's upsert names no conflict target (any unique key is one).
    target = connections[table.db].features.supports_update_conflicts_with_target
    table.bulk_create(
        rows,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["span", "queue_name", "task_path", "start"] if target else None,
        update_fields=["succeeded", "failed", "run_times", "lag"],
    )


def _sum_hours(hours: set[dt.datetime]) -> dict[dt.datetime, dict[Scope, Tally]]:
    """Each of ``hours`` summed from its minutes' rows, by scope."""
    periods: dict[dt.datetime, dict[Scope, Tally]] = {}
    for hour in sorted(hours):
        tallies: dict[Scope, Tally] = {}
        rows = rollups().filter(
            span=MINUTE, start__gte=hour, start__lt=hour + dt.timedelta(seconds=HOUR)
        )
        for row in rows.values_list("queue_name", "task_path", "succeeded", "failed", "run_times"):
            queue, path, succeeded, failed, run_times = row
            tallies.setdefault((queue, path), Tally()).add(succeeded, failed, run_times)
        periods[hour] = tallies
    return periods
