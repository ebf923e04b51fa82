"""The ``BGTASKS_*`` settings, with their defaults, read lazily.

Every read goes to ``django.conf.settings`` so that ``override_settings`` works
and nothing is read at import time. See docs/settings.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

# BGTASKS_EXECUTOR: where "run now" (admin, API, command) runs a task.
EXECUTOR_THREAD = "thread"  # claim it here, run it in a thread of this process
EXECUTOR_WORKER = "worker"  # file a request; a `bgtasks worker` performs it
EXECUTORS = (EXECUTOR_THREAD, EXECUTOR_WORKER)


class Settings:
    """The ``BGTASKS_*`` settings: ``conf.TTL`` reads ``settings.BGTASKS_TTL``, and so on."""

    @property
    def TTL(self) -> float:
        """Default lease duration in seconds."""
        value: float = getattr(settings, "BGTASKS_TTL", 120.0)
        return value

    @property
    def HEARTBEAT_INTERVAL(self) -> float | None:
        """Seconds between heartbeats; ``None`` means a third of each lease's ttl."""
        value: float | None = getattr(settings, "BGTASKS_HEARTBEAT_INTERVAL", None)
        return value

    @property
    def PROGRESS_INTERVAL(self) -> float:
        """Seconds within which a run's ``update()`` calls are coalesced into one
        write (django_bgtasks.progress); 0 writes every call."""
        value: float = getattr(settings, "BGTASKS_PROGRESS_INTERVAL", 0.5)
        return value

    @property
    def CHANGES_POLL_INTERVAL(self) -> float:
        """Seconds between the change feed's reads on SQLite and MySQL, which
        have no notifications (django_bgtasks.changes); one read per process."""
        value: float = getattr(settings, "BGTASKS_CHANGES_POLL_INTERVAL", 0.5)
        return value

    @property
    def EVENTS_KEEPALIVE(self) -> float:
        """Seconds between the event stream's keepalive comments, at each of
        which it checks again that its client may still see tasks."""
        value: float = getattr(settings, "BGTASKS_EVENTS_KEEPALIVE", 15.0)
        return value

    @property
    def DATABASE(self) -> str:
        """The database alias that holds the lease table."""
        value: str = getattr(settings, "BGTASKS_DATABASE", "default")
        return value

    @property
    def HISTORY_DAYS(self) -> int:
        """How many days of run history ``bgtasks prune`` keeps."""
        value: int = getattr(settings, "BGTASKS_HISTORY_DAYS", 30)
        return value

    @property
    def EXECUTOR(self) -> str:
        """``"thread"`` (run now runs in the calling process) or ``"worker"``."""
        value: str = getattr(settings, "BGTASKS_EXECUTOR", EXECUTOR_THREAD)
        return value

    @property
    def SCHEDULES(self) -> dict[str, Any]:
        """Per-site schedules by task name (a ``timedelta``, a cron string, or
        ``None`` for none), replacing those the tasks were registered with."""
        value: dict[str, Any] = getattr(settings, "BGTASKS_SCHEDULES", {})
        return value

    @property
    def API_AUTHENTICATION(self) -> list[str]:
        """Dotted paths to callables ``(request) -> user | None`` that the JSON
        API tries, in order, for a request without a session user."""
        value: list[str] = getattr(settings, "BGTASKS_API_AUTHENTICATION", [])
        return value

    @property
    def MAX_VALUE_BYTES(self) -> int:
        """The largest JSON value (encoded, in bytes) a task may store."""
        value: int = getattr(settings, "BGTASKS_MAX_VALUE_BYTES", 1 << 20)
        return value


conf = Settings()
