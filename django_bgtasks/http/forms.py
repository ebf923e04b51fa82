"""The bodies of the JSON API's writes: ``RunForm``, ``CancelForm``, ``QueueForm``
and ``FilterForm``.

A body is a JSON object or a form; it may hold only the write's optional
fields, each checked by its rule of :mod:`django_bgtasks.validation`.
:func:`post_options` reads one, or answers the 400 naming the first problem.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, JsonResponse

from django_bgtasks.http.responses import error
from django_bgtasks.validation import (
    parse_json,
    validate_args,
    validate_kwargs,
    validate_queue_name,
    validate_token,
    validate_ttl,
)


class _Option(forms.Field):
    """An optional field of a POST body, checked by a rule of ``validation``.

    A JSON body's value is taken as it is (the rule refuses a wrong type); a
    form's text is converted with ``parse`` first.
    """

    def __init__(
        self, label: str, kind: str, parse: Callable[[str], Any], rule: Callable[[Any], Any]
    ) -> None:
        super().__init__(required=False, label=label)
        self.kind, self.parse, self.rule = kind, parse, rule
        self.from_text = True

    def to_python(self, value: Any) -> Any:
        if value is None or not self.from_text:
            return value
        try:
            return self.parse(value)
        except ValueError:
            raise ValidationError(f"{self.label} must be {self.kind}, not {value!r}") from None


def _json(what: str) -> Callable[[str], Any]:
    """A form field's text read as JSON (a ``ValueError`` that says why not)."""
    return lambda text: parse_json(text, what)


class _OptionsForm(forms.Form):
    """The optional fields of a POST, from a JSON object or a form; no others."""

    def __init__(self, data: dict[str, Any], *, from_text: bool) -> None:
        super().__init__(data)
        for field in self.fields.values():
            if isinstance(field, _Option):
                field.from_text = from_text

    def clean(self) -> dict[str, Any]:
        # Unknown fields are refused before any value meets its rule (text
        # that is no number at all was refused already, by its field): the
        # order in which this API named what is wrong before it used a form.
        unknown = sorted(set(self.data) - set(self.fields))
        if unknown:
            *others, last = (repr(name) for name in self.fields)
            only = f"{', '.join(others)} and {last} are" if others else f"{last} is"
            raise ValidationError(f"Unknown field(s): {', '.join(unknown)}. Only {only} accepted.")
        cleaned = self.cleaned_data
        for name, field in self.fields.items():
            if isinstance(field, _Option) and cleaned.get(name) is not None:
                try:
                    cleaned[name] = field.rule(cleaned[name])
                except (ValueError, TypeError) as exc:
                    self.add_error(name, str(exc))
        return cleaned


class RunForm(_OptionsForm):
    """``POST <name>/run/``: an optional ``ttl`` for this run (``validate_ttl``),
    and the run's ``args`` (a list) and ``kwargs`` (an object): in a JSON
    body as they are, in a form as JSON text. Their types are checked here
    (``validate_args``, ``validate_kwargs``) and against the task's function
    by ``operations.start()``, as for every surface."""

    ttl = _Option("ttl", "a number of seconds", float, validate_ttl)
    args = _Option("args", "a JSON array", _json("args"), validate_args)
    kwargs = _Option("kwargs", "a JSON object", _json("kwargs"), validate_kwargs)


class CancelForm(_OptionsForm):
    """``POST <name>/cancel/``: an optional ``token``, the claim to cancel (``validate_token``)."""

    token = _Option("token", "a whole number", int, validate_token)


class QueueForm(_OptionsForm):
    """``POST django-tasks/queues/pause/`` and ``unpause/``: the ``queue``
    (``validate_queue_name``; without it, ``operations.pause`` refuses)."""

    queue = _Option("queue", "a queue name", str, validate_queue_name)


def post_options(
    request: HttpRequest, form_class: type[_OptionsForm]
) -> dict[str, Any] | JsonResponse:
    """The POST's fields, cleaned by ``form_class``; or a 400 naming the first problem."""
    if request.content_type == "application/json":
        try:
            data = parse_json(request.body or b"{}", "The body")
        except ValueError as exc:
            return error(400, str(exc))
        if not isinstance(data, dict):
            return error(400, "The body must be a JSON object.")
        form = form_class(data, from_text=False)
    else:
        fields = {key: request.POST[key] for key in request.POST if key != "csrfmiddlewaretoken"}
        form = form_class(fields, from_text=True)
    if not form.is_valid():
        return error(
            400, next(str(message) for errors in form.errors.values() for message in errors)
        )
    return form.cleaned_data


def _text(name: str) -> Callable[[Any], str]:
    """A filter term's rule here: a string (``QueuedFilter.parse`` checks the rest)."""

    def rule(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
        return value

    return rule


def _json_text(value: Any) -> str:
    """``args`` as text: a JSON body may hold the value itself."""
    return value if isinstance(value, str) else json.dumps(value)


class FilterForm(_OptionsForm):
    """``POST django-tasks/retry/``, ``cancel/`` and ``delete/``: a filter's
    terms, as the list's query string names them (http/bulk.py), each a
    string; ``args`` in a JSON body may be the JSON value itself."""

    status = _Option("status", "a status", str, _text("status"))
    queue = _Option("queue", "a queue name", str, _text("queue"))
    task = _Option("task", "a task path", str, _text("task"))
    backend = _Option("backend", "a backend alias", str, _text("backend"))
    args = _Option("args", "JSON", str, _json_text)
    error = _Option("error", "a text", str, _text("error"))
    key = _Option("key", "a key", str, _text("key"))
    since = _Option("since", "a time", str, _text("since"))
    until = _Option("until", "a time", str, _text("until"))
