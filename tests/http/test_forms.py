"""The bodies of the JSON API's writes (django_bgtasks.http.forms): a JSON
object or a form, holding only the write's fields, each checked by its rule
(``RunForm``'s ttl and arguments, ``CancelForm``'s token, ``FilterForm``'s
terms); anything else is a 400 that names it, with nothing started."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.http import JsonResponse
from django.test import Client, RequestFactory

from django_bgtasks.http.forms import CancelForm, FilterForm, post_options
from tests.dbtools import rows, runs
from tests.http.test_api import post_json


def test_run_takes_a_ttl_from_json_or_a_form(
    site_alias: str, operator: Client, settle: Any
) -> None:
    assert post_json(operator, "/bgtasks/surface-quick/run/", {"ttl": 7.5}).status_code == 202
    assert settle("surface-quick").ttl == 7.5
    assert operator.post("/bgtasks/surface-quick/run/", {"ttl": "9"}).status_code == 202
    assert settle("surface-quick").ttl == 9.0


FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize("executor", ["thread", "worker"])
@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        ('{"ttl": -1}', "application/json", "positive"),
        ('{"ttl": 0}', "application/json", "positive"),
        ('{"ttl": "30"}', "application/json", "number"),
        ('{"ttl": 1e9}', "application/json", "at most"),
        (
            '{"ttl": 30, "steps": [1]}',
            "application/json",
            "Unknown field(s): steps. Only 'ttl', 'args' and 'kwargs' are accepted.",
        ),
        ("[30]", "application/json", "JSON object"),
        ("{not json", "application/json", "not valid JSON"),
        ("[" * 100_000, "application/json", "The body is nested too deeply"),
        ("ttl=soon", FORM, "number of seconds"),
        ("ttl=30&steps=9", FORM, "Unknown field(s): steps"),
        # The arguments: surface-quick(lease, total=3), tests/testapp
        (
            '{"args": {"total": 1}}',
            "application/json",
            "args must be a list or tuple (a JSON array), not an object (a dict)",
        ),
        (
            '{"kwargs": [1]}',
            "application/json",
            "kwargs must be a dict (a JSON object), not an array (a list)",
        ),
        (
            '{"kwargs": {"bogus": 1}}',
            "application/json",
            "task 'surface-quick' can't take these arguments: "
            "got an unexpected keyword argument 'bogus'",
        ),
        ('{"args": [1, 2]}', "application/json", "too many positional arguments"),
        ("args=[1,", FORM, "args must be a JSON array, not '[1,'"),
        ("args=3", FORM, "args must be a list or tuple (a JSON array), not a number"),
        ("kwargs=nope", FORM, "kwargs must be a JSON object, not 'nope'"),
        ('kwargs={"total": 1, "bogus": 2}', FORM, "unexpected keyword argument 'bogus'"),
    ],
)
def test_run_answers_400_for_bad_input_and_starts_nothing(
    site_alias: str,
    operator: Client,
    settings: Any,
    executor: str,
    body: str,
    content_type: str,
    message: str,
) -> None:
    settings.BGTASKS_EXECUTOR = executor
    response = operator.post("/bgtasks/surface-quick/run/", body, content_type=content_type)

    assert response.status_code == 400
    assert message in response.json()["error"]
    assert rows(site_alias) == [] and runs(site_alias) == []


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ('{"args": [[1, 2, 3]], "ttl": 20}', "application/json"),
        ('kwargs={"numbers": [1, 2, 3]}&ttl=20', FORM),
    ],
    ids=["json", "form"],
)
def test_run_passes_the_arguments_to_the_task(
    site_alias: str, operator: Client, settle: Any, body: str, content_type: str
) -> None:
    # surface-sum(lease, numbers), tests/testapp
    response = operator.post("/bgtasks/surface-sum/run/", body, content_type=content_type)

    assert response.status_code == 202
    state = settle("surface-sum")
    assert (state.outcome, state.ttl) == ("succeeded", 20.0)
    assert [run["result"] for run in runs(site_alias, "surface-sum")] == [6]


def refusal(answer: dict[str, Any] | JsonResponse) -> dict[str, Any]:
    assert isinstance(answer, JsonResponse) and answer.status_code == 400, answer
    body: dict[str, Any] = json.loads(answer.content)
    return body


def test_a_form_s_csrf_token_is_no_field_and_a_one_field_body_names_its_one_field() -> None:
    factory = RequestFactory()
    form = factory.post("/", {"token": "7", "csrfmiddlewaretoken": "x" * 32})
    assert post_options(form, CancelForm) == {"token": 7}
    for request in (
        factory.post("/", {"tokens": "7"}),
        factory.post("/", json.dumps({"tokens": 7}), content_type="application/json"),
    ):
        assert refusal(post_options(request, CancelForm)) == {
            "error": "Unknown field(s): tokens. Only 'token' is accepted."
        }


def test_a_filter_s_args_may_be_json_itself_in_a_json_body_and_other_terms_are_text() -> None:
    factory = RequestFactory()
    body = {"args": {"tenant": "a"}, "status": "READY"}
    request = factory.post("/", json.dumps(body), content_type="application/json")
    options = post_options(request, FilterForm)
    assert isinstance(options, dict)
    given = {name: value for name, value in options.items() if value is not None}
    assert given == {"args": '{"tenant": "a"}', "status": "READY"}
    form = post_options(factory.post("/", {"args": '{"tenant": "a"}'}), FilterForm)
    assert isinstance(form, dict) and form["args"] == '{"tenant": "a"}'
    wrong = factory.post("/", json.dumps({"queue": 3}), content_type="application/json")
    assert refusal(post_options(wrong, FilterForm)) == {"error": "queue must be a string, not int"}
