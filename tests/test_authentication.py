"""Scripts and other services on the JSON API: ``BGTASKS_API_AUTHENTICATION``'s
hooks, the built-in signed bearer token (made, checked, expired and revoked),
CSRF for token and session requests, and docs/scripts.md's recipes run as
written against a live server."""

from __future__ import annotations

import json
import re
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import requests
import time_machine
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory

from django_bgtasks import authentication
from django_bgtasks.authentication import make_token, user_for_token
from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows

objects = BackgroundTask.objects
ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DOC = ROOT / "docs" / "scripts.md"
SIGNED = "django_bgtasks.authentication.signed_token"


@pytest.fixture
def tokens_on(settings: Any) -> None:
    settings.BGTASKS_API_AUTHENTICATION = [SIGNED]


def bearer(token: str) -> dict[str, Any]:
    return {"headers": {"Authorization": f"Bearer {token}"}}


def post_json(client: Client, url: str, data: Any = None, **extra: Any) -> Any:
    return client.post(url, json.dumps(data or {}), content_type="application/json", **extra)


def assert_refused(response: Any, *secrets: bytes) -> None:
    """403, a JSON error and nothing else: no task data."""
    assert response.status_code == 403, response.content
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"error"}
    for secret in secrets:
        assert secret not in response.content


# --- the token itself ---------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_names_its_user_until_the_password_changes(make_staff: Any) -> None:
    user = make_staff("ops-bot", "view_backgroundtask")
    token = make_token(user)
    assert user_for_token(token) == user
    assert user_for_token(make_token(user, max_age=1)) == user

    user.set_password("a new one")
    user.save()
    assert user_for_token(token) is None
    assert user_for_token(make_token(user)) == user  # a new token works


@pytest.mark.django_db
def test_deactivating_the_user_stops_it(make_staff: Any) -> None:
    user = make_staff("ops-bot", "view_backgroundtask")
    token = make_token(user)
    user.is_active = False
    user.save()
    assert user_for_token(token) is None
    # Active again, with the same password: the same fingerprint, so the token
    # works again (docs/scripts.md: a new password revokes it for good).
    user.is_active = True
    user.save()
    assert user_for_token(token) == user


@pytest.mark.django_db
def test_a_token_expires_after_its_own_max_age(make_staff: Any) -> None:
    user = make_staff("ops-bot", "view_backgroundtask")
    with time_machine.travel(time.time() - 120, tick=False):
        old = make_token(user, max_age=60)
        long_lived = make_token(user, max_age=3600)
    assert user_for_token(old) is None
    assert user_for_token(long_lived) == user


@pytest.mark.django_db
def test_a_new_secret_key_revokes_tokens_unless_the_old_one_is_a_fallback(
    make_staff: Any, settings: Any
) -> None:
    user = make_staff("ops-bot", "view_backgroundtask")
    token = make_token(user)
    old_key = settings.SECRET_KEY
    settings.SECRET_KEY = "a-new-key-" + "x" * 50
    assert user_for_token(token) is None
    settings.SECRET_KEY_FALLBACKS = [old_key]
    assert user_for_token(token) == user


@pytest.mark.django_db
@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        "",
        "a:b:c",
        "ünïcödé:token",
        "x" * 5000,
        signing.TimestampSigner(salt="another.salt").sign_object({"user": "1", "max_age": 60}),
        signing.Signer(salt=authentication.SALT).sign_object({"user": "1", "max_age": 60}),
        signing.TimestampSigner(salt=authentication.SALT).sign_object(["not", "a", "dict"]),
        signing.TimestampSigner(salt=authentication.SALT).sign_object({"user": "1"}),
        signing.TimestampSigner(salt=authentication.SALT).sign_object(
            {"user": "1", "fp": "0", "max_age": 10**30}
        ),
        signing.TimestampSigner(salt=authentication.SALT).sign_object(
            {"user": "not-a-pk", "fp": "0", "max_age": 60}
        ),
        signing.TimestampSigner(salt=authentication.SALT).sign_object(
            {"user": "999999", "fp": "0", "max_age": 60}
        ),
        signing.TimestampSigner(salt=authentication.SALT).sign_object(
            {"user": "1", "fp": "forged", "max_age": 60}
        ),
    ],
    ids=[
        "garbage",
        "empty",
        "colons",
        "unicode",
        "huge",
        "another-salt",
        "no-timestamp",
        "not-a-dict",
        "no-max-age",
        "absurd-max-age",
        "bad-pk",
        "no-such-user",
        "forged-fingerprint",
    ],
)
def test_a_bad_token_names_nobody_and_never_raises(make_staff: Any, token: str) -> None:
    make_staff("ops-bot", "view_backgroundtask")
    assert user_for_token(token) is None


@pytest.mark.parametrize("max_age", [0, -1, 3650 * 86400 + 1, 1.5, True, "60", None])
def test_max_age_must_be_whole_seconds_up_to_ten_years(max_age: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        authentication.validate_max_age(max_age)


def test_only_a_bearer_authorization_header_is_read() -> None:
    factory = RequestFactory()
    for header, expected in [
        ("Bearer abc", "abc"),
        ("bearer   abc ", "abc"),
        ("Token abc", None),
        ("Basic YTpi", None),
        ("Bearer", None),
        ("", None),
    ]:
        request = factory.get("/", headers={"Authorization": header})
        assert authentication.bearer_token(request) == expected, header
    assert authentication.bearer_token(factory.get("/")) is None


# --- the hooks ----------------------------------------------------------------------------

CALLS: list[str] = []


def hook_nobody(request: Any) -> Any:
    CALLS.append("nobody")
    return None


def hook_refuses(request: Any) -> Any:
    CALLS.append("refuses")
    raise PermissionDenied


def hook_header_user(request: Any) -> Any:
    """Whoever the X-Test-User header names (a stand-in for any token scheme)."""
    from django.contrib.auth import get_user_model

    CALLS.append("header")
    name = request.headers.get("X-Test-User")
    return get_user_model().objects.filter(username=name).first() if name else None


NOT_CALLABLE = 42


@pytest.fixture
def calls() -> list[str]:
    CALLS.clear()
    return CALLS


@pytest.mark.django_db
def test_hooks_are_tried_in_order_and_the_first_user_wins(
    settings: Any, make_staff: Any, calls: list[str]
) -> None:
    user = make_staff("ops-bot", "view_backgroundtask")
    settings.BGTASKS_API_AUTHENTICATION = [
        f"{__name__}.hook_nobody",
        f"{__name__}.hook_header_user",
        f"{__name__}.hook_refuses",
    ]
    request = RequestFactory().get("/", headers={"X-Test-User": "ops-bot"})
    assert authentication.authenticate(request) is True
    assert request.user == user
    assert calls == ["nobody", "header"]


@pytest.mark.django_db
def test_permission_denied_from_a_hook_ends_the_search(
    settings: Any, make_staff: Any, calls: list[str]
) -> None:
    make_staff("ops-bot", "view_backgroundtask")
    settings.BGTASKS_API_AUTHENTICATION = [
        f"{__name__}.hook_refuses",
        f"{__name__}.hook_header_user",
    ]
    request = RequestFactory().get("/", headers={"X-Test-User": "ops-bot"})
    assert authentication.authenticate(request) is False
    assert calls == ["refuses"]


@pytest.mark.django_db
def test_a_session_user_is_never_replaced_by_a_hook(
    settings: Any, make_staff: Any, calls: list[str]
) -> None:
    session_user = make_staff("person", "view_backgroundtask")
    make_staff("ops-bot", "change_backgroundtask")
    settings.BGTASKS_API_AUTHENTICATION = [f"{__name__}.hook_header_user"]
    request = RequestFactory().get("/", headers={"X-Test-User": "ops-bot"})
    request.user = session_user
    assert authentication.authenticate(request) is False
    assert request.user == session_user and calls == []


@pytest.mark.parametrize(
    "value", ["django_bgtasks.authentication.signed_token", {"a": 1}, [f"{__name__}.NOT_CALLABLE"]]
)
def test_a_bad_setting_is_a_type_error(settings: Any, value: Any) -> None:
    settings.BGTASKS_API_AUTHENTICATION = value
    with pytest.raises(TypeError):
        authentication.hooks()


# --- the API with tokens ------------------------------------------------------------------


def test_a_token_reads_and_operates_without_a_csrf_token(
    site_alias: str, make_staff: Any, tokens_on: None, settle: Any
) -> None:
    operator = make_token(make_staff("ops-bot", "change_backgroundtask"))
    objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 2}, ttl=30)
    client = Client(enforce_csrf_checks=True)  # and no cookie at all

    listing = client.get("/bgtasks/", **bearer(operator))
    assert listing.status_code == 200
    # The task with a row, besides the registered ones that never ran.
    tasks = listing.json()["tasks"]
    assert [task["name"] for task in tasks if task["token"]] == ["cleanup"]
    assert client.get("/bgtasks/cleanup/", **bearer(operator)).json()["owner"] == "worker-1"

    started = post_json(client, "/bgtasks/surface-quick/run/", **bearer(operator))
    assert started.status_code == 202, started.content
    assert settle("surface-quick").outcome == "succeeded"
    cancelled = post_json(client, "/bgtasks/cleanup/cancel/", {"token": 1}, **bearer(operator))
    assert cancelled.status_code == 202
    assert objects.get_state("cleanup").cancel_requested
    assert "sessionid" not in client.cookies  # nothing was logged in


def test_a_view_only_token_reads_but_cannot_operate(
    site_alias: str, make_staff: Any, tokens_on: None
) -> None:
    viewer = make_token(make_staff("ops-bot", "view_backgroundtask"))
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)
    client = Client()
    assert client.get("/bgtasks/cleanup/", **bearer(viewer)).status_code == 200
    for url in ("/bgtasks/surface-quick/run/", "/bgtasks/cleanup/cancel/"):
        response = post_json(client, url, **bearer(viewer))
        assert_refused(response)
        assert "permission to change" in response.json()["error"]
    assert rows(site_alias) == before


def test_bad_tokens_get_403_and_no_task_data(
    site_alias: str, make_staff: Any, tokens_on: None, settings: Any
) -> None:
    objects.try_claim("cleanup", "worker-1", {"secret": "s3cr3t"}, ttl=30)
    before = rows(site_alias)
    changed = make_staff("changed", "change_backgroundtask")
    revoked = make_token(changed)
    changed.set_password("new")
    changed.save()
    with time_machine.travel(time.time() - 120, tick=False):
        expired = make_token(make_staff("expired", "change_backgroundtask"), max_age=60)
    bad = {
        "garbage": "garbage",
        "wrong salt": signing.TimestampSigner(salt="x").sign_object({"user": "1"}),
        "revoked": revoked,
        "expired": expired,
        "no permission": make_token(make_staff("staff")),
        "not staff": make_token(make_staff("member", "change_backgroundtask", staff=False)),
    }
    client = Client(enforce_csrf_checks=True)
    for label, token in bad.items():
        for response in (
            client.get("/bgtasks/", **bearer(token)),
            client.get("/bgtasks/cleanup/", **bearer(token)),
            client.get("/bgtasks/nope/", **bearer(token)),
            post_json(client, "/bgtasks/surface-quick/run/", **bearer(token)),
            post_json(client, "/bgtasks/cleanup/cancel/", **bearer(token)),
        ):
            assert_refused(response, b"s3cr3t", b"worker-1")
            # A valid token of a user without the permission is told so (and
            # learns nothing else); any other token gets the same answer.
            expected = "permission" if label in ("no permission", "not staff") else "not accepted"
            assert expected in response.json()["error"], (label, response.json())
    assert rows(site_alias) == before


def test_tokens_are_refused_unless_the_hook_is_configured(
    site_alias: str, make_staff: Any
) -> None:
    token = make_token(make_staff("ops-bot", "change_backgroundtask"))
    response = Client().get("/bgtasks/", **bearer(token))
    assert_refused(response)
    assert response.json() == {"error": "The Authorization header was not accepted."}


def test_session_posts_still_need_the_csrf_token(
    site_alias: str, make_staff: Any, tokens_on: None
) -> None:
    """A session is a cookie, which a forged cross-site request carries: CSRF
    stays on for it, even when the request also has a valid token."""
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)
    operator = make_staff("operator", "change_backgroundtask")
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert post_json(client, "/bgtasks/cleanup/cancel/").status_code == 403
    token = make_token(make_staff("ops-bot", "change_backgroundtask"))
    assert post_json(client, "/bgtasks/cleanup/cancel/", **bearer(token)).status_code == 403
    assert rows(site_alias) == before


def test_a_hook_may_refuse_with_permission_denied(
    site_alias: str, settings: Any, make_staff: Any
) -> None:
    settings.BGTASKS_API_AUTHENTICATION = [f"{__name__}.hook_refuses"]
    assert_refused(Client().get("/bgtasks/", headers={"Authorization": "Anything"}))


# --- docs/scripts.md, run as written ------------------------------------------------------


def doc_block(containing: str, lang: str = "python") -> str:
    """The fenced ``lang`` block of docs/scripts.md that contains ``containing``."""
    blocks = re.findall(rf"```{lang}\n(.*?)```", SCRIPTS_DOC.read_text(), re.DOTALL)
    [block] = [block for block in blocks if containing in block]
    return block


def run_doc(code: str, base: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    namespace = {} if namespace is None else namespace
    # The docs' site is https://example.com and their task log-cleanup; here,
    # the live server and a task the test project registers.
    code = code.replace('"https://example.com"', repr(base))
    exec(compile(code, str(SCRIPTS_DOC), "exec"), namespace)  # noqa: S102  (our own docs)
    return namespace


def test_the_session_login_recipe(
    site_alias: str,
    live_server: Any,
    make_staff: Any,
    settle: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    user = make_staff("ops-bot", "change_backgroundtask")
    user.set_password("sw0rdfish")
    user.save()
    monkeypatch.setenv("OPS_BOT_PASSWORD", "sw0rdfish")
    objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 4}, ttl=30)

    namespace = run_doc(doc_block("def log_in"), live_server.url)
    with pytest.raises(RuntimeError, match="could not log in"):
        namespace["log_in"]("ops-bot", "wrong")
    usage = doc_block("session = log_in").replace("log-cleanup", "surface-quick")
    run_doc(usage, live_server.url, namespace)

    out = capsys.readouterr().out
    assert "cleanup running 0.25" in out and "started, token" in out
    assert settle("surface-quick").outcome == "succeeded"

    # The same session without the CSRF header: refused, as a forged POST is.
    session = namespace["session"]
    del session.headers["X-CSRFToken"]
    refused = session.post(f"{live_server.url}/bgtasks/cleanup/cancel/", json={})
    assert refused.status_code == 403 and not objects.get_state("cleanup").cancel_requested


def test_the_bearer_token_recipe(
    site_alias: str,
    live_server: Any,
    make_staff: Any,
    tokens_on: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.core.management import call_command

    make_staff("ops-bot", "change_backgroundtask")
    out, _err = _capture(call_command, "bgtasks", "token", "ops-bot", "--max-age", "7776000")
    monkeypatch.setenv("BGTASKS_TOKEN", out.strip())
    lease = objects.try_claim("log-cleanup", "worker-1", ttl=30)

    run_doc(doc_block("api.headers"), live_server.url)

    state = objects.get_state("log-cleanup")
    assert state.cancel_requested and state.token == lease.token

    # And a request with a bad token over real HTTP: 403, JSON, no data.
    answer = requests.get(
        f"{live_server.url}/bgtasks/", headers={"Authorization": "Bearer nope"}, timeout=30
    )
    assert answer.status_code == 403 and set(answer.json()) == {"error"}
    assert b"worker-1" not in answer.content


def _capture(call: Any, *args: str) -> tuple[str, str]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    call(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_drf_hook_recipe(
    site_alias: str, make_staff: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' five-line DRF hook, against a stand-in for DRF with the
    contract its TokenAuthentication has: ``(user, token)`` for a valid
    ``Authorization: Token <key>``, ``None`` without one, and
    ``AuthenticationFailed`` for a bad key. DRF itself is not a dependency."""
    operator = make_staff("ops-bot", "change_backgroundtask")
    keys = {"k3y": operator}

    class AuthenticationFailed(Exception):
        pass

    class TokenAuthentication:
        def authenticate(self, request: Any) -> Any:
            scheme, _, key = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
            if scheme != "Token":
                return None
            if key not in keys:
                raise AuthenticationFailed("Invalid token.")
            return keys[key], key

    drf = types.ModuleType("rest_framework")
    modules = {
        "rest_framework": drf,
        "rest_framework.authentication": types.ModuleType("rest_framework.authentication"),
        "rest_framework.exceptions": types.ModuleType("rest_framework.exceptions"),
        "bgtasks_auth_recipe": types.ModuleType("bgtasks_auth_recipe"),
    }
    modules["rest_framework.authentication"].TokenAuthentication = TokenAuthentication  # type: ignore[attr-defined]
    modules["rest_framework.exceptions"].AuthenticationFailed = AuthenticationFailed  # type: ignore[attr-defined]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    exec(doc_block("def drf_token"), modules["bgtasks_auth_recipe"].__dict__)  # noqa: S102
    settings.BGTASKS_API_AUTHENTICATION = ["bgtasks_auth_recipe.drf_token", SIGNED]
    objects.try_claim("cleanup", "worker-1", ttl=30)

    client = Client(enforce_csrf_checks=True)
    token = {"headers": {"Authorization": "Token k3y"}}
    assert client.get("/bgtasks/cleanup/", **token).status_code == 200
    assert post_json(client, "/bgtasks/cleanup/cancel/", **token).status_code == 202
    assert_refused(client.get("/bgtasks/", headers={"Authorization": "Token wrong"}))
    # The next hook still gets its turn.
    assert client.get("/bgtasks/", **bearer(make_token(operator))).status_code == 200
