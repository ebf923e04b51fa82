"""The security review's claims, as tests (docs/security.md), across every
surface at once (each surface's own tests go deeper into its behaviour).

* Every write path needs a permission: every URL of the JSON API and of the
  admin for tasks is found by walking the URLconf, and each is requested,
  GET and POST, by every kind of user who must not change anything.
* The JSON API and the admin leak nothing to those users.
* CSRF is enforced on every URL that accepts a POST.
* Task names, owners, values and errors are escaped: HTML in the admin, JSON
  in the API, and no terminal control characters in the command's output.
* No SQL is built from values: the package executes SQL in one place, the
  statements carry values only as parameters, and names made of SQL, format
  and placeholder syntax are stored as the text they are.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import fields
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

import django_bgtasks
from django_bgtasks.conf import conf
from django_bgtasks.core import store
from django_bgtasks.db import engines
from django_bgtasks.db import shared as rules
from django_bgtasks.http.events import watch_url
from django_bgtasks.models import BackgroundTask, QueuedTask, TaskRun, Worker
from tests.dbtools import rows, runs

objects = BackgroundTask.objects
PACKAGE = Path(django_bgtasks.__file__).parent

# --- no SQL built from values ------------------------------------------------------------

# The only parameters the statements take: every value goes through these.
PARAMETERS = {"name", "owner", "token", "value", "ttl", "outcome", "error"}
# The workers' statements (requests, schedules, resume, retry, worker rows).
PARAMETERS |= {"trigger", "args", "request", "requested_by", "due", "next", "expect"}
PARAMETERS |= {"max_attempts", "interrupted", "lost", "failed", "delay", "resume", "schedule"}
PARAMETERS |= {"id", "host", "pid", "tasks", "concurrency", "running", "seconds"}
# A run's result (release).
PARAMETERS |= {"result", "result_note"}
# A timed-out run is retried as a failed one is (claim_retry).
PARAMETERS |= {"timed_out"}
# A worker's one renewal of every lease it holds.
PARAMETERS |= {"leases"}
# A request's trace context (django_bgtasks.tracing).
PARAMETERS |= {"trace_context"}


class _Calls(ast.NodeVisitor):
    """``<something>.execute(...)`` calls, by the function they are in."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.functions: list[str] = ["<module>"]
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in (
            "execute",
            "executemany",
            "executescript",
            "raw",
            "extra",
        ):
            self.found.append(f"{self.where}:{self.functions[-1]}")
        self.generic_visit(node)


def _execute_calls() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        calls = _Calls(str(path.relative_to(PACKAGE)))
        calls.visit(ast.parse(path.read_text(), filename=str(path)))
        found += calls.found
    return found


def test_sql_is_executed_in_one_place_with_parameters() -> None:
    # db/engines.run runs the statements of db/ (core/store.py and the
    # queue's manager hand them to it through engines.read/write): through
    # db/cursor.fetch_all, or on MySQL through db/mysql/leases.py's readers, which
    # run each statement and read its result (read_rows, count_rows, renew_steps,
    # _upsert, _claim, run_steps; _claim_update and _last_insert_id a claim's
    # token), and the
    # queue's through db/mysql/queue.py's in_one_transaction (the steps of a
    # statement, or of several, in one transaction: _in_one_query, or
    # _one_step_at_a_time; on MariaDB the CALL of a procedure of those steps,
    # which db/mysql/routines.py's routine creates from the rendered
    # statement, with no value in it; its ours lists and drops them) and
    # db/mysql/leases.py's run_steps (the enqueue's INSERT and the read of what
    # it stored, in the caller's transaction) or, on MariaDB, read_rows (the
    # INSERT with RETURNING); db/sqlite/driver.py's _run_steps runs a statement
    # of several steps through fetch_all; db/mysql/probes.py's mysql_server and
    # db/postgresql/probes.py's postgresql_replication read a server's
    # settings for the checks, and its postgresql_standby a replica's lag;
    # db/schema.py runs the migrations' constant DDL (db/<engine>/schema.py,
    # with no f-string or % formatting in it: SchemaSQL) and looks up the
    # pattern indexes 0009 and 0017 drop (the table's name the one parameter:
    # drop_pattern_indexes, create_pattern_indexes); db/cursor.py's cursor
    # passes what fetch_all runs on to psycopg, asking to prepare it.
    # Nothing else in the package talks SQL.
    calls = _execute_calls()
    assert "db/cursor.py:fetch_all" in calls and "db/mysql/leases.py:_upsert" in calls
    in_sql = {
        "db/mysql/leases.py:read_rows",
        "db/mysql/leases.py:count_rows",
        "db/mysql/leases.py:renew_steps",
        "db/mysql/leases.py:_upsert",
        "db/mysql/leases.py:_claim",
        "db/mysql/leases.py:_last_insert_id",
        "db/mysql/leases.py:_claim_update",  # MySQL: a claim and its token read in one query
        # MySQL: a worker's renewal and the read of its answer; the queue's
        # enqueue and the read of what it stored.
        "db/mysql/leases.py:run_steps",
        "db/mysql/queue.py:_in_one_query",
        "db/mysql/queue.py:_one_step_at_a_time",
        "db/mysql/routines.py:routine",
        # `bgtasks procedures`: the names of ours (a parameterised LIKE), and
        # _drop's DROP of each, the name quoted (an identifier takes no parameter).
        "db/mysql/routines.py:ours",
        "db/mysql/routines.py:_drop",
        "db/mysql/probes.py:mysql_server",
        "db/postgresql/probes.py:postgresql_replication",
        # How far behind a replica the operator's lists read may be (a constant).
        "db/postgresql/probes.py:postgresql_standby",
        "db/cursor.py:fetch_all",
        "db/cursor.py:execute",
        # The change feed's LISTEN (db/postgresql/notify.py), on its own connection.
        "push/feed.py:_listener",
        # The session proof's one constant statement (cursor.SESSION_ENDPOINTS):
        # whether a connection reaches PostgreSQL directly, not through a pooler.
        "db/cursor.py:direct_session",
        # The migrations' schema SQL, on the engine they migrate.
        "db/schema.py:__call__",  # SchemaSQL's
        "db/schema.py:drop_pattern_indexes",
        "db/schema.py:create_pattern_indexes",
    }
    others = [call for call in calls if call not in in_sql]
    assert others == [], others
    for path in sorted(PACKAGE.glob("db/*/schema.py")):
        tree = ast.parse(path.read_text())
        formatting = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.JoinedStr)
            or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod))
            or (isinstance(node, ast.Attribute) and node.attr == "format")
        ]
        assert formatting == [], f"{path} formats strings: its SQL is constant DDL"


@pytest.mark.parametrize("vendor", engines.SUPPORTED_VENDORS)
def test_statements_take_values_only_as_named_parameters(vendor: str) -> None:
    # A connection object of that vendor (none is opened: the vendor and the
    # quoting need no server), and the statements rendered for the real
    # tables: the very object the lease operations execute from.
    aliases = [alias for alias in settings.DATABASES if connections[alias].vendor == vendor]
    if not aliases:  # only MariaDB/MySQL can be missing (tests/settings.py)
        pytest.skip(settings.MYSQL_UNAVAILABLE or "BGTASKS_MYSQL_URL is empty")
    alias = aliases[0]
    connection = connections[alias]
    rendered = engines.statements(
        connection,
        task=BackgroundTask._meta.db_table,
        run=TaskRun._meta.db_table,
        worker=Worker._meta.db_table,
        queued=QueuedTask._meta.db_table,
    )
    assert rendered is store.statements(connection)
    for field in fields(rules.Statements):
        text = getattr(rendered, field.name)
        # Left after rendering: only %(param)s placeholders and literal %%.
        placeholders = set(re.findall(r"%\((\w+)\)s", text))
        assert placeholders <= PARAMETERS, (field.name, placeholders)
        stray = re.sub(r"%\(\w+\)s|%%", "", text)
        assert "%" not in stray, (field.name, text)
        assert "{" not in text and "}" not in text, (field.name, text)
        # Each names a table of the app (the clock reads no table at all).
        tables = (BackgroundTask, TaskRun, Worker)
        named = [connection.ops.quote_name(model._meta.db_table) in text for model in tables]
        assert any(named) or field.name == "clock", field.name


QUEUE_PARAMETERS = {"owner", "all", "queues", "seq", "token", "set_progress", "progress"}
QUEUE_PARAMETERS |= {"status", "return_value", "error", "refund", "uuid", "held", "limit", "ends"}
QUEUE_PARAMETERS |= {"task_path", "backend", "queue_name", "priority", "takes_context"}
QUEUE_PARAMETERS |= {"run_after", "max_attempts", "ttl", "unique_key", "active_key", "rows"}
QUEUE_PARAMETERS |= {"trace_context"}  # an enqueue's (django_bgtasks.tracing)
QUEUE_PARAMETERS |= {"queue"}
# A bulk action's batch of rows (cancel_many, retry_many).
QUEUE_PARAMETERS |= {"seqs"}
# A retry's delay (finish; finish_many's is in ``ends``).
QUEUE_PARAMETERS |= {"delay"}
# MySQL's loose scan of the names there are: the name a step starts after.
QUEUE_PARAMETERS |= {"after"}
QUEUE_PARAMETERS |= {"concurrency", "rate_limit", "rate_period"}
# MariaDB's enqueue of one task: what each task of ``rows`` has of its own.
QUEUE_PARAMETERS |= {"args_kwargs", "concurrency_key", "rate_key", "fairness_key"}
QUEUE_PARAMETERS |= {"fairness_weight"}


@pytest.mark.parametrize("vendor", engines.QUEUE_VENDORS)
def test_queue_statements_take_values_only_as_named_parameters(vendor: str) -> None:
    from django_bgtasks.models import QueuedTask

    aliases = [alias for alias in settings.DATABASES if connections[alias].vendor == vendor]
    if not aliases:  # only MariaDB/MySQL can be missing (tests/settings.py)
        pytest.skip(settings.MYSQL_UNAVAILABLE or "BGTASKS_MYSQL_URL is empty")
    connection = connections[aliases[0]]
    table = QueuedTask._meta.db_table
    paused = "django_bgtasks_pausedqueue"
    rendered = engines.queue_statements(connection, table=table, paused=paused)
    for field in fields(rules.QueueStatements):
        text = getattr(rendered, field.name)
        if not text:  # a statement this vendor does not have (finish_claim)
            assert (vendor, field.name) != ("postgresql", "finish_claim")
            continue
        placeholders = set(re.findall(r"%\((\w+)\)s", text))
        assert placeholders <= QUEUE_PARAMETERS, (field.name, placeholders)
        stray = re.sub(r"%\(\w+\)s|%%", "", text)
        assert "%" not in stray, (field.name, text)
        assert "{" not in text and "}" not in text, (field.name, text)
        tables = (connection.ops.quote_name(table), connection.ops.quote_name(paused))
        # (index_reads sets the planner of a transaction: it reads no table.)
        assert field.name == "index_reads" or any(name in text for name in tables), field.name


HOSTILE_NAMES = [
    "x'); DROP TABLE django_bgtasks_backgroundtask; --",
    'x"; DELETE FROM django_bgtasks_taskrun; --',
    "%(name)s",
    "%s %% %d",
    "{task} {run}",
    "name' OR '1'='1",
    "<script>alert('x')",
    "<img src=x onerror=alert(1)>",
    "\\'; SELECT pg_sleep(10); --",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_names_made_of_sql_are_stored_as_text(db_alias: str, name: str) -> None:
    owner = f"owner {name}"[:200]
    lease = objects.try_claim(name, owner, {"said": name}, ttl=60)
    assert lease is not None
    assert objects.update_state(name, owner, {"said": name, "again": True}, token=lease.token)
    assert objects.release(name, owner, token=lease.token, error=name)
    assert objects.try_claim(name, owner, [name], ttl=60) is not None
    assert objects.request_cancel(name)
    assert objects.force_release(name)

    [state] = objects.list_states()
    assert (state.name, state.owner, state.value) == (name, owner, [name])
    assert [(run["name"], run["outcome"]) for run in runs(db_alias)] == [
        (name, "succeeded"),
        (name, "released-by-operator"),
    ]
    # The tables are all still there, with just this task's rows.
    tables = connections[db_alias].introspection.table_names()
    assert {BackgroundTask._meta.db_table, TaskRun._meta.db_table} <= set(tables)
    assert BackgroundTask.objects.using(db_alias).count() == 1


# --- the web surfaces: every URL, every user who may not write -----------------------------

OWNER_MARK = "worker-s3cr3t"
VALUE_MARK = "v4lue-s3cr3t"
ACTIONS = ("run_now", "request_cancel", "force_release", "retry")
# A Django Task's id that no task has.
NO_SUCH_ID = "00000000-0000-4000-8000-000000000000"


def _routes(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def task_urls(name: str, result_id: str = NO_SUCH_ID) -> list[str]:
    """Every URL of the JSON API and of the tasks' admin, for task ``name``
    and Django Task ``result_id``. A route with a parameter this doesn't know
    fails the test, so that a new endpoint can't go untested."""
    urls = []
    for route in _routes(get_resolver().url_patterns):
        if not route.startswith(("bgtasks/", "admin/django_bgtasks/")):
            continue
        # As the admin and reverse() write them: percent-encoded for a
        # <str:name>, the admin's own quoting for an object id.
        url = "/" + route.replace("<str:name>", url_quote(name, safe="")).replace(
            "<path:object_id>", quote(name)
        )
        # A Django Task's result id: one no task has (every refusal comes
        # before the lookup), or a failed task's, which a retry would change.
        url = url.replace("<uuid:result_id>", result_id)
        # A malformed one, which the views answer with a JSON 404 (urls.py's last routes).
        url = url.replace("<str:result_id>", "not-a-uuid")
        # Any other path: the API's JSON 404 (urls.py's very last route).
        url = url.replace("<path:rest>", "no/such/endpoint")
        # A watch URL: validly signed for this task (read only by design).
        url = url.replace("<str:signed>", watch_url(name).rstrip("/").rsplit("/", 1)[-1])
        unknown = re.sub(
            r"<str:name>|<path:object_id>|<(?:uuid|str):result_id>|<str:signed>|<path:rest>"
            r"|<str:action>",
            "",
            route,
        )
        assert "<" not in unknown and "(" not in unknown, f"unknown parameter in {route!r}"
        if "<str:action>" in url:  # the admin's bulk actions, on the failed tasks
            urls += [
                url.replace("<str:action>", action) + "?status__exact=FAILED"
                for action in ("retry", "cancel", "delete")
            ]
            continue
        urls.append(url)
        # A Django Task's admin pages by its id too (given a name, they say
        # what an id is): its page, its history, its retry.
        if route.startswith("admin/django_bgtasks/queuedtask/<path:object_id>/"):
            urls.append(url.replace(f"/queuedtask/{quote(name)}/", f"/queuedtask/{result_id}/"))
    return urls


def post_data(name: str, token: int, url: str = "", seq: int = 0) -> dict[str, Any]:
    """What any of the write endpoints could want, all at once; the Django
    Tasks' list selects by sequence number (``seq``, their primary key)."""
    return {
        "token": str(token),
        "ttl": "30",
        "_selected_action": [str(seq) if "/queuedtask/" in url else name],
        "index": "0",
        "post": "yes",
        "confirmed": json.dumps({name: token}),
    }


def snapshot(alias: str) -> Any:
    queued = list(QueuedTask.objects.using(alias).order_by("seq").values())
    return rows(alias), runs(alias), list(LogEntry.objects.values_list("pk", flat=True)), queued


def failed_django_task() -> Any:
    """A failed Django Task (cancelled before it ran): ``(its id, its seq)``."""
    from tests import djtasks

    result = djtasks.add.enqueue(1, 1)
    QueuedTask.objects.cancel(result.id)
    return result.id, QueuedTask.objects.using(conf.DATABASE).get(uuid=result.id).seq


@pytest.fixture
def users(make_staff: Any) -> dict[str, Client]:
    """Everyone who must not change tasks, logged in."""
    clients = {"anonymous": Client()}
    for kind, user in [
        ("staff without permissions", make_staff("staff")),
        ("staff with view permission", make_staff("viewer", "view_backgroundtask")),
        (
            "not staff, with every permission",
            make_staff("member", "view_backgroundtask", "change_backgroundtask", staff=False),
        ),
        ("inactive superuser", make_staff("gone", superuser=True)),
    ]:
        if kind == "inactive superuser":
            user.is_active = False
            user.save()
        clients[kind] = Client()
        clients[kind].force_login(user)
    return clients


@pytest.mark.parametrize(
    ("name", "held"),
    # Held, so that a cancel or a release would work; idle (and registered),
    # so that a run would.
    [("cleanup", True), ("surface-quick", False)],
)
def test_no_url_lets_an_unprivileged_user_change_anything(
    site_alias: str, users: dict[str, Client], name: str, held: bool
) -> None:
    lease = objects.try_claim(name, OWNER_MARK, {"note": VALUE_MARK}, ttl=60)
    assert lease is not None
    if not held:
        assert objects.release(name, OWNER_MARK, token=lease.token)
    failed, seq = failed_django_task()
    before = snapshot(site_alias)
    urls = task_urls(name, failed)
    assert len(urls) >= 13  # the API's 4 and the admin's

    for kind, client in users.items():
        for url in urls:
            for action in (None, *ACTIONS):
                data = post_data(name, lease.token, url, seq)
                data |= {"action": action} if action else {}
                response = client.post(url, data)
                # (Reads answer POSTs too, e.g. the admin's status view, to
                # those who may read: what matters is that nothing changes.
                # A 404 is the API's answer at a path no endpoint has.)
                assert response.status_code in (200, 302, 403, 404, 405), (kind, url, action)
                if response.status_code == 302:
                    # To the login page, or back to the page, never onwards.
                    # (The Django Tasks' admin pages, given a task name for an
                    # object id, name no Django Task: their list, with a
                    # message saying what an id is.)
                    back = ("/admin/login/", url)
                    if "/queuedtask/" in url:
                        back = (*back, "/admin/")
                    assert response["Location"].startswith(back), response
            # The event streams need ASGI; the test client is WSGI, so those
            # who may watch get 501 (tests/http/test_events.py streams them).
            readable = (200, 302, 403, 404, 405, *((501,) if url.endswith("events/") else ()))
            assert client.get(url).status_code in readable, (kind, url)
    assert snapshot(site_alias) == before


def test_the_same_requests_do_change_things_for_an_operator(
    site_alias: str, make_staff: Any, settle: Callable[..., Any]
) -> None:
    # The control for the test above: its requests are the ones that work.
    operator = Client()
    operator.force_login(make_staff("operator", "view_backgroundtask", "change_backgroundtask"))
    changed = []
    failed, seq = failed_django_task()
    for url in task_urls("surface-quick", failed):
        token = 0
        if not url.endswith("/run/"):  # everything else wants a holder
            lease = objects.try_claim("surface-quick", OWNER_MARK, ttl=60)
            assert lease is not None
            token = lease.token
        before = snapshot(site_alias)
        operator.post(url, post_data("surface-quick", token, url, seq))
        if snapshot(site_alias) != before:
            changed.append(url)
        objects.force_release("surface-quick")
        settle("surface-quick")
        QueuedTask.objects.cancel(failed)  # failed again, if it was retried
    done = {url.rsplit("/", 2)[-2] for url in changed}
    assert done >= {"run", "cancel", "release", "retry"}, changed
    # Both retries: the API's and the admin's button.
    assert len([url for url in changed if url.endswith(f"/{failed}/retry/")]) == 2, changed


def test_nothing_leaks_to_users_without_the_view_permission(
    site_alias: str, users: dict[str, Client]
) -> None:
    objects.try_claim("cleanup", OWNER_MARK, {"note": VALUE_MARK}, ttl=60)
    for kind, client in users.items():
        if kind == "staff with view permission":
            continue
        for url in task_urls("cleanup"):
            if "/watch/" in url:
                # A signed watch URL is a capability: whoever holds it sees
                # that one task (tests/http/test_events.py: its scope and expiry).
                continue
            for response in (client.get(url), client.post(url)):
                assert OWNER_MARK.encode() not in response.content, (kind, url)
                assert VALUE_MARK.encode() not in response.content, (kind, url)
        # Not even whether a task exists: a name that never ran gets the same answer.
        for suffix in ("", "run/", "cancel/"):
            known = client.get(f"/bgtasks/cleanup/{suffix}")
            unknown = client.get(f"/bgtasks/never-ran/{suffix}")
            assert (known.status_code, known.content) == (unknown.status_code, unknown.content)


def test_every_post_needs_the_csrf_token(site_alias: str, make_staff: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_staff("root", superuser=True))
    lease = objects.try_claim("cleanup", OWNER_MARK, ttl=60)
    assert lease is not None
    before = snapshot(site_alias)
    for name in ("cleanup", "surface-quick"):
        for url in task_urls(name):
            for action in (None, *ACTIONS):
                data = post_data(name, lease.token) | ({"action": action} if action else {})
                response = client.post(url, data)
                assert response.status_code in (403, 405), (url, action, response)
                body = json.dumps(data)
                response = client.post(url, body, content_type="application/json")
                assert response.status_code in (403, 405), (url, action, response)
    assert snapshot(site_alias) == before


# --- escaping -------------------------------------------------------------------------------

EVIL = '<script>alert("owned")<\\script> & <img src=x onerror=alert(1)>'  # no "/" in names
# Terminal control: clear the screen, set the window title, and an 8-bit CSI.
CONTROL = "\x1b[2J\x1b]0;owned\x07\x9b31m"


def test_the_api_answers_json_that_a_browser_will_not_render(site_alias: str, users: Any) -> None:
    objects.try_claim(EVIL, f"{EVIL} owner", {"note": EVIL}, ttl=60)
    viewer = users["staff with view permission"]
    evil = url_quote(EVIL, safe="")
    for url in (
        "/bgtasks/",
        f"/bgtasks/{evil}/",
        f"/bgtasks/{evil}x/",  # 404
        "/bgtasks/%20x/",  # 400
    ):
        response = viewer.get(url)
        assert response["Content-Type"] == "application/json", url
        assert response["X-Content-Type-Options"] == "nosniff", url
        json.loads(response.content)
    assert viewer.get(f"/bgtasks/{evil}/").json()["name"] == EVIL


def test_admin_pages_escape_markup_in_every_field(site_alias: str, make_staff: Any) -> None:
    root = Client()
    root.force_login(make_staff("root", superuser=True))
    lease = objects.try_claim(EVIL, f"{EVIL} owner", {"note": EVIL}, ttl=60)
    assert lease is not None
    objects.release(EVIL, f"{EVIL} owner", token=lease.token, outcome="failed", error=EVIL)
    objects.try_claim(EVIL, f"{EVIL} owner", {"note": EVIL}, ttl=60)
    for url in task_urls(EVIL):
        response = root.get(url, follow=True)
        if response["Content-Type"] == "application/json":  # the API, the live view's data
            assert response["X-Content-Type-Options"] == "nosniff", url
            continue
        if url == "/bgtasks/metrics/":  # Prometheus' text: counts, no task's name or data
            assert response["Content-Type"].startswith("text/plain"), url
            assert response["X-Content-Type-Options"] == "nosniff", url
            assert "<script>" not in response.content.decode(), url
            continue
        html = response.content.decode()
        assert response["Content-Type"].startswith("text/html"), url
        assert "<script>alert(" not in html and "<img src=x" not in html, url
    detail = root.get(f"/admin/django_bgtasks/backgroundtask/{quote(EVIL)}/change/")
    html = detail.content.decode()
    # The owner, the value, the error and the history all went through escaping.
    assert html.count("&lt;script&gt;alert(") >= 5, html


def _control_characters(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc" and c not in "\n"]


def test_the_command_prints_no_terminal_control_characters(db_alias: str) -> None:
    value = {"note": f"{EVIL} {CONTROL}", CONTROL: [CONTROL]}
    lease = objects.try_claim(EVIL, "worker-1", value, ttl=60)
    assert lease is not None
    error = f"Traceback (most recent call last):\n  boom {CONTROL}\nRuntimeError: {CONTROL}"
    objects.release(EVIL, "worker-1", token=lease.token, outcome="failed", error=error)

    outputs = {}
    for args in (
        ("list",),
        ("list", "--json"),
        ("show", EVIL),
        ("show", EVIL, "--json"),
        ("watch", "--iterations", "1"),
    ):
        out = StringIO()
        call_command("bgtasks", *args, stdout=out, no_color=True)
        outputs[args] = out.getvalue()
        assert _control_characters(outputs[args]) == [], (args, outputs[args])
    # Markup is printed as the text it is (a terminal renders no HTML), and
    # --json still says exactly what is stored.
    assert EVIL in outputs[("list",)] and EVIL in outputs[("show", EVIL)]
    shown = json.loads(outputs[("show", EVIL, "--json")])
    assert (shown["name"], shown["value"], shown["error"]) == (EVIL, value, error)
    # (The registered tasks, which never ran, are listed too.)
    [listed] = [
        task for task in json.loads(outputs[("list", "--json")])["tasks"] if task["name"] == EVIL
    ]
    assert listed["value"] == value
