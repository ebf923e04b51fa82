"""The query of the JSON API's list of Django Tasks (``GET
<prefix>/django-tasks/``): its filters, its page size and its cursor.

``?status=``, ``?queue=``, ``?task=`` (a task path) and ``?backend=`` narrow
the list, and so do ``?args=`` (JSON the arguments contain), ``?error=``,
``?key=`` (a concurrency or rate key), ``?since=`` and ``?until=``
(:class:`~django_bgtasks.operations.queued.QueuedFilter` checks each, and
operations/search.py says what each matches: a page with those may hold
fewer tasks than its limit and still have a next one); ``?limit=`` is the
page's size (1 to 500, default 100); ``?cursor=`` is the ``next`` link's,
where the page before ended. The cursor is that place (the ``seq`` of the
page's last task, or of the last row a search read) signed with the site's
``SECRET_KEY``: opaque to a client, which follows ``next`` and never builds
one, and
refused when it was not made here, so a client can't page from a place of
its own making. Any other parameter, a parameter given twice, or a bad
value is a 400 that names it: a script that misspells ``status`` learns it,
rather than reading the whole list as if it were filtered.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core import signing
from django.http import HttpRequest, JsonResponse

from django_bgtasks.http.responses import error
from django_bgtasks.operations.queued import DEFAULT_PAGE_SIZE, QueuedFilter, page_size

_FILTERS = ("status", "queue", "task", "backend", "args", "error", "key", "since", "until")
PARAMETERS = (*_FILTERS, "limit", "cursor")
# The cursor's signature is the API list's own (another signed value of the
# site is no cursor).
_SIGNER = signing.Signer(salt="django_bgtasks.http.paging.cursor")


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A list request's filters, page size and place (``before``: the page
    holds the tasks older than that ``seq``; ``None`` from the newest)."""

    filters: QueuedFilter
    limit: int
    before: int | None


def list_query(request: HttpRequest) -> ListQuery | JsonResponse:
    """The request's query, or the 400 that names what is wrong with it."""
    unknown = sorted(set(request.GET) - set(PARAMETERS))
    if unknown:
        return error(
            400,
            f"Unknown parameter {unknown[0]!r}: the list takes {', '.join(PARAMETERS)}.",
        )
    values: dict[str, str] = {}
    for name in request.GET:
        given = request.GET.getlist(name)
        if len(given) > 1:
            return error(400, f"The parameter {name!r} is given {len(given)} times.")
        values[name] = given[0]
    try:
        filters = QueuedFilter.parse(**{name: values[name] for name in _FILTERS if name in values})
        limit = page_size(values.get("limit", DEFAULT_PAGE_SIZE))
        before = None if "cursor" not in values else _place(values["cursor"])
    except (TypeError, ValueError) as exc:
        return error(400, str(exc))
    return ListQuery(filters, limit, before)


def next_url(request: HttpRequest, before: int | None) -> str | None:
    """The URL of the page after this request's, which ends at ``before``
    (``None``: there is none): the same query, with the cursor there."""
    if before is None:
        return None
    query = request.GET.copy()
    query["cursor"] = _SIGNER.sign(str(before))
    return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")


def _place(cursor: str) -> int:
    """The ``seq`` a cursor of :func:`next_url` holds; a ``ValueError`` for
    any other text."""
    try:
        place = _SIGNER.unsign(cursor)
    except signing.BadSignature:
        raise ValueError(
            'The cursor is not one this API made: follow the list\'s "next" link as it is.'
        ) from None
    return int(place)
