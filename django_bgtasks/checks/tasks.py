"""System checks of what the registered tasks run under: the lease timing
(``BGTASKS_TTL``, and ``BGTASKS_HEARTBEAT_INTERVAL`` against it, against
each registered task's ttl and each ``LeaseBackend``'s ``OPTIONS["TTL"]``)
and ``BGTASKS_SCHEDULES`` (each entry parses, and names a registered task)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register

from django_bgtasks.conf import conf, lease_backends
from django_bgtasks.limits import MAX_TTL, MIN_TTL
from django_bgtasks.validation import is_finite_number


@register()
def check_timing(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E005 (bad ``BGTASKS_TTL``), E002 (heartbeat interval not below
    ttl/2, of ``BGTASKS_TTL``, of a registered task's own ttl, or of a
    ``LeaseBackend``'s ``OPTIONS["TTL"]``)."""
    from django_bgtasks.background.functions import registered_tasks

    ttl, interval = conf.TTL, conf.HEARTBEAT_INTERVAL
    if not is_finite_number(ttl) or not MIN_TTL <= ttl <= MAX_TTL:
        return [
            Error(
                f"BGTASKS_TTL is {ttl!r}; it must be a number of seconds from {MIN_TTL:g} "
                f"to {MAX_TTL:g}.",
                hint=(
                    "The default is 120. Below 0.1 s a heartbeat and a database round trip "
                    "no longer fit in a lease."
                ),
                id="bgtasks.E005",
            )
        ]
    if interval is not None and (not is_finite_number(interval) or not 0 < interval < ttl / 2):
        return [
            Error(
                f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; it must be above 0 and below "
                f"half of BGTASKS_TTL ({ttl / 2:g} s).",
                hint=(
                    "A heartbeat that fails once must be retried before the lease expires. "
                    "Leave it unset (None) to renew every ttl/3."
                ),
                id="bgtasks.E002",
            )
        ]
    if interval is None:
        return []
    # Each task's own ttl too: registering one reads no setting (its module is
    # imported at start-up), so this is where a ttl the interval does not fit
    # is said, before its first run refuses to start.
    messages: list[CheckMessage] = [
        Error(
            f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; the task {name!r} has a ttl of "
            f"{task.ttl:g} s, so it must be below {task.ttl / 2:g} s.",
            hint=(
                "Lower BGTASKS_HEARTBEAT_INTERVAL, leave it unset (None) to renew every "
                "ttl/3, or give the task a longer ttl."
            ),
            id="bgtasks.E002",
        )
        for name, task in registered_tasks().items()
        if task.ttl is not None and interval >= task.ttl / 2
    ]
    # The Django Tasks a worker claims are renewed with the same interval
    # (queued.py), against the ttl their backend gave them. (A TTL that is not
    # a number of seconds is the backend's own check, bgtasks.E016.)
    for alias, params in lease_backends().items():
        options = params.get("OPTIONS")
        backend_ttl = options.get("TTL") if isinstance(options, dict) else None
        if is_finite_number(backend_ttl) and backend_ttl > 0 and interval >= backend_ttl / 2:
            messages.append(
                Error(
                    f"BGTASKS_HEARTBEAT_INTERVAL is {interval!r}; TASKS[{alias!r}] gives its "
                    f'tasks a TTL of {backend_ttl:g} s (OPTIONS["TTL"]), so it must be below '
                    f"{backend_ttl / 2:g} s.",
                    hint=(
                        "Lower BGTASKS_HEARTBEAT_INTERVAL, leave it unset (None) to renew every "
                        'ttl/3, or raise the backend\'s OPTIONS["TTL"].'
                    ),
                    id="bgtasks.E002",
                )
            )
    return messages


@register()
def check_schedules(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E008 (a bad ``BGTASKS_SCHEDULES`` entry), W002 (one for no registered task)."""
    from django_bgtasks.background.functions import registered_tasks
    from django_bgtasks.background.schedules import parse_schedule

    schedules: object = conf.SCHEDULES
    if not isinstance(schedules, dict):
        return [
            Error(
                f"BGTASKS_SCHEDULES is {type(schedules).__name__}; it must be a dict of task "
                "names to schedules.",
                hint='For example {"log-cleanup": "0 3 * * *", "sync": timedelta(minutes=5)}.',
                id="bgtasks.E008",
            )
        ]
    messages: list[CheckMessage] = []
    registered = registered_tasks()
    for name, schedule in schedules.items():
        try:
            parse_schedule(schedule)
        except (TypeError, ValueError) as exc:
            messages.append(
                Error(
                    f"BGTASKS_SCHEDULES[{name!r}]: {exc}",
                    hint="Use a datetime.timedelta above zero, a five-field cron string "
                    "(minute hour day-of-month month day-of-week), or None for no schedule.",
                    id="bgtasks.E008",
                )
            )
        if name not in registered:
            messages.append(
                Warning(
                    f"BGTASKS_SCHEDULES names {name!r}, which no @background_task registers.",
                    hint=f"Registered: {', '.join(registered) or 'none'}.",
                    id="bgtasks.W002",
                )
            )
    return messages
