"""The operator's lists read from a replica (``BGTASKS_READ_DATABASE``,
django_bgtasks/db/read_database.py), against a real streaming standby of the
embedded PostgreSQL (tests/replica.py): the API's lists, ``bgtasks list``
and the metrics read it and say how far behind it may be; a task's own page
and the writes stay on the primary; a replica behind (its replay paused) is
read as it is, within ``BGTASKS_READ_MAX_LAG``, and past it the primary is;
a replica down is not read, and each surface says so, until it is back.
(The admin's pages: tests/admin/test_read_from.py.)"""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connections
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_bgtasks.db.read_database import ReadSource
from django_bgtasks.models import QueuedTask
from tests.replica import Standby

LIST = "/bgtasks/django-tasks/"


def enqueue(n: int) -> str:
    """A Django Task enqueued (on the primary), by its id."""
    from tests import djtasks

    return str(djtasks.add.enqueue(n, 1).id)


def received(replica: Standby, timeout: float = 30) -> None:
    """Wait until the standby has received (not replayed) all the primary
    has written: its replay paused, it then knows how far behind it is."""
    with connections["postgres"].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        [target] = cursor.fetchone()
    deadline = time.monotonic() + timeout
    with replica.connect() as conn:
        while True:
            [done] = conn.execute(
                "SELECT coalesce(pg_last_wal_receive_lsn() >= %s::pg_lsn, false)", [target]
            ).fetchone()
            if done:
                return
            assert time.monotonic() < deadline, f"the standby did not receive {target}"
            time.sleep(0.02)


def _listed(client: Client) -> tuple[list[str], dict[str, Any]]:
    body = client.get(LIST).json()
    return [item["id"] for item in body["django_tasks"]], body["read_from"]


def _cli(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", *args, stdout=out)
    return out.getvalue()


def _cli_list() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_cli("list", "--json"))
    return result


def _metrics(client: Client) -> dict[str, float]:
    body = client.get("/bgtasks/metrics/").content.decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name.startswith("bgtasks_read_")
    }


def test_the_lists_read_the_replica_and_say_how_far_behind_it_may_be(
    read_replica: Standby, viewer: Client, settings: Any
) -> None:
    first = enqueue(1)
    read_replica.wait_caught_up()
    ids, read_from = _listed(viewer)
    assert ids == [first]
    assert read_from == {
        "database": "replica",
        "replica": True,
        "lag_seconds": 0.0,
        "fallback": None,
    }
    assert viewer.get("/bgtasks/workers/").json()["read_from"]["database"] == "replica"
    assert viewer.get(f"{LIST}queues/").json()["read_from"]["database"] == "replica"
    assert viewer.get("/bgtasks/").json()["read_from"]["database"] == "replica"

    read_replica.pause_replay()
    try:
        second = enqueue(2)
        received(read_replica)
        time.sleep(0.2)  # the last commit replayed is now at least that old
        # Each list reads the standby, which has not replayed the second task.
        ids, read_from = _listed(viewer)
        assert ids == [first]
        assert read_from["replica"] is True and read_from["fallback"] is None
        assert read_from["lag_seconds"] >= 0.2
        cli = _cli_list()
        assert [task["id"] for task in cli["django_tasks"]] == [first]
        assert cli["read_from"]["database"] == "replica"
        # The command's other lists, as the API's.
        for command in ("queues", "workers"):
            assert json.loads(_cli(command, "--json"))["read_from"]["database"] == "replica"
            last = _cli(command).rstrip().splitlines()[-1]
            assert last.startswith("Read from the replica 'replica', up to "), command
        [queue] = json.loads(_cli("queues", "--json"))["queues"]
        assert (queue["name"], queue["counts"]["READY"]) == ("default", 1)
        lag = _metrics(viewer)
        assert lag["bgtasks_read_lag_seconds"] >= 0.2 and lag["bgtasks_read_fallback"] == 0
        queues = viewer.get(f"{LIST}queues/").json()["queues"]
        assert [(q["name"], q["counts"]["READY"]) for q in queues] == [("default", 1)]
        # A task's own page, and every write, are the primary's.
        own = viewer.get(f"{LIST}{second}/")
        assert own.status_code == 200 and own.json()["status"] == "READY"
        assert QueuedTask.objects.using("postgres").filter(uuid=second).exists()

        # Further behind than BGTASKS_READ_MAX_LAG: the primary is read, and
        # each surface says why.
        settings.BGTASKS_READ_MAX_LAG = 0.1
        ids, read_from = _listed(viewer)
        assert ids == [second, first]
        assert read_from["database"] == "postgres" and read_from["replica"] is False
        assert "more than BGTASKS_READ_MAX_LAG (0.1 s)" in read_from["fallback"]
        assert _metrics(viewer)["bgtasks_read_fallback"] == 1
        assert len(_cli_list()["django_tasks"]) == 2
    finally:
        read_replica.resume_replay()
    read_replica.wait_caught_up()
    settings.BGTASKS_READ_MAX_LAG = None  # no limit: read however far behind
    ids, read_from = _listed(viewer)
    assert ids == [second, first] and read_from["database"] == "replica"


def test_a_replica_down_is_not_read_and_each_list_says_so(
    read_replica: Standby, viewer: Client
) -> None:
    task = enqueue(1)
    read_replica.stop()
    try:
        ids, read_from = _listed(viewer)
        assert ids == [task]
        assert read_from["database"] == "postgres" and read_from["replica"] is False
        assert read_from["fallback"].startswith("the replica 'replica' can't be read (")
        assert _metrics(viewer) == {"bgtasks_read_lag_seconds": 0.0, "bgtasks_read_fallback": 1.0}
        assert _cli_list()["read_from"]["fallback"] == read_from["fallback"]
        for command in ("list", "queues", "workers"):
            last = _cli(command).rstrip().splitlines()[-1]
            assert last.startswith(
                "Read from the primary: the replica 'replica' can't be read ("
            ), command
    finally:
        read_replica.start()
    # Back: read again, on a connection made afresh.
    read_replica.wait_caught_up()
    ids, read_from = _listed(viewer)
    assert ids == [task] and read_from["database"] == "replica"


def test_without_a_replica_the_lists_read_the_lease_database_and_say_nothing(
    pg_site_alias: str,
) -> None:
    from django_bgtasks.db import read_database

    with read_database.reading() as source:
        assert read_database.alias() == "postgres"
    assert source == ReadSource("postgres", replica=False, lag=0.0)
    assert source.describe() == ""
    assert read_database.alias() == "postgres"  # (BGTASKS_DATABASE, outside too)


def test_what_each_source_says() -> None:
    behind = ReadSource("replica", replica=True, lag=0.42)
    assert behind.describe() == "Read from the replica 'replica', up to 0.4 s behind the primary."
    unknown = ReadSource("replica", replica=True, lag=None)
    assert unknown.describe() == (
        "Read from the replica 'replica'; how far behind it is, is not known."
    )
    assert unknown.as_json()["lag_seconds"] is None
    down = ReadSource("default", replica=False, lag=0.0, fallback="it is down.")
    assert down.describe() == "Read from the primary: it is down."


def test_a_read_database_whose_lag_is_not_measured_is_read_and_says_so(
    pg_site_alias: str, settings: Any
) -> None:
    # Only PostgreSQL's lag is measured: another engine's read alias is read
    # once it answers, its lag unknown, and no limit applies. ("default", the
    # suite's SQLite, stands in for such a replica here; the checks refuse
    # one of another engine than the primary's: bgtasks.E037.)
    from django_bgtasks.db import read_database

    settings.BGTASKS_READ_DATABASE = "default"
    settings.BGTASKS_READ_MAX_LAG = 0
    with read_database.reading() as source:
        assert read_database.alias() == "default"
    assert source == ReadSource("default", replica=True, lag=None)
    assert source.describe().endswith("how far behind it is, is not known.")
