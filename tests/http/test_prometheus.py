"""A real Prometheus (Debian's package) scrapes ``bgtasks:metrics`` from a real
server process (uvicorn, tests/asgiserver.py) with a bearer token from
``bgtasks token``, and its HTTP API then answers with the series the known
states make: a running task, a stale lease, a ready backlog with its lag, a
live and a silent worker. A second job without the token is refused."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.utils import timezone

from django_bgtasks.authentication import SIGNED_TOKEN, make_token
from django_bgtasks.models import BackgroundTask, QueuedTask
from tests import djtasks
from tests.asgiserver import free_port, stop, uvicorn
from tests.dbtools import backdate, backdate_worker
from tests.tools import require_prometheus

objects = BackgroundTask.objects
SCRAPE_CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: bgtasks
    metrics_path: /bgtasks/metrics/
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{target}"]
  - job_name: anonymous
    metrics_path: /bgtasks/metrics/
    static_configs:
      - targets: ["{target}"]
"""


@contextlib.contextmanager
def prometheus(tmp_path: Path, target: str, token: str) -> Iterator[str]:
    """Prometheus on a free port, scraping ``target`` each second; its URL."""
    binary = require_prometheus()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    config = tmp_path / "prometheus.yml"
    config.write_text(SCRAPE_CONFIG.format(token_file=token_file, target=target))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(f"{url}/-/ready"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"Prometheus did not start: {(tmp_path / 'prometheus.log').read_text()}"
                )
            time.sleep(0.1)
        yield url
    finally:
        stop(process)
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310  (our own URL)
            return bool(response.status == 200)
    except OSError:
        return False


def query(url: str, expression: str) -> dict[str, float]:
    """``/api/v1/query``: each series' value, by its labels (as ``k=v,...``)."""
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
    with urllib.request.urlopen(address, timeout=5) as response:  # noqa: S310  (our own URL)
        body: dict[str, Any] = json.load(response)
    assert body["status"] == "success", body
    found = {}
    for series in body["data"]["result"]:
        labels = {k: v for k, v in series["metric"].items() if k not in ("instance", "job")}
        key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
        found[key] = float(series["value"][1])
    return found


def eventually(url: str, expression: str, expected: dict[str, Any], timeout: float = 30) -> None:
    """Wait until the query answers ``expected`` (values compared by ``==``,
    or by a callable for a value that moves with the clock)."""
    deadline = time.monotonic() + timeout
    while True:
        found = query(url, expression)
        if found.keys() == expected.keys() and all(
            want(found[key]) if callable(want) else found[key] == want
            for key, want in expected.items()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{expression}: {found}, expected {expected}")
        time.sleep(0.5)


def test_prometheus_scrapes_the_cluster_s_series_with_a_bearer_token(
    pg_site_alias: str, make_staff: Any, tmp_path: Path
) -> None:
    alias = pg_site_alias
    token = make_token(make_staff("prometheus", "view_backgroundtask"))
    # The known states: a running task, a stale lease, a live and a silent
    # worker, and two ready Django Tasks, the oldest 120 s old.
    assert objects.try_claim("report", "host-a", ttl=3600) is not None
    assert objects.try_claim("import", "host-b", ttl=5) is not None
    backdate(alias, "import", 60)
    beat: dict[str, Any] = {"host": "h", "tasks": [], "concurrency": 1, "running": []}
    objects.work.beat(worker="live", pid=1, ttl=3600, **beat)
    objects.work.beat(worker="gone", pid=2, **beat)
    backdate_worker(alias, "gone", 600)
    oldest = djtasks.add.enqueue(1, 2)
    djtasks.add.enqueue(3, 4)
    QueuedTask.objects.using(alias).filter(uuid=oldest.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=120)
    )
    served = uvicorn(
        ["default", alias], BGTASKS_DATABASE=alias, BGTASKS_API_AUTHENTICATION=[SIGNED_TOKEN]
    )
    with served as target, prometheus(tmp_path, target, token) as url:
        eventually(url, 'up{job="bgtasks"}', {"": 1})
        eventually(
            url,
            'bgtasks_tasks{job="bgtasks",status=~"running|stale|never run"}',
            {"status=running": 1, "status=stale": 1, "status=never run": 4},
        )
        eventually(url, "bgtasks_stale_leases", {"": 1})
        eventually(url, "bgtasks_workers", {"state=live": 1, "state=silent": 1})
        eventually(
            url,
            "bgtasks_queue_tasks",
            {
                "queue=default,status=READY": 2,
                "queue=default,status=RUNNING": 0,
                "queue=other,status=READY": 0,
                "queue=other,status=RUNNING": 0,
            },
        )
        eventually(
            url,
            "bgtasks_queue_lag_seconds",
            {"queue=default": lambda lag: 120 <= lag < 180, "queue=other": 0},
        )
        # Without the token: refused, and Prometheus says so.
        eventually(url, 'up{job="anonymous"}', {"": 0})
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:  # noqa: S310
            targets = json.load(response)["data"]["activeTargets"]
        errors = {target["labels"]["job"]: target["lastError"] for target in targets}
        assert "403" in errors["anonymous"] and errors["bgtasks"] == "", errors
        # A change is seen at the next scrape: the backlog is taken.
        assert QueuedTask.objects.claim("live", queues=None) is not None
        eventually(
            url,
            'bgtasks_queue_tasks{queue="default"}',
            {"queue=default,status=READY": 1, "queue=default,status=RUNNING": 1},
        )
