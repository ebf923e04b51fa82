"""OpenTelemetry traces of the work this app runs elsewhere: one trace from
where the work is filed (a web request, a command) to its run in a worker.

On ``opentelemetry-api`` alone (the ``otel`` extra): spans are sent only
where the site configures an SDK. Without the package nothing is imported
and each call below is one branch; with the API but no SDK the spans are
the API's no-ops and no context is stored.

Following OpenTelemetry's messaging conventions:

* **Filing work is a producer span**: ``enqueue <queue>`` for a Django Task
  (``LeaseBackend.enqueue``; one span for an ``enqueue_many`` batch, whose
  context every task of it stores), ``request <task>`` for a background
  task's ``request_run()``. Its W3C trace context (``traceparent``, and
  ``tracestate`` when there is one) is stored with the work, in the same
  statement: :func:`send`'s ``context``.
* **A run is a consumer span**, ``run <queue>`` or ``run <task>``: a child of
  the stored context, *and* linked to it. The conventions require the link
  (a batch has no one parent) and allow the parent when a span processes a
  single message, as a run does: the parent puts the run in the trace of the
  request that filed it, which is what a trace viewer shows; the link is
  what tools that follow the conventions look for. A run without a stored
  context (a schedule's, a retry's, a value that does not parse) is a root
  span, unlinked.

A stored context is text from the database: one longer than
``limits.MAX_TRACE_CONTEXT_LENGTH`` or that does not parse is ignored, and
never fails a run. Claims and renewals are not traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from django_bgtasks.limits import MAX_TRACE_CONTEXT_LENGTH

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: nothing is traced
    ENABLED = False
else:
    ENABLED = True
    # W3C's, whatever OTEL_PROPAGATORS says: the column holds this format.
    _W3C = TraceContextTextMapPropagator()

# The instrumentation scope's name, as the site's SDK sees it.
TRACER_NAME = "django_bgtasks"
# messaging.system: not one of the conventions' well-known values.
SYSTEM = "bgtasks"

# Attribute names: the messaging conventions' where they have one...
DESTINATION = "messaging.destination.name"  # the queue, or the background task's name
MESSAGE_ID = "messaging.message.id"  # a Django Task's result id
CLIENT_ID = "messaging.client.id"  # the worker (the lease's owner)
BATCH_COUNT = "messaging.batch.message_count"  # tasks of one enqueue_many, when above 1
# ... and this app's.
TASK = "bgtasks.task"  # a Django Task's path, or a background task's name
TOKEN = "bgtasks.token"  # noqa: S105  (the run's fencing token, no secret)
ATTEMPT = "bgtasks.attempt"  # 1, 2, ...
TRIGGER = "bgtasks.trigger"  # a background run's: request, schedule, retry, ...
OUTCOME = "bgtasks.outcome"  # how the run ended (lost: its lease was)
ACCEPTED = "bgtasks.accepted"  # a request: False when one was pending already

# The operations, each a span's name before its destination.
ENQUEUE = "enqueue"
REQUEST = "request"
RUN = "run"


class Span:
    """One of this module's spans, or none (tracing is off): what the caller
    writes on it. ``context`` is what to store with the work (``None``:
    nothing, the column's NULL)."""

    __slots__ = ("_span", "context")

    def __init__(self, span: Any = None, context: str | None = None) -> None:
        self._span = span
        self.context = context

    def set(self, key: str, value: Any) -> None:
        """Set attribute ``key`` (``None``: leave it unset)."""
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def failed(self, exc: BaseException | None, description: str = "") -> None:
        """The run failed: ``exc`` is recorded on the span (an exception
        event, with its traceback), and its status is ERROR."""
        if self._span is None:
            return
        if exc is not None:
            self._span.record_exception(exc)
            description = description or f"{type(exc).__name__}: {exc}"
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, description))


_OFF = Span()
# (provider, tracer): the tracer of the provider the site configured, asked
# for again only when the provider changes (a site sets it once, at start).
_tracer_of: tuple[Any, Any] | None = None


def _tracer() -> Any:
    global _tracer_of
    provider = trace.get_tracer_provider()
    cached = _tracer_of
    if cached is None or cached[0] is not provider:
        cached = _tracer_of = (provider, provider.get_tracer(TRACER_NAME))
    return cached[1]


def _attributes(operation: str, kind: str, destination: str, more: Mapping[str, Any]) -> Any:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        DESTINATION: destination,
        **{key: value for key, value in more.items() if value is not None},
    }


@contextlib.contextmanager
def send(operation: str, destination: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
    """The producer span of filing work (``ENQUEUE`` or ``REQUEST``) on
    ``destination``, current while the block stores it; the block stores
    the span's ``context`` with the work. An exception that leaves the block
    is recorded on the span."""
    if not ENABLED:
        yield _OFF
        return
    parent = trace.get_current_span().get_span_context()
    with _tracer().start_as_current_span(
        f"{operation} {destination}",
        kind=trace.SpanKind.PRODUCER,
        attributes=_attributes(operation, "send", destination, attributes),
    ) as span:
        yield Span(span, _stored(span, parent))


def current_context() -> str | None:
    """The context of the span current here, to store (``None``: none)."""
    if not ENABLED:
        return None
    return _stored(trace.get_current_span(), None)


def _stored(span: Any, parent: Any) -> str | None:
    """``span``'s context as the column holds it: ``traceparent``, then a space
    and ``tracestate`` when there is one and it fits. ``None`` when the span
    is no span of its own: invalid, or the parent again (the API's no-op tracer
    hands back the current span, a context extracted upstream)."""
    span_context = span.get_span_context()
    if not span_context.is_valid or (
        parent is not None and parent.is_valid and span_context.span_id == parent.span_id
    ):
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, trace.set_span_in_context(span))
    stored = carrier.get("traceparent", "")
    state = carrier.get("tracestate", "")
    if stored and state and len(stored) + 1 + len(state) <= MAX_TRACE_CONTEXT_LENGTH:
        stored = f"{stored} {state}"
    return stored if 0 < len(stored) <= MAX_TRACE_CONTEXT_LENGTH else None


def stored_context(stored: object) -> Any:
    """The ``SpanContext`` that ``stored`` (a ``trace_context`` column) holds,
    or ``None``: NULL, too long, or not W3C's trace context."""
    if not ENABLED or not isinstance(stored, str) or not stored:
        return None
    if len(stored) > MAX_TRACE_CONTEXT_LENGTH:
        return None
    traceparent, _, tracestate = stored.partition(" ")
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    try:
        extracted = _W3C.extract(carrier)
    except Exception:  # text from the database: whatever it is, the run goes on
        return None
    span_context = trace.get_current_span(extracted).get_span_context()
    return span_context if span_context.is_valid else None


@contextlib.contextmanager
def run(destination: str, stored: object, attributes: Mapping[str, Any]) -> Iterator[Span]:
    """The consumer span of a run on ``destination``, current while the block
    runs it: a child of the context ``stored`` with the work, and linked to
    it (see the module docstring); a root span when there is none."""
    if not ENABLED:
        yield _OFF
        return
    creation = stored_context(stored)
    links = []
    parent = otel_context.Context()  # never the worker thread's own
    if creation is not None:
        links.append(trace.Link(creation))
        parent = trace.set_span_in_context(trace.NonRecordingSpan(creation), parent)
    with _tracer().start_as_current_span(
        f"{RUN} {destination}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=_attributes(RUN, "process", destination, attributes),
    ) as span:
        yield Span(span)


__all__ = ["ENABLED", "Span", "current_context", "run", "send", "stored_context"]
