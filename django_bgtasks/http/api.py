"""The JSON status API, for front ends to poll: ``include("django_bgtasks.urls")``.

* ``GET <prefix>/``: ``{"tasks": [TaskState, ...]}``, every task by name, the
  registered ones that never ran included (status ``never run``);
* ``GET <prefix>/<name>/``: one ``TaskState`` (a registered task's ``never
  run`` one if it has not run), or 404;
* ``POST <prefix>/<name>/run/``: start a registered task here, 202 (409 when
  it is held, 404 when no task is registered by that name, 400 on bad input);
  with ``BGTASKS_EXECUTOR = "worker"``, file a request for a worker, 202 (409
  when one is already pending);
* ``POST <prefix>/<name>/cancel/``: ask the holder to stop, 202 (409 when
  nobody holds it, or when an optional ``token`` no longer does; 404 when the
  task has never run; 400 on bad input).

A ``TaskState`` is :meth:`TaskState.as_json`, the shape the ``bgtasks``
command prints too; a GET adds a registered task's ``schedule`` and
``description`` (``operations.task_json``). Everything is read from the lease table through
``BackgroundTask.objects`` (with the database's clock), so every replica
answers alike; nothing here keeps state of its own.

Reads need a staff user with the model's view (or change) permission and
writes its change permission (:mod:`django_bgtasks.operations.permissions`); anyone else
gets a 403 JSON error and no data. The user is the session's, or, for a
request without one, the first that a ``BGTASKS_API_AUTHENTICATION`` hook
vouches for (:mod:`django_bgtasks.authentication`, e.g. a bearer token).
Writes are CSRF-protected like any session-authenticated POST; a request a
hook authenticated by its header carries no cookie to forge, and needs no
CSRF token. Their bodies, a JSON object or a form, are checked
by ``RunForm`` and ``CancelForm``; what they do is :mod:`django_bgtasks.operations`,
which the views only put into status codes and JSON.

Every answer is JSON (:func:`endpoint`): a wrong method is a 405 with
``Allow``, a CSRF refusal a 403, a Django Task id that is no UUID a 404, and
a ``DatabaseError`` a 503 with ``Retry-After``, logged.

Reads carry a weak ``ETag`` and answer ``If-None-Match`` with 304, so that
many polling tabs cost a small query each and no body. The tag covers
everything in the representation except ``heartbeat_age``, which grows with
the clock: a client that gets a 304 adds the seconds since its last 200 to the
age it has. A holder going silent still changes the tag, because the task
then reads as stale instead of running.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction
from django import forms
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.csrf import logger as csrf_logger
from django.urls import reverse
from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers
from django.utils.decorators import decorator_from_middleware
from django.utils.log import log_response
from django.views.decorators.csrf import csrf_exempt

from django_bgtasks import authentication
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import writes as operations
from django_bgtasks.operations.permissions import Action, user_may
from django_bgtasks.validation import validate_name, validate_token, validate_ttl

View = TypeVar("View", bound=Callable[..., HttpResponseBase])
AnyView = TypeVar("AnyView", bound=Callable[..., Any])  # a sync or an async view

logger = logging.getLogger("django_bgtasks.api")
# Seconds a client is asked to wait after a 503 (a database restart takes a few).
RETRY_AFTER = 5


def outside_request_transactions(view: AnyView) -> AnyView:
    """Exempt a view that writes leases from ``ATOMIC_REQUESTS``.

    A lease write must be durable when it returns, so it refuses to run
    inside ``transaction.atomic()``. The exemption covers every database
    alias, because which one holds the leases (``BGTASKS_DATABASE``) is read
    per request while this runs once, when the URLconf is loaded.
    """
    for alias in connections:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


def error(status: int, message: str, **extra: Any) -> JsonResponse:
    """A JSON error body: ``{"error": message, ...}``, never task data."""
    return JsonResponse({"error": message, **extra}, status=status)


def endpoint(*methods: str) -> Callable[[AnyView], AnyView]:
    """Make every answer of an API view (sync or async) JSON, whatever happens
    before or inside it: another method than ``methods`` is a 405 with an
    ``Allow`` header (Django's ``require_http_methods`` answers it with an
    empty body), and a ``DatabaseError`` (the server restarting or
    unreachable, in the view or in the session and permission reads before
    it) is a 503 with ``Retry-After``, logged on ``django_bgtasks.api``,
    instead of Django's HTML 500. Outermost but for
    :func:`outside_request_transactions`, so it covers the others.

    Exempt from the site's ``CsrfViewMiddleware``, whose refusal is an HTML
    page: a read allows only safe methods, which it never checks, and a
    write checks the token itself (:func:`csrf_protect`, a JSON 403)."""
    allowed = frozenset(methods)

    def decorator(view: AnyView) -> AnyView:
        if iscoroutinefunction(view):

            @wraps(view)
            async def checked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if request.method not in allowed:
                    return _not_allowed(request, methods)
                try:
                    return await view(request, *args, **kwargs)
                except DatabaseError as exc:
                    return _unavailable(request, exc)

            return csrf_exempt(checked_async)  # type: ignore[return-value]

        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if request.method not in allowed:
                return _not_allowed(request, methods)
            try:
                return view(request, *args, **kwargs)
            except DatabaseError as exc:
                return _unavailable(request, exc)

        return csrf_exempt(checked)  # type: ignore[return-value]

    return decorator


def _not_allowed(request: HttpRequest, methods: tuple[str, ...]) -> JsonResponse:
    response = error(
        405, f"Method {request.method} is not allowed here; use {' or '.join(methods)}."
    )
    response.headers["Allow"] = ", ".join(methods)
    return response


def _unavailable(request: HttpRequest, exc: DatabaseError) -> JsonResponse:
    # The details go to the log only: the answer may reach someone not yet
    # authenticated (the session could not be read either).
    logger.error(
        "%s %s: the database is unavailable: %s", request.method, request.path, exc, exc_info=exc
    )
    response = error(503, f"The database is unavailable; try again in {RETRY_AFTER} seconds.")
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


class _JsonCsrfMiddleware(CsrfViewMiddleware):
    """Django's CSRF check, answering a refusal with a JSON 403 instead of
    the site's ``CSRF_FAILURE_VIEW`` page (HTML)."""

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        response = error(403, f"CSRF verification failed: {reason}")
        log_response(  # as Django's own refusal is logged
            "Forbidden (%s): %s",
            reason,
            request.path,
            response=response,
            request=request,
            logger=csrf_logger,
        )
        return response


_json_csrf_protect = decorator_from_middleware(_JsonCsrfMiddleware)


def csrf_protect(view: View) -> View:
    """Django's ``csrf_protect``, refusing with a JSON 403 (``_JsonCsrfMiddleware``)."""
    return cast("View", _json_csrf_protect(view))


def _authenticated(view: View) -> View:
    """Run the ``BGTASKS_API_AUTHENTICATION`` hooks for a request without a
    session user. One a hook vouched for is exempt from the CSRF check that
    follows (in ``_operation``): it was authenticated by a header, which a
    forged cross-site request can't carry, not by a cookie, which it would.
    One whose ``Authorization`` header no hook accepted is refused here."""

    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        refused = hook_refusal(request)
        if refused is not None:
            return refused
        return view(request, *args, **kwargs)

    return checked  # type: ignore[return-value]


def hook_refusal(request: HttpRequest) -> JsonResponse | None:
    """Authenticate by the ``BGTASKS_API_AUTHENTICATION`` hooks (see
    ``_authenticated``); the 403 for an ``Authorization`` header none accepted."""
    if authentication.authenticate(request):
        request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        # The event stream asks the hook again at each keepalive (events.py).
        request._bgtasks_by_hook = True  # type: ignore[attr-defined]
    elif "Authorization" in request.headers:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return error(403, "The Authorization header was not accepted.")
    return None


def permission_refusal(request: HttpRequest, action: Action) -> JsonResponse | None:
    """The 403, with no data, for a user who may not ``action`` tasks."""
    if user_may(request, action):
        return None
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return error(403, "Log in as a staff member to see background tasks.")
    return error(403, f"You do not have permission to {action} background tasks.")


def access_refusal(request: HttpRequest, action: Action) -> JsonResponse | None:
    """Both checks a read of the API makes, in its order: the event stream's too."""
    return hook_refusal(request) or permission_refusal(request, action)


def _requires(action: Action) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            refused = permission_refusal(request, action)
            if refused is not None:
                return refused
            return view(request, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorator


def etag(items: Iterable[dict[str, Any]]) -> str:
    """A weak ETag over ``TaskState.as_json()`` dicts, leaving out the one
    field that changes without the task changing (``heartbeat_age``)."""
    digest = hashlib.blake2b(digest_size=16)
    for item in items:
        tagged = {key: value for key, value in item.items() if key != "heartbeat_age"}
        # Compact JSON never contains a raw newline, so one separates items.
        digest.update(json.dumps(tagged, sort_keys=True, separators=(",", ":")).encode())
        digest.update(b"\n")
    return f'W/"{digest.hexdigest()}"'


def conditional_json(
    request: HttpRequest, payload: Any, items: list[dict[str, Any]]
) -> HttpResponse:
    """``payload`` as JSON, or 304 when the client's ETag still matches."""
    tag = etag(items)
    response = get_conditional_response(request, etag=tag)
    if response is None:
        response = JsonResponse(payload, safe=False)
    if response.status_code in (200, 304):
        response.headers["ETag"] = tag
        # Private: it is per-user data. no-cache: revalidate on every poll.
        patch_cache_control(response, private=True, no_cache=True)
        patch_vary_headers(response, ["Cookie"])
    return response


def task_list_response(request: HttpRequest, *, never_run: bool = False) -> HttpResponse:
    """Every task's state; shared with the admin's live view. With
    ``never_run``, the registered tasks that never ran too, and each
    registered task's schedule and description (``operations.task_states``)."""
    if never_run:
        items = [operations.task_json(state) for state in operations.task_states()]
    else:
        items = [state.as_json() for state in BackgroundTask.objects.list_states()]
    return conditional_json(request, {"tasks": items}, items)


def _named(view: View) -> View:
    """Pass the URL's task name on checked, or answer 400 for a malformed one."""

    @wraps(view)
    def checked(request: HttpRequest, name: str, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            name = validate_name(name)
        except ValueError as exc:
            return error(400, str(exc))
        return view(request, name, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _operation(view: View) -> View:
    """A write: POST only, CSRF-protected (unless a hook authenticated it; the
    site's ``CsrfViewMiddleware`` is told to leave the check to this), for
    the change permission, on a well-formed name, and outside ``ATOMIC_REQUESTS``."""
    return outside_request_transactions(
        endpoint("POST")(_authenticated(csrf_protect(_requires("change")(_named(view)))))
    )


def _accepted(name: str, body: dict[str, Any]) -> HttpResponse:
    """202 with ``body`` (the task's state), and where to poll it."""
    response = JsonResponse(body, status=202)
    response.headers["Location"] = reverse("bgtasks:task", args=[name])
    return response


@endpoint("GET", "HEAD")
@_authenticated
@_requires("view")
def task_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/``: every task's state, the registered ones that never ran too."""
    return task_list_response(request, never_run=True)


@endpoint("GET", "HEAD")
@_authenticated
@_requires("view")
@_named
def task_detail(request: HttpRequest, name: str) -> HttpResponse:
    """``GET <prefix>/<name>/``: one task's state (``never run`` for a
    registered task with no run yet), or 404."""
    state = operations.task_state(name)
    if state is None:
        return error(404, f"No task named {name!r} has run.")
    item = operations.task_json(state)
    return conditional_json(request, item, [item])


# --- the bodies of the POSTs ---------------------------------------------------------


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
            only = " and ".join(repr(name) for name in self.fields)
            raise ValidationError(
                f"Unknown field(s): {', '.join(unknown)}. Only {only} is accepted."
            )
        cleaned = self.cleaned_data
        for name, field in self.fields.items():
            if isinstance(field, _Option) and cleaned.get(name) is not None:
                try:
                    cleaned[name] = field.rule(cleaned[name])
                except (ValueError, TypeError) as exc:
                    self.add_error(name, str(exc))
        return cleaned


class RunForm(_OptionsForm):
    """``POST <name>/run/``: an optional ``ttl`` for this run (``validate_ttl``)."""

    ttl = _Option("ttl", "a number of seconds", float, validate_ttl)


class CancelForm(_OptionsForm):
    """``POST <name>/cancel/``: an optional ``token``, the claim to cancel (``validate_token``)."""

    token = _Option("token", "a whole number", int, validate_token)


def _options(
    request: HttpRequest, form_class: type[_OptionsForm]
) -> dict[str, Any] | JsonResponse:
    """The POST's fields, cleaned by ``form_class``; or a 400 naming the first problem."""
    if request.content_type == "application/json":
        try:
            data = json.loads(request.body or b"{}")
        except ValueError as exc:
            return error(400, f"The body is not valid JSON: {exc}")
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


# --- the operations --------------------------------------------------------------------


@_operation
def task_run(request: HttpRequest, name: str) -> HttpResponse:
    """Start the registered task ``name`` in a thread of this process, under its
    lease; with ``BGTASKS_EXECUTOR = "worker"``, file a request for a worker."""
    options = _options(request, RunForm)
    if isinstance(options, JsonResponse):
        return options
    try:
        result = operations.start(name, ttl=options["ttl"], requested_by=f"api: {request.user}")
    except (ValueError, TypeError) as exc:  # the ttl against the heartbeat setting
        return error(400, str(exc))
    if isinstance(result, operations.NotRegistered):
        return error(404, f"No background task is registered as {name!r}.")
    if isinstance(result, operations.AlreadyHeld):
        held = result.state
        holder = held.owner if held is not None else "another owner"
        return error(
            409,
            f"Task {name!r} is already running on {holder}.",
            state=held.as_json() if held is not None else None,
        )
    if isinstance(result, operations.AlreadyRequested):
        pending = result.state
        return error(
            409,
            f"Task {name!r} already has a pending request.",
            state=pending.as_json() if pending is not None else None,
        )
    if isinstance(result, operations.Requested):  # BGTASKS_EXECUTOR = "worker"
        return _accepted(name, result.state.as_json())
    # The work may already have finished; the token says which run this was.
    state = BackgroundTask.objects.get_state(name)
    return _accepted(
        name,
        state.as_json() if state is not None else {"name": name, "token": result.running.token},
    )


@_operation
def task_cancel(request: HttpRequest, name: str) -> HttpResponse:
    """Ask the holder of ``name`` to stop; it sees this at its next heartbeat."""
    options = _options(request, CancelForm)
    if isinstance(options, JsonResponse):
        return options
    # With a token, only that run is asked to stop: a client cancels the run
    # it showed, never a newer one that took over since.
    result = operations.request_cancel(name, token=options["token"])
    if isinstance(result, operations.NeverRun):
        return error(404, f"No task named {name!r} has run.")
    if isinstance(result, operations.CancelRequested):
        return _accepted(name, result.state.as_json())
    if isinstance(result, operations.TookOverSince):
        message = (
            f"Task {name!r} is no longer run by token {result.token} (now {result.state.token})."
        )
    else:
        message = f"Task {name!r} is not running."
    return error(409, message, state=result.state.as_json())


# --- Django Tasks (LeaseBackend) -----------------------------------------------------------


@endpoint("GET", "HEAD")
@_authenticated
@_requires("view")
def queued_list(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/django-tasks/``: the queued and running Django Tasks,
    then the most recent finished ones (``operations.queued_tasks()``)."""
    items = [operations.queued_json(row) for row in operations.queued_tasks()]
    return conditional_json(request, {"django_tasks": items}, items)


def _result_id(view: View) -> View:
    """Pass the URL's Django Task id on as a canonical UUID string, or answer
    a JSON 404 for one that is no UUID: no task can have it. (urls.py routes
    any other segment here last, so that no malformed id meets Django's HTML
    404.)"""

    @wraps(view)
    def checked(request: HttpRequest, result_id: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            parsed = str(uuid.UUID(str(result_id)))
        except ValueError:
            return error(404, f"No Django Task has the id {result_id!r}: it is not a UUID.")
        return view(request, parsed, *args, **kwargs)

    return checked  # type: ignore[return-value]


@endpoint("GET", "HEAD")
@_authenticated
@_requires("view")
@_result_id
def queued_detail(request: HttpRequest, result_id: str) -> HttpResponse:
    """``GET <prefix>/django-tasks/<id>/``: one Django Task, or 404."""
    row = operations.queued_task(result_id)
    if row is None:
        return error(404, f"No Django Task has the id {result_id!r}.")
    item = operations.queued_json(row)
    return conditional_json(request, item, [item])


# Every method: what is refused first is what any endpoint refuses first.
_ANY_METHOD = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@endpoint(*_ANY_METHOD)
@_authenticated
@csrf_protect
@_requires("view")
def no_endpoint(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any path under the API's prefix that no route takes: a JSON 404, like
    every other answer there. Refused as any endpoint first (403 to whoever
    may not read, and to a POST without its CSRF token), so that it tells a
    stranger nothing. Writes nothing."""
    return error(404, f"No endpoint of the bgtasks API at {request.path!r}.")


@outside_request_transactions
@endpoint("POST")
@_authenticated
@csrf_protect
@_requires("change")
@_result_id
def queued_cancel(request: HttpRequest, result_id: str) -> HttpResponse:
    """``POST <prefix>/django-tasks/<id>/cancel/``: 202 (a ready task will not
    run; a running one stops at its next ``check()``), 404, or 409 when it
    already finished."""
    result = operations.cancel_queued(result_id)
    if isinstance(result, operations.QueuedUnknown):
        return error(404, f"No Django Task has the id {result_id!r}.")
    if isinstance(result, operations.QueuedFinished):
        return error(
            409, "The Django Task already finished.", task=operations.queued_json(result.row)
        )
    response = JsonResponse(operations.queued_json(result.row), status=202)
    response.headers["Location"] = reverse("bgtasks:django-task", args=[result_id])
    return response
