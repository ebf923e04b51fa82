"""How long a worker waits before it looks again: between polls, and while
the database can't be reached. Its background-task loop and its queue
threads wait by the same rules."""

from __future__ import annotations

import logging
import random
import threading

from django_bgtasks.db.outages import close_connection, summary

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


def back_off(
    log: logging.Logger, who: str, backoff: float, exc: BaseException, stop: threading.Event
) -> float:
    """After a database that did not answer (``exc``): say so in one line,
    naming ``who`` and the driver's error, close this thread's connection,
    wait ``backoff`` seconds (less if ``stop`` is set), and return the next
    wait: doubled, up to ``MAX_BACKOFF_SECONDS``."""
    log.warning("%s: database unreachable, retrying in %g s: %s", who, backoff, summary(exc))
    close_connection()
    stop.wait(backoff)
    return min(backoff * 2, MAX_BACKOFF_SECONDS)
