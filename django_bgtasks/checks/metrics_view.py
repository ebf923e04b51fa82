"""The system check of the metrics view: ``bgtasks.I001`` when the URLconf
mounts ``bgtasks:metrics`` (``include("django_bgtasks.urls")``) and
``prometheus_client`` (the ``metrics`` extra) is missing, so that the view
answers every scrape with a 501.

An info, neither an error nor a warning: every site that mounts the JSON API
mounts the view, and one that doesn't scrape it should neither be kept from
starting nor fail a ``check --fail-level WARNING`` it passed before the view
existed. ``manage.py check`` still shows it; a site that doesn't scrape
silences it (``SILENCED_SYSTEM_CHECKS = ["bgtasks.I001"]``).
"""

from __future__ import annotations

import importlib
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Info, Tags, register
from django.urls import NoReverseMatch, reverse


@register(Tags.urls)
def check_metrics_extra(**kwargs: Any) -> list[CheckMessage]:
    """bgtasks.I001 (``bgtasks:metrics`` mounted without ``prometheus_client``)."""
    if not getattr(settings, "ROOT_URLCONF", None):  # a worker's settings: no URLs
        return []
    try:
        path = reverse("bgtasks:metrics")
    except NoReverseMatch:
        return []
    try:
        importlib.import_module("prometheus_client")
    except ImportError:
        return [
            Info(
                f"The metrics view ({path}, bgtasks:metrics) is mounted, but "
                "prometheus_client is not installed: it answers every request with a 501.",
                hint="pip install 'django-bgtasks[metrics]', or silence bgtasks.I001 if you "
                "don't scrape it.",
                id="bgtasks.I001",
            )
        ]
    return []
