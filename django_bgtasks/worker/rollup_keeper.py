"""A worker's share of the dashboard's rollup (:mod:`django_bgtasks.queue.rollup`).

Every worker that runs Django Tasks asks, from its polls, every
``ROLL_EVERY_SECONDS``, whether a minute is due to be rolled up; the
rollup's own rows and the database's clock say which, so the workers need
not agree on whose turn it is, and the first to ask after a minute has
passed rolls it. While a catch-up is behind (a day to roll up, ten
minutes a call) it asks at every poll.

The rollup is the dashboard's, not the queue's: an error in it is logged
and tried again later, and never stops the worker's claims.
"""

from __future__ import annotations

import logging
import time

from django_bgtasks.queue import rollup

logger = logging.getLogger("django_bgtasks.worker")

# Spread over the minute: with several workers, the minute just passed is
# rolled up within this long of SETTLE, by whichever asks first.
ROLL_EVERY_SECONDS = 20.0


class RollupKeeper:
    """Calls :func:`~django_bgtasks.queue.rollup.roll` from a worker's polls."""

    def __init__(self) -> None:
        self._next = 0.0  # (monotonic) when the next poll asks

    def run(self) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + ROLL_EVERY_SECONDS
        try:
            done = rollup.roll()
        except Exception:
            logger.exception(
                "the dashboard's rollup failed; trying again in %s s", ROLL_EVERY_SECONDS
            )
            return
        if done.behind:
            self._next = 0.0
