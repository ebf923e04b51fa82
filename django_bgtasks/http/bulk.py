"""The JSON API's bulk actions on Django Tasks: ``POST
<prefix>/django-tasks/retry/``, ``cancel/`` and ``delete/``, with a filter in
the body (operations/bulk.py does the action).

The body, a JSON object or a form, holds the filter's terms, as the list's
query string names them (``status``, ``queue``, ``task``, ``backend``,
``args``, ``error``, ``key``, ``since``, ``until``; ``args`` in a JSON body
may be the JSON value itself). At least one is needed. The answer is 200
with the counts, ``{"action", "matched", "<retried|cancelled|deleted>",
"stopping", "skipped"}``; a bad body is a 400 that names what is wrong, with
nothing written. Retry and cancel need the change permission, delete the
delete permission; each is CSRF-protected as every write of the API is.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_bgtasks.http.access import authenticated, csrf_protect, requires
from django_bgtasks.http.forms import FilterForm, post_options
from django_bgtasks.http.responses import endpoint, error, outside_request_transactions
from django_bgtasks.operations import bulk
from django_bgtasks.operations.queued import QueuedFilter


def body_filter(request: HttpRequest) -> QueuedFilter | JsonResponse:
    """The filter of the request's body, or the 400 that names what is wrong."""
    options = post_options(request, FilterForm)
    if isinstance(options, JsonResponse):
        return options
    try:
        given = {name: value for name, value in options.items() if value is not None}
        return QueuedFilter.parse(**given)
    except (TypeError, ValueError) as exc:
        return error(400, str(exc))


def _bulk_view(action: bulk.Action) -> Any:
    """The view of ``action`` on the body's filter."""

    def view(request: HttpRequest) -> HttpResponse:
        filters = body_filter(request)
        if isinstance(filters, JsonResponse):
            return filters
        try:
            result = bulk.act(action, bulk.Selection.of(filters))
        except ValueError as exc:
            return error(400, str(exc))
        return JsonResponse(result.as_json())

    view.__name__ = view.__qualname__ = f"queued_{action}_matching"
    view.__doc__ = f"``POST <prefix>/django-tasks/{action}/``: {action} the body's filter's tasks."
    checked = requires(bulk.PERMISSIONS[action])(view)
    return outside_request_transactions(endpoint("POST")(authenticated(csrf_protect(checked))))


retry_matching = _bulk_view("retry")
cancel_matching = _bulk_view("cancel")
delete_matching = _bulk_view("delete")
