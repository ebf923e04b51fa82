"""The demo's data: log entries old enough to clean up, and a folder tree to scan.

The demo and serve scripts call these before starting replicas; storage-scan
makes its tree on first use too, so the task also works on its own.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from demo_site.models import LogEntry

MESSAGES = [
    "GET /orders/ 200",
    "POST /cart/ 201",
    "payment gateway slow (2.3 s)",
    "login failed for user 'bob'",
    "cache miss: product:4411",
    "GET /search/?q=lamp 200",
    "webhook retried (attempt 2)",
]
TENANTS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka"]
MONTHS = [f"2026-{month:02d}" for month in range(1, 13)]
FILES_PER_FOLDER = 6


def reset_logs(*, old: int = 1500, recent: int = 300, days: int = 30) -> None:
    """Replace the log with ``old`` entries older than ``days`` and ``recent`` newer ones."""
    rng = random.Random(42)  # noqa: S311  (made-up data, the same every run)
    now = timezone.now()

    def entry(age_days: float) -> LogEntry:
        return LogEntry(
            created_at=now - dt.timedelta(days=age_days),
            level=rng.choice(LogEntry.Level.values),
            message=rng.choice(MESSAGES),
        )

    with transaction.atomic():
        LogEntry.objects.all().delete()
        LogEntry.objects.bulk_create(
            [entry(rng.uniform(days + 1, days + 365)) for _ in range(old)]
            + [entry(rng.uniform(0, days - 1)) for _ in range(recent)],
            batch_size=500,
        )


def ensure_storage_tree(root: Path) -> None:
    """Make ``root/<tenant>/<month>/`` folders with a few files each, once."""
    if (root / ".complete").exists():
        return
    rng = random.Random(7)  # noqa: S311  (made-up data)
    for tenant in TENANTS:
        for month in MONTHS:
            folder = root / tenant / month
            folder.mkdir(parents=True, exist_ok=True)
            for number in range(FILES_PER_FOLDER):
                size = rng.randrange(200, 20_000)
                (folder / f"upload-{number:03d}.bin").write_bytes(b"\0" * size)
    # Written last: a tree half made by an interrupted run is finished next time.
    (root / ".complete").touch()


DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"  # noqa: S105  (a local demo account, printed for the reader)


def ensure_demo_user() -> None:
    """A superuser ``demo``/``demo`` for browsing the local demo site."""
    from django.contrib.auth import get_user_model

    user, _ = get_user_model()._default_manager.get_or_create(username=DEMO_USERNAME)
    user.is_staff = user.is_superuser = True
    user.set_password(DEMO_PASSWORD)
    user.save()
