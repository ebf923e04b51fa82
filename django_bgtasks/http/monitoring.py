"""The cluster's metrics for Prometheus, and the readiness view for orchestrators.

* ``GET <prefix>/metrics/`` (``bgtasks:metrics``): Prometheus' text format,
  the gauges of :func:`django_bgtasks.operations.cluster.cluster_counts`,
  read from the database at each scrape (any web replica answers alike),
  from ``BGTASKS_READ_DATABASE`` where one is named, with two gauges that say
  how old what it read may be (db/read_database.py). It needs
  what the API's reads need (:mod:`django_bgtasks.http.access`): a session or
  a ``BGTASKS_API_AUTHENTICATION`` hook (a bearer token from ``bgtasks
  token``), and the view permission; anyone else gets a JSON 403. Without
  ``prometheus_client`` (the ``metrics`` extra) it answers a JSON 501 saying
  so, and ``bgtasks.I001`` says it at start-up.
* ``GET <prefix>/ready/`` (``bgtasks:ready``): 200 ``{"ready": true}``, or
  503 ``{"ready": false, "reason": ...}`` with the one-line reason of
  :func:`django_bgtasks.operations.health.problem` (``?workers=N`` as
  ``bgtasks health --workers N``). No authentication: orchestrators' probes
  send none, and the answer tells nothing but the reason (no host names, no
  error text, no task data).

Each scrape registers a fresh collector on a fresh ``CollectorRegistry``:
nothing global, nothing kept between scrapes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from django_bgtasks.db import read_database
from django_bgtasks.db.read_database import ReadSource
from django_bgtasks.http.access import authenticated, requires
from django_bgtasks.http.responses import endpoint, error, outside_request_transactions
from django_bgtasks.limits import COUNT_CAP
from django_bgtasks.operations.cluster import ClusterCounts, cluster_counts
from django_bgtasks.operations.health import problem, required_workers

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # the metrics extra is not installed: the view says so
    INSTALLED = False
    Collector = object  # type: ignore[assignment,misc]
else:
    INSTALLED = True

NOT_INSTALLED = (
    "prometheus_client is not installed: pip install 'django-bgtasks[metrics]' "
    "to serve the metrics."
)


def _by_queue(name: str, text: str, values: Mapping[str, float]) -> Any:
    """A gauge labelled by queue, a value for each."""
    family = GaugeMetricFamily(name, text, labels=["queue"])
    for queue, value in values.items():
        family.add_metric([queue], value)
    return family


class ClusterCollector(Collector):
    """The gauges of one :class:`ClusterCounts`, and of the database they
    were read from."""

    def __init__(self, counts: ClusterCounts, source: ReadSource) -> None:
        self.counts = counts
        self.source = source

    def collect(self) -> Iterator[Any]:
        counts = self.counts
        tasks = GaugeMetricFamily(
            "bgtasks_tasks", "Background tasks by status.", labels=["status"]
        )
        for status, count in counts.tasks.items():
            tasks.add_metric([status], count)
        yield tasks
        queued = GaugeMetricFamily(
            "bgtasks_queue_tasks",
            "Django Tasks by queue and status"
            f" (the ready ones counted up to {COUNT_CAP:,} a queue).",
            labels=["queue", "status"],
        )
        for (queue, status), count in counts.queue_tasks.items():
            queued.add_metric([queue, status], count)
        yield queued
        yield _by_queue(
            "bgtasks_queue_lag_seconds",
            "Seconds since the oldest due ready Django Task of the queue became ready.",
            counts.queue_lag,
        )
        yield _by_queue(
            "bgtasks_queue_paused",
            "1 while an operator has paused the queue (bgtasks pause --queue), else 0.",
            {queue: float(paused) for queue, paused in counts.queue_paused.items()},
        )
        workers = GaugeMetricFamily(
            "bgtasks_workers", "Workers, live or silent past their ttl.", labels=["state"]
        )
        for state, count in counts.workers.items():
            workers.add_metric([state], count)
        yield workers
        yield GaugeMetricFamily(
            "bgtasks_stale_leases",
            "Leases whose holder went silent past its ttl, not yet taken over.",
            value=counts.stale_leases,
        )
        lag = self.source.lag
        yield GaugeMetricFamily(
            "bgtasks_read_lag_seconds",
            "How far behind the primary the database these gauges were read from may be"
            " (BGTASKS_READ_DATABASE; 0 for the primary, NaN when not known).",
            value=math.nan if lag is None else lag,
        )
        yield GaugeMetricFamily(
            "bgtasks_read_fallback",
            "1 when BGTASKS_READ_DATABASE could not be read and these gauges were read"
            " from the primary, else 0.",
            value=float(self.source.fallback is not None),
        )


# Outside ATOMIC_REQUESTS: a transaction opened on a database that is down
# would fail before the view could answer why.
@outside_request_transactions
@never_cache
@endpoint("GET", "HEAD")
@authenticated
@requires("view")
def metrics(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/metrics/``: the cluster's gauges, in Prometheus' text format."""
    if not INSTALLED:
        return error(501, NOT_INSTALLED)
    registry = CollectorRegistry(auto_describe=False)
    with read_database.reading() as source:
        counts = cluster_counts()
    registry.register(ClusterCollector(counts, source))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@outside_request_transactions
@never_cache
@endpoint("GET", "HEAD")
def ready(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/ready/[?workers=N]``: 200, or 503 with the reason."""
    text = request.GET.get("workers", "0")
    try:
        workers = required_workers(int(text))
    except ValueError:
        return error(400, f"workers must be a whole number, 0 or more, not {text!r}.")
    found = problem(workers=workers)
    if found is not None:
        return JsonResponse({"ready": False, "reason": found.reason}, status=503)
    return JsonResponse({"ready": True})
