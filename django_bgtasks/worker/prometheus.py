"""A worker's own metrics for Prometheus (``bgtasks worker --metrics-port
PORT``): :class:`WorkerMetrics`, served over HTTP from a registry of its own
(``prometheus_client``, the ``metrics`` extra), never the process's global one.

The worker calls it, as its hooks (worker/hooks.py), where a run's end is
known once: ``Runs.reap()`` for a background run (its outcome, ``lost``
when its lease was), the queue
thread's end of a Django Task (the status it left the row in), the queue
thread's start (the claim's wait) and the renewer's beat (how long the
renewal statement took). The slots are read when Prometheus scrapes. A
worker without ``--metrics-port`` has no ``WorkerMetrics``: its loop does no
metrics work at all.

Labels are bounded: ``task`` is a registered name or a Django Task's path,
``queue`` a queue's name, ``outcome`` one of :class:`~django_bgtasks.choices.Outcome`'s;
never an id or an argument.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django_bgtasks.choices import Outcome
from django_bgtasks.queue.manager import ENDED_LATE, FAILED, READY, RUNNING, SUCCESSFUL, Claim

if TYPE_CHECKING:
    from django_bgtasks.core.runner import RunningLease

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # the metrics extra is not installed: --metrics-port says so
    INSTALLED = False
else:
    INSTALLED = True

NOT_INSTALLED = "--metrics-port needs prometheus_client: pip install 'django-bgtasks[metrics]'."

# Seconds: runs from a few milliseconds to an hour.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
# Seconds: a claim's wait, from at once to an hour behind.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
# Seconds: one renewal statement, from a millisecond to a stuck database.
STATEMENT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

# How a Django Task's run ended, from the status it left its row in, in the
# words of a background run's outcome. READY is a failed attempt to be
# retried, or one given back by a stopping worker (``interrupted``).
QUEUED_OUTCOMES = {
    SUCCESSFUL: Outcome.SUCCEEDED,
    FAILED: Outcome.FAILED,
    RUNNING: Outcome.LOST,
    ENDED_LATE: Outcome.TIMED_OUT,
}


class WorkerMetrics:
    """One worker process's counters, histograms and slot gauges, in a
    registry of their own: the worker's hooks (worker/hooks.py's
    ``WorkerHooks``, handed to ``Worker(hooks=...)``). ``slots()`` says, when
    scraped, how many runs are going and how many could be (the worker's
    ``slots``)."""

    def __init__(self, slots: Callable[[], tuple[int, int]]) -> None:
        self.registry = registry = CollectorRegistry()
        self.runs = Counter(
            "bgtasks_runs",
            "Runs this worker ended, background tasks and Django Tasks alike, by outcome.",
            ["task", "outcome"],
            registry=registry,
        )
        self.losses = Counter(
            "bgtasks_lease_losses",
            "Runs of this worker whose lease was lost (taken over, recovered, or not "
            "renewed within its ttl).",
            ["task"],
            registry=registry,
        )
        # (name, help, labels, buckets) of each histogram, in this order.
        self.duration, self.claim_wait, self.heartbeat = (
            Histogram(name, doc, labels, buckets=buckets, registry=registry)
            for name, doc, labels, buckets in (
                (
                    "bgtasks_run_duration_seconds",
                    "How long this worker's runs took, from the claim to the end.",
                    ["task"],
                    DURATION_BUCKETS,
                ),
                (
                    "bgtasks_claim_wait_seconds",
                    "How long a Django Task waited from ready to started (its first "
                    "attempt), by the database's clock.",
                    ["queue"],
                    WAIT_BUCKETS,
                ),
                (
                    "bgtasks_heartbeat_seconds",
                    "How long the worker's renewal statement (every lease it holds) took.",
                    [],
                    STATEMENT_BUCKETS,
                ),
            )
        )
        registry.register(_Slots(slots))

    def serve(self, port: int, address: str = "0.0.0.0") -> Callable[[], None]:  # noqa: S104
        """Serve the registry on ``port`` (a thread of prometheus_client's),
        on every interface unless ``address`` says; raises ``OSError`` for a
        port that can't be bound. Returns what stops serving."""
        server, thread = start_http_server(port, addr=address, registry=self.registry)

        def close() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5.0)

        return close

    # --- what the worker calls ------------------------------------------------------------

    def run_ended(self, running: RunningLease) -> None:
        """A background run ended (reaped): its outcome and duration."""
        self.ended(running.name, running.outcome or Outcome.LOST, running.duration)

    def queued_started(self, claim: Claim) -> None:
        """A Django Task's run starts: how long it waited, from ready (its
        ``run_after`` if later than its enqueueing) to its claim. Retries
        are left out: their ready time is not on the row."""
        if claim.attempts != 1 or claim.last_attempted_at is None:
            return
        ready = max(
            (at for at in (claim.enqueued_at, claim.run_after) if at is not None),
            default=None,
        )
        if ready is not None:
            wait = (claim.last_attempted_at - ready) / dt.timedelta(seconds=1)
            self.claim_wait.labels(claim.queue_name).observe(max(wait, 0.0))

    def queued_ended(self, claim: Claim, status: str, duration: float, stopping: bool) -> None:
        """A Django Task's run ended, leaving its row ``status``."""
        if status == READY:
            outcome = Outcome.INTERRUPTED if stopping else Outcome.FAILED
        else:
            outcome = QUEUED_OUTCOMES.get(status, Outcome.FAILED)
        self.ended(claim.task_path, outcome, duration)

    def ended(self, task: str, outcome: str, duration: float) -> None:
        """One run of ``task`` ended with ``outcome`` after ``duration`` seconds."""
        self.runs.labels(task, str(outcome)).inc()
        self.duration.labels(task).observe(duration)
        if outcome == Outcome.LOST:
            self.losses.labels(task).inc()

    def renewed(self, seconds: float) -> None:
        """The renewal statement took ``seconds``."""
        self.heartbeat.observe(seconds)


class _Slots:
    """``bgtasks_worker_slots{state}``: the runs going and the room left, read at each scrape."""

    def __init__(self, slots: Callable[[], tuple[int, int]]) -> None:
        self.slots = slots

    def collect(self) -> Iterator[Any]:
        busy, total = self.slots()
        family = GaugeMetricFamily(
            "bgtasks_worker_slots",
            "This worker's run slots (background runs and Django Tasks threads), by state.",
            labels=["state"],
        )
        family.add_metric(["busy"], busy)
        family.add_metric(["free"], max(total - busy, 0))
        yield family
