"""The site of tests/topology/test_lease_database.py, in a process of its own:
``DJANGO_SETTINGS_MODULE=tests.topology.leasedb_settings python -m
tests.topology.leasedb_site``. It runs a lease, tries each way of fencing,
drives the admin, the JSON API and the command, and prints one
``result <json>`` line; the test then reads both databases itself."""

from __future__ import annotations

import io
import json
from typing import Any


def main() -> None:
    import django

    django.setup()

    from django.core.management import call_command
    from django.db import transaction
    from django.db.models import F
    from django.test import Client

    from django_bgtasks import FenceOnOtherDatabase, TaskCancelled, lease
    from django_bgtasks.models import BackgroundTask
    from tests.testapp.models import Counter

    report: dict[str, Any] = {"refused": {}}
    Counter.objects.create(name="job", value=0)  # the data, on "default"
    from django.contrib.auth.models import User

    admin = User.objects.create_superuser("admin", password="pw")  # noqa: S106
    client = Client()
    client.force_login(admin)

    def refused(case: str, attempt: Any) -> None:
        try:
            attempt()
        except FenceOnOtherDatabase as exc:
            report["refused"][case] = str(exc)

    try:
        with lease("job", ttl=30, value={"done": 0}) as running:
            report["token"], report["owner"] = running.token, running.owner

            def data_transaction() -> None:
                # The careless way: the data's transaction, on "default".
                with transaction.atomic():
                    Counter.objects.filter(name="job").update(value=F("value") + 1)
                    running.fence()

            def using_the_data_alias() -> None:
                with transaction.atomic(using="leases"):
                    running.fence(using="default")

            def both_open() -> None:
                with transaction.atomic(using="leases"), transaction.atomic():
                    Counter.objects.filter(name="job").update(value=F("value") + 1)
                    running.fence()

            refused("data_transaction", data_transaction)
            refused("using_the_data_alias", using_the_data_alias)
            refused("both_open", both_open)

            # The lease database's own transaction: the fence is taken.
            with transaction.atomic(using="leases"):
                running.fence()
                report["fenced_on_leases"] = True
            with transaction.atomic(using="leases"), transaction.atomic():
                running.fence(using="leases")  # "my fenced writes are on leases"
                report["fenced_saying_using"] = True
            with transaction.atomic(using="leases"):
                report["wrong_token_fence"] = BackgroundTask.objects.fence(
                    "job", running.owner, running.token + 1, using="leases"
                )

            # The operator surfaces read and write the lease database.
            report["admin_list"] = client.get("/admin/django_bgtasks/backgroundtask/").status_code
            api = client.get("/bgtasks/job/")
            report["api_detail"] = [api.status_code, api.json()["token"], api.json()["running"]]
            listed = client.get("/bgtasks/").json()
            report["api_list"] = {t["name"]: t["token"] for t in listed["tasks"]}
            out = io.StringIO()
            call_command("bgtasks", "show", "job", "--json", stdout=out)
            report["command_show"] = json.loads(out.getvalue())["owner"]
            report["api_cancel"] = client.post("/bgtasks/job/cancel/").status_code
            running.update({"done": 1}, flush=True)  # sees the cancel request
    except TaskCancelled:
        report["cancelled"] = True
    change = client.get("/admin/django_bgtasks/backgroundtask/job/change/")
    report["admin_change"] = change.status_code
    report["admin_change_shows_run"] = "cancelled" in change.content.decode()
    print("result " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
