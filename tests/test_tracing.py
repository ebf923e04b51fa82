"""OpenTelemetry traces (``django_bgtasks/tracing.py``, issue 30): one trace
from where work is filed to its run in a real worker process, the context
crossing the database.

The test process configures the SDK (an in-memory exporter, tests/otel.py)
and enqueues Django Tasks and requests background tasks inside a span; a
``bgtasks worker`` process with the SDK configured the same way runs them and
writes its spans to a file. Each run's consumer span is a child of its
producer span and linked to it, with the attributes and outcome of the run,
and an error recorded when it fails; on every engine, since the context
travels through each vendor's statements. Without an SDK nothing is stored
and the work runs; without opentelemetry-api (a process that can't import
it) nothing of it is imported. The stored text is read with care: a bad or
oversized value is ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, TraceState

from django_bgtasks import get_task, tracing
from django_bgtasks.conf import conf
from django_bgtasks.limits import MAX_TRACE_CONTEXT_LENGTH
from django_bgtasks.models import BackgroundTask, QueuedTask
from tests import djtasks, otel
from tests.dbtools import runs
from tests.faults.harness import Workers
from tests.procs import Worker, wait_until

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The SDK configured in this process for the test, an in-memory exporter."""
    provider, exporter = otel.in_memory()
    otel.install(provider)
    yield exporter
    otel.install(None)


def hexes(span: Any) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def stored(span: Any) -> str:
    """What a producer span's work stores: its traceparent."""
    trace_id, span_id = hexes(span)
    return f"00-{trace_id}-{span_id}-{span.get_span_context().trace_flags:02x}"


def queued(result: Any) -> QueuedTask:
    return QueuedTask.objects.using(conf.DATABASE).get(uuid=result.id)


def request_context(name: str) -> str | None:
    """The trace context the lease row of ``name`` holds."""
    return BackgroundTask.objects.using(conf.DATABASE).get(name=name).trace_context


# --- across a real worker process ----------------------------------------------------


def test_one_trace_from_the_enqueue_and_the_request_to_the_workers_runs(
    tasks_alias: str, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    backend = djtasks.echo.get_backend()
    with trace.get_tracer("tests").start_as_current_span("web request") as web:
        ok = djtasks.echo.enqueue(1)
        bad = djtasks.fails.enqueue("boom")
        batch = backend.enqueue_many(djtasks.echo, [((2,), {}), ((3,), {})])
        junk = djtasks.echo.enqueue(4)
        assert BackgroundTask.objects.request_run("surface-quick", requested_by="test")
        assert BackgroundTask.objects.request_run("surface-fails", requested_by="test")
    web_trace = hexes(web)[0]
    sent = {span.name: span for span in exporter.get_finished_spans()}
    producers = [span for span in exporter.get_finished_spans() if span.kind == SpanKind.PRODUCER]
    assert len(producers) == 6 and {span.parent.span_id for span in producers} == {
        web.get_span_context().span_id
    }
    enqueues = [span for span in producers if span.name == "enqueue default"]
    ok_send, bad_send, batch_send, junk_send = enqueues
    assert ok_send.attributes is not None and batch_send.attributes is not None
    assert ok_send.attributes[tracing.MESSAGE_ID] == ok.id
    assert ok_send.attributes[tracing.TASK] == "tests.djtasks.echo"
    assert batch_send.attributes[tracing.BATCH_COUNT] == 2
    assert tracing.MESSAGE_ID not in batch_send.attributes
    # Each task stores its producer span's context; the batch's, one for both.
    assert queued(ok).trace_context == stored(ok_send)
    assert queued(bad).trace_context == stored(bad_send)
    assert [queued(r).trace_context for r in batch] == [stored(batch_send)] * 2
    assert request_context("surface-quick") == stored(sent["request surface-quick"])
    # A value that is no trace context is ignored: that run is untraced.
    assert queued(junk).trace_context == stored(junk_send)
    QueuedTask.objects.using(tasks_alias).filter(uuid=junk.id).update(
        trace_context="00-not-a-context"
    )

    spans_file = str(tmp_path / "spans.json")
    workers = Workers(
        tasks_alias, tmp_path, scenario=("traced", spans_file, "bgtasks"), TASKS=settings.TASKS
    )
    try:
        worker = workers.start(
            "--queue", "default", "--task", "surface-quick", "--task", "surface-fails",
            "--poll", "0.05", "--once",
        )  # fmt: skip
        assert workers.exit_status(worker, 60) == 0, workers.output()
    finally:
        workers.stop_all()
    ran = otel.read(spans_file)
    assert {span["kind"] for span in ran} == {"CONSUMER"}  # claims and renewals: none
    by_id = {span["attributes"].get(tracing.MESSAGE_ID): span for span in ran}

    def continues(span: dict[str, Any], producer: Any) -> None:
        trace_id, span_id = hexes(producer)
        assert span["trace_id"] == web_trace == trace_id, span
        assert span["parent_id"] == span_id and span["links"] == [[trace_id, span_id]], span

    for result, producer in [(ok, ok_send), (bad, bad_send), *((r, batch_send) for r in batch)]:
        span = by_id[result.id]
        continues(span, producer)
        assert span["name"] == "run default"
        attributes = span["attributes"]
        assert attributes["messaging.system"] == "bgtasks"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes[tracing.DESTINATION] == "default"
        assert attributes[tracing.TOKEN] == 1 and attributes[tracing.ATTEMPT] == 1
        assert attributes[tracing.CLIENT_ID] == queued(result).owner != ""
    assert by_id[ok.id]["attributes"][tracing.TASK] == "tests.djtasks.echo"
    assert by_id[ok.id]["attributes"][tracing.OUTCOME] == "SUCCESSFUL"
    assert by_id[ok.id]["status"] == "UNSET" and by_id[ok.id]["events"] == []
    failed = by_id[bad.id]
    assert failed["attributes"][tracing.OUTCOME] == "FAILED"
    assert failed["status"] == "ERROR" and failed["description"] == "ValueError: boom"
    [event] = failed["events"]
    assert event["name"] == "exception" and event["exception.type"] == "ValueError"
    untraced = by_id[junk.id]
    assert untraced["parent_id"] is None and untraced["links"] == []
    assert untraced["trace_id"] != web_trace
    assert untraced["attributes"][tracing.OUTCOME] == "SUCCESSFUL"

    [quick] = otel.named(ran, "run surface-quick")
    continues(quick, sent["request surface-quick"])
    assert quick["attributes"][tracing.TRIGGER] == "request"
    assert quick["attributes"][tracing.OUTCOME] == "succeeded"
    assert quick["attributes"][tracing.TASK] == "surface-quick"
    [fails] = otel.named(ran, "run surface-fails")
    continues(fails, sent["request surface-fails"])
    assert fails["attributes"][tracing.OUTCOME] == "failed" and fails["status"] == "ERROR"
    assert [event["exception.type"] for event in fails["events"]] == ["RuntimeError"]
    # The database says the same: each ran once, as its span says.
    assert [queued(r).status for r in (ok, bad, *batch, junk)] == [
        "SUCCESSFUL", "FAILED", "SUCCESSFUL", "SUCCESSFUL", "SUCCESSFUL",
    ]  # fmt: skip
    for name, outcome in [("surface-quick", "succeeded"), ("surface-fails", "failed")]:
        [run] = runs(tasks_alias, name)
        span = otel.named(ran, f"run {name}")[0]
        assert (run["outcome"], run["token"]) == (outcome, span["attributes"][tracing.TOKEN])


# --- in this process -------------------------------------------------------------------


def test_a_pending_request_keeps_its_context_and_a_second_is_not_accepted(
    site_alias: str, exporter: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("first"):
        assert BackgroundTask.objects.request_run("surface-quick")
    with tracer.start_as_current_span("second"):
        assert not BackgroundTask.objects.request_run("surface-quick")
    first, _, second, _ = exporter.get_finished_spans()
    assert first.attributes is not None and second.attributes is not None
    assert (first.attributes[tracing.ACCEPTED], second.attributes[tracing.ACCEPTED]) == (
        True,
        False,
    )
    assert request_context("surface-quick") == stored(first)


def test_start_runs_in_a_thread_as_a_child_of_the_callers_span(
    site_alias: str, exporter: InMemorySpanExporter
) -> None:
    with trace.get_tracer("tests").start_as_current_span("admin view") as view:
        running = get_task("surface-fails").start()
    assert running is not None

    def ended() -> list[Any]:  # (after the run's end, which wait() sees)
        return [span for span in exporter.get_finished_spans() if span.name == "run surface-fails"]

    [run] = wait_until("the run's span to end", ended)
    assert run.kind == SpanKind.CONSUMER and run.parent is not None
    assert run.parent.span_id == view.get_span_context().span_id
    assert [link.context.span_id for link in run.links] == [view.get_span_context().span_id]
    assert run.attributes is not None and run.attributes[tracing.TRIGGER] == "manual"
    assert run.attributes[tracing.OUTCOME] == "failed"
    assert run.status.status_code.name == "ERROR"
    assert run.status.description == "RuntimeError: disk on fire"


# --- without an SDK, and without the API ---------------------------------------------


def test_without_an_sdk_nothing_is_stored_and_the_work_is_filed(tasks_alias: str) -> None:
    """The API installed, no SDK configured: the API's no-op spans, even
    inside a context extracted from upstream (which the no-op tracer hands
    back as the current span), store nothing."""
    upstream = tracing.stored_context(TRACEPARENT)
    with trace.use_span(trace.NonRecordingSpan(upstream)):
        result = djtasks.echo.enqueue(1)
        assert BackgroundTask.objects.request_run("surface-quick")
        assert tracing.current_context() == TRACEPARENT  # (what start() would pass on)
    row = queued(result)
    assert (row.status, row.trace_context) == ("READY", None)
    assert request_context("surface-quick") is None


def test_without_opentelemetry_nothing_of_it_is_imported_and_the_work_is_filed(
    sqlite_alias: str,
) -> None:
    """A process where ``opentelemetry`` can't be imported, as without the
    otel extra. (What differs is the process's imports, not the SQL: the
    NULL it stores is the previous test's, on every engine.)"""
    worker = Worker(sqlite_alias, "without_otel", "surface-quick", TASKS=settings.TASKS)
    try:
        report = worker.result()
    finally:
        worker.kill()
    assert report["enabled"] is False and report["imported"] == []
    assert report["requested"] is True
    assert queued(djtasks.echo.get_backend().get_result(report["id"])).trace_context is None
    assert request_context("surface-quick") is None


# --- the stored context, read with care ----------------------------------------------


def test_a_stored_context_round_trips_with_its_tracestate(exporter: InMemorySpanExporter) -> None:
    state = TraceState([("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")])
    upstream = tracing.stored_context(TRACEPARENT)
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            upstream.trace_id, upstream.span_id, True, upstream.trace_flags, trace_state=state
        )
    )
    with trace.use_span(parent), tracing.send(tracing.ENQUEUE, "q", {}) as span:
        text = span.context
    assert text is not None and text.endswith(" rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert text.startswith(f"00-{TRACE}-") and not text.startswith(TRACEPARENT)
    read = tracing.stored_context(text)
    assert read.trace_id == int(TRACE, 16) and read.is_remote
    assert read.trace_state == state


def test_a_tracestate_too_long_for_the_column_is_left_out(
    exporter: InMemorySpanExporter,
) -> None:
    """W3C's tracestate may be up to 512 characters; a longer one (here
    32 members of 20) is not stored, the traceparent is."""
    state = TraceState([(f"k{i:02}", "v" * 16) for i in range(32)])
    parent = trace.NonRecordingSpan(
        trace.SpanContext(int(TRACE, 16), int(SPAN, 16), True, trace_state=state)
    )
    with trace.use_span(parent), tracing.send(tracing.REQUEST, "t", {}) as span:
        text = span.context
    assert text is not None and " " not in text and len(text) == 55


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        "00-not-a-context",
        f"00-{'0' * 32}-{SPAN}-01",  # an invalid trace id
        f"ff-{TRACE}-{SPAN}-01",  # a forbidden version
        f"00-{TRACE}-{SPAN}-01-extra",
        TRACEPARENT + " " + "x" * (MAX_TRACE_CONTEXT_LENGTH - 55),  # one too long
        12,
    ],
)
def test_a_bad_or_oversized_stored_context_is_ignored(value: Any) -> None:
    assert tracing.stored_context(value) is None


def test_a_bad_tracestate_keeps_the_traceparent() -> None:
    read = tracing.stored_context(TRACEPARENT + " not a=valid,state")
    assert read is not None and read.trace_id == int(TRACE, 16) and len(read.trace_state) == 0
    # The longest that is read: two members of 256 and 255 characters (a
    # member's value is at most 256), 512 in all.
    longest = f"{TRACEPARENT} a={'v' * 254},b={'v' * 253}"
    assert len(longest) == MAX_TRACE_CONTEXT_LENGTH
    assert len(tracing.stored_context(longest).trace_state) == 2


def test_a_run_without_a_stored_context_is_a_root_span_even_inside_another(
    exporter: InMemorySpanExporter,
) -> None:
    outer = trace.get_tracer("tests").start_as_current_span("outer")
    with outer, tracing.run("q", "garbage", {tracing.TASK: "t"}) as span:
        span.set(tracing.OUTCOME, "SUCCESSFUL")
        span.set(tracing.TOKEN, None)  # unset, not None
    [run, _] = exporter.get_finished_spans()
    assert run.name == "run q" and run.parent is None and list(run.links) == []
    assert run.attributes == {
        "messaging.system": "bgtasks",
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        tracing.DESTINATION: "q",
        tracing.TASK: "t",
        tracing.OUTCOME: "SUCCESSFUL",
    }
