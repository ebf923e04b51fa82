"""A real Prometheus (Debian's package) scrapes ``bgtasks:metrics`` from a real
server process (uvicorn, tests/asgiserver.py) with a bearer token from
``bgtasks token``, and its HTTP API then answers with the series the known
states make: a running task, a stale lease, a ready backlog with its lag, a
live and a silent worker. A second job without the token is refused.

It also scrapes a real ``bgtasks worker --metrics-port`` process beside the
view, and answers with the series of its known runs (successes, a failure,
a lost lease) and the view's backlog; docs/prometheus/alerts.yml passes
``promtool check rules`` and loads healthy, and every query of
docs/grafana/bgtasks.json runs (the main panels' with data)."""

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
from tests.dbtools import a_worker_runs, backdate, backdate_worker
from tests.faults.harness import Workers
from tests.procs import ROOT, wait_until
from tests.tools import require_prometheus

objects = BackgroundTask.objects
SCRAPE_CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
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
def prometheus(tmp_path: Path, target: str, token: str, extra: str = "") -> Iterator[str]:
    """Prometheus on a free port, scraping ``target`` each second (and what
    ``extra`` adds to its config); its URL."""
    binary = require_prometheus()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    config = tmp_path / "prometheus.yml"
    config.write_text(SCRAPE_CONFIG.format(token_file=token_file, target=target) + extra)
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


def api(url: str, path: str, **params: str) -> Any:
    """The ``data`` of a successful answer of Prometheus' HTTP API."""
    address = f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(address, timeout=5) as response:  # noqa: S310  (our own URL)
        body: dict[str, Any] = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def query(url: str, expression: str) -> dict[str, float]:
    """``/api/v1/query``: each series' value, by its labels (as ``k=v,...``)."""
    data = api(url, "query", query=expression)
    found = {}
    for series in data["result"]:
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
        # No BGTASKS_READ_DATABASE: read from the lease database, as it says.
        eventually(url, "bgtasks_read_lag_seconds", {"": 0})
        eventually(url, "bgtasks_read_fallback", {"": 0})
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
        # A queue paused, and so said.
        eventually(url, "bgtasks_queue_paused", {"queue=default": 0, "queue=other": 0})
        assert QueuedTask.objects.pause_queue("other")
        eventually(url, "bgtasks_queue_paused", {"queue=default": 0, "queue=other": 1})


ALERTS = Path(ROOT) / "docs" / "prometheus" / "alerts.yml"
DASHBOARD = Path(ROOT) / "docs" / "grafana" / "bgtasks.json"
WORKER_JOB = """
  - job_name: bgtasks-workers
    static_configs:
      - targets: ["127.0.0.1:{port}"]
rule_files:
  - {alerts}
"""
# The dashboard's panels that must have data after the known runs.
MAIN_PANELS = {
    "Live workers",
    "Ready backlog",
    "Busy worker slots",
    "Ready Django Tasks by queue",
    "Queue lag",
    "Runs by outcome",
    "Failure ratio by task",
    "Run duration p95 by task",
    "Claim wait p95 by queue",
    "Lease losses",
    "Renewal statement p99",
}


def promtool(*args: str) -> str:
    """``promtool ARGS``, which must succeed: what it printed."""
    require_prometheus()
    checked = subprocess.run(
        ["/usr/bin/promtool", *args], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return checked.stdout


def test_the_alert_rules_pass_promtool() -> None:
    assert "SUCCESS: 7 rules found" in promtool("check", "rules", str(ALERTS))


def rule_test(tmp_path: Path, tests: str) -> str:
    """promtool's unit test of docs/prometheus/alerts.yml: ``tests``, the
    YAML list of its ``tests:`` (series a minute apart, and the alerts due)."""
    spec = tmp_path / "rule_test.yml"
    spec.write_text(f"rule_files:\n  - {ALERTS}\nevaluation_interval: 1m\ntests:\n{tests}")
    return promtool("test", "rules", str(spec))


def test_the_lag_alert_leaves_a_paused_queue_out(tmp_path: Path) -> None:
    # Two queues 400 s behind for 15 minutes, one of them paused, which
    # must not alert.
    tests = """
  - interval: 1m
    input_series:
      - series: 'bgtasks_queue_lag_seconds{job="bgtasks",queue="default"}'
        values: '400x15'
      - series: 'bgtasks_queue_paused{job="bgtasks",queue="default"}'
        values: '1x15'
      - series: 'bgtasks_queue_lag_seconds{job="bgtasks",queue="emails"}'
        values: '400x15'
      - series: 'bgtasks_queue_paused{job="bgtasks",queue="emails"}'
        values: '0x15'
    alert_rule_test:
      - eval_time: 12m
        alertname: BgTasksQueueLagging
        exp_alerts:
          - exp_labels: {severity: warning, queue: emails}
            exp_annotations:
              summary: "Django Tasks queue emails is 6m 40s behind"
              description: "Add workers (or --queue workers for it), or look for a slow task."
"""
    assert "SUCCESS" in rule_test(tmp_path, tests)


def test_the_replica_alert_waits_for_a_lasting_fall_back(tmp_path: Path) -> None:
    # Two replicas of the view, one of which read the primary for a few
    # scrapes only; then both, for 12 minutes.
    tests = """
  - interval: 1m
    input_series:
      - series: 'bgtasks_read_fallback{job="bgtasks",instance="a"}'
        values: '0 1 1 0 0 1x12'
      - series: 'bgtasks_read_fallback{job="bgtasks",instance="b"}'
        values: '0 0 0 0 0 1x12'
    alert_rule_test:
      - {eval_time: 4m, alertname: BgTasksReadReplicaFallback, exp_alerts: []}
      - eval_time: 16m
        alertname: BgTasksReadReplicaFallback
        exp_alerts:
          - exp_labels: {severity: warning}
            exp_annotations:
              summary: "The operator's lists read the primary: the replica can't be read"
              description: "Why: the site's log (django_bgtasks.read_database), the admin's lists."
"""
    assert "SUCCESS" in rule_test(tmp_path, tests)


def test_prometheus_scrapes_a_worker_s_runs_beside_the_view(
    pg_site_alias: str, make_staff: Any, tmp_path: Path, settings: Any
) -> None:
    alias = pg_site_alias
    token = make_token(make_staff("prometheus", "view_backgroundtask"))
    # Known work: two successes and a failure on the worker's queue, a
    # backlog of two on a queue no worker takes (the oldest 120 s old), and
    # a background run whose lease an operator takes from it.
    djtasks.add.enqueue(1, 2)
    djtasks.add.enqueue(3, 4)
    djtasks.fails.enqueue("known")
    backlog = djtasks.add.using(queue_name="other")
    oldest = backlog.enqueue(5, 6)
    backlog.enqueue(7, 8)
    QueuedTask.objects.using(alias).filter(uuid=oldest.id).update(
        enqueued_at=timezone.now() - dt.timedelta(seconds=120)
    )
    a_worker_runs("echo")
    assert objects.request_run("echo", kwargs={"n": 1, "pause": 1.5})
    port = free_port()
    workers = Workers(
        alias,
        tmp_path,
        args=("--task", "echo", "--queue", "default", "--poll", "0.2"),
        BGTASKS_HEARTBEAT_INTERVAL=0.3,
        TASKS=settings.TASKS,
    )
    served = uvicorn(
        ["default", alias], BGTASKS_DATABASE=alias, BGTASKS_API_AUTHENTICATION=[SIGNED_TOKEN]
    )
    extra = WORKER_JOB.format(port=port, alerts=ALERTS)
    try:
        workers.start("--metrics-port", str(port))
        # Renewed once at least before the operator takes it: the heartbeat
        # histogram below counts that renewal (a release before the first
        # beat would leave the worker nothing to renew).
        running = wait_until(
            "echo runs and its lease is renewed",
            lambda: (
                (state := objects.get_state("echo"))
                and state.running
                and state.updated_at > state.started_at
                and state
            ),
            why=workers.output(),
        )
        assert objects.force_release("echo", token=running.token)
        with served as target, prometheus(tmp_path, target, token, extra) as url:
            eventually(url, 'up{job="bgtasks-workers"}', {"": 1})
            runs = "bgtasks_runs_total"
            eventually(
                url,
                runs,
                {
                    "outcome=succeeded,task=tests.djtasks.add": 2,
                    "outcome=failed,task=tests.djtasks.fails": 1,
                    "outcome=lost,task=echo": 1,
                },
            )
            eventually(url, "bgtasks_lease_losses_total", {"task=echo": 1})
            eventually(url, "bgtasks_claim_wait_seconds_count", {"queue=default": 3})
            eventually(url, "bgtasks_worker_slots", {"state=busy": 0, "state=free": 8})
            assert query(url, "bgtasks_heartbeat_seconds_count")[""] >= 1
            # The view, beside it: the backlog no worker takes, and its lag.
            eventually(
                url,
                'bgtasks_queue_tasks{job="bgtasks",status="READY"}',
                {"queue=default,status=READY": 0, "queue=other,status=READY": 2},
            )
            eventually(
                url,
                'bgtasks_queue_lag_seconds{job="bgtasks"}',
                {"queue=default": 0, "queue=other": lambda lag: 120 <= lag < 180},
            )
            # This worker, and the test's own row (a_worker_runs above) while
            # it is within its ttl: as the database says at the scrape.
            eventually(
                url,
                'bgtasks_workers{job="bgtasks",state="live"}',
                {"state=live": lambda live: live == live_workers() and live >= 1},
            )
            _rules_load_healthy(url)
            _dashboard_queries_answer(url)
    finally:
        workers.stop_all()
    # What the database says of the same runs.
    statuses = sorted(QueuedTask.objects.using(alias).values_list("queue_name", "status"))
    assert statuses == [
        ("default", "FAILED"),
        ("default", "SUCCESSFUL"),
        ("default", "SUCCESSFUL"),
        ("other", "READY"),
        ("other", "READY"),
    ]


def live_workers() -> int:
    """How many workers the database says are live now."""
    return sum(not worker.silent for worker in objects.work.workers())


def _rules_load_healthy(url: str) -> None:
    """Every rule of docs/prometheus/alerts.yml loaded, and evaluated without error."""
    deadline = time.monotonic() + 30
    while True:
        groups = api(url, "rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        health = {rule["name"]: (rule["health"], rule.get("lastError", "")) for rule in rules}
        if len(rules) == 7 and all(h == "ok" for h, _ in health.values()):
            return
        assert not any(h == "err" for h, _ in health.values()), health
        if time.monotonic() > deadline:
            raise AssertionError(f"rules not healthy: {health}")
        time.sleep(0.5)


def _dashboard_queries_answer(url: str) -> None:
    """Every query of docs/grafana/bgtasks.json runs without error; the
    main panels' return data (after the known runs)."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert {panel["title"] for panel in panels} >= MAIN_PANELS
    for panel in panels:
        for target in panel["targets"]:
            expression = target["expr"]
            if panel["title"] not in MAIN_PANELS:
                api(url, "query", query=expression)  # asserts success
                continue
            deadline = time.monotonic() + 15
            while not api(url, "query", query=expression)["result"]:
                assert time.monotonic() < deadline, f"{panel['title']}: no data for {expression}"
                time.sleep(0.5)
