"""System checks of the ``BGTASKS_*`` settings read where they are used
(intervals, limits, the executor, the API's authentication hooks), of a
``BGTASKS_*`` name the app does not read, and of ``USE_TZ``. (The lease
database's settings are :mod:`django_bgtasks.checks.database`'s; the
timing and schedules, :mod:`django_bgtasks.checks.tasks`'.)"""

from __future__ import annotations

import difflib
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string

from django_bgtasks.conf import EXECUTORS, PREFIX, SETTING_NAMES, conf
from django_bgtasks.validation import is_finite_number, max_value_bytes


@register()
def check_progress_interval(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E014 (bad ``BGTASKS_PROGRESS_INTERVAL``)."""
    interval = conf.PROGRESS_INTERVAL
    if not is_finite_number(interval) or interval < 0:
        return [
            Error(
                f"BGTASKS_PROGRESS_INTERVAL is {interval!r}; it must be a number of seconds, "
                "0 or more.",
                hint="The default is 0.5; 0 writes every update() at once.",
                id="bgtasks.E014",
            )
        ]
    return []


@register()
def check_push(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E020 (bad ``BGTASKS_CHANGES_POLL_INTERVAL``), bgtasks.E021
    (bad ``BGTASKS_EVENTS_KEEPALIVE``) and bgtasks.E022 (bad ``BGTASKS_ADMIN_EVENTS``)."""
    errors: list[CheckMessage] = []
    poll = conf.CHANGES_POLL_INTERVAL
    if not is_finite_number(poll) or not 0 < poll <= 60:
        errors.append(
            Error(
                f"BGTASKS_CHANGES_POLL_INTERVAL is {poll!r}; it must be a number of seconds "
                "above 0, at most 60.",
                hint=(
                    "The default is 0.5: on SQLite and MySQL the change feed reads the "
                    "leases that often, once per process."
                ),
                id="bgtasks.E020",
            )
        )
    keepalive = conf.EVENTS_KEEPALIVE
    if not is_finite_number(keepalive) or not 0 < keepalive <= 300:
        errors.append(
            Error(
                f"BGTASKS_EVENTS_KEEPALIVE is {keepalive!r}; it must be a number of seconds "
                "above 0, at most 300.",
                hint=(
                    "The default is 15: proxies close a silent connection after 30 to 60 s, "
                    "and a stream checks its access again at each keepalive."
                ),
                id="bgtasks.E021",
            )
        )
    admin_events: object = conf.ADMIN_EVENTS
    if admin_events is not None and not isinstance(admin_events, bool):
        errors.append(
            Error(
                f"BGTASKS_ADMIN_EVENTS is {admin_events!r}; it must be None, True or False.",
                hint=(
                    "None (the default): the admin opens the event stream when its page was "
                    "served under ASGI, and polls under WSGI. True: always (the events/ URLs "
                    "are routed to an ASGI server). False: never."
                ),
                id="bgtasks.E022",
            )
        )
    return errors


# Alike the checks beside it on purpose: each has its own setting, id, message and hint.
@register()
def check_history(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E006 (bad ``BGTASKS_HISTORY_DAYS``)."""
    days = conf.HISTORY_DAYS
    if not is_finite_number(days) or days < 0:
        return [
            Error(
                f"BGTASKS_HISTORY_DAYS is {days!r}; it must be a number of days, 0 or more.",
                hint="The default is 30.",
                id="bgtasks.E006",
            )
        ]
    return []


@register()
def check_max_value_bytes(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E019 (``BGTASKS_MAX_VALUE_BYTES`` not a whole number of bytes above 0)."""
    try:
        max_value_bytes()  # the rule the lease operations apply
    except TypeError:
        return [
            Error(
                f"BGTASKS_MAX_VALUE_BYTES is {conf.MAX_VALUE_BYTES!r}; it must be a whole "
                "number of bytes above 0.",
                hint=(
                    "The default is 1048576 (1 MiB); write 1 << 20 or 1_048_576, not a "
                    'string such as "1MB". Values larger than it are refused, and results '
                    "larger than it are not stored."
                ),
                id="bgtasks.E019",
            )
        ]
    return []


# Alike the checks beside it on purpose: each has its own setting, id, message and hint.
@register()
def check_setting_names(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.W006 (a ``BGTASKS_*`` setting the app does not read: a misspelling,
    which would otherwise leave the default in force without a word)."""
    known = [name.removeprefix(PREFIX) for name in SETTING_NAMES]
    messages: list[CheckMessage] = []
    for name in sorted(dir(settings)):
        if not name.startswith(PREFIX) or name in SETTING_NAMES:
            continue
        # Compared without the prefix, which every name shares and which
        # would make any two of them look alike.
        close = difflib.get_close_matches(name.removeprefix(PREFIX), known, n=1)
        hint = f"Did you mean {PREFIX}{close[0]}? " if close else ""
        messages.append(
            Warning(
                f"{name} is not a django-bgtasks setting, so it changes nothing.",
                hint=f"{hint}The settings are listed in docs/settings.md.",
                id="bgtasks.W006",
            )
        )
    return messages


@register()
def check_time_zone(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.W001 (``USE_TZ = False``)."""
    if not settings.USE_TZ:
        return [
            Warning(
                "USE_TZ is False. Lease times come from the database clock in UTC, so "
                "times shown by Django will be off by your UTC offset.",
                hint="Set USE_TZ = True (Django's default).",
                id="bgtasks.W001",
            )
        ]
    return []


@register()
def check_executor(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E007 (bad ``BGTASKS_EXECUTOR``)."""
    executor = conf.EXECUTOR
    if executor not in EXECUTORS:
        return [
            Error(
                f"BGTASKS_EXECUTOR is {executor!r}; it must be one of "
                f"{', '.join(map(repr, EXECUTORS))}.",
                hint=(
                    '"thread" (the default) runs "run now" in the web process; "worker" files '
                    "a request that `manage.py bgtasks worker` performs."
                ),
                id="bgtasks.E007",
            )
        ]
    return []


@register()
def check_api_authentication(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.E009 (a ``BGTASKS_API_AUTHENTICATION`` entry that can't be imported)."""
    paths: object = conf.API_AUTHENTICATION
    hint = (
        "List dotted paths to callables (request) -> user | None, e.g. "
        '["django_bgtasks.authentication.signed_token"]; see docs/security.md.'
    )
    if isinstance(paths, str) or not isinstance(paths, list | tuple):
        return [
            Error(
                f"BGTASKS_API_AUTHENTICATION is {paths!r}; it must be a list of dotted paths.",
                hint=hint,
                id="bgtasks.E009",
            )
        ]
    messages: list[CheckMessage] = []
    for path in paths:
        try:
            hook = import_string(path) if isinstance(path, str) else None
        except ImportError as exc:
            problem = f"can't be imported: {exc}"
        else:
            if callable(hook):
                continue
            problem = "is not a callable" if isinstance(path, str) else "is not a dotted path"
        messages.append(
            Error(
                f"BGTASKS_API_AUTHENTICATION: {path!r} {problem}.",
                hint=hint,
                id="bgtasks.E009",
            )
        )
    return messages
