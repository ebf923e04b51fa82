"""Background tasks that the admin, API, command and browser tests start by
name. django-bgtasks imports this module at start-up, as it would any app's."""

from __future__ import annotations

import time

from django_bgtasks import RunningLease, background_task


@background_task(name="surface-quick", ttl=30)
def quick(lease: RunningLease, total: int = 3) -> dict[str, int]:
    """Counts to three, reporting each step."""
    for done in range(1, total + 1):
        lease.update({"done": done, "total": total})
    return {"counted": total}


@background_task(name="surface-slow", ttl=3)
def slow(lease: RunningLease, steps: int = 240, pause: float = 0.25) -> dict[str, int]:
    """Counts slowly (a minute), and stops when cancelled.

    Long enough that a loaded CI machine's browser still finds it running when
    the test asks to cancel it.
    """
    for done in range(1, steps + 1):
        time.sleep(pause)
        lease.update({"done": done, "total": steps, "phase": "counting"})  # raises TaskCancelled
    return {"counted": steps}


@background_task(name="surface-fails", ttl=30)
def fails(lease: RunningLease) -> None:
    """Fails half-way."""
    lease.update({"done": 1, "total": 2})
    raise RuntimeError("disk on fire")


@background_task(name="surface-sum", ttl=30)
def sum_of(lease: RunningLease, numbers: list[int]) -> int:
    """Adds the numbers it is given: a start without them is refused."""
    lease.update({"done": len(numbers), "total": len(numbers)})
    return sum(numbers)
