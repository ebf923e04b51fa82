"""The example site's background tasks, in the style of a real site's chores.

Any replica can start them (the admin, the JSON API, the ``bgtasks`` command),
or ask a ``manage.py bgtasks worker`` to, as the demo does. The lease makes
sure that only one process runs each at a time, and what they report through
``lease.update()`` is what every replica shows.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from demo_site.demo_data import ensure_storage_tree
from demo_site.models import LogEntry
from django_bgtasks import RunningLease, background_task


# No ttl of its own: BGTASKS_TTL, which the demo sets short (3 s) to make a
# takeover quick to watch.
@background_task(name="log-cleanup", resume=True)
def log_cleanup(
    lease: RunningLease, days: int = 30, batch_size: int = 50, pause: float = 0.1
) -> dict[str, int]:
    """Delete log entries older than a number of days, in batches.

    Small batches keep each transaction short, and the pause between them
    spares the database. Each batch is deleted under ``lease.fence()``: if
    this process lost the lease meanwhile (it was paused, or cut off), the
    batch rolls back instead of racing the worker that took over.

    Every value it writes is a checkpoint: ``done`` rows so far, written at
    once (``flush=True``), not coalesced. When its
    worker dies, another worker resumes the run with ``lease.resume_from``,
    that last value, and counts on from there (``from`` says where it began).
    The deletes themselves need no checkpoint, since the rows already deleted
    are gone; a batch deleted after the last checkpoint is simply not counted
    by the resumed run.
    """
    start = (lease.resume_from or {}).get("done", 0)
    cutoff = timezone.now() - dt.timedelta(days=days)
    old = LogEntry.objects.filter(created_at__lt=cutoff)
    # Each value keeps "done": a resume from any of them loses no count.
    lease.update({"phase": "counting", "done": start, "from": start})
    done, total = start, start + old.count()
    lease.update({"phase": "deleting", "done": done, "total": total, "from": start})
    while True:
        # No database access: raises if an operator cancelled the run, or the
        # heartbeat thread found the lease gone, while we paused.
        lease.check()
        batch = list(old.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not batch:
            break
        with transaction.atomic():
            lease.fence()
            deleted, _ = LogEntry.objects.filter(pk__in=batch).delete()
        done += deleted
        # A checkpoint a resume counts on from: flush=True writes it now,
        # rather than coalescing it with the next (BGTASKS_PROGRESS_INTERVAL).
        lease.update(
            {"phase": "deleting", "done": done, "total": total, "from": start}, flush=True
        )
        time.sleep(pause)
    lease.update({"phase": "done", "done": done, "total": total, "from": start})
    return {"deleted": done - start, "done": done}


@background_task(name="storage-scan")
def storage_scan(lease: RunningLease, pause: float = 0.03) -> dict[str, Any]:
    """Walk the uploads folder tree and total up what each tenant stores."""
    root = Path(settings.DEMO_STORAGE_ROOT)
    lease.update({"phase": "preparing", "current_prefix": "", "scanned": 0})
    ensure_storage_tree(root)
    prefixes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    scanned, size = 0, 0
    per_tenant: dict[str, int] = {}
    for done, prefix in enumerate(prefixes):
        for folder, subfolders, files in os.walk(root / prefix):
            subfolders.sort()
            current = Path(folder).relative_to(root).as_posix()
            for file in files:
                lease.check()  # a cancel is seen between files, not only per folder
                size += os.stat(os.path.join(folder, file)).st_size
                scanned += 1
            per_tenant[prefix] = per_tenant.get(prefix, 0) + len(files)
            lease.update(
                {
                    "phase": "scanning",
                    "current_prefix": current,
                    "scanned": scanned,
                    "bytes": size,
                    "done": done,
                    "total": len(prefixes),
                }
            )
            time.sleep(pause)
    result = {"scanned": scanned, "bytes": size, "files_per_tenant": per_tenant}
    lease.update(
        {
            "phase": "done",
            "current_prefix": "",
            "done": len(prefixes),
            "total": len(prefixes),
            **result,
        }
    )
    return result
