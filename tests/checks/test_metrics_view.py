"""The system check of the metrics view (django_bgtasks.checks.metrics_view):
``bgtasks.I001`` when the URLconf mounts ``bgtasks:metrics`` and
``prometheus_client`` is missing; an info, so that ``check --fail-level
WARNING`` still passes, that names the extra and how to silence it; none
with prometheus_client, without the API's URLs, or without any URLconf (a
worker's settings). The view's own answer without it:
tests/http/test_monitoring.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import INFO, WARNING

from django_bgtasks.checks.metrics_view import check_metrics_extra
from tests import tools


@pytest.fixture
def without_prometheus_client() -> Iterator[None]:
    """As the app runs without the metrics extra (the check imports it when it runs)."""
    with tools.without_prometheus_client():
        yield


def test_without_prometheus_client_a_mounted_view_is_an_info(
    without_prometheus_client: None, settings: Any
) -> None:
    found = [message for message in url_checks() if message.id == "bgtasks.I001"]
    assert len(found) == 1 and "/bgtasks/metrics/" in found[0].msg
    settings.ROOT_URLCONF = "tests.testapp.no_api_urls"
    assert not [message for message in url_checks() if message.id == "bgtasks.I001"]


def test_with_prometheus_client_there_is_no_info() -> None:
    assert not [message for message in url_checks() if message.id == "bgtasks.I001"]


def url_checks() -> list[Any]:
    """The URL checks, ours among them (the model checks would query the
    databases, which these tests don't open; Django 6's JSONField check does)."""
    from django.core.checks import Tags, run_checks

    return run_checks(tags=[Tags.urls])


def test_the_info_names_the_extra_and_how_to_silence_it(
    without_prometheus_client: None,
) -> None:
    [info] = check_metrics_extra()
    assert (info.id, info.level) == ("bgtasks.I001", INFO)
    assert not info.is_serious(WARNING)
    assert "django-bgtasks[metrics]" in info.hint and "bgtasks.I001" in info.hint


def test_a_worker_s_settings_without_a_urlconf_get_no_info(
    without_prometheus_client: None, settings: Any
) -> None:
    assert check_metrics_extra() != []
    del settings.ROOT_URLCONF
    assert check_metrics_extra() == []
