"""Which slot comes next (django_bgtasks/background/schedules.py): cron
schedules in a time zone, walked across both daylight-saving transitions of
Europe/Paris and America/New_York, to the exact UTC instant; and the time
zone's refusals. (The slots' claims, by the workers: tests/worker/test_slots.py.)

2026's transitions: Paris springs forward on 29 March at 02:00 CET (01:00
UTC, to 03:00 CEST) and falls back on 25 October at 03:00 CEST (01:00 UTC, to
02:00 CET); New York springs forward on 8 March at 02:00 EST (07:00 UTC, to
03:00 EDT) and falls back on 1 November at 02:00 EDT (06:00 UTC, to 01:00 EST).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from django_bgtasks import background_task
from django_bgtasks.background.schedules import Cron, parse_schedule
from django_bgtasks.checks.tasks import check_schedules

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def utc(text: str) -> dt.datetime:
    """``"03-29 01:00"`` of 2026, in UTC."""
    return dt.datetime.strptime(f"2026-{text}", "%Y-%m-%d %H:%M").replace(tzinfo=dt.UTC)


def walk(schedule: Cron, start: str, count: int) -> list[dt.datetime]:
    """The first ``count`` slots after ``start``, each from the one before, as
    a worker's claim moves a row on."""
    slots, now = [], utc(start)
    for _ in range(count):
        now = schedule.next_after(now)
        slots.append(now)
    return slots


# Each case: zone, expression, the walk's start (UTC), its slots (UTC).
WALKS = [
    # Spring forward. A fixed time in the skipped hour runs at the first
    # minute after the jump (03:00 local), once; the next day at its own time.
    (PARIS, "30 2 * * *", "03-28 12:00", ["03-29 01:00", "03-30 00:30"]),
    (NEW_YORK, "30 2 * * *", "03-07 12:00", ["03-08 07:00", "03-09 06:30"]),
    # A fixed time beside the skipped hour is not moved.
    (PARIS, "30 1 * * *", "03-28 12:00", ["03-29 00:30", "03-29 23:30"]),
    (NEW_YORK, "0 3 * * *", "03-07 12:00", ["03-08 07:00", "03-09 07:00"]),
    # A wildcard hour follows the wall clock: no slot in the skipped hour.
    (PARIS, "0 * * * *", "03-28 23:30", ["03-29 00:00", "03-29 01:00", "03-29 02:00"]),
    (
        NEW_YORK,
        "*/30 * * * *",
        "03-08 05:50",
        ["03-08 06:00", "03-08 06:30", "03-08 07:00", "03-08 07:30"],
    ),
    # Fall back. A fixed time in the repeated hour runs once, at its first
    # pass (summer time); the next day at the same wall-clock time, in winter time.
    (PARIS, "30 2 * * *", "10-24 12:00", ["10-25 00:30", "10-26 01:30"]),
    (NEW_YORK, "30 1 * * *", "10-31 12:00", ["11-01 05:30", "11-02 06:30"]),
    # A wildcard hour runs each slot of the repeated hour twice, an hour apart.
    (PARIS, "0 * * * *", "10-24 23:30", ["10-25 00:00", "10-25 01:00", "10-25 02:00"]),
    (
        NEW_YORK,
        "*/30 * * * *",
        "11-01 04:50",
        ["11-01 05:00", "11-01 05:30", "11-01 06:00", "11-01 06:30", "11-01 07:00"],
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "slots"), WALKS)
def test_a_cron_schedule_walks_each_transition_to_the_exact_utc_instant(
    zone: str, expression: str, start: str, slots: list[str]
) -> None:
    schedule = parse_schedule(expression, zone)
    assert isinstance(schedule, Cron)
    assert walk(schedule, start, len(slots)) == [utc(slot) for slot in slots]


TRANSITION_DAYS = [(PARIS, "03-29"), (PARIS, "10-25"), (NEW_YORK, "03-08"), (NEW_YORK, "11-01")]
EXPRESSIONS = ["30 2 * * *", "30 1 * * *", "0 * * * *", "*/30 * * * *", "15 1-3 * * *"]


@pytest.mark.parametrize(("zone", "day"), TRANSITION_DAYS)
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_from_any_instant_the_next_slot_is_the_walks_next_one_never_an_earlier_one(
    zone: str, day: str, expression: str
) -> None:
    """A worker computes the next slot from the database's clock at its poll,
    not from the slot before: from every half-minute of the transition's day
    the answer must be the first slot of the walk after that instant. (In
    the second pass of a repeated hour cronsim alone answers a slot of the
    first pass, before the instant: a slot would come twice, or a claim's
    ``next`` would be in the past.)"""
    schedule = Cron(expression, zone)
    start = utc(f"{day} 00:00") - dt.timedelta(hours=8)
    slots, now = [], start
    while not slots or slots[-1] < start + dt.timedelta(hours=36):
        now = schedule.next_after(now)
        slots.append(now)
    instant = start
    while instant < start + dt.timedelta(hours=30):
        expected = next(slot for slot in slots if slot > instant)
        assert schedule.next_after(instant) == expected, instant
        instant += dt.timedelta(seconds=30)


def test_without_a_zone_a_cron_schedule_is_read_in_time_zone(settings: Any) -> None:
    settings.TIME_ZONE = NEW_YORK
    schedule = parse_schedule("30 2 * * *")
    assert isinstance(schedule, Cron) and schedule.text == "30 2 * * *"
    assert walk(schedule, "03-07 12:00", 1) == [utc("03-08 07:00")]
    settings.TIME_ZONE = PARIS
    assert walk(schedule, "03-28 12:00", 1) == [utc("03-29 01:00")]


def test_a_zone_is_part_of_the_schedules_text_so_a_changed_zone_is_a_changed_schedule() -> None:
    assert Cron("0 3 * * *", PARIS).text == "0 3 * * * in Europe/Paris"
    assert Cron("0 3 * * *", PARIS) != Cron("0 3 * * *", NEW_YORK)


@pytest.mark.parametrize(
    ("schedule", "zone", "error", "message"),
    [
        ("0 3 * * *", "Europe/Nowhere", ValueError, "not a time zone this Python knows"),
        ("0 3 * * *", "", ValueError, "not a time zone"),
        ("0 3 * * *", "../../etc/passwd", ValueError, "not a time zone"),
        ("0 3 * * *", 1, TypeError, "must be an IANA time zone name, not int"),
        (dt.timedelta(hours=1), PARIS, ValueError, "timezone goes with a cron schedule"),
        (None, "Mars/Olympus", ValueError, "not a time zone"),
    ],
)
def test_a_bad_time_zone_is_refused_where_the_task_is_declared(
    schedule: object, zone: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        parse_schedule(schedule, zone)
    with pytest.raises(error, match=message):
        background_task(name="tz-refused", schedule=schedule, timezone=zone)  # type: ignore[arg-type]


def test_background_task_takes_a_zone_which_a_sites_cron_string_keeps(settings: Any) -> None:
    task = background_task(name="tz-paris", schedule="30 2 * * *", timezone=PARIS)(
        lambda lease: None
    )
    assert task.effective_schedule == Cron("30 2 * * *", PARIS)
    settings.BGTASKS_SCHEDULES = {"tz-paris": "0 4 * * *"}
    assert task.effective_schedule == Cron("0 4 * * *", PARIS)
    settings.BGTASKS_SCHEDULES = {"tz-paris": dt.timedelta(hours=1)}
    assert task.effective_schedule is not None
    assert task.effective_schedule.text == "every 3600s"
    assert check_schedules() == []
