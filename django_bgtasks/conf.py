"""The ``BGTASKS_*`` settings, with their defaults, read lazily.

Nothing is read at import time. A setting is read from ``django.conf.settings``
once and then kept, because the lease operations read several on every call
and reading one a site leaves unset costs an AttributeError each time; Django's
``setting_changed`` signal (``override_settings``, pytest-django's ``settings``
fixture) forgets what was kept. Like Django's own settings, they are not meant
to be reassigned at run time otherwise. See docs/settings.md.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from django_bgtasks.limits import DEFAULT_TTL

_UNREAD = object()
_kept: dict[str, Any] = {}


def _setting(name: str, default: Any) -> Any:
    value = _kept.get(name, _UNREAD)
    if value is _UNREAD:
        value = _kept[name] = getattr(settings, name, default)
    return value


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("BGTASKS_"):
        _kept.clear()


setting_changed.connect(_forget, dispatch_uid="django_bgtasks.conf")

# BGTASKS_EXECUTOR: where "run now" (admin, API, command) runs a task.
EXECUTOR_THREAD = "thread"  # claim it here, run it in a thread of this process
EXECUTOR_WORKER = "worker"  # file a request; a `bgtasks worker` performs it
EXECUTORS = (EXECUTOR_THREAD, EXECUTOR_WORKER)


class Settings:
    """The ``BGTASKS_*`` settings: ``conf.TTL`` reads ``settings.BGTASKS_TTL``, and so on."""

    @property
    def TTL(self) -> float:
        """Default lease duration in seconds."""
        value: float = _setting("BGTASKS_TTL", DEFAULT_TTL)
        return value

    @property
    def HEARTBEAT_INTERVAL(self) -> float | None:
        """Seconds between heartbeats; ``None`` means a third of each lease's ttl."""
        value: float | None = _setting("BGTASKS_HEARTBEAT_INTERVAL", None)
        return value

    @property
    def PROGRESS_INTERVAL(self) -> float:
        """Seconds within which a run's ``update()`` calls are coalesced into one
        write (django_bgtasks.progress); 0 writes every call."""
        value: float = _setting("BGTASKS_PROGRESS_INTERVAL", 0.5)
        return value

    @property
    def CHANGES_POLL_INTERVAL(self) -> float:
        """Seconds between the change feed's reads on SQLite and MySQL, which
        have no notifications (django_bgtasks.changes); one read per process."""
        value: float = _setting("BGTASKS_CHANGES_POLL_INTERVAL", 0.5)
        return value

    @property
    def EVENTS_KEEPALIVE(self) -> float:
        """Seconds between the event stream's keepalive comments, at each of
        which it checks again that its client may still see tasks."""
        value: float = _setting("BGTASKS_EVENTS_KEEPALIVE", 15.0)
        return value

    @property
    def ADMIN_EVENTS(self) -> bool | None:
        """Whether the admin's pages open the event stream: ``None`` when the
        page itself is served under ASGI, else always (``True``) or never."""
        value: bool | None = _setting("BGTASKS_ADMIN_EVENTS", None)
        return value

    @property
    def DATABASE(self) -> str:
        """The database alias that holds the lease table."""
        value: str = _setting("BGTASKS_DATABASE", "default")
        return value

    @property
    def READ_DATABASE(self) -> str:
        """The database alias the operator's list reads go to (the admin's
        lists, the API's, the dashboard, the metrics view, ``bgtasks list``,
        ``queues`` and ``workers``): a replica of ``BGTASKS_DATABASE``, or by
        default that alias itself (django_bgtasks.db.read_database)."""
        value: str | None = _setting("BGTASKS_READ_DATABASE", None)
        return self.DATABASE if value is None else value

    @property
    def READ_MAX_LAG(self) -> float | None:
        """Seconds behind the primary past which ``BGTASKS_READ_DATABASE`` is
        not read (the primary is, and the surface says why); ``None``: no limit."""
        value: float | None = _setting("BGTASKS_READ_MAX_LAG", 10.0)
        return value

    @property
    def PREPARED_STATEMENTS(self) -> bool | None:
        """Whether the lease statements run as prepared statements on PostgreSQL
        (django_bgtasks.db.cursor): ``None`` means yes unless the database sets
        ``DISABLE_SERVER_SIDE_CURSORS`` (a transaction-pooling PgBouncer)."""
        value: bool | None = _setting("BGTASKS_PREPARED_STATEMENTS", None)
        return value

    @property
    def REQUIRE_SYNC_REPLICATION(self) -> bool:
        """Whether the lease database's primary must have a synchronous standby
        (checked by ``manage.py check --database``, bgtasks.E031-E035)."""
        value: bool = _setting("BGTASKS_REQUIRE_SYNC_REPLICATION", False)
        return value

    @property
    def HISTORY_DAYS(self) -> int:
        """How many days of run history ``bgtasks prune`` keeps."""
        value: int = _setting("BGTASKS_HISTORY_DAYS", 30)
        return value

    @property
    def EXECUTOR(self) -> str:
        """``"thread"`` (run now runs in the calling process) or ``"worker"``."""
        value: str = _setting("BGTASKS_EXECUTOR", EXECUTOR_THREAD)
        return value

    @property
    def SCHEDULES(self) -> dict[str, Any]:
        """Per-site schedules by task name (a ``timedelta``, a cron string, or
        ``None`` for none), replacing those the tasks were registered with."""
        value: dict[str, Any] = _setting("BGTASKS_SCHEDULES", {})
        return value

    @property
    def API_AUTHENTICATION(self) -> list[str]:
        """Dotted paths to callables ``(request) -> user | None`` that the JSON
        API tries, in order, for a request without a session user."""
        value: list[str] = _setting("BGTASKS_API_AUTHENTICATION", [])
        return value

    @property
    def MAX_VALUE_BYTES(self) -> int:
        """The largest JSON value (encoded, in bytes) a task may store."""
        value: int = _setting("BGTASKS_MAX_VALUE_BYTES", 1 << 20)
        return value


PREFIX = "BGTASKS_"
# Every setting the app reads, from Settings' properties (one for each), so
# that bgtasks.W006 (a BGTASKS_* name it does not know) can't drift from them.
SETTING_NAMES: tuple[str, ...] = tuple(
    sorted(
        PREFIX + name for name, member in vars(Settings).items() if isinstance(member, property)
    )
)

conf = Settings()


# Where LeaseBackend is defined: settings name it by its public path,
# django_bgtasks.backend.LeaseBackend, which re-exports it.
LEASE_BACKEND = "django_bgtasks.queue.backend.LeaseBackend"


def lease_backends() -> dict[str, dict[str, Any]]:
    """The ``TASKS`` entries whose backend is (a subclass of) ``LeaseBackend``,
    by alias. (Matched by name: importing the backend module needs a Tasks
    framework, which a site of background tasks alone may not have.)"""
    from django.utils.module_loading import import_string

    found = {}
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            backend = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError):
            continue
        if any(
            f"{base.__module__}.{base.__qualname__}" == LEASE_BACKEND
            for base in getattr(backend, "__mro__", ())
        ):
            found[alias] = params
    return found
