"""The example site's background tasks."""

from __future__ import annotations

import time

from django_bgtasks import RunningLease, background_task


@background_task(name="log-cleanup", ttl=3)
def log_cleanup(lease: RunningLease, batches: int = 20) -> dict[str, int]:
    """Delete old log rows in batches."""
    for done in range(1, batches + 1):
        time.sleep(0.2)  # one batch of deletes
        lease.update({"phase": "deleting", "done": done, "total": batches})
    return {"deleted": batches}
