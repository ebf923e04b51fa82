"""Run by ``nox -s wheel`` inside the example project, in a fresh virtualenv
that holds the built wheel and not the checkout. Not a pytest module.

It proves that what ships works on its own: the package is imported from
site-packages, it carries ``py.typed``, the ``postgres`` extra brought a
psycopg that needs no compiler (the binary build) and the ``cron`` extra
cronsim, every template and static file it ships is found by Django's
loaders, the example project's tasks are discovered, a full lease cycle runs
with history and a rising token, and (in versions that ship them) the admin's
changelist renders and the JSON API answers, to a session and to a bearer
token.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    import django

    django.setup()

    import django_bgtasks

    package = Path(django_bgtasks.__file__).resolve().parent
    checkout = Path(os.environ["BGTASKS_CHECKOUT"]).resolve()
    assert "site-packages" in package.parts, f"imported from {package}, not site-packages"
    assert checkout not in package.parents, f"imported from the checkout ({package})"
    assert (package / "py.typed").is_file(), "py.typed is missing"
    say(f"django_bgtasks from {package}, with py.typed; Django {django.get_version()}")

    check_extras()
    check_templates(package)
    check_static(package)
    check_tasks()
    check_lease_cycle()
    client = staff_client()
    check_admin(package, client)
    check_json_api(package, client)
    say("the installed wheel works")


def say(text: str) -> None:
    sys.stdout.write(f"smoke: {text}\n")


def check_extras() -> None:
    import psycopg

    from django_bgtasks.background.schedules import parse_schedule

    # "binary" is the extra's; "c" would be a site's own build (docs/install.md).
    assert psycopg.pq.__impl__ == "binary", psycopg.pq.__impl__
    say(f"postgres extra: psycopg {psycopg.__version__}, {psycopg.pq.__impl__} build")
    assert parse_schedule("0 3 * * *") is not None
    say("cron extra: a cron schedule parses")


def check_templates(package: Path) -> None:
    from django.template.loader import get_template

    root = package / "templates"
    names = [str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()]
    for name in names:
        get_template(name)  # raises TemplateDoesNotExist / TemplateSyntaxError
    say(f"{len(names)} shipped template(s) load")


def check_static(package: Path) -> None:
    from django.contrib.staticfiles import finders

    root = package / "static"
    names = [str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()]
    for name in names:
        assert finders.find(name), f"static file {name} is not found by the finders"
    say(f"{len(names)} shipped static file(s) found")


def check_tasks() -> None:
    from django_bgtasks import registered_tasks

    tasks = registered_tasks()
    assert tasks, "the example project's tasks module was not autodiscovered"
    say(f"registered tasks: {', '.join(tasks)}")


def check_lease_cycle() -> None:
    from django_bgtasks import LeaseHeld, lease
    from django_bgtasks.models import BackgroundTask, TaskRun

    name = "wheel-smoke"
    tokens = []
    for round_ in (1, 2):
        with lease(name, ttl=30, value={"phase": "start"}) as running:
            running.update({"done": round_, "total": 2})
            state = BackgroundTask.objects.get_state(name)
            assert state is not None and state.running and state.token == running.token
            assert BackgroundTask.objects.try_claim(name, "someone-else") is None
            try:
                with lease(name, ttl=30):
                    raise AssertionError("a second holder got the lease")
            except LeaseHeld:
                pass
            tokens.append(running.token)
        state = BackgroundTask.objects.get_state(name)
        assert state is not None
        assert (state.running, state.outcome, state.value) == (
            False,
            "succeeded",
            {"done": round_, "total": 2},
        )
    assert tokens[1] > tokens[0], tokens
    runs = list(TaskRun.objects.for_task(name).values_list("token", "outcome"))
    assert runs == [(tokens[1], "succeeded"), (tokens[0], "succeeded")], runs
    say(f"two lease cycles: tokens {tokens}, both in history as succeeded")


def staff_client() -> Any:
    """A test client logged in as a superuser of the example project."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user_model = get_user_model()
    user = user_model.objects.filter(username="wheel-smoke").first()
    if user is None:
        user = user_model.objects.create_superuser("wheel-smoke", "smoke@example.com", "x")
    client = Client()
    client.force_login(user)
    return client


def get(client: Any, url: str) -> Any:
    from django.test.utils import override_settings

    with override_settings(ALLOWED_HOSTS=["testserver"]):
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response


def check_admin(package: Path, client: Any) -> None:
    from django.contrib import admin
    from django.urls import reverse

    from django_bgtasks.models import BackgroundTask

    if not ((package / "admin.py").exists() or (package / "admin" / "__init__.py").exists()):
        say("this version ships no admin.py; no changelist to render")
        return
    assert admin.site.is_registered(BackgroundTask), "admin.py registers no BackgroundTask admin"
    url = reverse("admin:django_bgtasks_backgroundtask_changelist")
    assert b"wheel-smoke" in get(client, url).content, "the task is not on the changelist"
    say(f"admin changelist {url} renders")


def check_json_api(package: Path, client: Any) -> None:
    from django.urls import reverse

    from django_bgtasks.models import BackgroundTask

    if not (package / "urls.py").exists():
        say("this version ships no urls.py; no JSON API to call")
        return
    state = BackgroundTask.objects.get_state("wheel-smoke")
    assert state is not None
    data = get(client, reverse("bgtasks:task", args=["wheel-smoke"])).json()
    assert (data["name"], data["token"], data["status"]) == ("wheel-smoke", state.token, "idle")
    names = [task["name"] for task in get(client, reverse("bgtasks:list")).json()["tasks"]]
    assert "wheel-smoke" in names, names
    say("JSON API answers for the task and the list")
    if (package / "authentication.py").exists():
        check_bearer_token()


def check_bearer_token() -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import override_settings
    from django.urls import reverse

    from django_bgtasks.authentication import SIGNED_TOKEN, make_token

    token = make_token(get_user_model().objects.get(username="wheel-smoke"), max_age=60)
    url = reverse("bgtasks:task", args=["wheel-smoke"])
    headers = {"Authorization": f"Bearer {token}"}
    with override_settings(
        ALLOWED_HOSTS=["testserver"], BGTASKS_API_AUTHENTICATION=[SIGNED_TOKEN]
    ):
        response = Client().get(url, headers=headers)
        assert response.status_code == 200, response.content
        refused = Client().get(url, headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 403, refused.status_code
    say("JSON API answers a bearer token from make_token(), and refuses a bad one")


if __name__ == "__main__":
    main()
