"""How long a worker waits before it looks again: between polls, and while
the database can't be reached. Its background-task loop and its queue
threads wait by the same rules."""

from __future__ import annotations

import random

# The longest wait between polls while the database can't be reached (the
# wait starts at ``poll`` and doubles).
MAX_BACKOFF_SECONDS = 30.0


def spread(poll: float) -> float:
    """The wait before the next poll: a random point in the second half of
    ``poll``. Workers woken by the same change (a release announced to all)
    would otherwise poll in step from then on, and the fastest of them would
    claim every slot that comes due; spread out, each slot goes to whichever
    worker happens to look first. ``poll`` stays the longest wait."""
    return poll * random.uniform(0.5, 1.0)  # noqa: S311  (not for secrets)
