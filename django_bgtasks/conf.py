"""The ``BGTASKS_*`` settings, with their defaults, read lazily.

Every read goes to ``django.conf.settings`` so that ``override_settings`` works
and nothing is read at import time. See docs/settings.md.
"""

from __future__ import annotations

from django.conf import settings


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
    def MAX_VALUE_BYTES(self) -> int:
        """The largest JSON value (encoded, in bytes) a task may store."""
        value: int = getattr(settings, "BGTASKS_MAX_VALUE_BYTES", 1 << 20)
        return value


conf = Settings()
