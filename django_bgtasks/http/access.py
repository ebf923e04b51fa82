"""Who may use the JSON API and the event stream, and the API's CSRF check.

Reads need a staff user with the model's view (or change) permission and
writes its change permission (:mod:`django_bgtasks.operations.permissions`); anyone else
gets a 403 JSON error and no data. The user is the session's, or, for a
request without one, the first that a ``BGTASKS_API_AUTHENTICATION`` hook
vouches for (:mod:`django_bgtasks.authentication`, e.g. a bearer token).
Writes are CSRF-protected like any session-authenticated POST (a refusal is a
JSON 403, not the site's HTML page); a request a hook authenticated by its
header carries no cookie to forge, and needs no CSRF token.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.csrf import logger as csrf_logger
from django.utils.decorators import decorator_from_middleware
from django.utils.log import log_response

from django_bgtasks import authentication
from django_bgtasks.http.responses import error
from django_bgtasks.operations.permissions import Action, user_may

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


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


def authenticated(view: View) -> View:
    """Run the ``BGTASKS_API_AUTHENTICATION`` hooks for a request without a
    session user. One a hook vouched for is exempt from the CSRF check that
    follows (in the API's writes): it was authenticated by a header, which a
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
    ``authenticated``); the 403 for an ``Authorization`` header none accepted."""
    if authentication.authenticate(request):
        request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        # The event stream asks the hook again at each keepalive (stream_access.py).
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


def requires(action: Action) -> Callable[[View], View]:
    """Answer with :func:`permission_refusal` for a user who may not ``action`` tasks."""

    def decorator(view: View) -> View:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            refused = permission_refusal(request, action)
            if refused is not None:
                return refused
            return view(request, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorator
