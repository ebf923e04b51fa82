"""The OpenTelemetry SDK as a site configures it, for the tracing tests
(tests/test_tracing.py): an in-memory exporter in the test process, and in a
worker process (``python -m tests.procs traced <path> bgtasks worker ...``)
the same, written to a JSON file after each span ends, so that the test
reads what the worker traced even when it is stopped."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def install(provider: TracerProvider | None) -> None:
    """Make ``provider`` the process's tracer provider (``None``: none, the
    API's no-ops again). The API lets a process set it once; a test process
    sets it for one test at a time, as opentelemetry-test-utils'
    ``reset_trace_globals()`` does it."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace._PROXY_TRACER_PROVIDER = trace.ProxyTracerProvider()
    if provider is not None:
        trace.set_tracer_provider(provider)


def in_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider whose finished spans the returned exporter keeps."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def as_json(span: ReadableSpan) -> dict[str, Any]:
    """What the tests read of a span, by plain names, ids in hex."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [
            [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"]
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "events": [{"name": event.name, **dict(event.attributes or {})} for event in span.events],
    }


class _Written(SpanProcessor):
    """Writes every span the exporter kept to ``path`` (JSON, replaced at
    once) each time one ends."""

    def __init__(self, exporter: InMemorySpanExporter, path: str) -> None:
        self.exporter, self.path = exporter, path
        self.lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock:
            spans = [as_json(kept) for kept in self.exporter.get_finished_spans()]
            with open(self.path + ".tmp", "w") as file:
                json.dump(spans, file)
            os.replace(self.path + ".tmp", self.path)


def traced_worker(path: str) -> None:
    """A worker process's SDK: its spans, written to ``path``."""
    provider, exporter = in_memory()
    provider.add_span_processor(_Written(exporter, path))  # after the exporter's
    trace.set_tracer_provider(provider)


def read(path: str) -> list[dict[str, Any]]:
    """The spans a worker wrote (none when it wrote none)."""
    try:
        with open(path) as file:
            spans: list[dict[str, Any]] = json.load(file)
    except FileNotFoundError:
        return []
    return spans


def named(spans: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The spans called ``name``."""
    return [span for span in spans if span["name"] == name]
